import t from 'tap';
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
interface Route {
  name: string;
  method: 'GET' | 'POST' | 'PATCH' | 'PUT' | 'DELETE';
  url: (tenantId: string) => string;
  body?: (n: number) => unknown;
  allowed: Role[];
}

let n = 0;
const routes: Route[] = [
  { name: 'list tenants', method: 'GET', url: () => '/v1/tenants', allowed: ['admin', 'operator', 'tenant'] },
  {
    name: 'count tenants by phase',
    method: 'GET',
    url: () => '/v1/tenants/summary',
    allowed: ['admin', 'operator', 'tenant'],
  },
  { name: 'whoami', method: 'GET', url: () => '/v1/whoami', allowed: ['admin', 'operator', 'tenant', 'runtime'] },
  { name: 'get tenant', method: 'GET', url: (id) => `/v1/tenants/${id}`, allowed: ['admin', 'operator', 'tenant'] },
  {
    name: 'tenant operations',
    method: 'GET',
    url: (id) => `/v1/tenants/${id}/operations`,
    allowed: ['admin', 'operator', 'tenant'],
  },
  {
    name: 'suspend',
    method: 'POST',
    url: (id) => `/v1/tenants/${id}/suspend`,
    allowed: ['admin', 'operator', 'tenant'],
  },
  { name: 'resume', method: 'POST', url: (id) => `/v1/tenants/${id}/resume`, allowed: ['admin', 'operator', 'tenant'] },
  { name: 'retry', method: 'POST', url: (id) => `/v1/tenants/${id}/retry`, allowed: ['admin', 'operator', 'tenant'] },
  {
    name: 'patch suspended',
    method: 'PATCH',
    url: (id) => `/v1/tenants/${id}`,
    body: () => ({ suspended: false }),
    allowed: ['admin', 'operator', 'tenant'],
  },
  { name: 'list clusters', method: 'GET', url: () => '/v1/clusters', allowed: ['admin', 'operator'] },
  {
    name: 'register cluster',
    method: 'POST',
    url: () => '/v1/clusters',
    body: (i) => ({ name: `c-${i}`, region: 'eu-1', capacity: 5, kubeconfig, force: true }),
    allowed: ['admin', 'operator'],
  },
  {
    name: 'set availability',
    method: 'PUT',
    url: () => `/v1/runtime-versions/${v1}/availability`,
    body: () => ({ availability: 'available' }),
    allowed: ['admin', 'operator'],
  },
  { name: 'audit log', method: 'GET', url: () => '/v1/audit', allowed: ['admin', 'operator'] },
  {
    name: 'create key',
    method: 'POST',
    url: () => '/v1/keys',
    body: () => ({ role: 'operator', name: 'k' }),
    allowed: ['admin'],
  },
  { name: 'list keys', method: 'GET', url: () => '/v1/keys', allowed: ['admin'] },
];

const keys: Record<Role, string> = {
  admin: api.adminKey,
  operator: api.operatorKey,
  tenant: a.apiKey,
  runtime: runtimeKey,
};

t.test('each role against each route', async (t) => {
  for (const route of routes) {
    for (const role of Object.keys(keys) as Role[]) {
      const res = await api.request(route.method, route.url(a.tenantId), {
        key: keys[role],
        ...(route.body ? { body: route.body(++n) } : {}),
      });
      const ok = route.allowed.includes(role);
      if (ok)
        t.ok(
          res.statusCode < 300,
          `${role} may ${route.name} (got ${res.statusCode} ${res.statusCode >= 300 ? res.body : ''})`,
        );
      else {
        t.equal(res.statusCode, 403, `${role} may not ${route.name}`);
        t.equal(res.json().error.code, 'FORBIDDEN');
      }
    }
  }
});

t.test("tenant A's key never reaches tenant B: every tenant route answers 404", async (t) => {
  const tenantRoutes = routes.filter((r) => r.url('X').includes('X'));
  t.ok(tenantRoutes.length >= 6);
  for (const route of [
    ...tenantRoutes,
    {
      name: 'upgrade',
      method: 'POST',
      url: (id: string) => `/v1/tenants/${id}/upgrade`,
      body: () => ({ version: v1 }),
      allowed: [],
    },
    { name: 'delete', method: 'DELETE', url: (id: string) => `/v1/tenants/${id}`, allowed: [] },
  ] as Route[]) {
    const res = await api.request(route.method, route.url(b.tenantId), {
      key: a.apiKey,
      ...(route.body ? { body: route.body(++n) } : {}),
    });
    t.equal(res.statusCode, 404, `A cannot ${route.name} B`);
    t.equal(res.json().error.code, 'TENANT_NOT_FOUND');
  }
  const op = await api.request('GET', `/v1/operations/${b.operationId}`, { key: a.apiKey });
  t.equal(op.statusCode, 404, "A cannot read B's operation");
  const list = (await api.request('GET', '/v1/tenants?limit=200', { key: a.apiKey })).json();
  t.same(
    list.items.map((x: { id: string }) => x.id),
    [a.tenantId],
    'A lists only itself',
  );
  const stillB = (await api.request('GET', `/v1/tenants/${b.tenantId}`)).json();
  t.equal(stillB.generation, 1, 'B is untouched');
});

t.test('a tenant key cannot change its own plan', async (t) => {
  const res = await api.request('PATCH', `/v1/tenants/${a.tenantId}`, { key: a.apiKey, body: { plan: 'enterprise' } });
  t.equal(res.statusCode, 403);
  t.match(res.json().error.message, /plan/);
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
  const created = (await api.request('POST', '/v1/keys', { body: { role: 'operator', name: 'temp' } })).json();
  t.equal((await api.request('GET', '/v1/clusters', { key: created.key })).statusCode, 200);
  const revoked = await api.request('DELETE', `/v1/keys/${created.info.id}`);
  t.equal(revoked.statusCode, 200);
  t.ok(revoked.json().revokedAt);
  const after = await api.request('GET', '/v1/clusters', { key: created.key });
  t.equal(after.statusCode, 401);
  t.equal(after.json().error.code, 'INVALID_API_KEY');
});

t.test('a key revoked behind the API stops working within the key cache TTL', async (t) => {
  const created = (await api.request('POST', '/v1/keys', { body: { role: 'operator', name: 'elsewhere' } })).json();
  t.equal((await api.request('GET', '/v1/clusters', { key: created.key })).statusCode, 200, 'resolved and cached');
  await revokeKeyUnannounced(api.db.pool, created.info.id);
  // A wait, not a claim about speed: the bound is the cache's TTL with a generous margin.
  const status = await until('the revoked key refused', api.config.keyCacheMs + 30_000, async () => {
    const s = (await api.request('GET', '/v1/clusters', { key: created.key })).statusCode;
    return s !== 200 && s;
  });
  t.equal(status, 401, 'refused once the cached entry expired');
});

t.test('public routes need no key', async (t) => {
  for (const url of [
    '/healthz',
    '/readyz',
    '/v1/runtime-versions',
    '/v1/runtime-versions/paths',
    '/v1/plans',
    '/docs/json',
    '/console',
  ]) {
    t.equal((await api.request('GET', url, { key: null })).statusCode, 200, url);
  }
});
