/**
 * What a hybrid runtime's install names: images pinned by the digests the catalog records (a
 * digest that is not sha256: and 64 hex digits refused, images without one listed), names of its
 * own so that two runtimes share a cluster (a runtime registered before keeps the old ones), and
 * YAML that a YAML 1.1 reader such as kubectl's reads as the objects (strings like `no` stay
 * strings).
 */
import t from 'tap';
import { parseAllDocuments } from 'yaml';
import { catalog, validateCatalog } from '../../runtime/catalog.ts';
import { hybridInstallBundle, hybridNamespace, type InstallBundleInput } from '../../runtime/hybrid/bundle.ts';
import { chartObjects, installDocument, chartsPart, InstallDocumentError } from '../../runtime/hybrid/install.ts';
import { yamlText } from '../../runtime/hybrid/yaml-text.ts';
import type { KubeObject } from '../../runtime/render/render.ts';
import type { RuntimeVersion } from '../../runtime/versions.ts';

const entry = catalog.get('1.5.0')!;
const DIGEST = `sha256:${'0123456789abcdef'.repeat(4)}`;

function input(version: RuntimeVersion, over: Partial<InstallBundleInput['runtime']> = {}): InstallBundleInput {
  return {
    runtime: {
      tenantId: '3f6c1a52-6a0e-4c1b-9a57-2d8e0f4b7c11',
      runtimeId: '8d1e5b7a-0c2f-4e7d-b1a3-6f9e2c4d8a10',
      name: 'plant-a',
      access: 'tunnel',
      argo: 'existing',
      argoNamespace: 'gitops',
      upgrader: true,
      namespace: hybridNamespace('plant-a'),
      ...over,
    },
    version,
    controlPlaneUrl: 'https://cp.example.test',
    tunnelUrl: 'wss://cp.example.test/v1/tunnel',
    publicKey: '-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEA\n-----END PUBLIC KEY-----\n',
    bootstrapToken: 'hrth_' + 'A'.repeat(43),
  };
}

const imagesOf = (objects: readonly KubeObject[]): string[] =>
  objects.flatMap((o) => {
    const pod = (o.spec as { template?: { spec?: { containers?: Array<{ image: string }> } } } | undefined)?.template
      ?.spec;
    return (pod?.containers ?? []).map((c) => c.image);
  });

t.test('images the catalog has digests for are pinned by registry and digest; the others are listed', async (t) => {
  const pinned: RuntimeVersion = {
    ...entry,
    images: {
      registry: 'registry.example.test/hosted-runtimes',
      agents: { 'app-proxy': DIGEST, bootstrap: DIGEST },
    },
  };
  t.doesNotThrow(() => validateCatalog([...catalog.versions.filter((v) => v.version !== '1.5.0'), pinned]));
  const b = hybridInstallBundle(input(pinned));
  const images = imagesOf(b.objects);
  t.ok(
    images.includes(`registry.example.test/hosted-runtimes/app-proxy:1.5.0@${DIGEST}`),
    'the app-proxy runs from the release registry, by tag and digest',
  );
  t.ok(images.includes(`registry.example.test/hosted-runtimes/bootstrap:1.5.0@${DIGEST}`), 'so does the bootstrap Job');
  t.ok(
    images.includes('registry.example.test/hosted-runtimes/event-reporter:1.5.0'),
    'an image without a recorded digest keeps its tag alone',
  );
  t.same(
    b.unpinnedImages,
    ['event-reporter', 'request-router', 'tunnel-client', 'upgrader'].map(
      (n) => `registry.example.test/hosted-runtimes/${n}:1.5.0`,
    ),
    'and is listed as unpinned',
  );
  const none = hybridInstallBundle(input(entry));
  t.ok(
    none.unpinnedImages.length > 0 && none.unpinnedImages.every((i) => !i.includes('@')),
    `a release without recorded digests lists every image (${none.unpinnedImages.length})`,
  );
});

t.test("the GitOps Operator's image (1.8.0) is pinned and listed like every agent's", async (t) => {
  const operatorEntry = catalog.get('1.8.0')!;
  const registry = 'registry.example.test/hosted-runtimes';
  const pinned: RuntimeVersion = {
    ...operatorEntry,
    images: { registry, agents: { 'gitops-operator': DIGEST } },
  };
  t.doesNotThrow(() => validateCatalog([...catalog.versions.filter((v) => v.version !== '1.8.0'), pinned]));
  for (const over of [{}, { argo: 'new' as const, argoNamespace: undefined }]) {
    const b = hybridInstallBundle(input(pinned, over));
    t.ok(
      imagesOf(b.objects).includes(`${registry}/gitops-operator:1.8.0@${DIGEST}`),
      'the operator runs from the release registry, by tag and digest',
    );
    t.notOk(
      b.unpinnedImages.some((i) => i.includes('/gitops-operator:')),
      'and is not listed as unpinned',
    );
    t.ok(b.unpinnedImages.includes(`${registry}/app-proxy:1.8.0`), 'the agents without a digest are');
  }
  const none = hybridInstallBundle(input(operatorEntry));
  t.ok(
    none.unpinnedImages.includes('hosted-runtimes/gitops-operator:1.8.0'),
    'without a recorded digest the operator image is listed as unpinned',
  );
  const bad: RuntimeVersion = { ...operatorEntry, images: { agents: { 'gitops-operator': 'sha256:nope' } } };
  t.throws(
    () => hybridInstallBundle(input(bad)),
    { name: 'HybridBundleError', message: /images\.agents\['gitops-operator'\]/ },
    "a bad digest of the operator's image is refused, naming it",
  );
});

t.test('a digest must be sha256: and 64 hex digits, in the catalog and in a bundle', async (t) => {
  for (const digest of [
    `sha256:${'0'.repeat(63)}`,
    `sha256:${'g'.repeat(64)}`,
    '0'.repeat(64),
    `sha512:${'0'.repeat(64)}`,
  ]) {
    const bad: RuntimeVersion = { ...entry, images: { agents: { 'app-proxy': digest } } };
    t.throws(
      () => validateCatalog([...catalog.versions.filter((v) => v.version !== '1.5.0'), bad]),
      { message: /images\.agents\['app-proxy'\].*is not sha256: and 64 hex digits/ },
      `the catalog refuses '${digest}'`,
    );
    t.throws(
      () => hybridInstallBundle(input(bad)),
      { name: 'HybridBundleError', message: /is not sha256: and 64 hex digits/ },
      `a bundle refuses '${digest}'`,
    );
  }
  t.throws(
    () =>
      validateCatalog([
        ...catalog.versions.filter((v) => v.version !== '1.5.0'),
        { ...entry, images: { registry: 'Registry/UPPER:tag' } },
      ]),
    { message: /images\.registry 'Registry\/UPPER:tag' is not a registry and path/ },
    'the catalog refuses a registry with a tag or upper case',
  );
});

t.test("the Argo charts' images are pinned by the reference the chart renders", async (t) => {
  const chart = {
    release: 'argocd',
    namespace: 'argocd',
    objects: [
      {
        apiVersion: 'apps/v1',
        kind: 'Deployment',
        metadata: { name: 'argocd-server' },
        spec: { template: { spec: { containers: [{ name: 'server', image: 'quay.io/argoproj/argocd:v3.0.6' }] } } },
      },
      {
        apiVersion: 'apps/v1',
        kind: 'StatefulSet',
        metadata: { name: 'argocd-application-controller', namespace: 'argocd' },
        spec: {
          template: {
            spec: {
              initContainers: [{ name: 'copy', image: 'quay.io/argoproj/argocd:v3.0.6' }],
              containers: [{ name: 'c', image: 'ecr-public.aws.com/docker/library/redis:7.2.8-alpine' }],
            },
          },
        },
      },
    ] as KubeObject[],
  };
  const version: RuntimeVersion = { ...entry, images: { charts: { 'quay.io/argoproj/argocd:v3.0.6': DIGEST } } };
  const objects = chartObjects({ tenantId: 't', name: 'plant-b' }, version, [chart]);
  t.same(
    imagesOf(objects),
    [`quay.io/argoproj/argocd:v3.0.6@${DIGEST}`, 'ecr-public.aws.com/docker/library/redis:7.2.8-alpine'],
    'the recorded image is pinned, the other is not',
  );
  t.equal(chart.objects[0]!.metadata.namespace, undefined, 'the rendered chart is not changed');
  t.equal(
    objects.find((o) => o.kind === 'Deployment')!.metadata.namespace,
    'argocd',
    "an object without a namespace gets its release's",
  );
  t.same(chartsPart({ tenantId: 't', name: 'plant-b' }, version, [chart]).unpinnedImages, [
    'ecr-public.aws.com/docker/library/redis:7.2.8-alpine',
  ]);
});

t.test('an install that would create an object of a kind its own CRDs define is refused', async (t) => {
  const crd = {
    apiVersion: 'apiextensions.k8s.io/v1',
    kind: 'CustomResourceDefinition',
    metadata: { name: 'appprojects.argoproj.io' },
    spec: { group: 'argoproj.io', names: { kind: 'AppProject' } },
  } as KubeObject;
  const project = {
    apiVersion: 'argoproj.io/v1alpha1',
    kind: 'AppProject',
    metadata: { name: 'default' },
  } as KubeObject;
  t.throws(
    () =>
      chartObjects({ tenantId: 't', name: 'b' }, entry, [
        { release: 'argocd', namespace: 'argocd', objects: [crd, project] },
      ]),
    new InstallDocumentError(
      'the install would create AppProject default of a kind its own CRDs define: one apply cannot create both',
    ),
  );
  const pdb = { apiVersion: 'policy/v1', kind: 'PodDisruptionBudget', metadata: { name: 'x' } } as KubeObject;
  t.throws(
    () =>
      chartObjects({ tenantId: 't', name: 'b' }, entry, [{ release: 'argocd', namespace: 'argocd', objects: [pdb] }]),
    { message: /PodDisruptionBudget x, a kind the remove command does not delete/ },
    'a kind the remove command would leave behind is refused',
  );
});

t.test('two runtimes share no name in a cluster; a runtime registered before keeps its names', async (t) => {
  const names = (b: ReturnType<typeof hybridInstallBundle>) =>
    new Set(b.objects.map((o) => `${o.kind}/${o.metadata.namespace ?? ''}/${o.metadata.name}`));
  for (const argo of ['new', 'existing'] as const) {
    const over = argo === 'new' ? { argo, argoNamespace: undefined } : { argo };
    const a = hybridInstallBundle(input(entry, { ...over, name: 'plant-a', namespace: hybridNamespace('plant-a') }));
    const b = hybridInstallBundle(input(entry, { ...over, name: 'plant-b', namespace: hybridNamespace('plant-b') }));
    const shared = [...names(a)].filter((n) => names(b).has(n));
    t.same(shared, [], `argo=${argo}: no object of one is an object of the other`);
    t.equal(a.namespace, 'hosted-runtime-plant-a', `argo=${argo}: the namespace is the runtime's`);
    if (argo === 'new')
      t.ok(
        a.objects.some((o) => o.kind === 'ClusterRole' && o.metadata.name === 'hosted-runtime-plant-a:event-reporter'),
        'cluster-wide rights are named after its namespace',
      );
  }
  const legacy = hybridInstallBundle(input(entry, { namespace: undefined }));
  t.equal(legacy.namespace, 'hosted-runtime', 'without a namespace of its own: hosted-runtime, as it was installed');
  t.ok(
    legacy.objects.some((o) => o.kind === 'Role' && o.metadata.name === 'hosted-runtime-app-proxy'),
    'and its Roles beside the Argo CD keep their names',
  );
  t.throws(
    () => hybridInstallBundle(input(entry, { argoNamespace: hybridNamespace('plant-a') })),
    { name: 'HybridBundleError', message: /cannot be the runtime's own namespace hosted-runtime-plant-a/ },
    "the Argo CD namespace cannot be the runtime's own",
  );
});

t.test('a YAML 1.1 reader (kubectl) reads the written text as the objects: `no` stays a string', async (t) => {
  const value = { args: ['--appendonly', 'no', 'yes', 'on', 'y', '1_000', '2001-12-14', '0x1f'], flag: false, n: 3 };
  const text = yamlText(value);
  t.same(parseAllDocuments(text, { version: '1.1' })[0]!.toJS(), value, 'YAML 1.1 reads it back as written');
  t.same(parseAllDocuments(text)[0]!.toJS(), value, 'and so does YAML 1.2');
  const doc = installDocument(hybridInstallBundle(input(entry)), entry, { text: '', unpinnedImages: [] });
  t.match(doc.text, /^# The complete install of a hybrid runtime/, 'the served install says what it is');
  t.notMatch(
    doc.text
      .split('\n')
      .filter((l) => l.startsWith('#'))
      .join('\n'),
    /hrth_|plant-a|gitops/,
    'its comment holds no value a caller gave',
  );
});
