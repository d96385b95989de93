/**
 * Kept-alive upstream connections closed just as they are reused: the tunnel client (→ router)
 * and the router (→ app-proxy) send an idempotent, bodiless request again on a fresh connection
 * instead of failing it; anything else still fails clearly.
 */
import { randomUUID } from 'node:crypto';
import http from 'node:http';
import net, { type AddressInfo } from 'node:net';
import t from 'tap';
import { createRouter } from '../../../runtime/agents/request-router/router.ts';
import { startTunnelClient } from '../../../runtime/agents/tunnel-client/client.ts';
import { connected, json, request, startControlPlane, StubCallers, StubRuntimeTokens } from './harness.ts';
import { until } from '../../../sandbox/until.ts';

/**
 * TEST DOUBLE upstream: answers the first request on each connection (keep-alive), then resets
 * the connection as soon as a second request arrives on it, as a server whose idle timeout fired
 * while the client was reusing the connection.
 */
async function resettingUpstream(t: {
  teardown(fn: () => unknown): void;
}): Promise<{ url: string; connections: () => number; answered: () => number }> {
  let connections = 0;
  let answered = 0;
  const sockets = new Set<net.Socket>();
  const server = net.createServer((socket) => {
    connections++;
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    let seen = '';
    let done = false;
    socket.on('data', (d: Buffer) => {
      if (done) {
        socket.resetAndDestroy();
        return;
      }
      seen += d.toString('latin1');
      if (!seen.includes('\r\n\r\n')) return;
      done = true;
      answered++;
      socket.write(
        'HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\nConnection: keep-alive\r\nKeep-Alive: timeout=60\r\n\r\nok',
      );
    });
    socket.on('error', () => {});
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(async () => {
    for (const s of sockets) s.destroy();
    await new Promise((r) => server.close(r));
  });
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    connections: () => connections,
    answered: () => answered,
  };
}

void t.test(
  'router: a GET on a reused connection the upstream resets is sent again; a POST with a body is not',
  async (t) => {
    const up = await resettingUpstream(t);
    const router = createRouter({ appProxyUrl: up.url, eventSourceUrl: up.url });
    const server = http.createServer(router.handler);
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    t.teardown(async () => {
      router.close();
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
    });
    const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    for (let i = 0; i < 3; i++) {
      const res = await request(`${base}/api/x`);
      t.equal(res.status, 200, `GET ${i + 1}`);
      t.equal(res.body.toString(), 'ok');
    }
    t.equal(up.answered(), 3);
    t.ok(up.connections() >= 3, 'each retry used a fresh connection');
    const post = await request(`${base}/api/x`, {
      method: 'POST',
      headers: { 'content-type': 'text/plain' },
      body: Buffer.from('not twice'),
    });
    t.equal(post.status, 502, 'a request with a body is never sent twice');
    t.equal((json(post) as { error: { code: string } }).error.code, 'UPSTREAM_UNAVAILABLE');
  },
);

void t.test(
  'tunnel client: a GET on a reused router connection that is reset is sent again; a POST with a body is not',
  async (t) => {
    const up = await resettingUpstream(t);
    const tokens = new StubRuntimeTokens();
    const callers = new StubCallers();
    const admin = { authorization: `Bearer ${callers.add('admin')}` };
    const cp = await startControlPlane({ tokens, callers });
    const tenantId = randomUUID();
    const client = startTunnelClient({ url: cp.wsUrl, token: tokens.issue(tenantId).token, upstream: up.url });
    t.teardown(async () => {
      await client.close();
      await cp.close();
    });
    await connected(client);
    await until('server sees the tunnel', 10_000, () => cp.tunnel.status(tenantId).connected);
    const base = `${cp.base}/v1/tenants/${tenantId}/runtime`;
    for (let i = 0; i < 3; i++) {
      const res = await request(`${base}/api/x`, { headers: admin });
      t.equal(res.status, 200, `GET ${i + 1}`);
      t.equal(res.body.toString(), 'ok');
    }
    t.equal(up.answered(), 3);
    const post = await request(`${base}/api/x`, {
      method: 'POST',
      headers: { ...admin, 'content-type': 'text/plain' },
      body: Buffer.from('not twice'),
    });
    t.equal(post.status, 502, 'a request with a body is never sent twice');
    t.equal((json(post) as { error: { code: string } }).error.code, 'RUNTIME_UPSTREAM_ERROR');
  },
);
