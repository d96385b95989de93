/**
 * A hybrid runtime's tunnel with two provisioner replicas (two apps, each with its own pool, on one
 * database, both on loopback): the runtime registered and its bootstrap token exchanged at the real
 * routes, its real tunnel client connected to replica B with the runtime key the exchange made,
 * the real request router and app-proxy behind it (the app-proxy with the runtime's RUNTIME_ID).
 * Requests through `/v1/tenants/:id/runtimes/<name>/proxy/...` reach that runtime — relayed from A
 * to B, which holds its tunnel — and not the tenant's hosted runtime (connected to A, its own
 * app-proxy); the runtime reconnecting to the other replica replaces its tunnel there (4001) and
 * requests follow it; a runtime awaiting install, removed, unknown or not connected is refused. Replica A
 * shows the tunnel through the directory row B renews; once B stops renewing (its database
 * connection gone, as when the process dies without cleaning up) and the lease has run out, A
 * shows the runtime disconnected and says why. (Runs last: B is gone after it.)
 */
import t from 'tap';
import http from 'node:http';
import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import { createTestApi, startReplica } from '../../helpers/api.ts';
import { createPool } from '../../../provisioner/db/database.ts';
import { CloseCode, generateRequestSigningKeys, TUNNEL_LEASE_SECONDS } from '../../../provisioner/tunnel/index.ts';
import { SWEEP_AFTER_SECONDS } from '../../../provisioner/store/tunnels.ts';
import { startTunnelClient } from '../../../runtime/agents/tunnel-client/client.ts';
import { createRouter } from '../../../runtime/agents/request-router/router.ts';
import { buildAppProxy } from '../../../runtime/agents/app-proxy/app.ts';
import { loadPublicKey } from '../../../runtime/agents/app-proxy/request-token.ts';
import { staticRuntimeInfo } from '../../../runtime/agents/app-proxy/runtime-info.ts';
import type { Runtime, RuntimeBootstrapAnswer } from '../../../provisioner/api/types.ts';
import { ApiClient } from '../../../provisioner/http/api-client.ts';
import { ageTunnelRow, tunnelRows } from '../../helpers/tunnels.ts';
import { auditRows } from '../../helpers/audit.ts';

t.setTimeout(180_000);
// Every replica signs with the same key (docs/tunnel.md): the runtime holds one public key.
const a = await createTestApi({
  env: {
    PROVISIONER_PUBLIC_URL: 'https://cp.example.test',
    PROVISIONER_REQUEST_SIGNING_KEY: generateRequestSigningKeys().privateKeyPem,
  },
});
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
/** The one client over a replica's socket, with a key (the tenant's unless given). */
const at = (base: string, key = tenant.apiKey) => new ApiClient({ baseUrl: base, token: key });
/** A request to the runtime's API through the tunnel (outside the route map): its status, headers and JSON body. */
async function call<T>(base: string, method: string, path: string, key: string, body?: unknown) {
  const res = await fetch(base + path, {
    method,
    headers: { ...auth(key), ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
  const text = await res.text();
  return { status: res.status, headers: res.headers, body: (text ? JSON.parse(text) : null) as T };
}

/** Registers a hybrid runtime (tunnel, a new Argo CD) through A; a refusal is thrown. */
const register = (name: string) =>
  at(baseA).call('POST /v1/tenants/:id/runtimes', {
    params: { id: tenant.tenantId },
    body: { name, mode: 'hybrid', access: 'tunnel', argo: 'new' },
  });

/** Registers a hybrid runtime and exchanges its bootstrap token, as the install's Job does. */
async function install(name: string): Promise<{ runtime: Runtime; answer: RuntimeBootstrapAnswer }> {
  const reg = await register(name);
  const answer = await at(baseA, reg.bootstrapToken).call('POST /v1/runtimes/bootstrap', { body: {} });
  return { runtime: reg.runtime, answer };
}

/** The runtime's agents: app-proxy (its own runtime's tokens only) behind the request router, the tunnel client to `base`. */
async function agents(
  answer: Pick<RuntimeBootstrapAnswer, 'tenantId' | 'publicKey' | 'runtimeToken' | 'name'> & { runtimeId?: string },
  base: string,
) {
  const proxy = await buildAppProxy({
    tenantId: answer.tenantId,
    runtimeId: answer.runtimeId,
    publicKey: loadPublicKey(answer.publicKey),
    runtimeInfo: staticRuntimeInfo({ runtimeVersion: answer.name, components: {} }),
    // What the runtime received: the caller's credentials must not be among it.
    routes: async (api) => {
      api.get('/api/echo', async (request) => ({
        authorization: request.headers.authorization ?? null,
        cookie: request.headers.cookie ?? null,
        signed: typeof request.headers['x-hrt-request-token'] === 'string',
      }));
      api.get('/api/moved', async (_request, reply) => reply.code(302).header('location', '/api/runtime').send());
    },
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
/** The plant runtime's agents now running (a reconnect elsewhere replaces them). */
let plantAgents = await agents(plant.answer, baseB);
t.teardown(() => plantAgents.close());
// The tenant's hosted runtime: a runtime key without a runtime, its own app-proxy (no RUNTIME_ID), connected to A.
const hostedKey = (
  await at(baseA, a.adminKey).call('POST /v1/keys', {
    body: { role: 'runtime', name: 'hosted agents', tenantId: tenant.tenantId },
  })
).key;
const hostedAgents = await agents(
  { tenantId: tenant.tenantId, publicKey: plant.answer.publicKey, runtimeToken: hostedKey, name: 'hosted' },
  baseA,
);
t.teardown(() => hostedAgents.close());
// The directory rows are written right after the tunnels connect; renew() waits for pending writes.
await b.services.tunnelDirectory.renew();
await a.services.tunnelDirectory.renew();

type ErrorBody = { error: { code: string; message: string } };
const proxy = <T>(base: string, name: string, path: string, method = 'GET', key = tenant.apiKey) =>
  call<T>(base, method, `/v1/tenants/${tenant.tenantId}/runtimes/${name}/proxy${path}`, key);

t.test(
  'a request by runtime name reaches that runtime through its tunnel, relayed to the replica holding it',
  async (t) => {
    t.equal(
      a.services.tunnel.runtimeStatus(plant.runtime.id).connected,
      false,
      'precondition: A does not hold the tunnel',
    );
    t.equal(b.services.tunnel.runtimeStatus(plant.runtime.id).connected, true, 'precondition: B holds it');
    const viaA = await proxy<{ runtimeVersion: string }>(baseA, 'plant', '/api/runtime');
    t.equal(
      viaA.status,
      200,
      "A relays to B, B forwards through the runtime's tunnel, its app-proxy accepts the token",
    );
    t.equal(viaA.body.runtimeVersion, 'plant', "the answer is the hybrid runtime's app-proxy's, not the hosted one's");
    const viaB = await proxy<{ runtimeVersion: string }>(baseB, 'plant', '/api/runtime');
    t.same([viaB.status, viaB.body.runtimeVersion], [200, 'plant'], 'B serves it through its own tunnel');
    const hosted = await proxy<{ runtimeVersion: string }>(baseB, 'hosted', '/api/runtime');
    t.same(
      [hosted.status, hosted.body.runtimeVersion],
      [200, 'hosted'],
      "name 'hosted' reaches the tenant's hosted runtime (relayed from B to A)",
    );
    const old = await call<{ runtimeVersion: string }>(
      baseA,
      'GET',
      `/v1/tenants/${tenant.tenantId}/runtime/api/runtime`,
      tenant.apiKey,
    );
    t.same([old.status, old.body.runtimeVersion], [200, 'hosted'], 'the hosted route still reaches the hosted runtime');
    const metrics = await (await fetch(`${baseB}/metrics`)).text();
    t.match(
      metrics,
      /^provisioner_tunnel_connects_total\{mode="hybrid"\} [1-9]\d*$/m,
      "B counts the hybrid runtime's tunnel",
    );
    t.match(metrics, /^provisioner_tunnels [1-9]\d*$/m, 'and holds it');
  },
);

t.test("the caller's credentials stay behind; a Location is put under the runtime's proxy route", async (t) => {
  const res = await fetch(`${baseA}/v1/tenants/${tenant.tenantId}/runtimes/plant/proxy/api/echo`, {
    headers: { ...auth(tenant.apiKey), cookie: 'session=caller' },
  });
  t.same(
    await res.json(),
    { authorization: null, cookie: null, signed: true },
    'the runtime got no Authorization and no Cookie, and the signed request token',
  );
  const moved = await fetch(`${baseA}/v1/tenants/${tenant.tenantId}/runtimes/plant/proxy/api/moved`, {
    headers: auth(tenant.apiKey),
    redirect: 'manual',
  });
  t.equal(moved.status, 302);
  t.equal(
    moved.headers.get('location'),
    `/v1/tenants/${tenant.tenantId}/runtimes/plant/proxy/api/runtime`,
    "the runtime's Location is under /v1/tenants/:id/runtimes/plant/proxy",
  );
});

t.test('an action on a hybrid runtime is audited with its name by the replica that serves it', async (t) => {
  const res = await proxy<ErrorBody>(baseA, 'plant', '/api/applications/apps/guestbook/refresh', 'POST');
  // This app-proxy has no Argo objects to act on: its router answers 404; the attempt is audited all the same.
  t.equal(res.status, 404, "the runtime's own answer comes back");
  const rows = (await auditRows(a.db.pool, { targetId: tenant.tenantId })).filter((r) => r.after?.runtime === 'plant');
  t.match(
    rows.at(-1),
    { actorRole: 'tenant', after: { runtime: 'plant', name: 'guestbook', status: 404 } },
    "the audit row names the runtime, the Application and the runtime's answer",
  );
});

t.test('a runtime awaiting install, removed, unknown or not connected is refused, naming why', async (t) => {
  const pending = await register('pending');
  t.equal(pending.runtime.state, 'awaiting-install', 'registered, awaiting its install');
  const awaiting = await proxy<ErrorBody>(baseA, 'pending', '/api/runtime');
  t.match(
    [awaiting.status, awaiting.body.error],
    [409, { code: 'RUNTIME_NOT_INSTALLED', message: /'pending' is not installed yet/ }],
    'awaiting install: 409 RUNTIME_NOT_INSTALLED',
  );

  await install('idle');
  const unreachable = await proxy<ErrorBody>(baseA, 'idle', '/api/runtime');
  t.match(
    [unreachable.status, unreachable.body.error],
    [503, { code: 'RUNTIME_UNREACHABLE', message: /'idle' is not connected/ }],
    'installed, no tunnel anywhere: 503 RUNTIME_UNREACHABLE',
  );
  t.ok(Number(unreachable.headers.get('retry-after')) > 0, 'with Retry-After');

  const idle = await at(baseA).call('DELETE /v1/tenants/:id/runtimes/:name', {
    params: { id: tenant.tenantId, name: 'idle' },
  });
  t.equal(idle.runtime.state, 'removed', 'the idle runtime is removed');
  const removed = await proxy<ErrorBody>(baseA, 'idle', '/api/runtime');
  t.match(
    [removed.status, removed.body.error],
    [404, { code: 'RUNTIME_NOT_FOUND', message: /idle/ }],
    'removed: 404 RUNTIME_NOT_FOUND, as GET /v1/tenants/:id/runtimes/idle answers',
  );
  const unknown = await proxy<ErrorBody>(baseA, 'nowhere', '/api/runtime');
  t.match(
    [unknown.status, unknown.body.error],
    [404, { code: 'RUNTIME_NOT_FOUND', message: /nowhere/ }],
    'unknown name: 404 naming it',
  );

  const other = await a.signup();
  const foreign = await proxy<ErrorBody>(baseA, 'plant', '/api/runtime', 'GET', other.apiKey);
  t.match(
    [foreign.status, foreign.body.error],
    [404, { code: 'TENANT_NOT_FOUND' }],
    "another tenant's key: 404, as on every tenant route",
  );
  const runtimeKey = await proxy<ErrorBody>(baseA, 'plant', '/api/runtime', 'GET', plant.answer.runtimeToken);
  t.equal(runtimeKey.status, 403, "the runtime's own key cannot call the route");
});

const view = (base: string, name: string) =>
  at(base).call('GET /v1/tenants/:id/runtimes/:name', { params: { id: tenant.tenantId, name } });

/**
 * The plant runtime restarted with its tunnel client dialling `base`: the new connection's row
 * makes the replica holding the old one close it as replaced; the old agents then stop, as a
 * restarted runtime's would be gone. Resolves with the old connection's close code.
 */
async function restartPlantOn(base: string, label: string): Promise<number> {
  const old = plantAgents;
  const replaced = new Promise<number>((resolve) =>
    old.client.events.once('disconnected', (code: number) => {
      void old.close();
      resolve(code);
    }),
  );
  plantAgents = await agents({ ...plant.answer, name: label }, base);
  return replaced;
}

t.test(
  'a hybrid runtime reconnecting to the other replica replaces its tunnel there; requests follow it',
  async (t) => {
    t.equal(
      await restartPlantOn(baseA, 'plant on a'),
      CloseCode.replaced,
      'B closed its tunnel with the replaced close code',
    );
    await a.services.tunnelDirectory.renew();
    t.equal(b.services.tunnel.runtimeStatus(plant.runtime.id).connected, false, 'B no longer holds it');
    t.equal(a.services.tunnel.runtimeStatus(plant.runtime.id).connected, true, 'A holds it');
    const viaB = await proxy<{ runtimeVersion: string }>(baseB, 'plant', '/api/runtime');
    t.same([viaB.status, viaB.body.runtimeVersion], [200, 'plant on a'], 'B relays to A, reaching the new connection');
    const rows = await tunnelRows(a.db.pool, 'hybrid', plant.runtime.id);
    t.same(
      rows.map((r) => r.replicaId),
      [a.services.tunnelDirectory.replicaId],
      'one row, held by A',
    );

    // And back to B for what follows.
    t.equal(
      await restartPlantOn(baseB, 'plant'),
      CloseCode.replaced,
      'A closed its tunnel when the runtime went back to B',
    );
    await b.services.tunnelDirectory.renew();
    const viaA = await proxy<{ runtimeVersion: string }>(baseA, 'plant', '/api/runtime');
    t.same([viaA.status, viaA.body.runtimeVersion], [200, 'plant'], 'A relays to B again');
  },
);

t.test("replica A shows the tunnel replica B holds and renews; after B's lease ran out, disconnected", async (t) => {
  const onA = await view(baseA, 'plant');
  t.equal(onA.tunnel.connected, true, 'A shows the tunnel B holds as connected');
  t.match(
    onA.conditions.find((c) => c.type === 'TunnelConnected'),
    { status: 'True', reason: 'Connected' },
    'TunnelConnected is True on A',
  );
  // B's renewal round renews its row: one aged to 20 s is fresh again after it.
  await ageTunnelRow(a.db.pool, 'hybrid', plant.runtime.id, 20);
  await b.services.tunnelDirectory.renew();
  const [row] = await tunnelRows(a.db.pool, 'hybrid', plant.runtime.id);
  t.ok(
    row!.seenSecondsAgo < 10,
    `B's renewal round renewed the row it holds (age ${row!.seenSecondsAgo} s, under 10 s)`,
  );

  // B dies without cleaning up: its database connection goes, so no renewal and no delete reach
  // the table; its row is then aged past the lease instead of waiting TUNNEL_LEASE_SECONDS.
  // (pg's pool refuses every query from now on; its connections held open end when B closes.)
  poolBEnding = poolB.end();
  const aged = await ageTunnelRow(a.db.pool, 'hybrid', plant.runtime.id, TUNNEL_LEASE_SECONDS + 1);
  t.equal(aged, 1, "B's row of the runtime was there to age");
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
  const listed = await at(baseA).call('GET /v1/tenants/:id/runtimes', { params: { id: tenant.tenantId } });
  t.equal(listed.items.find((r) => r.name === 'plant')?.tunnel.connected, false, 'the list says the same');
  const relayed = await proxy<ErrorBody>(baseA, 'plant', '/api/runtime');
  t.match(
    [relayed.status, relayed.body.error],
    [503, { code: 'RUNTIME_UNREACHABLE', message: /'plant' is not connected/ }],
    'A does not relay to B once its row is stale: 503 RUNTIME_UNREACHABLE naming the runtime',
  );

  // Long past the lease, any replica's renewal round sweeps the row.
  await ageTunnelRow(a.db.pool, 'hybrid', plant.runtime.id, SWEEP_AFTER_SECONDS + 1);
  await a.services.tunnelDirectory.renew();
  t.equal(
    (await tunnelRows(a.db.pool, 'hybrid', plant.runtime.id)).length,
    0,
    `A's renewal round swept the row not renewed for more than ${SWEEP_AFTER_SECONDS} s`,
  );
  t.match(
    (await view(baseA, 'plant')).conditions.find((c) => c.type === 'TunnelConnected'),
    { status: 'False', reason: 'Disconnected' },
    'with the row swept, TunnelConnected is False, Disconnected',
  );
});
