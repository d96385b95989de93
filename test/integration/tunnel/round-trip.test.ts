import { randomUUID } from 'node:crypto';
import t from 'tap';
import {
  ready,
  json,
  pattern,
  request,
  sha256,
  startControlPlane,
  startRuntime,
  StubCallers,
  StubRuntimeTokens,
} from './harness.ts';
import { until } from '../../../sandbox/until.ts';

const tokens = new StubRuntimeTokens();
const callers = new StubCallers();
const tenantId = randomUUID();
const cp = await startControlPlane({ tokens, callers });
const runtime = await startRuntime(tenantId, cp, tokens.issue(tenantId).token);
const auth = { authorization: `Bearer ${callers.add('tenant', tenantId)}` };
const base = `${cp.base}/v1/tenants/${tenantId}/runtime`;
t.teardown(async () => {
  await runtime.close();
  await cp.close();
});
await ready(cp, runtime);

void t.test('GET /api/runtime through the tunnel returns the runtime and component versions', async (t) => {
  const res = await request(`${base}/api/runtime`, { headers: auth });
  t.equal(res.status, 200);
  t.same(json(res), { runtimeVersion: '1.5.0', components: { argoCd: '8.0.17', argoEvents: '2.4.15' } });
  t.match(res.headers['content-type'], /application\/json/);
});

void t.test('tenant status shows the tunnel connected and since when', async (t) => {
  const s = cp.tunnel.status(tenantId);
  t.equal(s.connected, true);
  t.ok(s.since && Date.parse(s.since) <= Date.now());
  t.same(cp.tunnel.status(randomUUID()), { connected: false });
});

void t.test("the caller's credentials do not reach the runtime; a signed request token does", async (t) => {
  const res = await request(`${base}/api/test/headers?x=1`, {
    headers: { ...auth, cookie: 'session=secret', 'x-custom': 'kept' },
  });
  t.equal(res.status, 200);
  const { headers } = json(res) as { headers: Record<string, string> };
  t.notOk(headers.authorization, 'no Authorization');
  t.notOk(headers.cookie, 'no Cookie');
  t.equal(headers['x-custom'], 'kept');
  t.match(headers['x-hrt-request-token'], /^[\w-]+\.[\w-]+\.[\w-]+$/);
});

void t.test('small POST body round trip', async (t) => {
  const res = await request(`${base}/api/test/echo`, {
    method: 'POST',
    headers: { ...auth, 'content-type': 'text/plain' },
    body: Buffer.from('hello tunnel'),
  });
  t.equal(res.status, 200);
  t.equal(res.body.toString(), 'hello tunnel');
});

void t.test('several-MB bodies in both directions arrive intact', async (t) => {
  const up = pattern(8 * 1024 * 1024 + 123);
  const res = await request(`${base}/api/test/digest`, {
    method: 'POST',
    headers: { ...auth, 'content-type': 'application/octet-stream' },
    body: up,
  });
  t.equal(res.status, 200);
  t.same(json(res), { bytes: up.length, sha256: sha256(up), contentType: 'application/octet-stream' });

  const size = 12 * 1024 * 1024 + 7;
  const down = await request(`${base}/api/test/bytes?size=${size}`, { headers: auth });
  t.equal(down.status, 200);
  t.equal(down.body.length, size);
  t.equal(sha256(down.body), sha256(pattern(size)));

  const echo = await request(`${base}/api/test/echo`, {
    method: 'POST',
    headers: { ...auth, 'content-type': 'application/octet-stream' },
    body: up,
  });
  t.equal(echo.status, 200);
  t.equal(sha256(echo.body), sha256(up), 'an 8 MB echo (both directions at once) is intact');
});

void t.test('500 concurrent streams on one tunnel', async (t) => {
  // The barrier holds every request at the runtime until the test releases them, so all 500 are
  // open at once when the count is read: no sampling of a moment that may pass unseen.
  const pending = Promise.all(
    Array.from({ length: 500 }, () => request(`${base}/api/test/barrier?n=100000`, { headers: auth })),
  );
  await until('all 500 requests held at the runtime', 30_000, () => runtime.state.barrierWaiting.length === 500);
  t.equal(cp.tunnel.status(tenantId).activeStreams, 500, 'the tunnel carries 500 streams at once');
  for (const release of runtime.state.barrierWaiting.splice(0)) release();
  const results = await pending;
  t.equal(results.filter((r) => r.status === 200).length, 500, 'all 500 answered');
  await until('streams released', 10_000, () => (cp.tunnel.status(tenantId).activeStreams ?? 0) === 0);
  t.equal((await request(`${base}/api/runtime`, { headers: auth })).status, 200, 'still serving afterwards');
});

void t.test('webhooks reach the event source through the tunnel', async (t) => {
  const res = await request(`${base}/webhooks/github/push?x=1`, {
    method: 'POST',
    headers: { ...auth, 'content-type': 'application/json' },
    body: Buffer.from('{"ref":"main"}'),
  });
  t.equal(res.status, 200);
  t.same(json(res), { received: true, url: '/github/push?x=1' });
  t.equal(runtime.webhooks.at(-1)?.body, '{"ref":"main"}');
});

void t.test('unknown runtime paths are 404 from the router', async (t) => {
  const res = await request(`${base}/nothing/here`, { headers: auth });
  t.equal(res.status, 404);
  t.equal((json(res) as { error: { code: string } }).error.code, 'ROUTE_NOT_FOUND');
});
