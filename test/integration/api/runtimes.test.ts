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
import { ApiClient, type AnswerOf, type BodyOf } from '../../../provisioner/http/api-client.ts';
import type { Runtime } from '../../../provisioner/api/types.ts';
import { until } from '../../../sandbox/until.ts';
import { expireBootstrap } from '../../helpers/runtimes.ts';
import { tunnelRows } from '../../helpers/tunnels.ts';
import { storedKeys } from '../../helpers/keys.ts';
import { auditRows } from '../../helpers/audit.ts';

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

/** The one client over the loopback socket (the tunnel below needs it): the admin key, or another. */
const client = new ApiClient({ baseUrl: base, token: api.adminKey });
const as = (key: string) => client.withToken(key);
type RegisterBody = BodyOf<'POST /v1/tenants/:id/runtimes'>;
type Registration = Partial<RegisterBody> & { name: string };
const registration = (body: Registration): RegisterBody => ({ mode: 'hybrid', access: 'tunnel', argo: 'new', ...body });

/** Registers a runtime (hybrid, tunnel, a new Argo CD unless `body` says); a refusal is the client's ApiError. */
const register = async (tenantId: string, key: string, body: Registration, headers = {}) => {
  const registered = await as(key).call('POST /v1/tenants/:id/runtimes', {
    params: { id: tenantId },
    body: registration(body),
    headers,
  });
  secrets.push(registered.bootstrapToken);
  return registered;
};
/** The same registration's status, headers and answer or refusal, never thrown. */
const registerRequest = async (tenantId: string, key: string, body: Registration, headers = {}) => {
  const res = await as(key).request('POST /v1/tenants/:id/runtimes', {
    params: { id: tenantId },
    body: registration(body),
    headers,
  });
  if (res.ok) secrets.push(res.body.bootstrapToken);
  return res;
};
/** The bootstrap exchange (the token is the request's key); a refusal is the client's ApiError. */
const exchange = async (token: string) => {
  const answer = await client.call('POST /v1/runtimes/bootstrap', { body: {}, token });
  secrets.push(answer.runtimeToken);
  return answer;
};
/** The same exchange's status and answer or refusal, never thrown. */
const exchangeRequest = async (token: string) => {
  const res = await client.request('POST /v1/runtimes/bootstrap', { body: {}, token });
  if (res.ok) secrets.push(res.body.runtimeToken);
  return res;
};
/** A runtime as its tenant's key reads it. */
const runtimeOf = (tenantId: string, key: string, name: string) =>
  as(key).call('GET /v1/tenants/:id/runtimes/:name', { params: { id: tenantId, name } });
/** Removes a runtime with its tenant's key; a refusal is the client's ApiError. */
const remove = (tenantId: string, key: string, name: string) =>
  as(key).call('DELETE /v1/tenants/:id/runtimes/:name', { params: { id: tenantId, name } });

const a = await api.signup();
const b = await api.signup();
secrets.push(a.apiKey, b.apiKey);

t.test('registering a hybrid runtime answers its bootstrap token and the install bundle', async (t) => {
  const res = await registerRequest(a.tenantId, a.apiKey, { name: 'edge', argo: 'existing', argoNamespace: 'argocd' });
  t.equal(res.status, 201, `201 (got ${JSON.stringify(res.body)})`);
  t.equal(res.headers.get('location'), `/v1/tenants/${a.tenantId}/runtimes/edge`, 'Location names the runtime');
  if (!res.ok) return;
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
  const tenant = await client.call('GET /v1/tenants/:id', { params: { id: a.tenantId } });
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

  const list = await as(a.apiKey).call('GET /v1/tenants/:id/runtimes', { params: { id: a.tenantId } });
  t.same(
    list.items.map((r) => [r.name, r.mode]),
    [
      ['hosted', 'hosted'],
      ['edge', 'hybrid'],
    ],
    'the list holds the hosted runtime first, then the hybrid one',
  );
  const hosted = await runtimeOf(a.tenantId, a.apiKey, 'hosted');
  const view = await as(a.apiKey).call('GET /v1/tenants/:id', { params: { id: a.tenantId } });
  t.equal(hosted.state, view.status.phase, "the hosted runtime's state is the tenant's phase");
  t.equal(hosted.version, tenant.spec.runtimeVersion, "the hosted runtime's version is the tenant's");
  t.equal(hosted.keyIssued, false, 'no reconcile ran: the hosted runtime holds no runtime key yet');
  // The key the reconciler makes for the tenant's agents (names no hybrid runtime).
  await createKey(api.db.pool, { role: 'runtime', tenantId: a.tenantId, name: 'agents', createdBy: 'test' });
  const keyed = await runtimeOf(a.tenantId, a.apiKey, 'hosted');
  t.equal(keyed.keyIssued, true, "with the agents' runtime key the hosted runtime shows its key issued");
  const edge = await runtimeOf(a.tenantId, a.apiKey, 'edge');
  t.equal(edge.keyIssued, false, "the hosted runtime's key is not the hybrid runtime's");
});

t.test('the bootstrap token is exchanged once for a runtime key that works as a hybrid runtime key', async (t) => {
  const reg = await register(a.tenantId, a.apiKey, { name: 'plant' });
  t.ok(reg.install.charts.length > 0, 'argo=new lists the Argo charts to install');
  t.match(reg.install.command, /helm upgrade --install/, 'the command installs the charts first');
  const first = await exchange(reg.bootstrapToken);
  t.match(
    first,
    {
      tenantId: a.tenantId,
      runtimeId: reg.runtime.id,
      name: 'plant',
      controlPlaneUrl: 'https://cp.example.test',
      tunnelUrl: 'wss://cp.example.test/v1/tunnel',
    },
    'the first exchange answers the runtime and the URLs the agents use',
  );
  t.equal(first.publicKey, api.services.signer.publicKeyPem, "the answer holds the control plane's public key");
  const who = await as(first.runtimeToken).call('GET /v1/whoami');
  t.same(
    [who.role, who.tenantId],
    ['runtime', a.tenantId],
    "the runtime key authenticates as a runtime key of the runtime's tenant",
  );
  const got = await runtimeOf(a.tenantId, a.apiKey, 'plant');
  t.match(got, { state: 'installed', keyIssued: true }, 'the runtime is installed, its key issued');
  t.ok(got.installedAt, 'installedAt is set');

  await t.rejects(
    exchange(reg.bootstrapToken),
    { status: 401, code: 'BOOTSTRAP_TOKEN_INVALID' },
    'a second exchange of the same token is refused',
  );

  const events = await api.request('POST', '/v1/runtime/events', {
    key: first.runtimeToken,
    body: { replica: 'r-1', items: [] },
  });
  t.equal(
    events.statusCode,
    200,
    "the runtime key reports its runtime's events (stored under it: hybrid-reports.test.ts)",
  );
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
    const ex = await exchange(reg.bootstrapToken);
    const tunnel = startTunnelClient({
      url: base.replace('http', 'ws') + '/v1/tunnel',
      token: ex.runtimeToken,
      upstream: `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`,
      backoff: { initialMs: 50, maxMs: 200 },
    });
    t.teardown(() => tunnel.close());
    if (!tunnel.connected) await once(tunnel.events, 'connected');
    await until(
      "the hybrid runtime's tunnel registered by the server",
      30_000,
      () => api.services.tunnel.runtimeStatus(reg.runtime.id).connected || undefined,
    );

    const after = api.services.tunnel.status(b.tenantId);
    t.same(
      [after.connected, after.connectionId],
      [true, before.connectionId],
      "the hosted runtime's tunnel stays connected, the same connection (not replaced)",
    );
    const got = await runtimeOf(b.tenantId, b.apiKey, 'tun');
    t.equal(got.tunnel.connected, true, 'the hybrid runtime shows its tunnel connected');
    t.match(
      got.conditions.find((c) => c.type === 'TunnelConnected'),
      { status: 'True', reason: 'Connected' },
      'condition TunnelConnected is True',
    );
    const hostedView = await runtimeOf(b.tenantId, b.apiKey, 'hosted');
    t.equal(hostedView.tunnel.connected, true, 'the hosted runtime shows its own tunnel connected');
    const recorded = await until(
      "the hybrid runtime's tunnel recorded in the tunnel directory",
      30_000,
      async () => (await tunnelRows(api.db.pool, 'hybrid', reg.runtime.id))[0]?.replicaId,
    );
    t.equal(recorded, api.services.tunnelDirectory.replicaId, 'the row names the replica holding the tunnel');

    const closed = once(tunnel.events, 'disconnected');
    await remove(b.tenantId, b.apiKey, 'tun');
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
        async () => (await tunnelRows(api.db.pool, 'hybrid', reg.runtime.id)).length === 0,
      ),
      'the removed runtime has no tunnel row',
    );
  },
);

t.test('two exchanges of one token at once: exactly one gets a runtime key', async (t) => {
  const reg = await register(b.tenantId, b.apiKey, { name: 'race' });
  const both = await Promise.all([exchangeRequest(reg.bootstrapToken), exchangeRequest(reg.bootstrapToken)]);
  t.same(both.map((r) => r.status).sort(), [200, 401], 'one exchange is answered 200, the other 401');
  const keys = await storedKeys(api.db.pool, { runtimeId: reg.runtime.id });
  t.equal(keys.length, 1, 'one runtime key was made for the runtime');
  await remove(b.tenantId, b.apiKey, 'race');
});

t.test('an expired bootstrap token is refused and the runtime says so', async (t) => {
  const reg = await register(a.tenantId, a.apiKey, { name: 'late' });
  // The token's expiry moved into the past (no waiting for the TTL).
  await expireBootstrap(api.db.pool, reg.runtime.id, 1);
  await t.rejects(
    exchange(reg.bootstrapToken),
    { status: 401, code: 'BOOTSTRAP_TOKEN_INVALID' },
    'an expired token is refused',
  );
  const got = await runtimeOf(a.tenantId, a.apiKey, 'late');
  t.equal(got.state, 'awaiting-install', 'the runtime still awaits its install');
  t.equal(
    got.conditions.find((c) => c.type === 'Installed')?.reason,
    'BootstrapExpired',
    'condition Installed says the token expired',
  );
  const del = await remove(a.tenantId, a.apiKey, 'late');
  t.equal(del.runtime.state, 'removed', 'it is removed (back under the budget)');
});

t.test('removal revokes the runtime key, refuses the token and answers the remove command', async (t) => {
  const reg = await register(a.tenantId, a.apiKey, {
    name: 'gone',
    access: 'ingress',
    ingressUrl: 'https://gone.example.test',
  });
  const ex = await exchange(reg.bootstrapToken);
  const key = ex.runtimeToken;
  const who = await as(key).call('GET /v1/whoami');
  t.equal(who.role, 'runtime', 'the runtime key works before the removal');

  const del = await remove(a.tenantId, a.apiKey, 'gone');
  t.equal(del.runtime.state, 'removed', 'the answer shows the runtime removed');
  t.ok(del.runtime.removedAt, 'removedAt is set');
  t.equal(del.runtime.keyIssued, false, 'the removed runtime holds no live key');
  t.equal(del.removeCommand, reg.install.removeCommand, "the remove command is the install's");
  await t.rejects(
    as(key).call('GET /v1/whoami'),
    { status: 401, code: 'INVALID_API_KEY' },
    'the runtime key is refused after the removal',
  );
  await t.rejects(
    runtimeOf(a.tenantId, a.apiKey, 'gone'),
    { status: 404, code: 'RUNTIME_NOT_FOUND' },
    'a removed runtime is not found',
  );

  // A removed runtime's token never redeems, even unused.
  const unused = await register(a.tenantId, a.apiKey, { name: 'gone' });
  t.equal(unused.runtime.name, 'gone', "a removed runtime's name may be registered again");
  await remove(a.tenantId, a.apiKey, 'gone');
  await t.rejects(
    exchange(unused.bootstrapToken),
    { status: 401, code: 'BOOTSTRAP_TOKEN_INVALID' },
    'the token of a removed runtime is refused',
  );

  const audit = await auditRows(api.db.pool, { targetType: 'runtime', targetId: reg.runtime.id });
  t.same(
    audit.map((r) => r.action),
    ['runtime.register', 'runtime.bootstrap', 'runtime.remove'],
    'register, bootstrap and remove each wrote an audit row',
  );
  t.notOk(
    audit.some((r) => {
      const text = JSON.stringify([r.before, r.after]);
      return text.includes(reg.bootstrapToken) || text.includes(key);
    }),
    'no audit row holds the bootstrap token or the runtime key',
  );
});

t.test("a tenant's key neither sees nor changes another tenant's runtimes", async (t) => {
  const mine = await register(b.tenantId, b.apiKey, { name: 'bees' });
  t.equal(mine.runtime.name, 'bees', 'B registers its own runtime');
  const asA = as(a.apiKey);
  const id = b.tenantId;
  const attempts: Array<[string, () => Promise<unknown>]> = [
    ['GET /v1/tenants/:id/runtimes', () => asA.call('GET /v1/tenants/:id/runtimes', { params: { id } })],
    ['GET /v1/tenants/:id/runtimes/:name', () => runtimeOf(id, a.apiKey, 'bees')],
    ['DELETE /v1/tenants/:id/runtimes/:name', () => remove(id, a.apiKey, 'bees')],
    ['POST /v1/tenants/:id/runtimes', () => register(id, a.apiKey, { name: 'intruder' })],
  ];
  for (const [what, attempt] of attempts)
    await t.rejects(
      attempt(),
      { status: 404, code: 'TENANT_NOT_FOUND' },
      `A's key: ${what} of B is 404, naming no runtime of B`,
    );
  const still = await runtimeOf(b.tenantId, b.apiKey, 'bees');
  t.equal(still.state, 'awaiting-install', "B's runtime is untouched");
  await t.rejects(
    asA.call('GET /v1/runtimes'),
    { name: 'ApiError', status: 403 },
    'a tenant key cannot list every runtime',
  );
});

t.test('bad registrations are refused naming the field', async (t) => {
  const cases: Array<[string, Registration, number, string, string]> = [
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
  for (const [what, body, status, code, field] of cases)
    await t.rejects(
      register(a.tenantId, a.apiKey, body),
      { status, code, field },
      `${what}: ${status} ${code} naming ${field}`,
    );
  await t.rejects(
    register(a.tenantId, a.apiKey, { name: 'in9', access: 'ingress', ingressUrl: 'https://127.0.0.1:8443' }),
    { message: /127\.0\.0\.1 is a loopback address.*PROVISIONER_HYBRID_INGRESS_ALLOWED_CIDRS/ },
    'a loopback ingressUrl is refused naming the address and the setting that would allow it',
  );
  await t.rejects(
    register(a.tenantId, a.apiKey, { name: 'edge' }),
    { status: 409, code: 'RUNTIME_EXISTS' },
    'a name in use: 409 RUNTIME_EXISTS',
  );
  await t.rejects(
    remove(a.tenantId, a.apiKey, 'hosted'),
    { status: 409, code: 'HOSTED_RUNTIME_NOT_REMOVABLE' },
    'the hosted runtime cannot be deleted as a runtime',
  );
});

t.test('a tenant registers at most PROVISIONER_HYBRID_RUNTIMES_PER_TENANT (3 here) hybrid runtimes', async (t) => {
  const c = await api.signup();
  secrets.push(c.apiKey);
  for (const name of ['one', 'two', 'three'])
    t.equal((await register(c.tenantId, c.apiKey, { name })).runtime.name, name, `${name}: registered`);
  await t.rejects(
    register(c.tenantId, c.apiKey, { name: 'four' }),
    {
      status: 409,
      code: 'TENANT_LIMIT_REACHED',
      details: { limit: 3, setting: 'PROVISIONER_HYBRID_RUNTIMES_PER_TENANT' },
    },
    'the fourth is refused, naming the limit and its setting',
  );
  await remove(c.tenantId, c.apiKey, 'two');
  t.equal(
    (await register(c.tenantId, c.apiKey, { name: 'four' })).runtime.name,
    'four',
    'after a removal one more fits',
  );
});

t.test('an Idempotency-Key replays the first registration; with another body it is refused', async (t) => {
  const headers = { 'idempotency-key': 'runtime-register-key-0123456789' };
  const first = await register(b.tenantId, b.apiKey, { name: 'idem' }, headers);
  const again = await registerRequest(b.tenantId, b.apiKey, { name: 'idem' }, headers);
  t.equal(again.status, 201, 'the replay answers 201');
  if (!again.ok) return;
  t.equal(again.body.bootstrapToken, first.bootstrapToken, 'the replay holds the same token');
  t.equal(again.body.runtime.id, first.runtime.id, 'one runtime was registered');
  await t.rejects(
    register(b.tenantId, b.apiKey, { name: 'idem2' }, headers),
    { status: 409, code: 'IDEMPOTENCY_KEY_REUSED' },
    'another body with the key: 409',
  );
});

t.test('GET /v1/runtimes lists hosted and hybrid runtimes of every tenant, page by page', async (t) => {
  const operator = as(api.operatorKey);
  const seen: Runtime[] = [];
  let cursor: string | null = null;
  let pages = 0;
  do {
    const page: AnswerOf<'GET /v1/runtimes'> = await operator.call('GET /v1/runtimes', {
      query: { limit: 2, ...(cursor ? { cursor } : {}) },
    });
    t.ok(page.items.length <= 2, 'a page holds at most limit (2) runtimes');
    seen.push(...page.items);
    cursor = page.nextCursor;
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
  const hybrid = await operator.call('GET /v1/runtimes', { query: { mode: 'hybrid', limit: 200 } });
  t.ok(
    hybrid.items.length > 0 && hybrid.items.every((r) => r.mode === 'hybrid'),
    'mode=hybrid lists only hybrid runtimes',
  );
});

t.test('the runtimes gauge counts what GET /v1/runtimes lists, by mode and state', async (t) => {
  const listed = await as(api.operatorKey).call('GET /v1/runtimes', { query: { limit: 200 } });
  const counts = new Map<string, number>();
  for (const r of listed.items) counts.set(`${r.mode}/${r.state}`, (counts.get(`${r.mode}/${r.state}`) ?? 0) + 1);
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
