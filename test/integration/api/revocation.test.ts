/**
 * Revocation reaches every replica by its notice, not by a cache expiring: two replicas on one
 * database, a runtime's tunnel on replica A. Deleting the tenant through replica B closes the
 * tunnel on A; revoking a key through A ends the log streams opened with it on B. Replica B caches
 * keys for an hour, so whatever B refuses within the tests' bounds it refuses because of the notice.
 */
import t from 'tap';
import http from 'node:http';
import { once } from 'node:events';
import { ApiClient } from '../../../provisioner/http/api-client.ts';
import type { OperationLogEvents, StreamEventOf } from '../../../provisioner/api/types.ts';
import { createTestApi, startReplica } from '../../helpers/api.ts';
import { connectRuntime } from '../../helpers/runtime.ts';
import { createPool } from '../../../provisioner/db/database.ts';
import { Reconciler } from '../../../provisioner/reconciler/reconciler.ts';
import { ScriptedEngine } from '../../helpers/scripted-engine.ts';
import { until } from '../../../sandbox/until.ts';

const a = await createTestApi();
const baseA = await a.app.listen({ port: 0, host: '127.0.0.1' });
const poolB = createPool(a.db.url, 5);
/** Replica B's key cache: far longer than any wait here, so only a notice can make B refuse a key. */
const B_KEY_CACHE_MS = 60 * 60_000;
const b = await startReplica(
  { ...a.config, keyCacheMs: B_KEY_CACHE_MS },
  { pool: poolB, url: a.db.url },
  { replicaId: 'replica-b' },
);
const baseB = await b.app.listen({ port: 0, host: '127.0.0.1' });
t.teardown(async () => {
  await b.close();
  await poolB.end();
  await a.close();
});

const upstream = http.createServer((_req, res) => res.end('runtime')).listen(0, '127.0.0.1');
await once(upstream, 'listening');
t.teardown(() => upstream.close());
/** The one API client on replica A or B (listening: the tunnel's relay and the streams need sockets) with `key`. */
const onA = (key: string) => new ApiClient({ baseUrl: baseA, token: key });
const onB = (key: string) => new ApiClient({ baseUrl: baseB, token: key });

/**
 * Follows an operation's log on `client` (a replica, a key) with the typed client's stream reader:
 * `opened` once its state event arrived; `ended` with every event once the stream ends.
 */
function follow(client: ApiClient, operationId: string) {
  let opened!: () => void;
  const openedP = new Promise<void>((r) => {
    opened = r;
  });
  const ended = (async () => {
    const events: StreamEventOf<OperationLogEvents>[] = [];
    for await (const e of client.events('GET /v1/operations/:id/log', {
      params: { id: operationId },
      query: { follow: '1' },
    })) {
      events.push(e);
      if (e.event === 'state') opened();
    }
    return events;
  })();
  // A stream that fails before its state event fails the wait on `opened` too.
  void ended.catch(() => opened());
  return { opened: openedP, ended };
}

t.test('deleting a tenant through another replica closes its tunnel on the replica that holds it', async (t) => {
  const tenant = await a.signup();
  const runtime = await connectRuntime(a, baseA, tenant.tenantId, upstream);
  t.teardown(() => runtime.client.close());
  // The directory row that lets B relay to A is written right after the tunnel connects; renew()
  // waits for that write.
  await a.services.tunnelDirectory.renew();
  // the runtime's API through the tunnel is outside the route map: the client's raw
  const runtimePath = `/v1/tenants/${tenant.tenantId}/runtime/x`;
  t.equal((await onB(a.operatorKey).raw('GET', runtimePath)).status, 200, 'reachable through B before');
  let disconnected = false;
  runtime.client.events.once('disconnected', () => (disconnected = true));
  t.equal(
    (await onB(a.operatorKey).request('DELETE /v1/tenants/:id', { params: { id: tenant.tenantId } })).status,
    202,
  );
  t.ok(
    await until('the tunnel on replica A closed after the delete on B', 30_000, () => disconnected),
    'the tunnel on replica A closed after the delete on B',
  );
  await t.rejects(
    onB(a.operatorKey).raw('GET', runtimePath),
    { status: 503, code: 'RUNTIME_UNREACHABLE' },
    "the deleted tenant's runtime is not reached any more",
  );
  const keys = await a.client.call('GET /v1/keys', { query: { tenantId: tenant.tenantId, includeRevoked: true } });
  const runtimeKeys = keys.items.filter((k) => k.role === 'runtime');
  t.ok(runtimeKeys.length > 0 && runtimeKeys.every((k) => k.revokedAt !== null), 'its runtime keys are revoked');
});

t.test('revoking a key through one replica ends its log streams on another', async (t) => {
  const tenant = await a.signup();
  // No reconciler runs here: the create operation stays queued, so the stream only ends when something ends it.
  const stream = follow(onB(tenant.apiKey), tenant.operationId);
  await stream.opened;
  const keys = await a.client.call('GET /v1/keys', { query: { tenantId: tenant.tenantId } });
  const keyId = keys.items.find((k) => k.role === 'tenant')!.id;
  let events: StreamEventOf<OperationLogEvents>[] | undefined;
  void stream.ended.then((e) => (events = e));
  t.equal((await a.client.request('DELETE /v1/keys/:id', { params: { id: keyId } })).status, 200);
  await until('the stream on replica B ended after the revocation on A', 30_000, () => events !== undefined);
  t.match(events?.at(-1), { event: 'error', data: { code: 'INVALID_API_KEY' } }, 'the stream says why it ended');
});

t.test(
  "the destroy that completes a delete revokes the tenant's keys with the notice: another replica refuses them at once",
  async (t) => {
    const kubeconfig =
      'apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: "https://203.0.113.10:6443"}}]\n' +
      'users: [{name: u, user: {token: root-token-0123456789}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n';
    t.equal(
      (
        await a.as(a.operatorKey).request('POST /v1/clusters', {
          body: { name: 'revoke-root', region: 'eu', capacity: 10, kubeconfig, force: true },
        })
      ).status,
      201,
    );
    // TEST DOUBLE engine: every call succeeds at once (the reconciler, database and notices are real).
    const reconciler = new Reconciler({
      pool: a.db.pool,
      engine: new ScriptedEngine(),
      box: a.services.box,
      pollMs: 100,
      logFlushMs: 10,
    });
    await reconciler.start();
    t.teardown(() => reconciler.stop({ graceMs: 0 }));
    const tenant = await a.signup();
    const params = { id: tenant.tenantId };
    const phase = async () => (await onB(a.operatorKey).call('GET /v1/tenants/:id', { params })).status.phase;
    await until('the tenant Ready on replica B', 30_000, async () => (await phase()) === 'Ready', 50);
    // Replica B has the tenant's key in its cache (for an hour: B_KEY_CACHE_MS).
    t.equal((await onB(tenant.apiKey).request('GET /v1/tenants/:id', { params })).status, 200);
    const del = await onA(tenant.apiKey).request('DELETE /v1/tenants/:id', { params });
    t.equal(del.status, 202);
    await until('the tenant Deleted on replica B', 30_000, async () => (await phase()) === 'Deleted', 25);
    // A wait, not a claim about speed: its bound is far below B's cache, so a refusal is the notice's.
    t.ok(
      await until("replica B refusing the deleted tenant's key", 60_000, async () => {
        const res = await onB(tenant.apiKey).request('GET /v1/tenants/:id', { params });
        return res.status === 401;
      }),
      "replica B refused the deleted tenant's key, which its cache alone would keep for an hour",
    );
  },
);
