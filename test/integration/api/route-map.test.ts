/**
 * The route map (provisioner/http/api-routes.ts) is the API: every operation the OpenAPI document
 * lists is a route of the map, registered from it, except the runtimes' own routes, the proxied
 * runtime paths, health and metrics; and every route of the map is served. A route added outside
 * the map (so the clients are not typed from it), or one left in the map after its removal, fails
 * here.
 */
import t from 'tap';
import { createTestApi } from '../../helpers/api.ts';
import { API_ROUTES } from '../../../provisioner/http/api-routes.ts';

const api = await createTestApi();
t.teardown(() => api.close());

/** What is served but is no route a client of the API calls through the map. */
const OUTSIDE_THE_MAP = [
  /^GET \/(healthz|readyz|metrics)$/, // health and metrics
  /^\w+ \/v1\/tenants\/:id\/(runtime|argo-cd)\/:path$/, // the runtime's API through the tunnel
  /^\w+ \/v1\/tenants\/:id\/runtimes\/:name\/proxy\/:path$/,
  /^POST \/v1\/webhooks\/:tenantId\/:secret\/:path$/, // Git providers' webhooks
  /^POST \/v1\/runtime\/events$/, // a runtime's reports
  /^(GET|POST) \/v1\/runtime\/upgrade$/, // a hybrid runtime's upgrader
  /^GET \/v1\/install\/:file$/, // a hybrid runtime's one-command install
];

t.test(
  'every operation of the OpenAPI document is a route of the map, and every route of the map is served',
  async (t) => {
    const res = await api.app.inject({ method: 'GET', url: '/docs/json' });
    t.equal(res.statusCode, 200);
    const doc = res.json<{ paths: Record<string, Record<string, unknown>> }>();
    const served = Object.entries(doc.paths).flatMap(([path, item]) =>
      Object.keys(item)
        .filter((m) => ['get', 'post', 'put', 'patch', 'delete'].includes(m))
        .map((m) => `${m.toUpperCase()} ${path.replace(/\{(\w+)\}/g, ':$1')}`),
    );
    t.ok(served.length > 80, `the document lists the operations (${served.length})`);
    const inMap = new Set(Object.keys(API_ROUTES));
    t.same(
      served.filter((op) => !inMap.has(op) && !OUTSIDE_THE_MAP.some((re) => re.test(op))),
      [],
      'every operation is in the map or one of the routes named outside it',
    );
    t.same(
      [...inMap].filter((key) => !served.includes(key)),
      [],
      'every route of the map is served',
    );
    t.ok(
      inMap.has('POST /v1/signup') && inMap.has('GET /v1/tenants/:id/applications'),
      'the map holds plain and per-kind routes',
    );
  },
);

t.test(
  'the document takes a route body from the map: a body the map gives is in it, an optional one is not',
  async (t) => {
    const doc = (await api.app.inject({ method: 'GET', url: '/docs/json' })).json<{
      paths: Record<string, Record<string, { requestBody?: unknown }>>;
    }>();
    t.ok(doc.paths['/v1/signup']?.post?.requestBody, 'signup has the body of the map');
    t.notOk(
      doc.paths['/v1/tenants/{id}/suspend']?.post?.requestBody,
      "suspend's optional body is checked by its handler, not declared to the validator",
    );
  },
);
