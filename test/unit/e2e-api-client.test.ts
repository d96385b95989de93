/**
 * The end-to-end harness's calls (test/e2e/harness/api-client.ts) against a loopback server: a
 * route called by its key sends exactly what the harness's generic `request(method, path, body,
 * headers)` sent before it (method, path, query, body and every header, the harness's key
 * included: the request below is a copy of it), and the answers come back as the tests read them
 * (a success's body, an error's body and its ApiError, a 503's Retry-After, a body that is not JSON).
 */
import { once } from 'node:events';
import { createServer, type IncomingHttpHeaders } from 'node:http';
import type { AddressInfo } from 'node:net';
import t from 'tap';
import { ApiClient, ApiError } from '../e2e/harness/api-client.ts';

interface Seen {
  method: string;
  url: string;
  headers: IncomingHttpHeaders;
  /** The header names in the order they came. */
  names: string[];
  body: string;
}

interface Answer {
  status: number;
  headers?: Record<string, string>;
  body?: string;
}

const seen: Seen[] = [];
let answer: Answer = { status: 200, body: '{}' };

const server = createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on('data', (c: Buffer) => chunks.push(c));
  req.on('end', () => {
    seen.push({
      method: req.method ?? '',
      url: req.url ?? '',
      headers: req.headers,
      names: req.rawHeaders.filter((_, i) => i % 2 === 0).map((n) => n.toLowerCase()),
      body: Buffer.concat(chunks).toString('utf8'),
    });
    res.writeHead(answer.status, answer.headers ?? { 'content-type': 'application/json' });
    res.end(answer.body ?? '');
  });
});
server.listen(0, '127.0.0.1');
await once(server, 'listening');
t.teardown(() => server.close());
const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;

/** The harness's request before the route map (its code as it was), the answer dropped. */
async function legacyRequest(
  token: string,
  method: string,
  path: string,
  body?: unknown,
  headers: Record<string, string> = {},
): Promise<void> {
  const res = await fetch(`${url}${path}`, {
    method,
    headers: {
      ...(token ? { authorization: `Bearer ${token}` } : {}),
      ...(body !== undefined ? { 'content-type': 'application/json' } : {}),
      ...headers,
    },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
    signal: AbortSignal.timeout(30_000),
  });
  await res.text();
}

/** What the server saw of one call. */
async function sent(call: () => Promise<unknown>): Promise<Seen> {
  seen.length = 0;
  await call();
  if (seen.length !== 1) throw new Error(`expected one request, saw ${seen.length}`);
  return seen[0]!;
}

const ID = '0b6f4a52-6d0e-4c86-9f8e-3e6a4b0c2d11';
const KEY = 'hrt_admin_0123456789abcdef';
const api = new ApiClient(url, KEY);

t.beforeEach(() => {
  answer = { status: 200, body: '{}' };
});

t.test('a route by its key sends what the generic request sent, byte for byte', async (t) => {
  const cases: Array<[string, () => Promise<unknown>, () => Promise<void>]> = [
    [
      'GET with path parameters',
      () => api.request('GET /v1/tenants/:id', { params: { id: ID } }),
      () => legacyRequest(KEY, 'GET', `/v1/tenants/${ID}`),
    ],
    [
      'GET with a query',
      () => api.expectStatus('GET /v1/tenants', { query: { limit: 200 } }, 200),
      () => legacyRequest(KEY, 'GET', '/v1/tenants?limit=200'),
    ],
    [
      'GET with a query of a commit',
      () =>
        api.expectStatus(
          'GET /v1/tenants/:id/applications/:namespace/:name/diff',
          { params: { id: ID, namespace: 'argocd', name: 'a' }, query: { revision: 'f'.repeat(40) } },
          200,
        ),
      () => legacyRequest(KEY, 'GET', `/v1/tenants/${ID}/applications/argocd/a/diff?revision=${'f'.repeat(40)}`),
    ],
    [
      'POST with a body',
      () => api.expectStatus('POST /v1/tenants/:id/upgrade', { params: { id: ID }, body: { version: '1.5.0' } }, 200),
      () => legacyRequest(KEY, 'POST', `/v1/tenants/${ID}/upgrade`, { version: '1.5.0' }),
    ],
    [
      'POST with an empty body',
      () => api.expectStatus('POST /v1/fleet-upgrades/:id/abort', { params: { id: ID }, body: {} }, 200),
      () => legacyRequest(KEY, 'POST', `/v1/fleet-upgrades/${ID}/abort`, {}),
    ],
    [
      'POST without a body',
      () => api.request('POST /v1/tenants/:id/sleep', { params: { id: ID } }),
      () => legacyRequest(KEY, 'POST', `/v1/tenants/${ID}/sleep`),
    ],
    [
      'DELETE',
      () => api.expectStatus('DELETE /v1/tenants/:id', { params: { id: ID } }, 200),
      () => legacyRequest(KEY, 'DELETE', `/v1/tenants/${ID}`),
    ],
    [
      'a signup: no key, an idempotency key',
      () =>
        api.withToken('').request('POST /v1/signup', {
          body: { organization: 'acme', email: 'ops@acme.example', plan: 'free' },
          headers: { 'idempotency-key': 'e2e-acme-1' },
        }),
      () =>
        legacyRequest(
          '',
          'POST',
          '/v1/signup',
          { organization: 'acme', email: 'ops@acme.example', plan: 'free' },
          { 'idempotency-key': 'e2e-acme-1' },
        ),
    ],
    [
      'another key',
      () => api.withToken('hrt_tenant_abc').request('GET /v1/whoami'),
      () => legacyRequest('hrt_tenant_abc', 'GET', '/v1/whoami'),
    ],
    [
      'raw: a path outside the map with a body',
      () => api.raw('POST', `/v1/tenants/${ID}/runtime/api/applications/argocd/demo/sync`, { body: {} }),
      () => legacyRequest(KEY, 'POST', `/v1/tenants/${ID}/runtime/api/applications/argocd/demo/sync`, {}),
    ],
    [
      "raw: a header replaces the harness's key",
      () =>
        api.raw('GET', `/v1/tenants/${ID}/argo-cd/api/version`, {
          headers: { authorization: 'Bearer hrt_tenant_not-a-key' },
        }),
      () =>
        legacyRequest(KEY, 'GET', `/v1/tenants/${ID}/argo-cd/api/version`, undefined, {
          authorization: 'Bearer hrt_tenant_not-a-key',
        }),
    ],
  ];
  for (const [what, now, before] of cases) {
    const a = await sent(now);
    const b = await sent(before);
    t.same(
      { method: a.method, url: a.url, headers: a.headers, names: a.names, body: a.body },
      { method: b.method, url: b.url, headers: b.headers, names: b.names, body: b.body },
      `${what}: ${a.method} ${a.url}`,
    );
  }
});

t.test('what goes on the wire, spelled out', async (t) => {
  const s = await sent(() =>
    api.expectStatus('POST /v1/tenants/:id/upgrade', { params: { id: ID }, body: { version: '1.5.0' } }, 200),
  );
  t.equal(s.method, 'POST');
  t.equal(s.url, `/v1/tenants/${ID}/upgrade`);
  t.equal(s.body, '{"version":"1.5.0"}', 'the body as JSON');
  t.equal(s.headers.authorization, `Bearer ${KEY}`, "the harness's key");
  t.equal(s.headers['content-type'], 'application/json');
  t.equal(s.headers.accept, '*/*', "no accept of the harness's own (fetch's default)");

  const bare = await sent(() => api.withToken('').request('GET /v1/tenants/summary'));
  t.equal(bare.url, '/v1/tenants/summary');
  t.notOk('authorization' in bare.headers, 'no key: no authorization');
  t.notOk('content-type' in bare.headers, 'no body: no content type');
  t.equal(bare.body, '');
});

t.test('a success: the answer, typed by the route', async (t) => {
  answer = { status: 202, body: JSON.stringify({ operationId: 'op-1', queued: true }) };
  const accepted = await api.expectStatus('POST /v1/tenants/:id/sleep', { params: { id: ID } }, 202);
  t.same(accepted, { operationId: 'op-1', queued: true });

  const res = await api.request('POST /v1/tenants/:id/sleep', { params: { id: ID } });
  t.equal(res.status, 202);
  t.ok(res.ok);
  if (res.ok) t.equal(res.body.operationId, 'op-1');

  answer = { status: 204 };
  const empty = await api.raw('DELETE', '/v1/anything');
  t.equal(empty.status, 204);
  t.equal(empty.body, undefined, 'an empty answer: undefined, as before');
});

t.test('a 4xx: its status, its error body and its ApiError; expectStatus of another status throws', async (t) => {
  const error = { error: { code: 'TENANT_NOT_FOUND', message: 'no tenant x', details: { id: ID } } };
  answer = { status: 404, body: JSON.stringify(error) };
  const res = await api.request('GET /v1/tenants/:id', { params: { id: ID } });
  t.equal(res.status, 404);
  t.notOk(res.ok);
  if (!res.ok) {
    t.same(res.body, error, 'the body as the server sent it');
    t.type(res.error, ApiError);
    t.equal(res.error.status, 404);
    t.equal(res.error.code, 'TENANT_NOT_FOUND');
    t.equal(res.error.message, 'no tenant x');
    t.same(res.error.details, { id: ID });
  }
  const asserted = await api.expectStatus('GET /v1/tenants/:id', { params: { id: ID } }, 404);
  t.same(asserted, error, 'expectStatus at the error status: the error body');
  t.equal(asserted.error.code, 'TENANT_NOT_FOUND', 'typed by the route map (its error schema)');

  await t.rejects(
    api.expectStatus('GET /v1/tenants/:id', { params: { id: ID } }, 200),
    new Error(`GET /v1/tenants/${ID}: expected 200, got 404: ${JSON.stringify(error)}`),
    'the message the harness always threw',
  );

  const raw = await api.raw('GET', '/v1/tenants/x/argo-cd/api/version');
  t.equal(raw.status, 404);
  t.same(raw.body, error, 'raw: the body as unknown');
});

t.test('a 503 with Retry-After', async (t) => {
  const error = { error: { code: 'TENANT_WAKING', message: 'waking', details: { operationId: 'op-9' } } };
  answer = {
    status: 503,
    headers: { 'content-type': 'application/json', 'retry-after': '7' },
    body: JSON.stringify(error),
  };
  const res = await api.request('GET /v1/tenants/:id', { params: { id: ID } });
  t.equal(res.status, 503);
  t.equal(res.headers.get('retry-after'), '7');
  if (res.ok) t.fail('a 503 is no success');
  else {
    t.equal(res.error.retryAfterSeconds, 7, 'the ApiError says when to try again');
    t.equal(res.error.code, 'TENANT_WAKING');
    t.same(res.body, error);
  }
  await t.rejects(api.expectStatus('GET /v1/tenants/:id', { params: { id: ID } }, 200), {
    message: `GET /v1/tenants/${ID}: expected 200, got 503: ${JSON.stringify(error)}`,
  });
});

t.test('an answer that is not JSON: rejected, as the harness always did', async (t) => {
  answer = { status: 502, headers: { 'content-type': 'text/html' }, body: '<html>bad gateway</html>' };
  await t.rejects(api.request('GET /v1/tenants/:id', { params: { id: ID } }), SyntaxError, 'request');
  await t.rejects(api.expectStatus('GET /v1/tenants/:id', { params: { id: ID } }, 502), SyntaxError, 'expectStatus');
  await t.rejects(api.raw('GET', '/healthz'), SyntaxError, 'raw');
  answer = { status: 200, headers: { 'content-type': 'text/plain' }, body: 'ok' };
  await t.rejects(api.request('GET /v1/tenants/summary'), SyntaxError, 'a 200 that is not JSON too');
});
