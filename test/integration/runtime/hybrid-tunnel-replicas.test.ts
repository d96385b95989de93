/**
 * A hybrid runtime's tunnel with two provisioner replicas (two apps, each with its own pool, on one
 * database, both on loopback): the runtime registered and its bootstrap token exchanged at the real
 * routes, its real tunnel client connected to replica B with the runtime key the exchange made,
 * the request router and app-proxy behind it. Replica A shows the tunnel through the directory row
 * B renews; once B stops renewing (its database connection gone, as when the process dies without
 * cleaning up) and the lease has run out, A shows the runtime disconnected and says why.
 */
import t from 'tap';
import http from 'node:http';
import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import { createTestApi, startReplica } from '../../helpers/api.ts';
import { createPool } from '../../../provisioner/db/database.ts';
import { TUNNEL_LEASE_SECONDS } from '../../../provisioner/tunnel/index.ts';
import { startTunnelClient } from '../../../runtime/agents/tunnel-client/client.ts';
import { createRouter } from '../../../runtime/agents/request-router/router.ts';
import { buildAppProxy } from '../../../runtime/agents/app-proxy/app.ts';
import { loadPublicKey } from '../../../runtime/agents/app-proxy/request-token.ts';
import { staticRuntimeInfo } from '../../../runtime/agents/app-proxy/runtime-info.ts';
import type { Runtime, RuntimeBootstrapAnswer, RuntimeRegistered } from '../../../provisioner/http/api-types.ts';

t.setTimeout(180_000);
const a = await createTestApi({ env: { PROVISIONER_PUBLIC_URL: 'https://cp.example.test' } });
const baseA = await a.app.listen({ port: 0, host: '127.0.0.1' });
const poolB = createPool(a.db.url, 5);
const b = await startReplica(a.config, { pool: poolB, url: a.db.url }, { replicaId: 'replica-b' });
const baseB = await b.app.listen({ port: 0, host: '127.0.0.1' });
/** B's pool once ended (B "died"): it ends when B's long-held connections are let go at its close. */
let poolBEnding: Promise<void> | undefined;
t.teardown(async () => {
  await b.close().catch(() => undefined);
  await (poolBEnding ?? poolB.end());
  await a.close();
});

const tenant = await a.signup();
const auth = (key: string) => ({ authorization: `Bearer ${key}` });
async function call<T>(base: string, method: string, path: string, key: string, body?: unknown) {
  const res = await fetch(base + path, {
    method,
    headers: { ...auth(key), ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
  const text = await res.text();
  return { status: res.status, headers: res.headers, body: (text ? JSON.parse(text) : null) as T };
}

/** Registers a hybrid runtime and exchanges its bootstrap token, as the install's Job does. */
async function install(name: string): Promise<{ runtime: Runtime; answer: RuntimeBootstrapAnswer }> {
  const reg = await call<RuntimeRegistered>(baseA, 'POST', `/v1/tenants/${tenant.tenantId}/runtimes`, tenant.apiKey, {
    name,
    mode: 'hybrid',
    access: 'tunnel',
    argo: 'new',
  });
  if (reg.status !== 201) throw new Error(`registration answered ${reg.status}`);
  const ex = await call<RuntimeBootstrapAnswer>(baseA, 'POST', '/v1/runtimes/bootstrap', reg.body.bootstrapToken, {});
  if (ex.status !== 200) throw new Error(`bootstrap exchange answered ${ex.status}`);
  return { runtime: reg.body.runtime, answer: ex.body };
}

/** The runtime's agents: app-proxy (its own runtime's tokens only) behind the request router, the tunnel client to `base`. */
async function agents(answer: RuntimeBootstrapAnswer, base: string) {
  const proxy = await buildAppProxy({
    tenantId: answer.tenantId,
    runtimeId: answer.runtimeId,
    publicKey: loadPublicKey(answer.publicKey),
    runtimeInfo: staticRuntimeInfo({ runtimeVersion: `hybrid ${answer.name}`, components: {} }),
  });
  const proxyUrl = await proxy.listen({ port: 0, host: '127.0.0.1' });
  const router = createRouter({ appProxyUrl: proxyUrl, eventSourceUrl: 'http://127.0.0.1:9' });
  const routerServer = http.createServer(router.handler).listen(0, '127.0.0.1');
  await once(routerServer, 'listening');
  const client = startTunnelClient({
    url: base.replace('http', 'ws') + '/v1/tunnel',
    token: answer.runtimeToken,
    upstream: `http://127.0.0.1:${(routerServer.address() as AddressInfo).port}`,
    backoff: { initialMs: 50, maxMs: 200 },
  });
  if (!client.connected) await once(client.events, 'connected');
  return {
    client,
    async close() {
      client.close();
      router.close();
      routerServer.close();
      await proxy.close();
    },
  };
}

const plant = await install('plant');
const plantAgents = await agents(plant.answer, baseB);
t.teardown(() => plantAgents.close());
// The directory row is written right after the tunnel connects; renew() waits for pending writes.
await b.services.tunnelDirectory.renew();

const view = async (base: string, name: string) =>
  (await call<Runtime>(base, 'GET', `/v1/tenants/${tenant.tenantId}/runtimes/${name}`, tenant.apiKey)).body;

t.test("replica A shows the tunnel replica B holds and renews; after B's lease ran out, disconnected", async (t) => {
  const onA = await view(baseA, 'plant');
  t.equal(onA.tunnel.connected, true, 'A shows the tunnel B holds as connected');
  t.match(
    onA.conditions.find((c) => c.type === 'TunnelConnected'),
    { status: 'True', reason: 'Connected' },
    'TunnelConnected is True on A',
  );
  // B's renewal round renews its row: one aged to 20 s is fresh again after it.
  await a.db.pool.query(
    `UPDATE hybrid_runtime_tunnels SET seen_at = now() - interval '20 seconds' WHERE runtime_id = $1`,
    [plant.runtime.id],
  );
  await b.services.tunnelDirectory.renew();
  const age = await a.db.pool.query<{ seconds: number }>(
    `SELECT extract(epoch FROM now() - seen_at)::float AS seconds FROM hybrid_runtime_tunnels WHERE runtime_id = $1`,
    [plant.runtime.id],
  );
  t.ok(
    age.rows[0]!.seconds < 10,
    `B's renewal round renewed the row it holds (age ${age.rows[0]!.seconds} s, under 10 s)`,
  );

  // B dies without cleaning up: its database connection goes, so no renewal and no delete reach
  // the table; its row is then aged past the lease instead of waiting TUNNEL_LEASE_SECONDS.
  // (pg's pool refuses every query from now on; its connections held open end when B closes.)
  poolBEnding = poolB.end();
  const aged = await a.db.pool.query(
    `UPDATE hybrid_runtime_tunnels SET seen_at = now() - make_interval(secs => $2 + 1) WHERE runtime_id = $1`,
    [plant.runtime.id, TUNNEL_LEASE_SECONDS],
  );
  t.equal(aged.rowCount, 1, "B's row of the runtime was there to age");
  const after = await view(baseA, 'plant');
  t.same(
    after.tunnel,
    { connected: false, since: null },
    `A shows the tunnel disconnected once B's row is older than the ${TUNNEL_LEASE_SECONDS} s lease`,
  );
  t.match(
    after.conditions.find((c) => c.type === 'TunnelConnected'),
    { status: 'False', reason: 'ReplicaLost', message: /stopped renewing it/ },
    'TunnelConnected is False, saying the replica holding the tunnel stopped renewing it',
  );
  const listed = (
    await call<{ items: Runtime[] }>(baseA, 'GET', `/v1/tenants/${tenant.tenantId}/runtimes`, tenant.apiKey)
  ).body;
  t.equal(listed.items.find((r) => r.name === 'plant')?.tunnel.connected, false, 'the list says the same');
});
