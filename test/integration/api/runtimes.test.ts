/**
 * Runtimes, hosted and hybrid, through the real app on loopback (real keys and rows in Postgres):
 * registration with its bundle, the single-use bootstrap exchange, the runtime key it makes,
 * removal, tenant isolation, bad input, the per-tenant budget, and no token in the log.
 */
import { Writable } from 'node:stream';
import t from 'tap';
import pino from 'pino';
import { parseAllDocuments } from 'yaml';
import { createTestApi } from '../../helpers/api.ts';
import { createKey } from '../../../provisioner/store/keys.ts';
import http from 'node:http';
import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import { connectRuntime } from '../../helpers/runtime.ts';
import { startTunnelClient } from '../../../runtime/agents/tunnel-client/client.ts';
import type {
  Runtime,
  RuntimeBootstrapAnswer,
  RuntimeRegistered,
  RuntimeRemoved,
} from '../../../provisioner/api/types.ts';
import { until } from '../../../sandbox/until.ts';
import { expireBootstrap } from '../../helpers/runtimes.ts';

const logged: string[] = [];
const sink = new Writable({
  write(chunk: Buffer, _enc, cb) {
    logged.push(chunk.toString());
    cb();
  },
});
const api = await createTestApi({
  // With a trailing slash: the answers carry it without one (paths are appended to it).
  env: { PROVISIONER_PUBLIC_URL: 'https://cp.example.test/', PROVISIONER_HYBRID_RUNTIMES_PER_TENANT: '3' },
  logger: pino({ level: 'debug' }, sink),
});
const base = await api.app.listen({ port: 0, host: '127.0.0.1' });
t.teardown(() => api.close());

/** Every secret an answer showed: none may appear in the log. */
const secrets: string[] = [];

interface Answer<T> {
  status: number;
  body: T;
  headers: Headers;
}
async function call<T = unknown>(
  method: string,
  path: string,
  o: { key?: string | null; body?: unknown; headers?: Record<string, string> } = {},
): Promise<Answer<T>> {
  const key = o.key === undefined ? api.adminKey : o.key;
  const res = await fetch(base + path, {
    method,
    headers: {
      ...(key ? { authorization: `Bearer ${key}` } : {}),
      ...(o.body !== undefined ? { 'content-type': 'application/json' } : {}),
      ...o.headers,
    },
    ...(o.body !== undefined ? { body: JSON.stringify(o.body) } : {}),
  });
  const text = await res.text();
  return { status: res.status, body: (text ? JSON.parse(text) : null) as T, headers: res.headers };
}
type ErrorAnswer = { error: { code: string; field?: string; message: string; details?: Record<string, unknown> } };

const register = async (tenantId: string, key: string, body: Record<string, unknown>, headers = {}) => {
  const res = await call<RuntimeRegistered & ErrorAnswer>('POST', `/v1/tenants/${tenantId}/runtimes`, {
    key,
    body: { mode: 'hybrid', access: 'tunnel', argo: 'new', ...body },
    headers,
  });
  if (res.status === 201) secrets.push(res.body.bootstrapToken);
  return res;
};
const exchange = async (token: string) => {
  const res = await call<RuntimeBootstrapAnswer & ErrorAnswer>('POST', '/v1/runtimes/bootstrap', {
    key: token,
    body: {},
  });
  if (res.status === 200) secrets.push(res.body.runtimeToken);
  return res;
};

const a = await api.signup();
const b = await api.signup();
secrets.push(a.apiKey, b.apiKey);

t.test('registering a hybrid runtime answers its bootstrap token and the install bundle', async (t) => {
  const res = await register(a.tenantId, a.apiKey, { name: 'edge', argo: 'existing', argoNamespace: 'argocd' });
  t.equal(res.status, 201, `201 (got ${JSON.stringify(res.body)})`);
  t.equal(res.headers.get('location'), `/v1/tenants/${a.tenantId}/runtimes/edge`, 'Location names the runtime');
  const { runtime, bootstrapToken, install } = res.body;
  t.match(bootstrapToken, /^hrth_[A-Za-z0-9_-]{43}$/, 'the token is hrth_ and 43 base64url characters');
  t.match(
    runtime,
    {
      name: 'edge',
      mode: 'hybrid',
      state: 'awaiting-install',
      access: 'tunnel',
      argo: 'existing',
      argoNamespace: 'argocd',
    },
    'the runtime awaits its install',
  );
  t.equal(runtime.upgrades, 'customer', 'upgrades default to the customer');
  t.equal(runtime.keyIssued, false, 'no runtime key before the exchange');
  const tenant = (await call<{ spec: { runtimeVersion: string } }>('GET', `/v1/tenants/${a.tenantId}`)).body;
  t.equal(runtime.version, tenant.spec.runtimeVersion, "the version defaults to the tenant's");
  t.equal(
    runtime.conditions.find((c) => c.type === 'Installed')?.reason,
    'AwaitingInstall',
    'condition Installed says it awaits the install',
  );
  const docs = parseAllDocuments(install.manifests).map((d) => d.toJS() as Record<string, unknown> | null);
  const objects = docs.filter((o): o is Record<string, unknown> => o !== null);
  t.ok(objects.length > 0, 'the manifests parse as YAML objects');
  for (const o of objects) {
    const labels = (o.metadata as { labels?: Record<string, string> }).labels ?? {};
    t.same(
      [labels['hosted-runtimes.io/tenant'], labels['hosted-runtimes.io/runtime']],
      [a.tenantId, 'edge'],
      `${String(o.kind)} ${(o.metadata as { name: string }).name} carries the tenant and runtime labels`,
    );
  }
  const secret = objects.find(
    (o) => o.kind === 'Secret' && (o.metadata as { name: string }).name === 'runtime-bootstrap',
  ) as { stringData?: Record<string, string> } | undefined;
  t.equal(secret?.stringData?.['bootstrap-token'], bootstrapToken, 'the runtime-bootstrap Secret holds the token');
  t.same(install.charts, [], 'argo=existing installs no Argo charts');
  t.equal(typeof install.command, 'string', 'an install command is given');
  t.match(install.removeCommand, /kubectl delete/, 'the remove command deletes with kubectl');

  const list = await call<{ items: Runtime[] }>('GET', `/v1/tenants/${a.tenantId}/runtimes`, { key: a.apiKey });
  t.equal(list.status, 200);
  t.same(
    list.body.items.map((r) => [r.name, r.mode]),
    [
      ['hosted', 'hosted'],
      ['edge', 'hybrid'],
    ],
    'the list holds the hosted runtime first, then the hybrid one',
  );
  const hosted = await call<Runtime>('GET', `/v1/tenants/${a.tenantId}/runtimes/hosted`, { key: a.apiKey });
  const view = (await call<{ status: { phase: string } }>('GET', `/v1/tenants/${a.tenantId}`, { key: a.apiKey })).body;
  t.equal(hosted.body.state, view.status.phase, "the hosted runtime's state is the tenant's phase");
  t.equal(hosted.body.version, tenant.spec.runtimeVersion, "the hosted runtime's version is the tenant's");
  t.equal(hosted.body.keyIssued, false, 'no reconcile ran: the hosted runtime holds no runtime key yet');
  // The key the reconciler makes for the tenant's agents (names no hybrid runtime).
  await createKey(api.db.pool, { role: 'runtime', tenantId: a.tenantId, name: 'agents', createdBy: 'test' });
  const keyed = await call<Runtime>('GET', `/v1/tenants/${a.tenantId}/runtimes/hosted`, { key: a.apiKey });
  t.equal(keyed.body.keyIssued, true, "with the agents' runtime key the hosted runtime shows its key issued");
  const edge = await call<Runtime>('GET', `/v1/tenants/${a.tenantId}/runtimes/edge`, { key: a.apiKey });
  t.equal(edge.body.keyIssued, false, "the hosted runtime's key is not the hybrid runtime's");
});

t.test('the bootstrap token is exchanged once for a runtime key that works as a hybrid runtime key', async (t) => {
  const reg = await register(a.tenantId, a.apiKey, { name: 'plant' });
  t.equal(reg.status, 201);
  t.ok(reg.body.install.charts.length > 0, 'argo=new lists the Argo charts to install');
  t.match(reg.body.install.command, /helm upgrade --install/, 'the command installs the charts first');
  const first = await exchange(reg.body.bootstrapToken);
  t.equal(first.status, 200, `the first exchange is answered 200 (got ${JSON.stringify(first.body)})`);
  t.match(
    first.body,
    {
      tenantId: a.tenantId,
      runtimeId: reg.body.runtime.id,
      name: 'plant',
      controlPlaneUrl: 'https://cp.example.test',
      tunnelUrl: 'wss://cp.example.test/v1/tunnel',
    },
    'the answer names the runtime and the URLs the agents use',
  );
  t.equal(first.body.publicKey, api.services.signer.publicKeyPem, "the answer holds the control plane's public key");
  const who = await call<{ role: string; tenantId: string }>('GET', '/v1/whoami', { key: first.body.runtimeToken });
  t.equal(who.status, 200, 'the runtime key authenticates');
  t.same([who.body.role, who.body.tenantId], ['runtime', a.tenantId], "it is a runtime key of the runtime's tenant");
  const got = await call<Runtime>('GET', `/v1/tenants/${a.tenantId}/runtimes/plant`, { key: a.apiKey });
  t.match(got.body, { state: 'installed', keyIssued: true }, 'the runtime is installed, its key issued');
  t.ok(got.body.installedAt, 'installedAt is set');

  const second = await exchange(reg.body.bootstrapToken);
  t.equal(second.status, 401, 'a second exchange of the same token is refused');
  t.equal(second.body.error.code, 'BOOTSTRAP_TOKEN_INVALID');

  const events = await call('POST', '/v1/runtime/events', {
    key: first.body.runtimeToken,
    body: { replica: 'r-1', items: [] },
  });
  t.equal(events.status, 200, "the runtime key reports its runtime's events (stored under it: hybrid-reports.test.ts)");
});

t.test(
  "a hybrid runtime's tunnel is held apart from the hosted runtime's, shown on the runtime, closed by removal",
  async (t) => {
    const upstream = http.createServer((_req, res) => res.end('{}')).listen(0, '127.0.0.1');
    await once(upstream, 'listening');
    t.teardown(() => upstream.close());
    const hosted = await connectRuntime(api, base, b.tenantId, upstream, 'hosted agents');
    t.teardown(() => hosted.client.close());
    const before = await until("the hosted runtime's tunnel registered by the server", 30_000, () => {
      const s = api.services.tunnel.status(b.tenantId);
      return s.connected ? s : undefined;
    });

    const reg = await register(b.tenantId, b.apiKey, { name: 'tun' });
    t.equal(reg.status, 201);
    const ex = await exchange(reg.body.bootstrapToken);
    t.equal(ex.status, 200);
    const client = startTunnelClient({
      url: base.replace('http', 'ws') + '/v1/tunnel',
      token: ex.body.runtimeToken,
      upstream: `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`,
      backoff: { initialMs: 50, maxMs: 200 },
    });
    t.teardown(() => client.close());
    if (!client.connected) await once(client.events, 'connected');
    await until(
      "the hybrid runtime's tunnel registered by the server",
      30_000,
      () => api.services.tunnel.runtimeStatus(reg.body.runtime.id).connected || undefined,
    );

    const after = api.services.tunnel.status(b.tenantId);
    t.same(
      [after.connected, after.connectionId],
      [true, before.connectionId],
      "the hosted runtime's tunnel stays connected, the same connection (not replaced)",
    );
    const got = await call<Runtime>('GET', `/v1/tenants/${b.tenantId}/runtimes/tun`, { key: b.apiKey });
    t.equal(got.body.tunnel.connected, true, 'the hybrid runtime shows its tunnel connected');
    t.match(
      got.body.conditions.find((c) => c.type === 'TunnelConnected'),
      { status: 'True', reason: 'Connected' },
      'condition TunnelConnected is True',
    );
    const hostedView = await call<Runtime>('GET', `/v1/tenants/${b.tenantId}/runtimes/hosted`, { key: b.apiKey });
    t.equal(hostedView.body.tunnel.connected, true, 'the hosted runtime shows its own tunnel connected');
    const recorded = await until(
      "the hybrid runtime's tunnel recorded in the tunnel directory",
      30_000,
      async () =>
        (
          await api.db.pool.query<{ replica_id: string }>(
            'SELECT replica_id FROM hybrid_runtime_tunnels WHERE runtime_id = $1',
            [reg.body.runtime.id],
          )
        ).rows[0]?.replica_id,
    );
    t.equal(recorded, api.services.tunnelDirectory.replicaId, 'the row names the replica holding the tunnel');

    const closed = once(client.events, 'disconnected');
    const del = await call<RuntimeRemoved>('DELETE', `/v1/tenants/${b.tenantId}/runtimes/tun`, { key: b.apiKey });
    t.equal(del.status, 200);
    const [code] = (await closed) as [number];
    t.equal(code, 4003, "removal closes the hybrid runtime's tunnel with the revoked close code");
    t.equal(
      api.services.tunnel.status(b.tenantId).connectionId,
      before.connectionId,
      "the hosted runtime's tunnel is untouched",
    );
    t.ok(
      await until(
        "the closed tunnel's directory row deleted",
        30_000,
        async () =>
          (await api.db.pool.query('SELECT 1 FROM hybrid_runtime_tunnels WHERE runtime_id = $1', [reg.body.runtime.id]))
            .rowCount === 0,
      ),
      'the removed runtime has no tunnel row',
    );
  },
);

t.test('two exchanges of one token at once: exactly one gets a runtime key', async (t) => {
  const reg = await register(b.tenantId, b.apiKey, { name: 'race' });
  t.equal(reg.status, 201);
  const both = await Promise.all([exchange(reg.body.bootstrapToken), exchange(reg.body.bootstrapToken)]);
  t.same(both.map((r) => r.status).sort(), [200, 401], 'one exchange is answered 200, the other 401');
  const keys = await api.db.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM api_keys WHERE runtime_id = $1', [
    reg.body.runtime.id,
  ]);
  t.equal(keys.rows[0]!.n, 1, 'one runtime key was made for the runtime');
  t.equal((await call('DELETE', `/v1/tenants/${b.tenantId}/runtimes/race`, { key: b.apiKey })).status, 200);
});

t.test('an expired bootstrap token is refused and the runtime says so', async (t) => {
  const reg = await register(a.tenantId, a.apiKey, { name: 'late' });
  t.equal(reg.status, 201);
  // The token's expiry moved into the past (no waiting for the TTL).
  await expireBootstrap(api.db.pool, reg.body.runtime.id, 1);
  const res = await exchange(reg.body.bootstrapToken);
  t.equal(res.status, 401, 'an expired token is refused');
  t.equal(res.body.error.code, 'BOOTSTRAP_TOKEN_INVALID');
  const got = await call<Runtime>('GET', `/v1/tenants/${a.tenantId}/runtimes/late`, { key: a.apiKey });
  t.equal(got.body.state, 'awaiting-install', 'the runtime still awaits its install');
  t.equal(
    got.body.conditions.find((c) => c.type === 'Installed')?.reason,
    'BootstrapExpired',
    'condition Installed says the token expired',
  );
  const del = await call<RuntimeRemoved>('DELETE', `/v1/tenants/${a.tenantId}/runtimes/late`, { key: a.apiKey });
  t.equal(del.status, 200, 'it is removed (back under the budget)');
});

t.test('removal revokes the runtime key, refuses the token and answers the remove command', async (t) => {
  const reg = await register(a.tenantId, a.apiKey, {
    name: 'gone',
    access: 'ingress',
    ingressUrl: 'https://gone.example.test',
  });
  t.equal(reg.status, 201);
  const ex = await exchange(reg.body.bootstrapToken);
  t.equal(ex.status, 200);
  const key = ex.body.runtimeToken;
  t.equal((await call('GET', '/v1/whoami', { key })).status, 200, 'the runtime key works before the removal');

  const del = await call<RuntimeRemoved>('DELETE', `/v1/tenants/${a.tenantId}/runtimes/gone`, { key: a.apiKey });
  t.equal(del.status, 200);
  t.equal(del.body.runtime.state, 'removed', 'the answer shows the runtime removed');
  t.ok(del.body.runtime.removedAt, 'removedAt is set');
  t.equal(del.body.runtime.keyIssued, false, 'the removed runtime holds no live key');
  t.equal(del.body.removeCommand, reg.body.install.removeCommand, "the remove command is the install's");
  const after = await call<ErrorAnswer>('GET', '/v1/whoami', { key });
  t.equal(after.status, 401, 'the runtime key is refused after the removal');
  t.equal(after.body.error.code, 'INVALID_API_KEY');
  const get = await call<ErrorAnswer>('GET', `/v1/tenants/${a.tenantId}/runtimes/gone`, { key: a.apiKey });
  t.equal(get.status, 404, 'a removed runtime is not found');
  t.equal(get.body.error.code, 'RUNTIME_NOT_FOUND');

  // A removed runtime's token never redeems, even unused.
  const unused = await register(a.tenantId, a.apiKey, { name: 'gone' });
  t.equal(unused.status, 201, "a removed runtime's name may be registered again");
  t.equal((await call('DELETE', `/v1/tenants/${a.tenantId}/runtimes/gone`, { key: a.apiKey })).status, 200);
  const res = await exchange(unused.body.bootstrapToken);
  t.equal(res.status, 401, 'the token of a removed runtime is refused');
  t.equal(res.body.error.code, 'BOOTSTRAP_TOKEN_INVALID');

  const audit = await api.db.pool.query<{ action: string; text: string }>(
    `SELECT action, coalesce(before::text, '') || coalesce(after::text, '') AS text FROM audit_log
      WHERE target_type = 'runtime' AND target_id = $1 ORDER BY id`,
    [reg.body.runtime.id],
  );
  t.same(
    audit.rows.map((r) => r.action),
    ['runtime.register', 'runtime.bootstrap', 'runtime.remove'],
    'register, bootstrap and remove each wrote an audit row',
  );
  t.notOk(
    audit.rows.some((r) => r.text.includes(reg.body.bootstrapToken) || r.text.includes(key)),
    'no audit row holds the bootstrap token or the runtime key',
  );
});

t.test("a tenant's key neither sees nor changes another tenant's runtimes", async (t) => {
  const mine = await register(b.tenantId, b.apiKey, { name: 'bees' });
  t.equal(mine.status, 201, 'B registers its own runtime');
  for (const [method, path, body] of [
    ['GET', `/v1/tenants/${b.tenantId}/runtimes`],
    ['GET', `/v1/tenants/${b.tenantId}/runtimes/bees`],
    ['DELETE', `/v1/tenants/${b.tenantId}/runtimes/bees`],
    ['POST', `/v1/tenants/${b.tenantId}/runtimes`, { name: 'intruder', mode: 'hybrid', access: 'tunnel', argo: 'new' }],
  ] as const) {
    const res = await call<ErrorAnswer>(method, path, { key: a.apiKey, ...(body ? { body } : {}) });
    t.equal(res.status, 404, `A's key: ${method} ${path} is 404`);
    t.equal(res.body.error.code, 'TENANT_NOT_FOUND', `A's key: ${method} ${path} names no runtime of B`);
  }
  const still = await call<Runtime>('GET', `/v1/tenants/${b.tenantId}/runtimes/bees`, { key: b.apiKey });
  t.equal(still.body.state, 'awaiting-install', "B's runtime is untouched");
  const all = await call<ErrorAnswer>('GET', '/v1/runtimes', { key: a.apiKey });
  t.equal(all.status, 403, 'a tenant key cannot list every runtime');
});

t.test('bad registrations are refused naming the field', async (t) => {
  const cases: Array<[string, Record<string, unknown>, number, string, string]> = [
    ['a name that is not a DNS label', { name: 'Bad_Name' }, 400, 'VALIDATION_FAILED', 'name'],
    ["the reserved name 'hosted'", { name: 'hosted' }, 400, 'VALIDATION_FAILED', 'name'],
    ['ingress without a URL', { name: 'in1', access: 'ingress' }, 400, 'VALIDATION_FAILED', 'ingressUrl'],
    [
      'ingress with an http URL',
      { name: 'in2', access: 'ingress', ingressUrl: 'http://x.example.test' },
      400,
      'VALIDATION_FAILED',
      'ingressUrl',
    ],
    [
      'a URL with tunnel access',
      { name: 'in3', ingressUrl: 'https://x.example.test' },
      400,
      'VALIDATION_FAILED',
      'ingressUrl',
    ],
    [
      'ingress at a loopback address (no PROVISIONER_HYBRID_INGRESS_ALLOWED_CIDRS here)',
      { name: 'in4', access: 'ingress', ingressUrl: 'https://127.0.0.1:8443' },
      400,
      'VALIDATION_FAILED',
      'ingressUrl',
    ],
    [
      'ingress at a name that resolves to loopback',
      { name: 'in5', access: 'ingress', ingressUrl: 'https://localhost' },
      400,
      'VALIDATION_FAILED',
      'ingressUrl',
    ],
    [
      'ingress at the cloud metadata address',
      { name: 'in6', access: 'ingress', ingressUrl: 'https://169.254.169.254' },
      400,
      'VALIDATION_FAILED',
      'ingressUrl',
    ],
    [
      'ingress at the control plane itself',
      { name: 'in7', access: 'ingress', ingressUrl: 'https://cp.example.test' },
      400,
      'VALIDATION_FAILED',
      'ingressUrl',
    ],
    [
      'ingress with a path',
      { name: 'in8', access: 'ingress', ingressUrl: 'https://x.example.test/argo' },
      400,
      'VALIDATION_FAILED',
      'ingressUrl',
    ],
    [
      'existing Argo CD without its namespace',
      { name: 'ex1', argo: 'existing' },
      400,
      'VALIDATION_FAILED',
      'argoNamespace',
    ],
    [
      "existing Argo CD in the runtime's own namespace",
      { name: 'ex2', argo: 'existing', argoNamespace: 'hosted-runtime' },
      400,
      'VALIDATION_FAILED',
      'argoNamespace',
    ],
    ['an unknown version', { name: 'v1', version: '9.9.9' }, 400, 'UNKNOWN_RUNTIME_VERSION', 'version'],
    ['mode hosted', { name: 'h1', mode: 'hosted' }, 409, 'HOSTED_RUNTIME_EXISTS', 'mode'],
  ];
  for (const [what, body, status, code, field] of cases) {
    const res = await register(a.tenantId, a.apiKey, body);
    t.same(
      [res.status, res.body.error?.code, res.body.error?.field],
      [status, code, field],
      `${what}: ${status} ${code} naming ${field}`,
    );
  }
  const loopback = await register(a.tenantId, a.apiKey, {
    name: 'in9',
    access: 'ingress',
    ingressUrl: 'https://127.0.0.1:8443',
  });
  t.match(
    loopback.body.error.message,
    /127\.0\.0\.1 is a loopback address.*PROVISIONER_HYBRID_INGRESS_ALLOWED_CIDRS/,
    'a loopback ingressUrl is refused naming the address and the setting that would allow it',
  );
  const taken = await register(a.tenantId, a.apiKey, { name: 'edge' });
  t.same([taken.status, taken.body.error.code], [409, 'RUNTIME_EXISTS'], 'a name in use: 409 RUNTIME_EXISTS');
  const hosted = await call<ErrorAnswer>('DELETE', `/v1/tenants/${a.tenantId}/runtimes/hosted`, { key: a.apiKey });
  t.same(
    [hosted.status, hosted.body.error.code],
    [409, 'HOSTED_RUNTIME_NOT_REMOVABLE'],
    'the hosted runtime cannot be deleted as a runtime',
  );
});

t.test('a tenant registers at most PROVISIONER_HYBRID_RUNTIMES_PER_TENANT (3 here) hybrid runtimes', async (t) => {
  const c = await api.signup();
  secrets.push(c.apiKey);
  for (const name of ['one', 'two', 'three'])
    t.equal((await register(c.tenantId, c.apiKey, { name })).status, 201, `${name}: registered`);
  const over = await register(c.tenantId, c.apiKey, { name: 'four' });
  t.equal(over.status, 409, 'the fourth is refused');
  t.match(
    over.body.error,
    { code: 'TENANT_LIMIT_REACHED', details: { limit: 3, setting: 'PROVISIONER_HYBRID_RUNTIMES_PER_TENANT' } },
    'the refusal names the limit and its setting',
  );
  t.equal((await call('DELETE', `/v1/tenants/${c.tenantId}/runtimes/two`, { key: c.apiKey })).status, 200);
  t.equal((await register(c.tenantId, c.apiKey, { name: 'four' })).status, 201, 'after a removal one more fits');
});

t.test('an Idempotency-Key replays the first registration; with another body it is refused', async (t) => {
  const headers = { 'idempotency-key': 'runtime-register-key-0123456789' };
  const first = await register(b.tenantId, b.apiKey, { name: 'idem' }, headers);
  t.equal(first.status, 201);
  const again = await register(b.tenantId, b.apiKey, { name: 'idem' }, headers);
  t.equal(again.status, 201, 'the replay answers 201');
  t.equal(again.body.bootstrapToken, first.body.bootstrapToken, 'the replay holds the same token');
  t.equal(again.body.runtime.id, first.body.runtime.id, 'one runtime was registered');
  const other = await register(b.tenantId, b.apiKey, { name: 'idem2' }, headers);
  t.same([other.status, other.body.error.code], [409, 'IDEMPOTENCY_KEY_REUSED'], 'another body with the key: 409');
});

t.test('GET /v1/runtimes lists hosted and hybrid runtimes of every tenant, page by page', async (t) => {
  const seen: Runtime[] = [];
  let cursor: string | null = null;
  let pages = 0;
  do {
    const res: Answer<{ items: Runtime[]; nextCursor: string | null }> = await call(
      'GET',
      `/v1/runtimes?limit=2${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`,
      { key: api.operatorKey },
    );
    t.equal(res.status, 200);
    t.ok(res.body.items.length <= 2, 'a page holds at most limit (2) runtimes');
    seen.push(...res.body.items);
    cursor = res.body.nextCursor;
    pages++;
  } while (cursor !== null && pages < 50);
  t.equal(cursor, null, 'the pages end');
  t.equal(new Set(seen.map((r) => r.id)).size, seen.length, 'no runtime is listed twice');
  for (const id of [a.tenantId, b.tenantId])
    t.ok(
      seen.some((r) => r.tenantId === id && r.mode === 'hosted'),
      `the hosted runtime of tenant ${id} is listed`,
    );
  t.ok(
    seen.some((r) => r.tenantId === b.tenantId && r.name === 'bees'),
    "B's hybrid runtime is listed",
  );
  t.notOk(
    seen.some((r) => r.state === 'removed'),
    'removed runtimes are not listed',
  );
  const hybrid = await call<{ items: Runtime[] }>('GET', '/v1/runtimes?mode=hybrid&limit=200', {
    key: api.operatorKey,
  });
  t.ok(
    hybrid.body.items.length > 0 && hybrid.body.items.every((r) => r.mode === 'hybrid'),
    'mode=hybrid lists only hybrid runtimes',
  );
});

t.test('the runtimes gauge counts what GET /v1/runtimes lists, by mode and state', async (t) => {
  const listed = await call<{ items: Runtime[] }>('GET', '/v1/runtimes?limit=200', { key: api.operatorKey });
  const counts = new Map<string, number>();
  for (const r of listed.body.items) counts.set(`${r.mode}/${r.state}`, (counts.get(`${r.mode}/${r.state}`) ?? 0) + 1);
  t.equal(counts.get('hybrid/installed'), 1, "precondition: one installed hybrid runtime ('plant')");
  const text = await (await fetch(`${base}/metrics`)).text();
  for (const [key, n] of counts) {
    const [mode, state] = key.split('/');
    t.match(
      text,
      `provisioner_runtimes{mode="${mode}",state="${state}"} ${n}\n`,
      `the gauge shows ${n} ${mode} runtime(s) in state ${state}, as listed`,
    );
  }
});

t.test('without PROVISIONER_PUBLIC_URL a registration is refused naming the setting', async (t) => {
  const bare = await createTestApi();
  t.teardown(() => bare.close());
  const tenant = await bare.signup();
  await t.rejects(
    bare.as(tenant.apiKey).call('POST /v1/tenants/:id/runtimes', {
      params: { id: tenant.tenantId },
      body: { name: 'x', mode: 'hybrid', access: 'tunnel', argo: 'new' },
    }),
    { status: 409, code: 'HYBRID_RUNTIMES_NOT_CONFIGURED', details: { setting: 'PROVISIONER_PUBLIC_URL' } },
    'the refusal names PROVISIONER_PUBLIC_URL',
  );
});

t.test('no bootstrap token, runtime key or tenant key appears in the log', async (t) => {
  const text = logged.join('');
  t.ok(text.length > 0 && secrets.length >= 6, 'precondition: the requests above were logged and showed secrets');
  t.same(
    secrets.filter((s) => text.includes(s)),
    [],
    'none of the secrets the answers showed is in the log',
  );
});
