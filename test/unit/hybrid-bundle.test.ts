/**
 * The install bundle of a hybrid runtime (runtime/hybrid/bundle.ts): the YAML a customer applies
 * parses to the objects the API answers with, each valid against the Kubernetes schemas and
 * labelled for removal; the bootstrap token is its only secret; the agents are the hosted
 * runtime's (same images, pod specs, rights) apart from what the modes change; the Argo charts are
 * the catalog's pins with the hosted values; the remove command selects exactly what was created.
 */
import t from 'tap';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseAllDocuments, parse as parseYaml } from 'yaml';
import { ConfigMap, Namespace, Secret, Service, ServiceAccount } from 'kubernetes-models/v1';
import { Deployment } from 'kubernetes-models/apps/v1';
import { Job } from 'kubernetes-models/batch/v1';
import { ClusterRole, ClusterRoleBinding, Role, RoleBinding } from 'kubernetes-models/rbac.authorization.k8s.io/v1';
import { CustomResourceDefinition } from 'kubernetes-models/apiextensions.k8s.io/v1';
import {
  ARGO_CHART_KINDS,
  BOOTSTRAP_JOB,
  HybridBundleError,
  HYBRID_LABELS,
  hybridAgents,
  hybridInstallBundle,
  hybridNamespace,
  INGRESS_URL_ANNOTATION,
  type InstallBundle,
  manifestFileName,
  ROUTER_SERVICE,
  type InstallBundleInput,
  type KubeObject,
} from '../../runtime/hybrid/bundle.ts';
import { catalog, compareVersions } from '../../runtime/catalog.ts';
import { agentObjects } from '../../runtime/component/agent-objects.ts';
import {
  agentsAt,
  CREDENTIALS_SECRET,
  GITOPS_OPERATOR_AGENT,
  productsUrl,
  RUNTIME_NAMESPACE,
} from '../../runtime/component/agents.ts';
import { GITOPS_OPERATOR_RULES, promotionCrds } from '../../runtime/component/promotion-crds.ts';
import { loadOperatorConfig } from '../../runtime/agents/gitops-operator/config.ts';
import { yamlText } from '../../runtime/hybrid/yaml-text.ts';
import {
  ARGO_CD_NAMESPACE,
  ARGO_RELEASES,
  argoReleaseValues,
  mergeValues,
} from '../../runtime/component/argo-releases.ts';
import { sourceServerArgoCdAccountValues } from '../../runtime/component/source-server-account.ts';
import { loadSourceServerConfig } from '../../runtime/agents/source-server/config.ts';
import { BOOTSTRAP_SECRET, BOOTSTRAP_TOKEN_KEY, CREDENTIAL_KEYS } from '../../runtime/protocol/bootstrap.ts';
import { loadRouterConfig } from '../../runtime/agents/request-router/config.ts';
import { generateRequestSigningKeys } from '../../provisioner/tunnel/request-token.ts';
import { DEFAULT_PLAN, PLANS } from '../../tenants/plans.ts';
import { upgradeBundle } from '../../runtime/hybrid/upgrade.ts';

const TENANT = '3f6c1a52-6a0e-4c1b-9a57-2d8e0f4b7c11';
const TOKEN = 'hrth_' + 'Zm9vYmFyYmF6cXV4cXV1eGNvcmdlZ3JhdWx0Z2FycGx5'.slice(0, 43);
const entry = catalog.versions[catalog.versions.length - 1]!;

function input(over: Partial<InstallBundleInput['runtime']> = {}): InstallBundleInput {
  return {
    runtime: {
      tenantId: TENANT,
      runtimeId: '8d1e5b7a-0c2f-4e7d-b1a3-6f9e2c4d8a10',
      name: 'plant-a',
      access: 'tunnel',
      argo: 'new',
      upgrader: false,
      ...over,
    },
    version: entry,
    controlPlaneUrl: 'https://cp.example.test',
    tunnelUrl: 'wss://cp.example.test/v1/tunnel',
    publicKey: '-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEA\n-----END PUBLIC KEY-----\n',
    bootstrapToken: TOKEN,
  };
}

const MODES: Array<[string, Partial<InstallBundleInput['runtime']>]> = [
  ['tunnel, new Argo', {}],
  ['ingress, new Argo', { access: 'ingress', ingressUrl: 'https://runtime.plant-a.example.test' }],
  ['tunnel, existing Argo', { argo: 'existing', argoNamespace: 'gitops' }],
  [
    'ingress, existing Argo',
    {
      access: 'ingress',
      ingressUrl: 'https://runtime.plant-a.example.test',
      argo: 'existing',
      argoNamespace: 'gitops',
    },
  ],
];

type Validatable = { validate(): void };
const MODELS: Record<string, (d: never) => Validatable> = {
  Namespace: (d) => new Namespace(d),
  ConfigMap: (d) => new ConfigMap(d),
  Secret: (d) => new Secret(d),
  Service: (d) => new Service(d),
  ServiceAccount: (d) => new ServiceAccount(d),
  Deployment: (d) => new Deployment(d),
  Job: (d) => new Job(d),
  Role: (d) => new Role(d),
  RoleBinding: (d) => new RoleBinding(d),
  ClusterRole: (d) => new ClusterRole(d),
  ClusterRoleBinding: (d) => new ClusterRoleBinding(d),
  CustomResourceDefinition: (d) => new CustomResourceDefinition(d),
};

const id = (o: KubeObject) => `${o.kind} ${o.metadata.namespace ?? ''}/${o.metadata.name}`;
const find = (objects: KubeObject[], kind: string, name: string, namespace = RUNTIME_NAMESPACE) =>
  objects.find(
    (o) =>
      o.kind === kind &&
      o.metadata.name === name &&
      (o.metadata.namespace ?? '') === (kind.startsWith('Cluster') || kind === 'Namespace' ? '' : namespace),
  );

t.test('the manifest parses to the objects; each is valid, labelled, and named once', async (t) => {
  for (const [mode, over] of MODES) {
    const b = hybridInstallBundle(input(over));
    const parsed = parseAllDocuments(b.manifests)
      .map((d) => d.toJSON() as unknown)
      .filter((d) => d !== null);
    t.same(parsed, b.objects, `${mode}: the YAML documents are the objects, in order`);
    const names = new Set<string>();
    for (const o of b.objects) {
      const model = MODELS[o.kind];
      t.ok(model, `${mode}: ${id(o)} is a kind the bundle is meant to hold`);
      t.doesNotThrow(() => model!(o as never).validate(), `${mode}: ${id(o)} is valid against its schema`);
      if (o.kind === 'CustomResourceDefinition') {
        // Shared by every runtime in the cluster: it names none of them (below, "the promotion CRDs").
        t.equal(o.metadata.labels?.['app.kubernetes.io/managed-by'], 'hosted-runtimes', `${mode}: ${id(o)} managed-by`);
        t.notOk(
          o.metadata.labels?.['hosted-runtimes.io/tenant'] ?? o.metadata.labels?.['hosted-runtimes.io/runtime'],
          `${mode}: ${id(o)} carries no tenant or runtime label`,
        );
      } else
        t.match(
          o.metadata.labels,
          {
            'app.kubernetes.io/managed-by': 'hosted-runtimes',
            'hosted-runtimes.io/tenant': TENANT,
            'hosted-runtimes.io/runtime': 'plant-a',
          },
          `${mode}: ${id(o)} carries the managed-by, tenant and runtime labels`,
        );
      t.notOk(names.has(id(o)), `${mode}: ${id(o)} appears once`);
      names.add(id(o));
    }
    t.equal(b.objects[0]!.kind, 'Namespace', `${mode}: the namespace is applied first`);
    t.equal(b.objects.at(-1)!.kind, 'Job', `${mode}: the bootstrap Job is applied last`);
  }
});

/**
 * What finding 2 injected through ingressUrl (a document break and a binding of cluster-admin to
 * every authenticated user), and the other ways out of a value: YAML 1.1 line breaks, a comment
 * mark, quotes, flow and anchor syntax, a tag, a BOM, a very long value.
 */
const INJECTED_BINDING =
  '\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  name: pwned\n' +
  'roleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: ClusterRole\n  name: cluster-admin\n' +
  'subjects:\n- apiGroup: rbac.authorization.k8s.io\n  kind: Group\n  name: system:authenticated\n';
const HOSTILE_TEXT = [
  INJECTED_BINDING,
  INJECTED_BINDING.replace(/\n/g, '\r'),
  INJECTED_BINDING.replace(/\n/g, '\u2028'),
  INJECTED_BINDING.replace(/\n/g, '\u2029'),
  INJECTED_BINDING.replace(/\n/g, '\u0085'),
  '\n# a comment\nkind: ClusterRoleBinding',
  '\' " } ] ,evil: true',
  '&anchor {evil: *anchor} !!binary AAAA',
  '\ufeff---\u200b\n...\n%YAML 1.1\n---',
  'x'.repeat(5000) + INJECTED_BINDING,
];

t.test(
  'a hostile value anywhere in the input stays one value: the manifest parses to exactly the objects',
  async (t) => {
    const cases: Array<[string, (v: string) => InstallBundleInput]> = [
      ['ingressUrl', (v) => input({ access: 'ingress', ingressUrl: `https://x.example.test${v}` })],
      ['runtimeId', (v) => input({ runtimeId: v })],
      ['controlPlaneUrl', (v) => ({ ...input(), controlPlaneUrl: `https://cp.example.test${v}` })],
      ['tunnelUrl', (v) => ({ ...input(), tunnelUrl: `wss://cp.example.test${v}` })],
      ['publicKey', (v) => ({ ...input(), publicKey: v })],
      ['bootstrapToken', (v) => ({ ...input(), bootstrapToken: v })],
    ];
    for (const [field, make] of cases)
      for (const [i, value] of HOSTILE_TEXT.entries()) {
        const what = `${field} #${i}`;
        const b = hybridInstallBundle(make(value));
        const docs = parseAllDocuments(b.manifests);
        t.same(
          docs.flatMap((d) => d.errors.map((e) => e.message)),
          [],
          `${what}: the manifest parses without an error`,
        );
        const parsed = docs.map((d) => d.toJSON() as unknown).filter((d) => d !== null);
        t.same(parsed, b.objects, `${what}: the YAML documents are exactly the bundle's objects, in order`);
        t.equal(
          b.objects.filter((o) => o.metadata.labels?.[HYBRID_LABELS.runtime] === 'plant-a').length,
          b.objects.filter((o) => o.kind !== 'CustomResourceDefinition').length,
          `${what}: every object but the shared CRDs carries the bundle's labels`,
        );
        t.notOk(/[\u0085\u2028\u2029]/.test(b.manifests), `${what}: no YAML 1.1 line break is written raw`);
        const comments = b.manifests.split('\n---\n')[0]!;
        t.notOk(
          comments.includes('pwned') || comments.includes('x.example.test'),
          `${what}: the comment holds no value`,
        );
        t.notOk(
          b.command.includes('pwned') || b.removeCommand.includes('pwned'),
          `${what}: the commands hold no value of the input`,
        );
      }
    const ingress = hybridInstallBundle(
      input({ access: 'ingress', ingressUrl: `https://x.example.test${INJECTED_BINDING}` }),
    );
    t.equal(
      (find(ingress.objects, 'Service', ROUTER_SERVICE.name)!.metadata as { annotations: Record<string, string> })
        .annotations[INGRESS_URL_ANNOTATION],
      `https://x.example.test${INJECTED_BINDING}`,
      'the injected text is the annotation value, whole',
    );
    t.notOk(
      parseAllDocuments(ingress.manifests).some(
        (d) =>
          (d.toJSON() as { kind?: string } | null)?.kind === 'ClusterRoleBinding' &&
          (d.toJSON() as { metadata: { name: string } }).metadata.name === 'pwned',
      ),
      'no document is the injected ClusterRoleBinding',
    );
    const {
      version: _version,
      bootstrapToken: _token,
      ...hostile
    } = input({
      access: 'ingress',
      ingressUrl: `https://x.example.test${INJECTED_BINDING}`,
    });
    const upgraded = upgradeBundle(hostile, catalog.versions[0]!, entry);
    t.same(
      parseAllDocuments(upgraded.install.manifests)
        .map((d) => (d.toJSON() as KubeObject | null)?.kind)
        .filter((k) => k !== undefined)
        .sort(),
      hybridInstallBundle({ ...hostile, version: entry, purpose: 'upgrade' })
        .objects.map((o) => o.kind)
        .sort(),
      "the upgrade bundle's manifest is its objects too",
    );
  },
);

t.test('the bootstrap token is the only secret: one Secret key, nowhere else in the bundle', async (t) => {
  for (const [mode, over] of MODES) {
    const b = hybridInstallBundle(input(over));
    const secrets = b.objects.filter((o) => o.kind === 'Secret');
    const data = secrets.flatMap((s) =>
      [...Object.entries((s.stringData as object) ?? {}), ...Object.entries((s.data as object) ?? {})].map(
        ([k, v]) => `${s.metadata.name}/${k}=${String(v)}`,
      ),
    );
    t.same(
      data,
      [`${BOOTSTRAP_SECRET}/${BOOTSTRAP_TOKEN_KEY}=${TOKEN}`],
      `${mode}: the only Secret value is the bootstrap token`,
    );
    t.ok(find(b.objects, 'Secret', CREDENTIALS_SECRET), `${mode}: the credentials Secret is created, empty`);
    t.equal(b.manifests.split(TOKEN).length - 1, 1, `${mode}: the token occurs once in the manifest`);
    t.notOk(b.command.includes(TOKEN), `${mode}: the install command does not hold the token`);
    t.notOk(b.removeCommand.includes(TOKEN), `${mode}: the remove command does not hold the token`);
    t.notOk(JSON.stringify(b.charts).includes(TOKEN), `${mode}: the chart values do not hold the token`);
  }
});

t.test('the bootstrap Job may touch only its two Secrets, by name', async (t) => {
  const b = hybridInstallBundle(input());
  const role = find(b.objects, 'Role', BOOTSTRAP_JOB)!;
  t.same(
    role.rules,
    [
      { apiGroups: [''], resources: ['secrets'], resourceNames: [CREDENTIALS_SECRET], verbs: ['get', 'patch'] },
      { apiGroups: [''], resources: ['secrets'], resourceNames: [BOOTSTRAP_SECRET], verbs: ['delete'] },
    ],
    'get and patch of runtime-credentials, delete of runtime-bootstrap, nothing else',
  );
  const binding = find(b.objects, 'RoleBinding', BOOTSTRAP_JOB)!;
  t.same(
    binding.subjects,
    [{ kind: 'ServiceAccount', name: BOOTSTRAP_JOB, namespace: RUNTIME_NAMESPACE }],
    'bound to the Job’s own account',
  );
  const job = find(b.objects, 'Job', BOOTSTRAP_JOB)! as unknown as {
    spec: {
      template: {
        spec: {
          serviceAccountName: string;
          containers: Array<{ image: string; env: Array<{ name: string; value?: string }> }>;
        };
      };
    };
  };
  const pod = job.spec.template.spec;
  t.equal(pod.serviceAccountName, BOOTSTRAP_JOB, 'the Job runs as that account');
  t.equal(
    pod.containers[0]!.image,
    `hosted-runtimes/bootstrap:${entry.components.agents}`,
    'the agents image of the catalog version',
  );
  t.notOk(JSON.stringify(job).includes(TOKEN), 'the Job reads the token from the Secret, it does not hold it');
  t.equal(
    pod.containers[0]!.env.find((e) => e.name === 'CONTROL_PLANE_URL')?.value,
    'https://cp.example.test',
    'the Job calls the control plane URL given',
  );
});

t.test('the agents are the hosted runtime’s, at the catalog’s image tag', async (t) => {
  const b = hybridInstallBundle(input());
  const budget = PLANS[DEFAULT_PLAN]!.runtime;
  const peers = {
    sourceServer: agentsAt(entry.version).some((a) => a.name === 'source-server'),
    productsUrl: productsUrl('https://cp.example.test', TENANT, ARGO_CD_NAMESPACE),
  };
  // The Source Server reaches the Argo CD beside it as the mode allows: its own test below.
  for (const agent of hybridAgents(entry.version).filter((a) => a.name !== 'source-server')) {
    const hosted = agentObjects(
      agent,
      `hosted-runtimes/${agent.name}:${entry.components.agents}`,
      TENANT,
      budget.agents[agent.name],
      RUNTIME_NAMESPACE,
      peers,
    );
    const deployment = find(b.objects, 'Deployment', agent.name)!;
    type Pod = { containers: Array<{ env: Array<{ name: string; value?: string }> }> };
    const expected = structuredClone((hosted.deployment.spec as { template: { spec: Pod } }).template.spec);
    if (agent.name === 'gitops-operator') {
      const env = (deployment.spec as { template: { spec: Pod } }).template.spec.containers[0]!.env;
      t.equal(
        loadOperatorConfig({
          KUBERNETES_SERVICE_HOST: '10.96.0.1',
          PRODUCTS_URL: env.find((e) => e.name === 'PRODUCTS_URL')?.value,
        }).productsUrl,
        `https://cp.example.test/console/#/tenants/${TENANT}/products/argocd`,
        'its pull requests link to the products page in the console of the control plane it was installed from',
      );
      // With new Argo CD, the hosted runtime's pod spec as it is (its PRODUCTS_URL included).
      t.same(
        (deployment.spec as { template: { spec: unknown } }).template.spec,
        expected,
        `${agent.name}: the pod spec is the hosted one (PROMOTIONS_NAMESPACE argocd, where the charts put Argo CD)`,
      );
      for (const other of hosted.otherRoles ?? [])
        t.same(
          find(b.objects, 'Role', `hosted-runtime:${agent.name}`, other.namespace)!.rules,
          other.role.rules,
          `${agent.name}: its hosted Role in ${other.namespace}, the same rules`,
        );
      continue;
    }
    expected.containers[0]!.env.push({ name: 'RUNTIME_ID', value: input().runtime.runtimeId });
    // The event reporter states the version in its heartbeats (the runtime's reportedVersion).
    if (agent.name === 'event-reporter')
      expected.containers[0]!.env.push({ name: 'RUNTIME_VERSION', value: entry.version });
    t.same(
      (deployment.spec as { template: { spec: unknown } }).template.spec,
      expected,
      agent.name === 'event-reporter'
        ? `${agent.name}: the pod spec is the hosted one with RUNTIME_ID and RUNTIME_VERSION ${entry.version} added to its environment`
        : `${agent.name}: the pod spec is the hosted one with RUNTIME_ID, the runtime's id, added to its environment`,
    );
    if (hosted.clusterRole)
      t.same(
        find(b.objects, 'ClusterRole', `hosted-runtime:${agent.name}`)!.rules,
        hosted.clusterRole.rules,
        `${agent.name}: the same cluster rules with new Argo CD`,
      );
  }
});

t.test('access=ingress: no tunnel client; the comment names the router Service the ingress points at', async (t) => {
  const b = hybridInstallBundle(input({ access: 'ingress', ingressUrl: 'https://runtime.plant-a.example.test' }));
  t.same(
    b.objects.filter((o) => o.metadata.name.includes('tunnel-client')).map(id),
    [],
    'no object of the tunnel client',
  );
  const router = find(b.objects, 'Service', ROUTER_SERVICE.name);
  t.ok(router, 'the request router has its Service');
  t.match(
    b.manifests,
    `at Service ${ROUTER_SERVICE.name} in namespace ${RUNTIME_NAMESPACE}, port ${ROUTER_SERVICE.port} (http)`,
    'the manifest says which Service and port the ingress points at',
  );
  t.equal(
    (router!.metadata as { annotations?: Record<string, string> }).annotations?.[INGRESS_URL_ANNOTATION],
    'https://runtime.plant-a.example.test',
    "the router's Service names the ingress URL in an annotation (data, not the comment)",
  );
  t.notMatch(b.manifests, /^#.*plant-a\.example\.test/m, 'no comment line holds the URL');
  const tunnel = hybridInstallBundle(input());
  t.ok(find(tunnel.objects, 'Deployment', 'tunnel-client'), 'access=tunnel has the tunnel client');
});

t.test('access=ingress: the request router checks request tokens for this runtime itself', async (t) => {
  type Env = Array<{ name: string; value?: string; valueFrom?: { secretKeyRef: { name: string; key: string } } }>;
  const routerEnv = (b: ReturnType<typeof hybridInstallBundle>): Env =>
    (find(b.objects, 'Deployment', ROUTER_SERVICE.name)!.spec as { template: { spec: { containers: [{ env: Env }] } } })
      .template.spec.containers[0].env;
  const runtime = input().runtime;
  const env = routerEnv(
    hybridInstallBundle(input({ access: 'ingress', ingressUrl: 'https://runtime.plant-a.example.test' })),
  );
  const named = (name: string) => env.find((e) => e.name === name);
  t.equal(named('ACCESS_MODE')?.value, 'ingress', 'ACCESS_MODE=ingress');
  t.equal(named('TENANT_ID')?.value, runtime.tenantId, 'its tenant');
  t.equal(named('RUNTIME_ID')?.value, runtime.runtimeId, 'its runtime');
  t.same(
    named('CONTROL_PLANE_PUBLIC_KEY')?.valueFrom,
    { secretKeyRef: { name: CREDENTIALS_SECRET, key: CREDENTIAL_KEYS.publicKey } },
    "the control plane's public key from the credentials Secret the bootstrap writes",
  );
  // The router's own loader accepts that environment (the Secret's value put in).
  const { publicKeyPem } = generateRequestSigningKeys();
  const vars = Object.fromEntries(env.map((e) => [e.name, e.valueFrom ? publicKeyPem : (e.value ?? '')]));
  t.match(
    loadRouterConfig(vars).requestTokens,
    { tenantId: runtime.tenantId, runtimeId: runtime.runtimeId },
    'the router starts in ingress mode for this runtime',
  );
  t.notOk(
    routerEnv(hybridInstallBundle(input())).some((e) => e.name === 'ACCESS_MODE'),
    'access=tunnel: the router checks no token (only the tunnel client calls it)',
  );
});

t.test(
  'argo=existing: no charts, no cluster-wide rights; a Role in the Argo CD namespace and nothing else there',
  async (t) => {
    const b = hybridInstallBundle(input({ argo: 'existing', argoNamespace: 'gitops' }));
    t.same(b.charts, [], 'no Argo chart');
    t.notMatch(b.command, /helm/, 'the install command installs no chart');
    t.same(b.objects.filter((o) => o.kind.startsWith('Cluster')).map(id), [], 'no ClusterRole or ClusterRoleBinding');
    const there = b.objects.filter((o) => o.metadata.namespace === 'gitops');
    t.same(
      there.map(id).sort(),
      [
        'Role gitops/hosted-runtime-app-proxy',
        'Role gitops/hosted-runtime-event-reporter',
        'Role gitops/hosted-runtime-source-server',
        'Role gitops/hosted-runtime:gitops-operator',
        'RoleBinding gitops/hosted-runtime-app-proxy',
        'RoleBinding gitops/hosted-runtime-event-reporter',
        'RoleBinding gitops/hosted-runtime-source-server',
        'RoleBinding gitops/hosted-runtime:gitops-operator',
      ],
      "in the Argo CD namespace only the four Roles (the GitOps Operator's too, from 1.8.0) and their bindings",
    );
    t.same(
      find(b.objects, 'Role', 'hosted-runtime-source-server', 'gitops')!.rules,
      [{ apiGroups: [''], resources: ['secrets'], verbs: ['get', 'list', 'watch'] }],
      "the Source Server reads Secrets there (Argo CD's repository credentials) and writes nothing",
    );
    t.same(
      find(b.objects, 'Role', 'hosted-runtime-app-proxy', 'gitops')!.rules,
      [
        { apiGroups: ['argoproj.io'], resources: ['applications'], verbs: ['get', 'patch'] },
        { apiGroups: ['promotions.hosted-runtimes.io'], resources: ['products'], verbs: ['get'] },
        { apiGroups: ['promotions.hosted-runtimes.io'], resources: ['promotions'], verbs: ['get', 'create', 'patch'] },
        {
          apiGroups: ['promotions.hosted-runtimes.io'],
          resources: ['promotionpreviews'],
          verbs: ['get', 'create', 'patch'],
        },
      ],
      'the app-proxy reads and patches (refresh, sync) Applications there, promotes, retries and aborts, and asks for previews',
    );
    t.same(
      find(b.objects, 'Role', 'hosted-runtime-event-reporter', 'gitops')!.rules,
      [
        { apiGroups: ['argoproj.io'], resources: ['applications'], verbs: ['get', 'list', 'watch'] },
        {
          apiGroups: ['promotions.hosted-runtimes.io'],
          resources: ['products', 'promotions', 'promotionpreviews'],
          verbs: ['get', 'list', 'watch'],
        },
      ],
      'the event reporter reads Applications, Products, Promotions and PromotionPreviews there',
    );
    const before = hybridInstallBundle({
      ...input({ argo: 'existing', argoNamespace: 'gitops' }),
      version: catalog.get('1.7.0')!,
    });
    t.same(
      find(before.objects, 'Role', 'hosted-runtime-app-proxy', 'gitops')!.rules,
      [{ apiGroups: ['argoproj.io'], resources: ['applications'], verbs: ['get', 'patch'] }],
      'before 1.8.0 (no promotion CRDs) the app-proxy gets Applications only',
    );
    t.same(
      find(before.objects, 'Role', 'hosted-runtime-event-reporter', 'gitops')!.rules,
      [{ apiGroups: ['argoproj.io'], resources: ['applications'], verbs: ['get', 'list', 'watch'] }],
      'and the event reporter too',
    );
    for (const [name, role] of [
      ['app-proxy', 'hosted-runtime-app-proxy'],
      ['event-reporter', 'hosted-runtime-event-reporter'],
      ['source-server', 'hosted-runtime-source-server'],
      ['gitops-operator', 'hosted-runtime:gitops-operator'],
    ])
      t.same(
        find(b.objects, 'RoleBinding', role!, 'gitops')!.subjects,
        [{ kind: 'ServiceAccount', name, namespace: RUNTIME_NAMESPACE }],
        `the ${name} Role is bound to the ${name} account`,
      );
    const reporter = find(b.objects, 'Deployment', 'event-reporter')! as unknown as {
      spec: { template: { spec: { containers: Array<{ env: Array<{ name: string; value?: string }> }> } } };
    };
    t.equal(
      reporter.spec.template.spec.containers[0]!.env.find((e) => e.name === 'WATCH_NAMESPACE')?.value,
      'gitops',
      'the event reporter watches that namespace only',
    );
  },
);

t.test(
  'argo=new: the four Argo charts at the catalog’s pins with the hosted values, installed before the apply',
  async (t) => {
    for (const version of catalog.versions) {
      const b = hybridInstallBundle({ ...input(), version });
      t.same(
        b.charts.map((c) => [c.chart, c.version, c.namespace, c.release]),
        ARGO_RELEASES.map((s) => [s.chart, version.components[s.component], s.namespace, s.releaseName]),
        `${version.version}: each Argo chart at its pin`,
      );
      const sourceServer = agentsAt(version.version).some((a) => a.name === 'source-server');
      for (const [i, spec] of ARGO_RELEASES.entries())
        t.same(
          parseYaml(b.charts[i]!.values),
          sourceServer && spec.component === 'argoCd'
            ? mergeValues(argoReleaseValues(spec, PLANS[DEFAULT_PLAN]!.runtime), sourceServerArgoCdAccountValues())
            : argoReleaseValues(spec, PLANS[DEFAULT_PLAN]!.runtime),
          `${version.version}: ${spec.chart} gets the hosted values on the ${DEFAULT_PLAN} plan` +
            (sourceServer && spec.component === 'argoCd' ? ", with the Source Server's account (no password)" : ''),
        );
    }
    const b = hybridInstallBundle(input());
    // The command run by bash with shell-function doubles of helm and kubectl that record their
    // arguments and what they read on stdin: each chart's values reach helm intact.
    const dir = mkdtempSync(join(tmpdir(), 'hybrid-command-'));
    t.teardown(() => rmSync(dir, { recursive: true, force: true }));
    const doubles =
      'helm() { echo "helm $*" >> "$DIR/log"; cat > "$DIR/values-$3"; }\n' +
      'kubectl() { echo "kubectl $*" >> "$DIR/log"; }\n';
    const ran = spawnSync('bash', ['--norc', '--noprofile', '-e', '-c', doubles + b.command], {
      env: { PATH: process.env.PATH, DIR: dir },
      encoding: 'utf8',
    });
    t.equal(ran.status, 0, `the install command runs in bash (${ran.stderr.trim() || 'no error'})`);
    const log = readFileSync(join(dir, 'log'), 'utf8').trim().split('\n');
    t.same(
      log.map((l) => l.split(' ').slice(0, 4).join(' ')),
      [
        ...b.charts.map((c) => `helm upgrade --install ${c.release}`),
        `kubectl apply -f ${manifestFileName('plant-a')}`,
      ],
      'helm installs each chart, then kubectl applies the manifest',
    );
    for (const c of b.charts)
      t.same(
        parseYaml(readFileSync(join(dir, `values-${c.release}`), 'utf8')),
        parseYaml(c.values),
        `helm read ${c.chart}'s values on stdin`,
      );
    const removed = spawnSync('bash', ['--norc', '--noprofile', '-e', '-c', doubles + b.removeCommand], {
      env: { PATH: process.env.PATH, DIR: dir },
      encoding: 'utf8',
    });
    t.equal(removed.status, 0, `the remove command runs in bash (${removed.stderr.trim() || 'no error'})`);
    const lines = b.command.split('\n');
    t.equal(
      lines.at(-1),
      `kubectl apply -f ${manifestFileName('plant-a')}`,
      'the command ends with the apply of the saved manifest',
    );
    t.equal(
      lines.filter((l) => l.startsWith('helm upgrade --install ')).length,
      4,
      'and installs the 4 charts before it',
    );
  },
);

t.test('the remove command deletes every kind the bundle created, by its labels', async (t) => {
  for (const [mode, over] of MODES) {
    const b = hybridInstallBundle(input(over));
    const first = b.removeCommand.split('\n')[0]!;
    const m = /^kubectl delete (\S+) --all-namespaces --ignore-not-found -l '([^']+)'$/.exec(first);
    t.ok(m, `${mode}: the first line is one kubectl delete by label selector`);
    const resources = m![1]!.split(',');
    const selector = Object.fromEntries(m![2]!.split(',').map((kv) => kv.split('=') as [string, string]));
    t.same(
      selector,
      {
        'app.kubernetes.io/managed-by': 'hosted-runtimes',
        'hosted-runtimes.io/tenant': TENANT,
        'hosted-runtimes.io/runtime': 'plant-a',
      },
      `${mode}: it selects the runtime's labels`,
    );
    // argo=new: also the kinds of the Argo charts' objects, which an install from the URL labels;
    // never the shared CRDs.
    const kinds = [
      ...new Set([
        ...b.objects.map((o) => o.kind).filter((k) => k !== 'CustomResourceDefinition'),
        ...(b.charts.length > 0 ? ARGO_CHART_KINDS : []),
      ]),
    ];
    t.equal(
      resources.length,
      kinds.length,
      `${mode}: one resource per kind the bundle (and with argo=new its charts) creates (${kinds.length})`,
    );
    for (const kind of kinds)
      t.ok(
        resources.some((r) => r.split('.')[0] === `${kind.toLowerCase()}s`),
        `${mode}: ${kind} objects are deleted`,
      );
    t.equal(resources.at(-1), 'namespaces', `${mode}: the namespace goes last`);
    t.notOk(
      resources.some((r) => r.startsWith('customresourcedefinitions')),
      `${mode}: no CRD is deleted (the promotion CRDs are shared with the cluster's other runtimes)`,
    );
    const lines = b.removeCommand.split('\n').slice(1);
    const helm = lines.filter((l) => !l.startsWith('#'));
    t.ok(
      lines.slice(helm.length).every((l) => l.startsWith('# ')),
      `${mode}: the note about the CRDs comes last, as shell comments`,
    );
    t.equal(helm.length, b.charts.length, `${mode}: one helm uninstall per chart installed (${b.charts.length})`);
    for (const line of helm)
      t.match(
        line,
        /^helm status \S+ --namespace \S+ >\/dev\/null 2>&1 && helm uninstall \S+ --namespace \S+ \|\| true$/,
        `${mode}: each uninstall runs only where helm installed the release (an install from the URL has none)`,
      );
  }
});

t.test('inconsistent input is refused naming what is missing', async (t) => {
  t.throws(
    () => hybridInstallBundle(input({ access: 'ingress' })),
    new HybridBundleError('access=ingress needs the ingress URL'),
    'access=ingress without its URL',
  );
  t.throws(
    () => hybridInstallBundle(input({ argo: 'existing' })),
    { name: 'HybridBundleError', message: /Argo CD namespace/ },
    'argo=existing without its namespace',
  );
  t.throws(
    () => hybridInstallBundle(input({ argo: 'existing', argoNamespace: RUNTIME_NAMESPACE })),
    { name: 'HybridBundleError', message: /runtime's own namespace/ },
    'the runtime namespace as the Argo CD namespace',
  );
  t.throws(
    () => hybridInstallBundle(input({ name: 'Plant_A' })),
    { name: 'HybridBundleError', message: /DNS label/ },
    'a name that is not a DNS label',
  );
  t.throws(
    () => hybridInstallBundle({ ...input(), bootstrapToken: '' }),
    { name: 'HybridBundleError', message: /token is empty/ },
    'no bootstrap token',
  );
});

t.test('the Source Server reads the Argo CD beside it as each mode allows, and its loader accepts that', async (t) => {
  type Env = Array<{ name: string; value?: string; valueFrom?: { secretKeyRef: { name: string; key: string } } }>;
  type PodSpec = {
    containers: [{ env: Env; volumeMounts: Array<{ name: string; mountPath: string }> }];
    volumes: Array<{ name: string; secret?: { secretName: string; optional?: boolean } }>;
  };
  const podOf = (b: ReturnType<typeof hybridInstallBundle>, name: string, ns?: string) =>
    (find(b.objects, 'Deployment', name, ns)!.spec as { template: { spec: PodSpec } }).template.spec;
  const named = (env: Env, name: string) => env.find((e) => e.name === name);
  // What the loader reads: literal values, and the Secrets' values put in (as the kubelet would).
  const vars = (env: Env) => ({
    ...Object.fromEntries(env.map((e) => [e.name, e.valueFrom ? 'hrt_runtime-token-value' : (e.value ?? '')])),
    KUBERNETES_SERVICE_HOST: '10.0.0.1', // in a pod
  });

  const ns = 'hosted-runtime-plant-a';
  const existing = hybridInstallBundle(input({ argo: 'existing', argoNamespace: 'gitops', namespace: ns }));
  const pod = podOf(existing, 'source-server', ns);
  const env = pod.containers[0].env;
  t.equal(
    named(env, 'ARGOCD_SERVER_URL')?.value,
    'https://argocd-server.gitops.svc',
    "argo=existing: the customer's argocd-server over https",
  );
  t.equal(named(env, 'ARGOCD_NAMESPACE')?.value, 'gitops', 'its repository Secrets in that namespace');
  t.equal(
    named(env, 'ARGOCD_CA_SECRET')?.value,
    'argocd-server-tls',
    "verified against Argo CD's own server certificate Secret",
  );
  t.notOk(
    named(env, 'ARGOCD_PASSWORD') ?? named(env, 'RUNTIME_TOKEN'),
    'no password and no runtime token: it logs in nowhere',
  );
  const tokenVolume = pod.volumes.find((v) => v.secret?.secretName === 'source-server-argocd');
  t.same(
    tokenVolume?.secret?.optional,
    true,
    "the customer's token Secret is mounted optional (the install works before it exists)",
  );
  const mount = pod.containers[0].volumeMounts.find((m) => m.name === tokenVolume?.name);
  t.equal(
    named(env, 'ARGOCD_TOKEN_FILE')?.value,
    `${mount?.mountPath}/token`,
    'and read as ARGOCD_TOKEN_FILE from there',
  );
  const loaded = loadSourceServerConfig(vars(env));
  t.equal(loaded.argoCdServerUrl, 'https://argocd-server.gitops.svc', 'its loader accepts the environment');
  t.equal(loaded.argoCdToken?.(), undefined, 'a token file not there yet is no token (answered 503, not a crash)');
  t.match(
    existing.manifests,
    /^# argocd account generate-token --account source-server$/m,
    'the comment says how to make the token',
  );
  t.notMatch(existing.manifests, /^#.*gitops/m, 'and holds no value the caller gave');
  for (const agent of ['event-reporter', 'app-proxy'])
    t.equal(
      named(podOf(existing, agent, ns).containers[0].env, 'SOURCE_SERVER_URL')?.value,
      `http://source-server.${ns}.svc:8080`,
      `the ${agent} asks the Source Server of its own runtime's namespace`,
    );

  // The request router: `/argo-cd/*` to the Argo CD the bundle installs; none beside the customer's.
  const routerEnv = (b: ReturnType<typeof hybridInstallBundle>, namespace?: string) =>
    podOf(b, 'request-router', namespace).containers[0].env;
  t.notOk(
    named(routerEnv(existing, ns), 'ARGOCD_SERVER_URL'),
    "argo=existing: the router proxies nothing to the customer's Argo CD API server",
  );
  t.equal(
    loadRouterConfig(vars(routerEnv(existing, ns))).argoCdServerUrl,
    undefined,
    'so its /argo-cd/* answers 404 naming what it serves',
  );

  const fresh = hybridInstallBundle(input());
  t.equal(
    named(routerEnv(fresh), 'ARGOCD_SERVER_URL')?.value,
    'http://argocd-server.argocd.svc:80',
    "argo=new: the router's /argo-cd/* reaches the Argo CD the bundle installs",
  );
  const newEnv = podOf(fresh, 'source-server').containers[0].env;
  t.equal(
    named(newEnv, 'ARGOCD_SERVER_URL')?.value,
    'http://argocd-server.argocd.svc:80',
    "argo=new: the Argo CD the bundle's charts install",
  );
  t.equal(named(newEnv, 'ARGOCD_ACCOUNT_SETUP')?.value, 'argocd-secret', 'it sets its account up itself');
  t.same(
    named(newEnv, 'RUNTIME_TOKEN')?.valueFrom,
    { secretKeyRef: { name: CREDENTIALS_SECRET, key: CREDENTIAL_KEYS.token } },
    'from the runtime token the bootstrap Job writes (the bundle holds no password)',
  );
  t.notOk(named(newEnv, 'ARGOCD_PASSWORD'), 'no password Secret');
  const newLoaded = loadSourceServerConfig(vars(newEnv));
  t.ok(newLoaded.argoCdAccountSetup, 'its loader accepts it');
  t.equal(newLoaded.argoCdPassword().length, 43, 'the password is derived from the runtime token');
  t.same(
    find(fresh.objects, 'Role', 'hosted-runtime-source-server', 'argocd')!.rules,
    [
      { apiGroups: [''], resources: ['secrets'], verbs: ['get', 'list', 'watch'] },
      { apiGroups: [''], resources: ['secrets'], resourceNames: ['argocd-secret'], verbs: ['patch'] },
    ],
    'its Role in argocd: read Secrets, patch argocd-secret by name and nothing else',
  );
  t.notOk(
    JSON.stringify(fresh.charts).includes('accounts.source-server.password'),
    'the chart values carry no password hash',
  );

  const older = hybridInstallBundle({ ...input(), version: catalog.get('1.6.0')! });
  t.notOk(find(older.objects, 'Deployment', 'source-server'), '1.6.0 has no Source Server');
  t.notOk(
    named(podOf(older, 'event-reporter').containers[0].env, 'SOURCE_SERVER_URL'),
    'and its event reporter asks none',
  );
});

/** A runtime registered now: its own namespace (`hosted-runtime-<name>`), as registration gives it. */
const own = (name: string, over: Partial<InstallBundleInput['runtime']> = {}): InstallBundleInput =>
  input({ name, namespace: hybridNamespace(name), ...over });
const withoutLabels = (o: KubeObject) => {
  const c = structuredClone(o);
  delete c.metadata.labels;
  return c;
};

t.test('the GitOps Operator and the promotion CRDs: in the versions that have the operator, not before', async (t) => {
  for (const version of catalog.versions) {
    const has = compareVersions(version.version, GITOPS_OPERATOR_AGENT.since!) >= 0;
    for (const [mode, over] of MODES) {
      const b = hybridInstallBundle({ ...input(over), version });
      const what = `${version.version}, ${mode}`;
      const deployment = find(b.objects, 'Deployment', 'gitops-operator');
      const crds = b.objects.filter((o) => o.kind === 'CustomResourceDefinition');
      if (!has) {
        t.notOk(deployment, `${what}: no operator`);
        t.same(crds, [], `${what}: no CRD`);
        t.notOk(
          b.objects.some((o) => o.metadata.name.includes('gitops-operator')),
          `${what}: nothing of the operator`,
        );
        continue;
      }
      t.ok(deployment, `${what}: the operator's Deployment`);
      t.equal(
        (deployment!.spec as { template: { spec: { containers: Array<{ image: string }> } } }).template.spec
          .containers[0]!.image,
        `hosted-runtimes/gitops-operator:${version.components.agents}`,
        `${what}: its image is the catalog's agents tag, like the other agents'`,
      );
      t.ok(find(b.objects, 'ServiceAccount', 'gitops-operator'), `${what}: its account`);
      t.same(
        crds.map(withoutLabels),
        promotionCrds().map((c) => withoutLabels(c as unknown as KubeObject)),
        `${what}: the hosted runtime's promotion CRDs, all seven, as promotion-crds.ts defines them`,
      );
      t.equal(
        b.objects.findIndex((o) => o.kind === 'CustomResourceDefinition'),
        1,
        `${what}: the CRDs come right after the runtime's namespace`,
      );
      t.same(
        b.objects.filter((o) => o.kind.startsWith('Cluster') && o.metadata.name.includes('gitops-operator')),
        [],
        `${what}: the operator has nothing cluster-wide`,
      );
    }
  }
});

t.test('two runtimes in one cluster: identical CRD objects, every other name their own', async (t) => {
  const pairs: Array<[string, InstallBundleInput, InstallBundleInput]> = [
    ['new beside existing in argocd', own('plant-a'), own('plant-b', { argo: 'existing', argoNamespace: 'argocd' })],
    [
      'two beside one existing Argo CD',
      own('plant-a', { argo: 'existing', argoNamespace: 'gitops' }),
      own('plant-b', { argo: 'existing', argoNamespace: 'gitops', tenantId: 'another-tenant', runtimeId: 'x' }),
    ],
    [
      'tunnel and ingress',
      own('plant-a', { upgrader: true }),
      own('plant-c', {
        access: 'ingress',
        ingressUrl: 'https://c.example.test',
        argo: 'existing',
        argoNamespace: 'argocd',
      }),
    ],
  ];
  for (const [what, one, two] of pairs) {
    const a = hybridInstallBundle(one);
    const b = hybridInstallBundle(two);
    const crds = (x: InstallBundle) => x.objects.filter((o) => o.kind === 'CustomResourceDefinition');
    t.equal(crds(a).length, 7, `${what}: the first bundle has the seven CRDs`);
    t.same(crds(b), crds(a), `${what}: the second's are the same objects, labels and all (its apply changes nothing)`);
    t.equal(yamlText(crds(b)), yamlText(crds(a)), `${what}: written the same, byte for byte`);
    // Every object the two could both name in the cluster: cluster-scoped (but the CRDs), or in a namespace both use.
    const shared = (x: InstallBundle) =>
      x.objects
        .filter((o) => o.kind !== 'CustomResourceDefinition')
        .filter((o) => o.metadata.namespace === undefined || o.metadata.namespace !== x.namespace)
        .map(id);
    const clash = shared(a).filter((k) => shared(b).includes(k));
    t.same(clash, [], `${what}: no other object of one has the other's kind, namespace and name`);
    t.not(a.namespace, b.namespace, `${what}: each has its own namespace`);
    for (const x of [a, b]) {
      const operatorRoles = x.objects.filter((o) => o.kind === 'Role' && o.metadata.name.endsWith(':gitops-operator'));
      t.same(
        operatorRoles.map((o) => o.metadata.name),
        [`${x.namespace}:gitops-operator`],
        `${what}: ${x.namespace}'s operator Role is named after its namespace`,
      );
    }
  }
});

t.test('argo=existing: the operator runs in the Argo CD namespace the registration names', async (t) => {
  const ns = hybridNamespace('plant-a');
  const b = hybridInstallBundle(own('plant-a', { argo: 'existing', argoNamespace: 'gitops' }));
  type Env = Array<{ name: string; value?: string; valueFrom?: unknown }>;
  const env = (
    find(b.objects, 'Deployment', 'gitops-operator', ns)!.spec as {
      template: { spec: { containers: [{ env: Env }] } };
    }
  ).template.spec.containers[0].env;
  t.equal(
    env.find((e) => e.name === 'PROMOTIONS_NAMESPACE')?.value,
    'gitops',
    "PROMOTIONS_NAMESPACE is the customer's Argo CD namespace",
  );
  const loaded = loadOperatorConfig({
    ...Object.fromEntries(env.map((e) => [e.name, e.valueFrom ? 'gitops-operator-0' : (e.value ?? '')])),
    KUBERNETES_SERVICE_HOST: '10.0.0.1', // in a pod
  });
  t.equal(loaded.namespace, 'gitops', "the operator's own loader accepts that environment, in that namespace");
  t.equal(
    loaded.productsUrl,
    `https://cp.example.test/console/#/tenants/${TENANT}/products/gitops`,
    'its pull requests link to the products of that namespace in the console',
  );
  const role = find(b.objects, 'Role', `${ns}:gitops-operator`, 'gitops');
  t.same(role?.rules, GITOPS_OPERATOR_RULES, 'its Role there has the hosted rules, nothing more');
  t.same(
    find(b.objects, 'RoleBinding', `${ns}:gitops-operator`, 'gitops')?.subjects,
    [{ kind: 'ServiceAccount', name: 'gitops-operator', namespace: ns }],
    'bound to its own account in the runtime namespace',
  );
  t.same(
    b.objects.filter((o) => o.metadata.namespace === 'argocd').map(id),
    [],
    'nothing in argocd (the charts are not installed)',
  );
  t.match(
    b.manifests,
    /^# creates there; they need Argo Workflows in this cluster/m,
    "the header says that actions and hooks need the customer's Argo Workflows",
  );
  t.match(
    b.manifests,
    /^# never ends and hooks do not start; promotions without actions or hooks need nothing more\.$/m,
    'and what happens without it',
  );
  t.notMatch(b.manifests, /^#.*gitops\b/m, 'no comment line holds the namespace the caller gave');

  const fresh = hybridInstallBundle(own('plant-a'));
  t.ok(
    find(fresh.objects, 'Role', `${ns}:gitops-operator`, 'argocd'),
    "argo=new: its Role in argocd, the charts' Argo CD",
  );
  t.notMatch(fresh.manifests, /Argo Workflows in this cluster/, 'argo=new brings Argo Workflows: no caveat');
});

t.test('the remove command keeps the shared CRDs and says how to delete them', async (t) => {
  for (const [mode, over] of MODES) {
    const b = hybridInstallBundle(input(over));
    const note = b.removeCommand.split('\n').filter((l) => l.startsWith('#'));
    t.ok(note.length > 0, `${mode}: a note`);
    const del = note.at(-1)!;
    for (const crd of promotionCrds())
      t.ok(
        del.includes((crd.metadata as { name: string }).name),
        `${mode}: its last line deletes ${(crd.metadata as { name: string }).name}, as a comment`,
      );
    t.match(note.join(' '), /deletes every object of its kind/, `${mode}: and says why they stay`);
    // Run as the customer would: the comment runs nothing.
    const dir = mkdtempSync(join(tmpdir(), 'hybrid-remove-'));
    t.teardown(() => rmSync(dir, { recursive: true, force: true }));
    const ran = spawnSync(
      'bash',
      [
        '--norc',
        '--noprofile',
        '-e',
        '-c',
        'kubectl() { echo "kubectl $*" >> "$DIR/log"; }\nhelm() { return 1; }\n' + b.removeCommand,
      ],
      { env: { PATH: process.env.PATH, DIR: dir }, encoding: 'utf8' },
    );
    t.equal(ran.status, 0, `${mode}: the command runs (${ran.stderr.trim() || 'no error'})`);
    const log = readFileSync(join(dir, 'log'), 'utf8').trim().split('\n');
    t.equal(log.length, 1, `${mode}: one kubectl call`);
    t.notMatch(log[0], /customresourcedefinition/, `${mode}: which deletes no CRD`);
  }
  const older = hybridInstallBundle({ ...input(), version: catalog.get('1.7.0')! });
  t.notMatch(older.removeCommand, /^#/m, 'a version without the CRDs has no note');
});
