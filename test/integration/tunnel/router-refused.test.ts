/**
 * The tunnel client while its request router is not listening yet: after a wake the runtime's
 * pods start together, and the tunnel can be up before the router's process listens. A request
 * without a body is then tried again, paced, until the router answers (within the client's
 * budget), and delivered once; past the budget, and at once for a request with a body, the
 * control plane answers 502 RUNTIME_UPSTREAM_ERROR. Real control plane tunnel server and tunnel
 * client on loopback; the "router" is a plain HTTP server started on the refused port.
 */
import { randomUUID } from 'node:crypto';
import http from 'node:http';
import t from 'tap';
import { startTunnelClient } from '../../../runtime/agents/tunnel-client/client.ts';
import { until } from '../../../sandbox/until.ts';
import { freedPort, json, refusalLog, request, startControlPlane, StubCallers, StubRuntimeTokens } from './harness.ts';

const tokens = new StubRuntimeTokens();
const callers = new StubCallers();
const cp = await startControlPlane({ tokens, callers });
t.teardown(() => cp.close());

/** A tunnel client for a new tenant whose router is at a port nothing listens on yet. */
async function runtimeWithoutRouter(t: { teardown(fn: () => unknown): void }, retryMs: number) {
  const tenantId = randomUUID();
  const port = await freedPort();
  const { logger, refused } = refusalLog();
  const client = startTunnelClient({
    url: cp.wsUrl,
    token: tokens.issue(tenantId).token,
    upstream: `http://127.0.0.1:${port}`,
    upstreamConnectRetryMs: retryMs,
    logger,
  });
  t.teardown(() => client.close());
  await until('the tunnel is up', 10_000, () => cp.tunnel.status(tenantId).connected);
  const auth = { authorization: `Bearer ${callers.add('tenant', tenantId)}` };
  return { port, refused, auth, base: `${cp.base}/v1/tenants/${tenantId}/runtime` };
}

void t.test('a router that starts listening after the first refusal gets the request, once', async (t) => {
  const { port, refused, auth, base } = await runtimeWithoutRouter(t, 60_000);
  const answer = request(`${base}/argo-cd/api/version`, { headers: auth });
  await until('the client logs the refusal', 30_000, () => refused.length > 0);
  t.same(refused, ['/argo-cd/api/version'], 'refused, and tried again');
  const seen: string[] = [];
  const router = http.createServer((req, res) => {
    seen.push(req.url ?? '');
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ Version: 'v3.1.5' }));
  });
  await new Promise<void>((resolve) => router.listen(port, '127.0.0.1', resolve));
  t.teardown(() => {
    router.closeAllConnections();
    router.close();
  });
  const res = await answer;
  t.equal(res.status, 200, 'answered once the router listened');
  t.same(json(res), { Version: 'v3.1.5' });
  t.same(seen, ['/argo-cd/api/version'], 'delivered once');
});

void t.test('refused for longer than the budget: 502 RUNTIME_UPSTREAM_ERROR naming the router', async (t) => {
  const { refused, auth, base } = await runtimeWithoutRouter(t, 300);
  const res = await request(`${base}/argo-cd/api/version`, { headers: auth });
  t.equal(res.status, 502);
  const { error } = json(res) as { error: { code: string; message: string } };
  t.equal(error.code, 'RUNTIME_UPSTREAM_ERROR');
  t.match(error.message, /request router: .*ECONNREFUSED/, `names the router: ${error.message}`);
  t.same(refused, ['/argo-cd/api/version'], 'it was tried again first');
});

void t.test('a request with a body is not sent again: a 502 at once', async (t) => {
  const { refused, auth, base } = await runtimeWithoutRouter(t, 60_000);
  const res = await request(`${base}/webhooks/github`, {
    method: 'POST',
    headers: { ...auth, 'content-type': 'application/json' },
    body: Buffer.from('{"ref":"refs/heads/main"}'),
  });
  t.equal(res.status, 502);
  t.equal((json(res) as { error: { code: string } }).error.code, 'RUNTIME_UPSTREAM_ERROR');
  t.same(refused, [], 'never retried');
});
