/**
 * The route map (provisioner/http/api-routes.ts) is the API: every operation the OpenAPI document
 * lists is a route of the map, registered from it, except the runtimes' own routes, the proxied
 * runtime paths, health and metrics; and every route of the map is served. A route added outside
 * the map (so the clients are not typed from it), or one left in the map after its removal, fails
 * here. Every request and response schema the app registers compiles (they are compiled at their
 * first use, provisioner/http/serialization.ts and validation.ts, so a refused one would otherwise
 * fail only when a request reaches it).
 */
import { readFile } from 'node:fs/promises';
import t from 'tap';
import { createTestApi } from '../../helpers/api.ts';
import { API_ROUTES } from '../../../provisioner/http/api-routes.ts';
import { compileEverySerializer } from '../../../provisioner/http/serialization.ts';
import { compileEveryValidator } from '../../../provisioner/http/validation.ts';

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

t.test(
  "the fuzzer's configuration lets every listing with a signed cursor refuse a made-up one with 400",
  async (t) => {
    // A schema cannot say which cursors the server signed: a listing the configuration
    // (test/fuzz/schemathesis.toml) misses fails the fuzz tier on the first made-up cursor
    // (INVALID_CURSOR, 400) it sends, as GET /v1/tenants/{id}/promotionpreviews once did.
    const toml = await readFile(new URL('../../fuzz/schemathesis.toml', import.meta.url), 'utf8');
    const accepting400: RegExp[] = [];
    let regex: RegExp | undefined;
    for (const line of toml.split('\n')) {
      if (line.startsWith('[')) regex = undefined;
      const include = /^include-path-regex = (".*")$/.exec(line);
      if (include) regex = new RegExp(JSON.parse(include[1]!) as string);
      const statuses = /^checks\.positive_data_acceptance\.expected-statuses = (\[.*\])$/.exec(line);
      if (regex && statuses && (JSON.parse(statuses[1]!) as string[]).includes('400')) {
        accepting400.push(regex);
      }
    }
    t.ok(
      accepting400.length >= 2,
      `the configuration was read: ${accepting400.length} blocks accept a 400, at least 2`,
    );
    const doc = (await api.app.inject({ method: 'GET', url: '/docs/json' })).json<{
      paths: Record<string, Record<string, { parameters?: { in: string; name: string }[] }>>;
    }>();
    const withCursor = Object.entries(doc.paths).flatMap(([path, item]) =>
      Object.values(item).some((op) => op.parameters?.some((p) => p.in === 'query' && p.name === 'cursor'))
        ? [path]
        : [],
    );
    t.ok(withCursor.length >= 10, `the document lists ${withCursor.length} listings with a cursor, at least 10`);
    t.same(
      withCursor.filter((path) => !accepting400.some((re) => re.test(path))),
      [],
      'every listing with a cursor is named in the configuration',
    );
  },
);

t.test('every request and response schema the app registers compiles, each distinct one once', async (t) => {
  const serializers = compileEverySerializer();
  const validators = compileEveryValidator();
  t.ok(serializers > 40, `every answer's serializer compiles, more than 40 distinct ones (${serializers})`);
  t.ok(validators > 30, `every request's validator compiles, more than 30 distinct ones (${validators})`);
  const again = await createTestApi();
  t.teardown(() => again.close());
  t.equal(compileEverySerializer(), serializers, 'a second app in the process adds no serializer');
  t.equal(compileEveryValidator(), validators, 'nor a validator');
});
