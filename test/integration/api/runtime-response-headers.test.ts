/**
 * What a runtime's answer may tell the proxy in front of the API and the caller's browser, through
 * a real tunnel on loopback: no `X-Accel-*` or `X-Sendfile` (ingress-nginx acts on
 * `X-Accel-Redirect`), and `Location` only as a path on the runtime's own route.
 */
import t from 'tap';
import http from 'node:http';
import { once } from 'node:events';
import { createTestApi } from '../../helpers/api.ts';
import { connectRuntime } from '../../helpers/runtime.ts';

const api = await createTestApi();
t.teardown(() => api.close());
const base = await api.app.listen({ port: 0, host: '127.0.0.1' });
const tenant = await api.signup();

/** What the runtime answers next: its headers (the test sets them before each request). */
let answerHeaders: Record<string, string> = {};
const upstream = http
  .createServer((_req, res) => {
    res.writeHead(302, { 'content-type': 'text/plain', ...answerHeaders });
    res.end('moved');
  })
  .listen(0, '127.0.0.1');
await once(upstream, 'listening');
t.teardown(() => upstream.close());
const runtime = await connectRuntime(api, base, tenant.tenantId, upstream);
t.teardown(() => runtime.client.close());

async function through(headers: Record<string, string>): Promise<Headers> {
  answerHeaders = headers;
  const res = await fetch(`${base}/v1/tenants/${tenant.tenantId}/runtime/page`, {
    headers: { authorization: `Bearer ${tenant.apiKey}` },
    redirect: 'manual',
  });
  await res.arrayBuffer();
  if (res.status !== 302) throw new Error(`precondition: the runtime's 302 is forwarded (got ${res.status})`);
  return res.headers;
}

t.test('X-Accel-* and X-Sendfile never reach the proxy in front of the API', async (t) => {
  const headers = await through({
    'x-accel-redirect': '/internal/secrets',
    'x-accel-buffering': 'no',
    'x-accel-charset': 'utf-8',
    'x-sendfile': '/etc/passwd',
    'x-runtime': 'yes',
  });
  for (const name of ['x-accel-redirect', 'x-accel-buffering', 'x-accel-charset', 'x-sendfile'])
    t.equal(headers.get(name), null, `${name} is dropped`);
  t.equal(headers.get('x-runtime'), 'yes', "the runtime's own x- headers still pass");
});

t.test("Location: only a path, put under the runtime's route", async (t) => {
  const route = `/v1/tenants/${tenant.tenantId}/runtime`;
  const cases: Array<[string, string | null]> = [
    ['/applications/guestbook', `${route}/applications/guestbook`],
    [`${route}/workflows`, `${route}/workflows`],
    ['/login?next=%2F', `${route}/login?next=%2F`],
    ['https://evil.example/phish', null],
    ['//evil.example/phish', null],
    ['/\\evil.example', null],
    ['/../../v1/keys', null],
    ['/a/%2e%2e/%2E%2E/v1/keys', null],
    ['relative/path', null],
    ['javascript:alert(1)', null],
  ];
  for (const [sent, expected] of cases) {
    const headers = await through({ location: sent });
    t.equal(headers.get('location'), expected, `${sent} → ${expected ?? 'dropped'}`);
  }
});
