/**
 * Two provisioner replicas (two apps, each with its own pool, on one database, both listening on
 * loopback) and a runtime whose tunnel is connected to one of them: requests and tenant status
 * work through either replica, a reconnect to the other replica replaces the first tunnel, and a
 * replica that is gone or no longer renews its rows is not relayed to.
 */
import t from 'tap';
import http from 'node:http';
import { createHash } from 'node:crypto';
import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import { createTestApi, startReplica } from '../../helpers/api.ts';
import { connectRuntime } from '../../helpers/runtime.ts';
import { createPool } from '../../../provisioner/db/database.ts';
import { ApiClient } from '../../../provisioner/http/api-client.ts';
import { CloseCode, RELAY_HEADER } from '../../../provisioner/tunnel/index.ts';
import type { Queryable } from '../../../provisioner/db/tx.ts';
import { ageTunnelRow, dropTunnelRow, moveTunnelRow, putTunnelRow, tunnelRows } from '../../helpers/tunnels.ts';

/** The replicas holding hosted runtimes' tunnel rows (of one tenant when told), as stored. */
const tunnelReplicas = async (db: Queryable, tenantId?: string) =>
  (await tunnelRows(db, 'hosted', tenantId)).map((r) => r.replicaId);

const a = await createTestApi();
const baseA = await a.app.listen({ port: 0, host: '127.0.0.1' });
const poolB = createPool(a.db.url, 5);
const b = await startReplica(a.config, { pool: poolB, url: a.db.url }, { replicaId: 'replica-b' });
const baseB = await b.app.listen({ port: 0, host: '127.0.0.1' });
t.teardown(async () => {
  await b.close();
  await poolB.end();
  await a.close();
});

const tenant = await a.signup();
const other = await a.signup();

/** The runtime: answers with what it received (method, path, body length and hash, whether the request token came along). */
const seen: string[] = [];
const upstream = http
  .createServer((req, res) => {
    seen.push(`${req.method ?? ''} ${req.url ?? ''}`);
    const hash = createHash('sha256');
    let bytes = 0;
    req.on('data', (c: Buffer) => {
      bytes += c.length;
      hash.update(c);
    });
    req.on('end', () => {
      if (req.url?.startsWith('/big')) {
        const size = Number(new URL(req.url, 'http://x').searchParams.get('size'));
        res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': size, 'x-runtime': 'yes' });
        res.end(Buffer.alloc(size, 7));
        return;
      }
      res.writeHead(201, { 'content-type': 'application/json', 'x-runtime': 'yes' });
      res.end(
        JSON.stringify({
          method: req.method,
          path: req.url,
          bytes,
          sha256: hash.digest('hex'),
          signed: typeof req.headers['x-hrt-request-token'] === 'string',
          relayHeader: req.headers[RELAY_HEADER] ?? null,
        }),
      );
    });
  })
  .listen(0, '127.0.0.1');
await once(upstream, 'listening');
t.teardown(() => upstream.close());

const runtimeOnA = await connectRuntime(a, baseA, tenant.tenantId, upstream, 'runtime on a');
t.teardown(() => runtimeOnA.client.close());
// The directory row is written right after the tunnel connects; renew() waits for pending writes.
await a.services.tunnelDirectory.renew();

/** The runtime after it reconnected to replica B (the fourth test). */
let runtimeOnB: Awaited<ReturnType<typeof connectRuntime>> | undefined;
t.teardown(() => runtimeOnB?.client.close());

const auth = (key: string) => ({ authorization: `Bearer ${key}` });
/** The one client over a replica's socket, with the operator key. */
const operatorAt = (base: string) => new ApiClient({ baseUrl: base, token: a.operatorKey });
const tunnelOf = async (base: string, id: string) => {
  const { tunnel } = (await operatorAt(base).call('GET /v1/tenants/:id', { params: { id } })).status;
  if (!tunnel) throw new Error(`the view of tenant ${id} through ${base} shows no tunnel`);
  return tunnel;
};

t.test('a runtime connected to replica A is reached through replica B, bodies streamed both ways', async (t) => {
  const get = await fetch(`${baseB}/v1/tenants/${tenant.tenantId}/runtime/api/info?x=1`, {
    headers: auth(tenant.apiKey),
  });
  t.equal(get.status, 201);
  t.equal(get.headers.get('x-runtime'), 'yes');
  t.match(await get.json(), { method: 'GET', path: '/api/info?x=1', bytes: 0, signed: true, relayHeader: null });

  const body = Buffer.alloc(3 * 1024 * 1024 + 17, 5);
  const post = await fetch(`${baseB}/v1/tenants/${tenant.tenantId}/runtime/api/upload`, {
    method: 'POST',
    headers: { ...auth(tenant.apiKey), 'content-type': 'application/octet-stream' },
    body,
  });
  t.equal(post.status, 201);
  t.match(
    await post.json(),
    { method: 'POST', bytes: body.length, sha256: createHash('sha256').update(body).digest('hex') },
    'the whole request body arrived',
  );

  const big = await fetch(`${baseB}/v1/tenants/${tenant.tenantId}/runtime/big?size=${5 * 1024 * 1024}`, {
    headers: auth(a.operatorKey),
  });
  t.equal(big.status, 200);
  t.equal((await big.arrayBuffer()).byteLength, 5 * 1024 * 1024, 'the whole response body came back');
});

t.test('tenant status through either replica shows the tunnel, with the same since', async (t) => {
  const viaA = await tunnelOf(baseA, tenant.tenantId);
  const viaB = await tunnelOf(baseB, tenant.tenantId);
  t.equal(viaA.connected, true);
  t.same(viaB, viaA);
  t.same(await tunnelOf(baseB, other.tenantId), { connected: false, since: null });
  const list = await operatorAt(baseB).call('GET /v1/tenants', { query: { limit: 200 } });
  t.equal(list.items.find((i) => i.id === tenant.tenantId)?.status.tunnel?.connected, true, 'the list shows it too');
});

t.test('authorization is checked before relaying; a relayed request is never relayed again', async (t) => {
  const before = seen.length;
  const cross = await fetch(`${baseB}/v1/tenants/${tenant.tenantId}/runtime/api/info`, { headers: auth(other.apiKey) });
  t.equal(cross.status, 404, "another tenant's key cannot reach the runtime through B either");
  const hop = await fetch(`${baseB}/v1/tenants/${tenant.tenantId}/runtime/api/info`, {
    headers: { ...auth(tenant.apiKey), [RELAY_HEADER]: 'replica-x' },
  });
  t.equal(hop.status, 503);
  t.equal(((await hop.json()) as { error: { code: string } }).error.code, 'RUNTIME_UNREACHABLE');
  t.equal(seen.length, before, 'the runtime saw none of these');
});

t.test('the runtime reconnecting to replica B replaces its tunnel on A; A then relays to B', async (t) => {
  const replaced = new Promise<number>((resolve) => {
    runtimeOnA.client.events.once('disconnected', (code) => {
      // One runtime, one tunnel client: stop the old one as a restarted runtime would be gone.
      void runtimeOnA.client.close();
      resolve(code);
    });
  });
  runtimeOnB = await connectRuntime(a, baseB, tenant.tenantId, upstream, 'runtime on b');
  t.equal(await replaced, CloseCode.replaced, 'A closed its tunnel with the replaced close code');
  await b.services.tunnelDirectory.renew();
  t.equal(a.services.tunnel.status(tenant.tenantId).connected, false);
  t.equal(b.services.tunnel.status(tenant.tenantId).connected, true);
  const viaA = await fetch(`${baseA}/v1/tenants/${tenant.tenantId}/runtime/api/info`, { headers: auth(tenant.apiKey) });
  t.equal(viaA.status, 201);
  t.same(await tunnelOf(baseA, tenant.tenantId), await tunnelOf(baseB, tenant.tenantId));

  const rows = await tunnelReplicas(a.db.pool, tenant.tenantId);
  t.same(rows, ['replica-b'], 'one row, held by B');
});

t.test('a lost directory row is written again at the next renewal', async (t) => {
  await dropTunnelRow(a.db.pool, tenant.tenantId);
  t.equal((await tunnelOf(baseA, tenant.tenantId)).connected, false, 'without the row A cannot know');
  await b.services.tunnelDirectory.renew();
  await b.services.tunnelDirectory.renew();
  t.equal((await tunnelOf(baseA, tenant.tenantId)).connected, true);
});

t.test('a replacement whose notification was missed is found by the next renewal', async (t) => {
  const third = await a.signup();
  const runtime = await connectRuntime(a, baseA, third.tenantId, upstream, 'runtime of the third tenant');
  await a.services.tunnelDirectory.renew();
  const closed = new Promise<number>((resolve) => {
    runtime.client.events.once('disconnected', (code) => {
      void runtime.client.close();
      resolve(code);
    });
  });
  // Another replica's newer connection, written without a notification.
  await moveTunnelRow(a.db.pool, third.tenantId, 'replica-z');
  t.equal(a.services.tunnel.status(third.tenantId).connected, true, 'nothing told A yet');
  await a.services.tunnelDirectory.renew();
  t.equal(await closed, CloseCode.replaced);
  t.equal(a.services.tunnel.status(third.tenantId).connected, false);
  t.same(await tunnelReplicas(a.db.pool, third.tenantId), ['replica-z'], "the other replica's row stays");
  await dropTunnelRow(a.db.pool, third.tenantId);
});

t.test('a runtime key revoked through one replica closes its tunnel on the other at once', async (t) => {
  const fourth = await a.signup();
  const runtime = await connectRuntime(a, baseB, fourth.tenantId, upstream, 'runtime of the fourth tenant');
  t.teardown(() => runtime.client.close());
  const closed = new Promise<number>((resolve) => runtime.client.events.once('disconnected', resolve));
  const revoke = await new ApiClient({ baseUrl: baseA, token: a.adminKey }).request('DELETE /v1/keys/:id', {
    params: { id: runtime.runtimeKey.info.id },
  });
  t.equal(revoke.status, 200);
  t.equal(
    await closed,
    CloseCode.revoked,
    'B closed it with the revoked close code, without waiting for its revalidation',
  );
});

t.test('a replica that stopped renewing is not relayed to; one that cannot be reached is 503 naming it', async (t) => {
  const closed = http.createServer();
  closed.listen(0, '127.0.0.1');
  await once(closed, 'listening');
  const deadPort = (closed.address() as AddressInfo).port;
  closed.close();
  await putTunnelRow(a.db.pool, other.tenantId, {
    replicaId: 'replica-dead',
    replicaUrl: `http://127.0.0.1:${deadPort}`,
  });
  const res = await fetch(`${baseA}/v1/tenants/${other.tenantId}/runtime/api/info`, { headers: auth(other.apiKey) });
  t.equal(res.status, 503);
  const err = ((await res.json()) as { error: { code: string; message: string } }).error;
  t.equal(err.code, 'RUNTIME_UNREACHABLE');
  t.match(err.message, /replica-dead, which could not be reached/);

  await ageTunnelRow(a.db.pool, 'hosted', other.tenantId, 3600);
  t.same(await tunnelOf(baseA, other.tenantId), { connected: false, since: null }, 'an expired row does not count');
  const stale = await fetch(`${baseA}/v1/tenants/${other.tenantId}/runtime/api/info`, { headers: auth(other.apiKey) });
  t.equal(stale.status, 503);
  t.match(((await stale.json()) as { error: { message: string } }).error.message, /is not connected/);
  await a.services.tunnelDirectory.renew();
  t.same(await tunnelReplicas(a.db.pool, other.tenantId), [], 'swept');
});

t.test('metrics: tunnels per replica, connects and disconnects by close code, relays by outcome', async (t) => {
  const scrape = async (base: string) => (await fetch(`${base}/metrics`)).text();
  const ma = await scrape(baseA);
  const mb = await scrape(baseB);
  t.match(mb, /^provisioner_tunnels 1$/m, 'B holds the one tunnel');
  t.match(ma, /^provisioner_tunnels 0$/m);
  t.match(ma, /^provisioner_tunnel_relays_total\{outcome="relayed"\} [1-9]\d*$/m, 'A relayed to B');
  t.match(
    ma,
    /^provisioner_tunnel_relays_total\{outcome="unreachable"\} [1-9]\d*$/m,
    'and failed to reach the dead replica',
  );
  t.match(
    ma,
    /^provisioner_tunnel_disconnects_total\{mode="hosted",code="4001"\} [1-9]\d*$/m,
    "A's tunnel was replaced",
  );
  t.match(mb, /^provisioner_tunnel_connects_total\{mode="hosted"\} [1-9]\d*$/m);
});

t.test(
  'a replica shutting down removes its rows; the runtime is then unreachable through the others until it reconnects',
  async (t) => {
    t.same(await tunnelReplicas(a.db.pool), ['replica-b']);
    const told = once(runtimeOnB!.client.events, 'draining');
    // Returns promptly with a tunnel open: tunnels close before the HTTP server waits for its sockets.
    await b.close();
    t.match(((await told) as [string])[0], /shutting down/, 'the runtime was told to reconnect elsewhere');
    t.same(await tunnelReplicas(a.db.pool), []);
    t.same(await tunnelOf(baseA, tenant.tenantId), { connected: false, since: null });
    const res = await fetch(`${baseA}/v1/tenants/${tenant.tenantId}/runtime/api/info`, {
      headers: auth(tenant.apiKey),
    });
    t.equal(res.status, 503);
  },
);
