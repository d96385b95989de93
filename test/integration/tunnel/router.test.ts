import http from 'node:http';
import type { AddressInfo } from 'node:net';
import t from 'tap';
import { until } from '../../../sandbox/until.ts';
import { createRouter } from '../../../runtime/agents/request-router/router.ts';
import { freedPort, json, pattern, refusalLog, request, sha256, startRuntimeServices } from './harness.ts';

const services = await startRuntimeServices('tenant-router');
t.teardown(() => services.close());
const r = services.routerBase;

void t.test('/api/* goes to the app-proxy, which refuses requests without a control-plane token', async (t) => {
  const res = await request(`${r}/api/runtime`);
  t.equal(res.status, 401);
  t.equal((json(res) as { error: { code: string } }).error.code, 'UNAUTHENTICATED');
});

void t.test('/webhooks/* goes to the event source without the prefix, bodies streamed', async (t) => {
  const body = pattern(3 * 1024 * 1024);
  const res = await request(`${r}/webhooks/github/push?delivery=1`, {
    method: 'POST',
    headers: { 'content-type': 'application/octet-stream' },
    body,
  });
  t.equal(res.status, 200);
  t.same(json(res), { received: true, url: '/github/push?delivery=1' });
  const seen = services.webhooks.at(-1)!;
  t.equal(seen.method, 'POST');
  t.equal(seen.bytes, body.length);
  t.equal(seen.sha256, sha256(body), 'the 3 MB body arrived intact');
});

void t.test("anything else is 404, and /healthz is the router's own health", async (t) => {
  const res = await request(`${r}/argocd/applications`);
  t.equal(res.status, 404);
  t.equal((json(res) as { error: { code: string } }).error.code, 'ROUTE_NOT_FOUND');
  t.equal((await request(`${r}/healthz`)).status, 200);
  t.equal((await request(`${r}/apix`)).status, 404, 'only /api and /api/… match');
});

void t.test('an unreachable upstream is a 502 that names it', async (t) => {
  const dead = http.createServer();
  await new Promise<void>((resolve) => dead.listen(0, '127.0.0.1', resolve));
  const port = (dead.address() as AddressInfo).port;
  await new Promise((resolve) => dead.close(resolve));
  const router = createRouter({
    appProxyUrl: `http://127.0.0.1:${port}`,
    eventSourceUrl: `http://127.0.0.1:${port}`,
    connectRetryMs: 0,
  });
  const server = http.createServer(router.handler);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => {
    router.close();
    server.closeAllConnections();
    server.close();
  });
  const res = await request(`http://127.0.0.1:${(server.address() as AddressInfo).port}/webhooks/x`);
  t.equal(res.status, 502);
  t.match((json(res) as { error: { message: string } }).error.message, /event-source could not be reached/);
});

void t.test(
  '/argo-cd/* goes to Argo CD’s API server without the prefix when the router has one, else 404',
  async (t) => {
    const seen: string[] = [];
    const argocd = http.createServer((req, res) => {
      seen.push(req.url ?? '');
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ Version: 'v3.1.5' }));
    });
    await new Promise<void>((resolve) => argocd.listen(0, '127.0.0.1', resolve));
    const router = createRouter({
      appProxyUrl: 'http://127.0.0.1:1',
      eventSourceUrl: 'http://127.0.0.1:1',
      argoCdServerUrl: `http://127.0.0.1:${(argocd.address() as AddressInfo).port}`,
    });
    const server = http.createServer(router.handler);
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    t.teardown(() => {
      router.close();
      server.closeAllConnections();
      server.close();
      argocd.closeAllConnections();
      argocd.close();
    });
    const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    const res = await request(`${base}/argo-cd/api/version?x=1`);
    t.equal(res.status, 200, 'Argo CD answered through the router');
    t.same(json(res), { Version: 'v3.1.5' });
    t.equal(seen.at(-1), '/api/version?x=1', 'it was asked for the path without /argo-cd');
    t.equal((await request(`${base}/argo-cd`)).status, 200, '/argo-cd alone is its root');
    t.equal(seen.at(-1), '/', 'asked for /');
    t.equal((await request(`${base}/argo-cdx`)).status, 404, 'only /argo-cd and /argo-cd/… match');
    const without = await request(`${r}/argo-cd/api/version`);
    t.equal(without.status, 404, 'a router without ARGOCD_SERVER_URL has no such route');
  },
);

/** A port nothing listens on (bound, then closed), and a router whose upstreams are all there. */
async function refusingRouter(t: { teardown(fn: () => void): void }, connectRetryMs: number) {
  const port = await freedPort();
  const { logger, refused, failed } = refusalLog();
  const upstreamUrl = `http://127.0.0.1:${port}`;
  const router = createRouter({
    appProxyUrl: upstreamUrl,
    eventSourceUrl: upstreamUrl,
    argoCdServerUrl: upstreamUrl,
    connectRetryMs,
    logger,
  });
  const server = http.createServer(router.handler);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => {
    router.close();
    server.closeAllConnections();
    server.close();
  });
  return { port, refused, failed, base: `http://127.0.0.1:${(server.address() as AddressInfo).port}` };
}

void t.test(
  'a server that starts after the first request (a woken runtime): the request waits for it instead of a 502',
  async (t) => {
    const { port, refused, base } = await refusingRouter(t, 60_000);
    const answer = request(`${base}/argo-cd/api/version`);
    await until('the router logs the refusal', 30_000, () => refused.length > 0);
    t.same(refused, ['/api/version'], 'refused once, tried again');
    const seen: string[] = [];
    const argocd = http.createServer((req, res) => {
      seen.push(req.url ?? '');
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ Version: 'v3.1.5' }));
    });
    await new Promise<void>((resolve) => argocd.listen(port, '127.0.0.1', resolve));
    t.teardown(() => {
      argocd.closeAllConnections();
      argocd.close();
    });
    const res = await answer;
    t.equal(res.status, 200, 'answered by the server once it listened');
    t.same(json(res), { Version: 'v3.1.5' });
    t.same(seen, ['/api/version'], 'delivered once');
  },
);

void t.test('refused for longer than the budget: a 502 naming the upstream', async (t) => {
  const { refused, failed, base } = await refusingRouter(t, 300);
  const res = await request(`${base}/argo-cd/api/version`);
  t.equal(res.status, 502);
  t.match((json(res) as { error: { message: string } }).error.message, /argocd-server could not be reached/);
  t.same(refused, ['/api/version'], 'it was tried again first');
  t.same(failed, ['/api/version'], 'then failed, logged once');
});

void t.test('a request with a body is not sent again (its body was read): a 502 at once', async (t) => {
  const { refused, base } = await refusingRouter(t, 60_000);
  const res = await request(`${base}/webhooks/github`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: Buffer.from('{"ref":"refs/heads/main"}'),
  });
  t.equal(res.status, 502);
  t.same(refused, [], 'never retried');
});
