/**
 * What the control plane generates for a customer to apply holds only the control plane's own
 * objects, whatever a registration sent (docs/security.md "Content the control plane generates for
 * customers"), through the real app on loopback with rows in Postgres. Hostile input in every field
 * of a registration (document breaks, YAML documents, comment marks, quotes, Unicode line
 * separators, controls, very long strings, extra properties) is refused with a 400 naming the field,
 * or accepted; for each one accepted, every bundle the API makes (the install bundle of the
 * registration, the upgrade bundle at each catalog version) parses to exactly the objects the
 * generator makes for that runtime, each with the bundle's labels. A value stored before these
 * checks existed still stays one value in every bundle, and the CLI prints it on one line.
 */
import t, { type Test } from 'tap';
import { parseAllDocuments } from 'yaml';
import { createTestApi } from '../../helpers/api.ts';
import { main } from '../../../provisioner/cli/main.ts';
import { catalog } from '../../../runtime/catalog.ts';
import {
  HYBRID_LABELS,
  HYBRID_MANAGED_BY,
  hybridInstallBundle,
  type KubeObject,
} from '../../../runtime/hybrid/bundle.ts';
import type { Runtime, RuntimeRegistered } from '../../../provisioner/api/types.ts';
import { promotionCrds } from '../../../runtime/component/promotion-crds.ts';
import { setIngressUrl } from '../../helpers/runtimes.ts';

const api = await createTestApi({
  env: {
    PROVISIONER_PUBLIC_URL: 'https://cp.example.test',
    PROVISIONER_HYBRID_RUNTIMES_PER_TENANT: '1000',
    PROVISIONER_HYBRID_REGISTRATIONS_PER_HOUR: '100000',
    PROVISIONER_HYBRID_BUNDLES_PER_MINUTE: '100000',
    PROVISIONER_HYBRID_BUNDLES_PER_RUNTIME_PER_MINUTE: '100000',
  },
});
const base = await api.app.listen({ port: 0, host: '127.0.0.1' });
t.teardown(() => api.close());

type ErrorAnswer = { error: { code: string; field?: string; message: string } };

const { tenantId, apiKey } = await api.signup();
const asTenant = api.as(apiKey);
/**
 * A registration (hybrid, tunnel, a new Argo CD unless `body` says) through the one raw request:
 * the hostile bodies below are ones the route's types refuse on purpose (extra properties).
 */
const register = async (body: Record<string, unknown>) => {
  const res = await api.request('POST', `/v1/tenants/${tenantId}/runtimes`, {
    key: apiKey,
    body: { mode: 'hybrid', access: 'tunnel', argo: 'new', ...body },
  });
  return { status: res.statusCode, body: res.json<RuntimeRegistered & ErrorAnswer>() };
};
/** A runtime of the tenant, read through the typed client. */
const runtimeOf = (name: string) =>
  asTenant.call('GET /v1/tenants/:id/runtimes/:name', { params: { id: tenantId, name } });

/** The exact payload of finding 2: a document break and a binding of cluster-admin to every authenticated user. */
const BINDING =
  '\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  name: pwned\n' +
  'roleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: ClusterRole\n  name: cluster-admin\n' +
  'subjects:\n- apiGroup: rbac.authorization.k8s.io\n  kind: Group\n  name: system:authenticated\n';

/**
 * The ingressUrl of the finding: the URL parser drops the line breaks and the dot segments remove
 * the path they leave, so the old check saw `https://runtime.example.test/`, and the old bundle
 * wrote the raw value into a comment line, making the binding its first document.
 */
const FINDING_INGRESS_URL = `https://runtime.example.test/${BINDING}---\n/../..`;

/** Ways out of a value, each appended to (or put into) an otherwise good value. */
const BREAKOUTS = [
  BINDING,
  BINDING.replace(/\n/g, '\r'),
  BINDING.replace(/\n/g, '\r\n'),
  BINDING.replace(/\n/g, '\u2028'),
  BINDING.replace(/\n/g, '\u2029'),
  BINDING.replace(/\n/g, '\u0085'),
  '\t',
  ' ',
  '\u0000',
  '\u007f',
  '\u001b[2K',
  '\u00a0',
  '\u200b',
  '\ufeff',
  '\u202e',
  '# a comment',
  '\' " } ] ,evil: true',
  '&a {x: *a} !!binary AAAA',
];

/** Every field of a registration, each with values that must be refused: [what, body, field]. */
const refused: Array<[string, Record<string, unknown>, string]> = [];
for (const [i, s] of BREAKOUTS.entries()) {
  refused.push(
    [`name #${i}`, { name: `plant${s}` }, 'name'],
    [`access #${i}`, { name: 'n', access: `tunnel${s}` }, 'access'],
    [`argo #${i}`, { name: 'n', argo: `new${s}` }, 'argo'],
    [`mode #${i}`, { name: 'n', mode: `hybrid${s}` }, 'mode'],
    [`upgrades #${i}`, { name: 'n', upgrades: `agent${s}` }, 'upgrades'],
    [`version #${i}`, { name: 'n', version: `1.5.0${s}` }, 'version'],
    [`argoNamespace #${i}`, { name: 'n', argo: 'existing', argoNamespace: `argocd${s}` }, 'argoNamespace'],
    [`ingressUrl #${i}`, { name: 'n', access: 'ingress', ingressUrl: `https://203.0.113.10${s}` }, 'ingressUrl'],
    [
      `ingressUrl in the host #${i}`,
      { name: 'n', access: 'ingress', ingressUrl: `https://a${s}.example.test` },
      'ingressUrl',
    ],
  );
}
refused.push(
  ['a name of 41 characters', { name: 'a'.repeat(41) }, 'name'],
  ['an upper-case name', { name: 'Plant' }, 'name'],
  [
    'an Argo CD namespace of 64 characters',
    { name: 'n', argo: 'existing', argoNamespace: 'a'.repeat(64) },
    'argoNamespace',
  ],
  [
    'a very long ingressUrl',
    { name: 'n', access: 'ingress', ingressUrl: `https://${'a'.repeat(5000)}.test` },
    'ingressUrl',
  ],
  [
    'an ingressUrl with credentials',
    { name: 'n', access: 'ingress', ingressUrl: 'https://u:p@203.0.113.10' },
    'ingressUrl',
  ],
  [
    'an ingressUrl with empty credentials',
    { name: 'n', access: 'ingress', ingressUrl: 'https://@203.0.113.10' },
    'ingressUrl',
  ],
  [
    'an ingressUrl with a query',
    { name: 'n', access: 'ingress', ingressUrl: 'https://203.0.113.10/?a=1' },
    'ingressUrl',
  ],
  [
    'an ingressUrl with a fragment',
    { name: 'n', access: 'ingress', ingressUrl: 'https://203.0.113.10/#x' },
    'ingressUrl',
  ],
  [
    'an ingressUrl with a path',
    { name: 'n', access: 'ingress', ingressUrl: 'https://203.0.113.10/argo' },
    'ingressUrl',
  ],
  ['an ingressUrl without slashes', { name: 'n', access: 'ingress', ingressUrl: 'https:203.0.113.10' }, 'ingressUrl'],
  [
    'an ingressUrl with backslashes',
    { name: 'n', access: 'ingress', ingressUrl: 'https:\\\\203.0.113.10\\' },
    'ingressUrl',
  ],
  ['an http ingressUrl', { name: 'n', access: 'ingress', ingressUrl: 'http://203.0.113.10' }, 'ingressUrl'],
  [
    'an ingressUrl whose dot segments remove its path',
    { name: 'n', access: 'ingress', ingressUrl: 'https://203.0.113.10/a/..' },
    'ingressUrl',
  ],
  ['a YAML document as ingressUrl', { name: 'n', access: 'ingress', ingressUrl: BINDING.trim() }, 'ingressUrl'],
  ['an extra property', { name: 'n', labels: { a: 'b' } }, 'labels'],
  ['an extra property named like a break-out', { name: 'n', [`x${BINDING}`]: 1 }, `x${BINDING}`],
);

t.test('hostile input in every field of a registration is refused with a 400 naming the field', async (t) => {
  for (const [what, body, field] of refused) {
    const res = await register(body);
    t.equal(res.status, 400, `${what}: refused with 400 (got ${res.status})`);
    t.equal(res.body.error?.field, field, `${what}: the error names ${JSON.stringify(field).slice(0, 40)}`);
  }
  const finding = await register({
    name: 'up1',
    access: 'ingress',
    ingressUrl: FINDING_INGRESS_URL,
  });
  t.equal(finding.status, 400, "the finding's ingressUrl with a ClusterRoleBinding after a document break is refused");
  t.match(
    finding.body.error?.message ?? '',
    /^ingressUrl '.*' holds a control, format or whitespace character/,
    'the message says what is wrong',
  );
  t.notMatch(finding.body.error?.message ?? '', /\n/, 'and quotes the value on one line');
  const list = await asTenant.call('GET /v1/tenants/:id/runtimes', { params: { id: tenantId } });
  t.same(
    list.items.filter((r) => r.mode === 'hybrid').map((r) => r.name),
    [],
    'nothing refused was stored',
  );
});

const key = (o: KubeObject) => `${o.kind} ${o.metadata.namespace ?? ''}/${o.metadata.name}`;
const noToken = 'hrth_' + 'A'.repeat(43);

/** What the generator makes for a runtime as the API shows it (its objects' kinds and names do not depend on the URLs or keys). */
function generated(r: Runtime, purpose: 'install' | 'upgrade', version: string = r.version!): string[] {
  const entry = catalog.get(version)!;
  const b = hybridInstallBundle({
    runtime: {
      tenantId: r.tenantId,
      runtimeId: r.id,
      name: r.name,
      access: r.access!,
      ...(r.ingressUrl ? { ingressUrl: r.ingressUrl } : {}),
      argo: r.argo!,
      ...(r.argoNamespace ? { argoNamespace: r.argoNamespace } : {}),
      // The runtime's own namespace, as the API reports it (the names of its objects follow it).
      ...(r.namespace ? { namespace: r.namespace } : {}),
      upgrader: r.upgrades === 'agent',
    },
    version: entry,
    controlPlaneUrl: 'https://cp.example.test',
    tunnelUrl: 'wss://cp.example.test/v1/tunnel',
    publicKey: 'k',
    purpose,
    ...(purpose === 'install' ? { bootstrapToken: noToken } : {}),
  });
  return b.objects.map(key).sort();
}

/**
 * The manifest parses without an error to exactly `expected`, each object with the bundle's labels;
 * the promotion CRDs (versions with the GitOps Operator), shared by every runtime in a cluster, with
 * the managed-by label alone and exactly as the hosted runtime defines them.
 */
function checkManifest(t: Test, what: string, manifests: string, r: Runtime, expected: string[]) {
  const docs = parseAllDocuments(manifests);
  t.same(
    docs.flatMap((d) => d.errors.map((e) => e.message)),
    [],
    `${what}: the manifest parses without an error`,
  );
  const objects = docs.map((d) => d.toJS() as KubeObject | null).filter((o): o is KubeObject => o !== null);
  t.same(objects.map(key).sort(), expected, `${what}: the objects are exactly the bundle's own`);
  const shared = (o: KubeObject) => o.kind === 'CustomResourceDefinition';
  t.same(
    objects
      .filter(
        (o) =>
          !shared(o) &&
          (o.metadata.labels?.[HYBRID_LABELS.managedBy] !== HYBRID_MANAGED_BY ||
            o.metadata.labels[HYBRID_LABELS.tenant] !== r.tenantId ||
            o.metadata.labels[HYBRID_LABELS.runtime] !== r.name),
      )
      .map(key),
    [],
    `${what}: every object but the shared CRDs carries the bundle's labels`,
  );
  const crds = objects.filter(shared);
  if (crds.length > 0)
    t.same(
      crds,
      promotionCrds().map((c) => ({
        ...c,
        metadata: {
          ...(c.metadata as KubeObject['metadata']),
          labels: { ...(c.metadata as KubeObject['metadata']).labels, [HYBRID_LABELS.managedBy]: HYBRID_MANAGED_BY },
        },
      })),
      `${what}: the CRDs are the promotion CRDs as the hosted runtime defines them, labelled managed-by only`,
    );
  t.notOk(/[\u0085\u2028\u2029]/.test(manifests), `${what}: no YAML 1.1 line break is written raw`);
}

/** Every bundle the API makes for the runtime: the upgrade bundle at its version and at each catalog version. */
async function checkBundles(t: Test, what: string, r: Runtime) {
  const bundle = (version?: string) =>
    asTenant.request('GET /v1/tenants/:id/runtimes/:name/bundle', {
      params: { id: tenantId, name: r.name },
      ...(version ? { query: { version } } : {}),
    });
  const current = await bundle();
  t.equal(current.status, 200, `${what}: its upgrade bundle is answered`);
  if (current.ok)
    checkManifest(t, `${what}, upgrade bundle`, current.body.install.manifests, r, generated(r, 'upgrade'));
  for (const v of catalog.versions) {
    const at = await bundle(v.version);
    if (!at.ok) continue; // a version this runtime cannot move to: no bundle to check
    checkManifest(
      t,
      `${what}, bundle at ${v.version}`,
      at.body.install.manifests,
      r,
      generated(r, 'upgrade', v.version),
    );
  }
}

t.test('what is accepted is stored normalised, and every bundle is exactly its own objects', async (t) => {
  const accepted: Array<[string, Record<string, unknown>, Partial<Runtime>]> = [
    ['tunnel, new Argo CD, a name of 40 characters', { name: 'a'.repeat(38) + '-1' }, {}],
    [
      'existing Argo CD in a 63-character namespace',
      { name: 'ex', argo: 'existing', argoNamespace: 'a'.repeat(63) },
      {},
    ],
    ['the in-cluster upgrader', { name: 'up', upgrades: 'agent' }, { upgrades: 'agent' }],
    [
      'an ingressUrl in capitals with the default port and a slash',
      { name: 'in1', access: 'ingress', ingressUrl: 'HTTPS://Runtime.Example.TEST:443/' },
      { ingressUrl: 'https://runtime.example.test' },
    ],
    [
      'an IPv6 ingressUrl with a port',
      { name: 'in2', access: 'ingress', ingressUrl: 'https://[2001:DB8::10]:8443' },
      { ingressUrl: 'https://[2001:db8::10]:8443' },
    ],
    [
      'an internationalised host',
      { name: 'in3', access: 'ingress', ingressUrl: 'https://bücher.example.test' },
      { ingressUrl: 'https://xn--bcher-kva.example.test' },
    ],
    [
      'ingress with existing Argo CD',
      { name: 'in4', access: 'ingress', ingressUrl: 'https://203.0.113.10', argo: 'existing', argoNamespace: 'argocd' },
      { ingressUrl: 'https://203.0.113.10' },
    ],
  ];
  for (const [what, body, expect] of accepted) {
    const res = await register(body);
    t.equal(res.status, 201, `${what}: registered (${res.status === 201 ? '' : JSON.stringify(res.body)})`);
    if (res.status !== 201) continue;
    const r = res.body.runtime;
    t.match(r, expect, `${what}: stored as ${JSON.stringify(expect)}`);
    const got = await runtimeOf(r.name);
    t.equal(got.ingressUrl, r.ingressUrl, `${what}: read back the same`);
    checkManifest(t, `${what}, install bundle`, res.body.install.manifests, r, generated(r, 'install'));
    await checkBundles(t, what, r);
  }
});

t.test('a value stored before the checks stays one value in every bundle and on one line in the CLI', async (t) => {
  const res = await register({ name: 'legacy', access: 'ingress', ingressUrl: 'https://203.0.113.10' });
  t.equal(res.status, 201, 'registered');
  const stored = FINDING_INGRESS_URL;
  await setIngressUrl(api.db.pool, res.body.runtime.id, stored);
  const r = await runtimeOf('legacy');
  t.equal(r.ingressUrl, stored, 'the API answers the stored value as it is (JSON keeps it one value)');
  await checkBundles(t, 'a stored injected ingressUrl', r);

  const out: string[] = [];
  const err: string[] = [];
  const code = await main(['--url', base, '--token', apiKey, 'runtimes', 'get', tenantId, 'legacy'], {
    out: (s) => out.push(s),
    err: (s) => err.push(s),
    env: {},
  });
  t.equal(code, 0, err.join('\n'));
  const text = out.join('\n');
  t.notMatch(text, /^kind: ClusterRoleBinding/m, 'runtimes get prints no line of the injected document');
  t.notMatch(text, /^---$/m, 'nor its document break');
  t.match(
    text,
    'ingress https://runtime.example.test/\\u000a---\\u000aapiVersion',
    'the stored value shows on one line, its newlines escaped',
  );
});
