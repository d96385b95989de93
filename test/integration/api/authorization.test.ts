import t from 'tap';
import type { ApiClient } from '../../../provisioner/http/api-client.ts';
import { createTestApi } from '../../helpers/api.ts';
import { createKey } from '../../../provisioner/store/keys.ts';
import { catalog } from '../../../runtime/catalog.ts';
import { until } from '../../../sandbox/until.ts';
import { revokeKeyUnannounced } from '../../helpers/keys.ts';

const api = await createTestApi();
t.teardown(() => api.close());

const [v1] = catalog.versions.map((v) => v.version) as [string];
const a = await api.signup({ runtimeVersion: v1 });
const b = await api.signup({ runtimeVersion: v1 });
const runtimeKey = (
  await createKey(api.db.pool, { role: 'runtime', tenantId: a.tenantId, name: 'runtime a', createdBy: 'test' })
).key;
const kubeconfig = `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://203.0.113.10:6443"}}]
users: [{name: u, user: {token: secret-token}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`;

type Role = 'admin' | 'operator' | 'tenant' | 'runtime';
/** An answer as the client's `request` gives it, whatever the route. */
type Answer = { ok: boolean; status: number; body: unknown };
interface Route {
  name: string;
  /** The route called with `client` for the tenant `id` (`i`: a number unique to the call). */
  call: (client: ApiClient, id: string, i: number) => Promise<Answer>;
  allowed: Role[];
}

let n = 0;
const routes: Route[] = [
  { name: 'list tenants', call: (c) => c.request('GET /v1/tenants'), allowed: ['admin', 'operator', 'tenant'] },
  {
    name: 'count tenants by phase',
    call: (c) => c.request('GET /v1/tenants/summary'),
    allowed: ['admin', 'operator', 'tenant'],
  },
  { name: 'whoami', call: (c) => c.request('GET /v1/whoami'), allowed: ['admin', 'operator', 'tenant', 'runtime'] },
  {
    name: 'get tenant',
    call: (c, id) => c.request('GET /v1/tenants/:id', { params: { id } }),
    allowed: ['admin', 'operator', 'tenant'],
  },
  {
    name: 'tenant operations',
    call: (c, id) => c.request('GET /v1/tenants/:id/operations', { params: { id } }),
    allowed: ['admin', 'operator', 'tenant'],
  },
  {
    name: 'suspend',
    call: (c, id) => c.request('POST /v1/tenants/:id/suspend', { params: { id } }),
    allowed: ['admin', 'operator', 'tenant'],
  },
  {
    name: 'resume',
    call: (c, id) => c.request('POST /v1/tenants/:id/resume', { params: { id } }),
    allowed: ['admin', 'operator', 'tenant'],
  },
  {
    name: 'retry',
    call: (c, id) => c.request('POST /v1/tenants/:id/retry', { params: { id } }),
    allowed: ['admin', 'operator', 'tenant'],
  },
  {
    name: 'patch suspended',
    call: (c, id) => c.request('PATCH /v1/tenants/:id', { params: { id }, body: { suspended: false } }),
    allowed: ['admin', 'operator', 'tenant'],
  },
  { name: 'list clusters', call: (c) => c.request('GET /v1/clusters'), allowed: ['admin', 'operator'] },
  {
    name: 'register cluster',
    call: (c, _, i) =>
      c.request('POST /v1/clusters', {
        body: { name: `c-${i}`, region: 'eu-1', capacity: 5, kubeconfig, force: true },
      }),
    allowed: ['admin', 'operator'],
  },
  {
    name: 'set availability',
    call: (c) =>
      c.request('PUT /v1/runtime-versions/:version/availability', {
        params: { version: v1 },
        body: { availability: 'available' },
      }),
    allowed: ['admin', 'operator'],
  },
  { name: 'audit log', call: (c) => c.request('GET /v1/audit'), allowed: ['admin', 'operator'] },
  {
    name: 'create key',
    call: (c) => c.request('POST /v1/keys', { body: { role: 'operator', name: 'k' } }),
    allowed: ['admin'],
  },
  { name: 'list keys', call: (c) => c.request('GET /v1/keys'), allowed: ['admin'] },
];
/** The routes of one tenant (those naming its id). */
const tenantRoutes = routes.slice(3, 9);

const keys: Record<Role, string> = {
  admin: api.adminKey,
  operator: api.operatorKey,
  tenant: a.apiKey,
  runtime: runtimeKey,
};

t.test('each role against each route', async (t) => {
  for (const route of routes) {
    for (const role of Object.keys(keys) as Role[]) {
      const res = await route.call(api.as(keys[role]), a.tenantId, ++n);
      const ok = route.allowed.includes(role);
      if (ok)
        t.ok(
          res.status < 300,
          `${role} may ${route.name} (got ${res.status} ${res.status >= 300 ? JSON.stringify(res.body) : ''})`,
        );
      else {
        t.equal(res.status, 403, `${role} may not ${route.name}`);
        t.match(res.body, { error: { code: 'FORBIDDEN' } });
      }
    }
  }
});

t.test("tenant A's key never reaches tenant B: every tenant route answers 404", async (t) => {
  t.same(
    tenantRoutes.map((r) => r.name),
    ['get tenant', 'tenant operations', 'suspend', 'resume', 'retry', 'patch suspended'],
  );
  const asA = api.as(a.apiKey);
  for (const route of [
    ...tenantRoutes,
    {
      name: 'upgrade',
      call: (c, id) => c.request('POST /v1/tenants/:id/upgrade', { params: { id }, body: { version: v1 } }),
      allowed: [],
    },
    { name: 'delete', call: (c, id) => c.request('DELETE /v1/tenants/:id', { params: { id } }), allowed: [] },
  ] as Route[]) {
    const res = await route.call(asA, b.tenantId, ++n);
    t.equal(res.status, 404, `A cannot ${route.name} B`);
    t.match(res.body, { error: { code: 'TENANT_NOT_FOUND' } });
  }
  await t.rejects(
    asA.call('GET /v1/operations/:id', { params: { id: b.operationId } }),
    { name: 'ApiError', status: 404 },
    "A cannot read B's operation",
  );
  const list = await asA.call('GET /v1/tenants', { query: { limit: 200 } });
  t.same(
    list.items.map((x) => x.id),
    [a.tenantId],
    'A lists only itself',
  );
  const stillB = await api.client.call('GET /v1/tenants/:id', { params: { id: b.tenantId } });
  t.equal(stillB.generation, 1, 'B is untouched');
});

t.test('a tenant key cannot change its own plan', async (t) => {
  await t.rejects(
    api.as(a.apiKey).call('PATCH /v1/tenants/:id', { params: { id: a.tenantId }, body: { plan: 'enterprise' } }),
    { status: 403, message: /plan/ },
  );
});

t.test('missing, malformed, unknown and revoked keys are 401', async (t) => {
  const cases: Array<[string, Record<string, string>, string]> = [
    ['no header', {}, 'UNAUTHENTICATED'],
    ['basic auth', { authorization: 'Basic dXNlcjpwYXNz' }, 'UNAUTHENTICATED'],
    ['bearer with spaces', { authorization: 'Bearer a b c' }, 'UNAUTHENTICATED'],
    ['too short', { authorization: 'Bearer abc' }, 'INVALID_API_KEY'],
    ['not a key at all', { authorization: 'Bearer garbage' }, 'INVALID_API_KEY'],
    ['unknown key', { authorization: 'Bearer hrt_admin_' + 'x'.repeat(43) }, 'INVALID_API_KEY'],
  ];
  // raw Authorization headers: sent raw
  for (const [name, headers, code] of cases) {
    const res = await api.request('GET', '/v1/tenants', { key: null, headers });
    t.equal(res.statusCode, 401, name);
    t.equal(res.json().error.code, code, name);
    if (code === 'INVALID_API_KEY')
      t.notMatch(
        res.json().error.message,
        /missing|malformed/,
        `${name}: a header that is there is not called missing`,
      );
  }
  const created = await api.client.call('POST /v1/keys', { body: { role: 'operator', name: 'temp' } });
  t.equal((await api.as(created.key).request('GET /v1/clusters')).status, 200);
  const revoked = await api.client.request('DELETE /v1/keys/:id', { params: { id: created.info.id } });
  t.equal(revoked.status, 200);
  t.ok(revoked.ok && revoked.body.revokedAt);
  await t.rejects(api.as(created.key).call('GET /v1/clusters'), { status: 401, code: 'INVALID_API_KEY' });
});

t.test('a key revoked behind the API stops working within the key cache TTL', async (t) => {
  const created = await api.client.call('POST /v1/keys', { body: { role: 'operator', name: 'elsewhere' } });
  const asCreated = api.as(created.key);
  t.equal((await asCreated.request('GET /v1/clusters')).status, 200, 'resolved and cached');
  await revokeKeyUnannounced(api.db.pool, created.info.id);
  // A wait, not a claim about speed: the bound is the cache's TTL with a generous margin.
  const status = await until('the revoked key refused', api.config.keyCacheMs + 30_000, async () => {
    const s = (await asCreated.request('GET /v1/clusters')).status;
    return s !== 200 && s;
  });
  t.equal(status, 401, 'refused once the cached entry expired');
});

t.test('public routes need no key', async (t) => {
  const anonymous = api.as(null);
  for (const key of ['GET /v1/runtime-versions', 'GET /v1/runtime-versions/paths', 'GET /v1/plans'] as const)
    t.equal((await anonymous.request(key)).status, 200, key);
  // outside the route map: raw
  for (const url of ['/healthz', '/readyz', '/docs/json', '/console'])
    t.equal((await api.request('GET', url, { key: null })).statusCode, 200, url);
});
