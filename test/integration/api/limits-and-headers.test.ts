/**
 * Limits and response hygiene on a running server: a slow request body is cut off, a key holds
 * only so many log streams, the signup rate limit keys on the client address a trusted proxy
 * reports, every answer says nosniff with a restrictive CSP, and a runtime's answers pass an
 * allow-list (no cookies, no HTML on the API's origin) while the caller's X-Forwarded-For is not
 * passed on.
 */
import t from 'tap';
import http from 'node:http';
import net from 'node:net';
import { once } from 'node:events';
import { createTestApi, uniqueOrg } from '../../helpers/api.ts';
import { connectRuntime } from '../../helpers/runtime.ts';
import { until } from '../../../sandbox/until.ts';
import { ApiClient, ApiError } from '../../../provisioner/http/api-client.ts';

const api = await createTestApi({
  env: { PROVISIONER_REQUEST_TIMEOUT_SECONDS: '2', PROVISIONER_SSE_STREAMS_PER_KEY: '2' },
});
t.teardown(() => api.close());
const base = await api.app.listen({ port: 0, host: '127.0.0.1' });
const port = Number(new URL(base).port);
/** The typed client at the socket, with no key (`withToken` gives one). */
const socket = new ApiClient({ baseUrl: base });

t.test('a request body sent one byte at a time is cut off by the request timeout', async (t) => {
  // PROVISIONER_REQUEST_TIMEOUT_SECONDS is 2 here; the body below would take 300 s to arrive.
  const socket = net.connect(port, '127.0.0.1');
  await once(socket, 'connect');
  const LENGTH = 1000;
  socket.write(
    `POST /v1/signup HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: ${LENGTH}\r\n\r\n{`,
  );
  let sent = 1;
  let answer = '';
  socket.on('data', (d: Buffer) => {
    answer += d.toString();
  });
  socket.on('error', () => {}); // a write racing the server's close may fail: the close is what is waited for
  const drip = setInterval(() => {
    if (socket.destroyed || sent >= LENGTH) return;
    socket.write(' ');
    sent += 1;
  }, 300);
  t.teardown(() => clearInterval(drip));
  await once(socket, 'close');
  clearInterval(drip);
  t.ok(sent < LENGTH, `the server ended the request while its body was still arriving (${sent} of ${LENGTH} bytes)`);
  t.match(answer, /^HTTP\/1\.1 408 /, 'with 408 Request Timeout');
  const body = JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4)) as { error: { code: string } };
  t.equal(body.error.code, 'REQUEST_TIMEOUT', "the server's own request timeout ended it (not a limit or a refusal)");
});

t.test('one key holds at most PROVISIONER_SSE_STREAMS_PER_KEY log streams', async (t) => {
  const tenant = await api.signup();
  /**
   * Opens the signup's operation log as a stream with `key`: its status, or the refusal's error.
   * With `signal` the stream stays open until it aborts; without, it is closed at once.
   */
  const open = async (key: string, signal?: AbortSignal): Promise<{ status: number; code?: string }> => {
    try {
      const res = await socket.withToken(key).fetch('GET /v1/operations/:id/log', {
        params: { id: tenant.operationId },
        query: { follow: '1' },
        accept: 'text/event-stream',
        ...(signal ? { signal } : {}),
      });
      if (!signal) await res.body?.cancel();
      return { status: res.status };
    } catch (err) {
      if (err instanceof ApiError) return { status: err.status, code: err.code };
      throw err;
    }
  };
  const controllers: AbortController[] = [];
  for (let i = 0; i < 2; i++) {
    const c = new AbortController();
    controllers.push(c);
    t.teardown(() => c.abort());
    t.equal((await open(tenant.apiKey, c.signal)).status, 200, `stream ${i + 1} opens`);
  }
  t.same(await open(tenant.apiKey), { status: 429, code: 'TOO_MANY_STREAMS' }, 'the third is refused');
  t.equal((await open(api.operatorKey)).status, 200, 'another key is not affected');
  controllers[0]!.abort();
  // The server frees the place when it sees the close, a moment after the client aborts.
  const reopened = await until(
    'a stream to open again after one was closed',
    10_000,
    async () => {
      const { status } = await open(tenant.apiKey);
      return status === 200 && status;
    },
    50,
  );
  t.equal(reopened, 200, 'a closed stream frees its place');
  for (const c of controllers) c.abort();
});

t.test('the signup rate limit keys on the address a trusted proxy reports', async (t) => {
  const proxied = await createTestApi({
    env: { PROVISIONER_SIGNUP_RATE_LIMIT: '2', PROVISIONER_TRUSTED_PROXIES: '127.0.0.1' },
  });
  t.teardown(() => proxied.close());
  // The in-process client's requests come from 127.0.0.1 (fastify's inject): the ingress's address.
  const send = async (app: typeof proxied, client: string) =>
    (
      await app.as(null).request('POST /v1/signup', {
        headers: { 'x-forwarded-for': client },
        body: { organization: uniqueOrg(), email: 'a@b.io' },
      })
    ).status;
  t.equal(await send(proxied, '198.51.100.1'), 202);
  t.equal(await send(proxied, '198.51.100.1'), 202);
  t.equal(await send(proxied, '198.51.100.1'), 429, 'the third from one client is limited');
  t.equal(await send(proxied, '198.51.100.2'), 202, 'another client behind the same ingress is not');
  const direct = await createTestApi({ env: { PROVISIONER_SIGNUP_RATE_LIMIT: '2' } });
  t.teardown(() => direct.close());
  t.equal(await send(direct, '198.51.100.3'), 202);
  t.equal(await send(direct, '198.51.100.4'), 202);
  t.equal(await send(direct, '198.51.100.5'), 429, 'without a trusted proxy a made-up X-Forwarded-For buys no budget');
});

t.test('every API answer says nosniff with a restrictive CSP; /docs keeps a working UI with its own', async (t) => {
  // A mapped route's answer (a refusal: no key) through the client; /healthz and an unknown path are outside the map.
  const answers: [string, Headers][] = [['/v1/tenants', (await socket.request('GET /v1/tenants')).headers]];
  for (const path of ['/healthz', '/no-such-route']) answers.push([path, (await fetch(`${base}${path}`)).headers]);
  for (const [path, headers] of answers) {
    t.equal(headers.get('x-content-type-options'), 'nosniff', `${path}: nosniff`);
    t.match(headers.get('content-security-policy'), /default-src 'none'/, `${path}: CSP default-src 'none'`);
  }
  const docs = await fetch(`${base}/docs/`, { redirect: 'follow' });
  t.equal(docs.status, 200, '/docs answers');
  const html = await docs.text();
  const csp = docs.headers.get('content-security-policy') ?? '';
  t.match(csp, /script-src 'self'/, '/docs lets its own scripts run');
  t.notMatch(csp, /upgrade-insecure-requests/, 'and works over plain http on loopback');
  const assets = [...html.matchAll(/(?:src|href)="\.?\/?([^"]+\.(?:js|css))"/g)].map((m) => m[1]!);
  t.ok(assets.length > 0, 'the UI page references its assets');
  for (const asset of assets) {
    const res = await fetch(new URL(asset, `${base}/docs/`));
    t.equal(res.status, 200, `${asset} is served`);
  }
  t.equal((await fetch(`${base}/docs/json`)).status, 200, 'the OpenAPI document is served');
});

t.test(
  "a runtime's cookies and HTML never reach the caller; the caller's X-Forwarded-For is not passed on",
  async (t) => {
    const tenant = await api.signup();
    const seen: http.IncomingHttpHeaders[] = [];
    const upstream = http
      .createServer((req, res) => {
        seen.push(req.headers);
        res.writeHead(200, {
          'content-type': 'text/html',
          'set-cookie': 'session=stolen; Path=/',
          'x-frame-options': 'ALLOWALL',
          'access-control-allow-origin': '*',
          'x-runtime': 'yes',
        });
        res.end('<script>alert(1)</script>');
      })
      .listen(0, '127.0.0.1');
    await once(upstream, 'listening');
    t.teardown(() => upstream.close());
    const runtime = await connectRuntime(api, base, tenant.tenantId, upstream);
    t.teardown(() => runtime.client.close());
    const res = await fetch(`${base}/v1/tenants/${tenant.tenantId}/runtime/page`, {
      headers: { authorization: `Bearer ${tenant.apiKey}`, 'x-forwarded-for': '203.0.113.66' },
    });
    t.equal(res.status, 200);
    t.equal(res.headers.get('set-cookie'), null, 'no set-cookie');
    t.equal(res.headers.get('access-control-allow-origin'), null, 'no CORS header from the runtime');
    t.equal(res.headers.get('x-frame-options'), null, 'no framing header from the runtime');
    t.equal(res.headers.get('content-type'), 'application/octet-stream', 'HTML is served as a download');
    t.equal(res.headers.get('content-disposition'), 'attachment');
    t.equal(res.headers.get('x-content-type-options'), 'nosniff');
    t.equal(res.headers.get('x-runtime'), 'yes', "the runtime's own x- headers pass");
    await res.arrayBuffer();
    t.equal(
      seen.at(-1)?.['x-forwarded-for'],
      '127.0.0.1',
      "the runtime sees the caller's address as the control plane saw it, not the caller's claim",
    );
  },
);
