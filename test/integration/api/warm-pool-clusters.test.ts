/**
 * The warm pool per root cluster, and the runtime key exchanged at the claim (docs/operations.md
 * "Warm pool"). Two root clusters in two regions and PROVISIONER_WARM_POOL=free=2: the pool keeps
 * two entries on each, each pinned to its cluster when added and provisioned there; cordoning one
 * recycles its entries while the other keeps its two. A signup naming a region claims an entry on
 * that region's cluster; one naming none, on the least loaded cluster. The claim mints the tenant's
 * runtime key (a new key, not the entry's pool credential) in its transaction; the `bind` run
 * installs it; both keys authenticate until that run succeeds, then the pool credential is revoked
 * (audited; no key in the audit rows); a failing bind keeps both working until its retry succeeds.
 * A runtime's tunnel client reading the key from a file (the mounted Secret) moves to the new key
 * when the file changes — before the revocation, with no drop, and after it, at once rather than
 * after its slow retry. Real Postgres, the real app, reconciler and tunnel; the engine is the
 * ScriptedEngine TEST DOUBLE.
 */
import t from 'tap';
import http from 'node:http';
import { once } from 'node:events';
import { mkdtempSync, rmSync, writeFileSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ScriptedEngine } from '../../helpers/scripted-engine.ts';
import { Reconciler } from '../../../provisioner/reconciler/reconciler.ts';
import { EngineError } from '../../../provisioner/engine/engine.ts';
import { runtimeTokenAad } from '../../../provisioner/reconciler/runtime-token.ts';
import { hashKey } from '../../../provisioner/store/key-format.ts';
import { CLAIM_RUNTIME_KEY_NAME } from '../../../provisioner/store/pool.ts';
import { POOL_CREDENTIAL_NAME } from '../../../provisioner/store/leases.ts';
import { startTunnelClient, type TunnelClient } from '../../../runtime/agents/tunnel-client/client.ts';
import { catalog } from '../../../runtime/catalog.ts';
import { createTestApi } from '../../helpers/api.ts';
import { until } from '../../../sandbox/until.ts';
import { auditCount, auditRows } from '../../helpers/audit.ts';
import { storedKeys } from '../../helpers/keys.ts';
import { tenantLogLines } from '../../helpers/operations.ts';
import { findTenants, tenantRecord } from '../../helpers/tenants.ts';

const KUBECONFIG =
  'apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: "https://203.0.113.10:6443"}}]\n' +
  'users: [{name: u, user: {token: root-cluster-token-0123456789}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n';
const VERSION = catalog.defaultVersion();

const api = await createTestApi({
  env: { PROVISIONER_WARM_POOL: 'free=2', PROVISIONER_WARM_POOL_PARALLELISM: '4' },
});
t.teardown(() => api.close());
const base = await api.app.listen({ port: 0, host: '127.0.0.1' });

/** Binds of these organizations wait for their gate; those in `failing` fail that many times first. */
const gates = new Map<string, { promise: Promise<void>; open: () => void }>();
const failing = new Map<string, number>();
function gate(organization: string): () => void {
  let open!: () => void;
  const promise = new Promise<void>((r) => (open = r));
  gates.set(organization, { promise, open });
  return open;
}
// TEST DOUBLE engine: every run succeeds at once, but for the gated and failing organizations.
const engine = new ScriptedEngine({
  script: (c) => {
    if (c.kind !== 'up') return undefined;
    const left = failing.get(c.input.organization) ?? 0;
    if (left > 0) {
      failing.set(c.input.organization, left - 1);
      return { fail: new EngineError('ProgramFailed', 'scripted bind failure') };
    }
    const g = gates.get(c.input.organization);
    return { outputs: { runtimeVersion: c.input.runtimeVersion }, ...(g ? { gate: g.promise } : {}) };
  },
});
const reconciler = new Reconciler({
  pool: api.db.pool,
  engine,
  box: api.services.box,
  pollMs: 100,
  logFlushMs: 10,
  workers: 8,
  backoff: { baseMs: 50, capMs: 200 },
});
await reconciler.start();
t.teardown(() => reconciler.stop({ graceMs: 0 }));

for (const [name, region, capacity] of [
  ['root-eu', 'eu', 10],
  ['root-us', 'us', 200],
] as const) {
  await api.as(api.operatorKey).call('POST /v1/clusters', {
    body: { name, region, capacity, kubeconfig: KUBECONFIG, force: true },
  });
}

// A router for the runtimes' tunnels: nothing is forwarded through it here.
const router = http.createServer((_req, res) => res.writeHead(204).end()).listen(0, '127.0.0.1');
await once(router, 'listening');
const dir = mkdtempSync(join(tmpdir(), 'warm-pool-keys-'));
const clients: TunnelClient[] = [];
t.teardown(async () => {
  for (const c of clients) await c.close();
  router.close();
  rmSync(dir, { recursive: true, force: true });
});

interface Entry {
  id: string;
  phase: string;
  cluster: string | null;
  pool_credential_id: string | null;
}
const entries = async () =>
  (await findTenants(api.db.pool, { pooled: true, deleted: false })).map((r): Entry => ({
    id: r.id,
    phase: r.phase,
    cluster: r.cluster_name,
    pool_credential_id: r.pool_credential_id,
  }));
const perCluster = (list: Entry[]) => {
  const out: Record<string, number> = {};
  for (const e of list) out[e.cluster ?? '(none)'] = (out[e.cluster ?? '(none)'] ?? 0) + 1;
  return out;
};
const fullPool = (want: Record<string, number>) =>
  until(
    `Ready entries ${JSON.stringify(want)}`,
    30_000,
    async () => {
      const ready = (await entries()).filter((e) => e.phase === 'Ready');
      const have = perCluster(ready);
      return (
        Object.entries(want).every(([c, n]) => have[c] === n) &&
        ready.length === Object.values(want).reduce((a, b) => a + b, 0)
      );
    },
    50,
  );
/** The clear runtime key stored (sealed) on a tenant row. */
async function storedKey(tenantId: string): Promise<string> {
  const { runtime_token_enc: sealed } = await tenantRecord(api.db.pool, tenantId);
  if (!sealed) throw new Error(`precondition: tenant ${tenantId} holds a runtime token`);
  return api.services.box.decrypt(sealed, runtimeTokenAad(tenantId)).toString('utf8');
}
const whoami = async (key: string) => {
  const res = await api.as(key).request('GET /v1/whoami');
  return { status: res.status, body: res.ok ? res.body : null };
};
const clusterOf = async (tenantId: string) => (await tenantRecord(api.db.pool, tenantId)).cluster_name ?? undefined;
const operationState = async (id: string) =>
  (await api.client.call('GET /v1/operations/:id', { params: { id } })).state;

/**
 * A runtime's tunnel client reading its key from a file, as the agents read the mounted Secret
 * (RUNTIME_TOKEN_FILE), checking it every 50 ms; its events recorded in order.
 */
const runtimes = new Map<string, Promise<Runtime>>();
interface Runtime {
  client: TunnelClient;
  seen: string[];
  write: (key: string) => void;
}
/** The runtime of an entry (one per entry: a second would take its tunnel over). */
function runtimeOf(id: string, key: string): Promise<Runtime> {
  let r = runtimes.get(id);
  if (!r) runtimes.set(id, (r = startRuntime(id, key)));
  return r;
}
async function startRuntime(id: string, key: string): Promise<Runtime> {
  const file = join(dir, id);
  writeFileSync(file, key);
  const seen: string[] = [];
  const client = startTunnelClient({
    url: base.replace('http', 'ws') + '/v1/tunnel',
    token: () => readFileSync(file, 'utf8').trim(),
    tokenCheckMs: 50,
    upstream: `http://127.0.0.1:${(router.address() as { port: number }).port}`,
    backoff: { initialMs: 50, maxMs: 200 },
  });
  clients.push(client);
  for (const e of ['connected', 'disconnected', 'rekeying', 'rejected'] as const)
    client.events.on(e, () => seen.push(e));
  if (!client.connected) await once(client.events, 'connected');
  return { client, seen, write: (k: string) => writeFileSync(file, k) };
}
const tunnelConnected = async (tenantId: string) =>
  (await api.client.call('GET /v1/tenants/:id', { params: { id: tenantId } })).status.tunnel?.connected;

t.test('the pool keeps its size on each root cluster, each entry pinned to its cluster', async (t) => {
  const round = await api.services.warmPool.refill();
  t.same(round, { added: 4, recycled: 0 }, 'two entries per cluster added in one round (parallelism 4)');
  const added = await auditRows(api.db.pool, { action: 'warm_pool.add' });
  t.same(
    added.map((r) => r.after?.cluster).sort(),
    ['root-eu', 'root-eu', 'root-us', 'root-us'],
    'each added for its cluster (audited)',
  );
  t.same(perCluster(await entries()), { 'root-eu': 2, 'root-us': 2 }, 'each row pinned to its cluster when added');
  await fullPool({ 'root-eu': 2, 'root-us': 2 });
  const list = await entries();
  for (const e of list) {
    const runs = engine.callsFor(e.id).filter((c) => c.kind === 'up');
    t.ok(
      runs.length > 0 && runs.every((c) => c.input.clusterName === e.cluster),
      `entry ${e.id.slice(0, 8)} provisioned on its pinned cluster ${e.cluster}`,
    );
  }
  t.same((await api.services.warmPool.refill()).added, 0, 'full: nothing added');

  const creds = [];
  for (const e of await entries())
    if (e.pool_credential_id) creds.push(...(await storedKeys(api.db.pool, { id: e.pool_credential_id })));
  t.equal(creds.length, 4, 'each entry has a pool credential');
  t.ok(
    creds.every((k) => k.role === 'runtime' && k.name === POOL_CREDENTIAL_NAME && k.revoked_at === null),
    'a runtime key named as the pool credential, live',
  );

  const metrics = (await api.request('GET', '/metrics', { key: null })).body;
  for (const c of ['root-eu', 'root-us'])
    t.match(
      metrics,
      new RegExp(
        `provisioner_warm_pool_entries\\{plan="free",version="${VERSION.replaceAll('.', '\\.')}",state="ready",cluster="${c}"\\} 2`,
      ),
      `/metrics: two Ready entries on ${c}`,
    );
  const capacity = await api.as(api.operatorKey).call('GET /v1/capacity');
  const free = capacity.plans.find((p) => p.plan === 'free')!.warmPool;
  t.same(
    { size: free.size, target: free.target, ready: free.ready },
    { size: 2, target: 4, ready: 4 },
    'GET /v1/capacity: 2 per cluster, 4 in all, 4 ready',
  );
  t.same(
    free.clusters.map((c) => [c.cluster, c.ready]),
    [
      ['root-eu', 2],
      ['root-us', 2],
    ],
    'and per cluster',
  );
});

t.test('cordoning a cluster recycles its entries; the other keeps its two', async (t) => {
  const before = await entries();
  const onUs = before.filter((e) => e.cluster === 'root-us').map((e) => e.id);
  const rootUs = { params: { name: 'root-us' } };
  t.equal((await api.as(api.operatorKey).request('POST /v1/clusters/:name/cordon', rootUs)).status, 200);
  t.same(await api.services.warmPool.refill(), { added: 0, recycled: 2 }, "root-us's two entries recycled, none added");
  t.same(perCluster(await entries()), { 'root-eu': 2 }, 'root-eu keeps its two');
  const recycled = await auditRows(api.db.pool, { action: 'warm_pool.recycle', targetId: onUs });
  t.same(
    recycled.map((r) => r.after?.cluster),
    ['root-us', 'root-us'],
    'audited as recycled from root-us',
  );
  const deleted = await findTenants(api.db.pool, { ids: onUs });
  t.ok(deleted.length === 2 && deleted.every((r) => r.deleted), 'deleted (their stacks destroyed)');
  t.same((await api.services.warmPool.refill()).added, 0, 'no entry added on the cordoned cluster');

  t.equal((await api.as(api.operatorKey).request('POST /v1/clusters/:name/uncordon', rootUs)).status, 200);
  t.same((await api.services.warmPool.refill()).added, 2, 'uncordoned: its two entries come back');
  await fullPool({ 'root-eu': 2, 'root-us': 2 });
});

t.test('a signup with a region claims on its cluster; without one, on the least loaded cluster', async (t) => {
  const us = await api.signup({ plan: 'free', region: 'us' });
  t.equal(us.body.warm, true, 'region us: served warm');
  t.equal(await clusterOf(us.tenantId), 'root-us', 'on root-us');
  // root-us holds 2 of 200, root-eu 2 of 10: placement's choice is root-us.
  const any = await api.signup({ plan: 'free' });
  t.equal(any.body.warm, true, 'no region: served warm');
  t.equal(await clusterOf(any.tenantId), 'root-us', 'on the least loaded cluster, root-us');
  const eu = await api.signup({ plan: 'free', region: 'eu' });
  t.equal(eu.body.warm, true, 'region eu: served warm');
  t.equal(await clusterOf(eu.tenantId), 'root-eu', 'on root-eu');
  t.equal(await auditCount(api.db.pool, { action: 'warm_pool.claim' }), 3, 'each claim audited');
  const none = await api.signup({ plan: 'free', region: 'us' });
  t.notOk(none.body.warm, "root-us's entries taken: a region us signup is cold (the entry on root-eu is not in us)");
  for (const s of [us, any, eu])
    await until(`the bind of ${s.tenantId}`, 10_000, async () => (await operationState(s.operationId)) === 'succeeded');
  await api.services.warmPool.refill();
  await fullPool({ 'root-eu': 2, 'root-us': 2 });
});

t.test(
  'the claim mints a new runtime key; the pool credential authenticates until the bind that installed the new key succeeds',
  async (t) => {
    // The runtimes of root-eu's entries connected with their pool credentials, read from files.
    const euEntries = (await entries()).filter((e) => e.cluster === 'root-eu');
    const creds = new Map<string, string>();
    for (const e of euEntries) {
      creds.set(e.id, await storedKey(e.id));
      await runtimeOf(e.id, creds.get(e.id)!);
    }
    const release = gate('keyed-org');
    const signup = await api.signup({ organization: 'keyed-org', plan: 'free', region: 'eu' });
    t.equal(signup.body.warm, true, 'served warm');
    const id = signup.tenantId;
    const credential = creds.get(id);
    if (!credential) throw new Error('the claimed entry is not one of root-eu’s');
    const runtime = await runtimes.get(id)!;

    const key = await storedKey(id);
    t.not(key, credential, "the tenant's runtime key is a new one, not the entry's credential");
    const [row] = await storedKeys(api.db.pool, { keyHash: hashKey(key) });
    t.same(
      row && { name: row.name, role: row.role, revoked: row.revoked_at !== null },
      { name: CLAIM_RUNTIME_KEY_NAME, role: 'runtime', revoked: false },
      'made in the claim: a runtime key of the tenant (its hash in api_keys)',
    );
    const bind = await until('the bind run started', 10_000, async () =>
      engine.callsFor(id).find((c) => c.kind === 'up' && c.input.organization === 'keyed-org'),
    );
    t.equal(bind.input.runtimeToken, key, 'the bind run installs the new key into the runtime');

    t.match(
      await whoami(credential),
      { status: 200, body: { role: 'runtime', tenantId: id } },
      'while the bind runs, the pool credential still authenticates',
    );
    t.match(await whoami(key), { status: 200, body: { role: 'runtime', tenantId: id } }, 'and so does the new key');

    // The kubelet updates the mounted Secret's file once the bind wrote the Secret: the runtime's
    // tunnel client moves to the new key, beside its open connection.
    runtime.write(key);
    await until('the tunnel client dialled with the new key', 10_000, async () =>
      runtime.seen.includes('rekeying') && runtime.seen.at(-1) === 'connected' ? true : undefined,
    );
    t.notOk(runtime.seen.includes('disconnected'), 'without losing its tunnel');

    release();
    await until('the bind succeeded', 10_000, async () => (await operationState(signup.operationId)) === 'succeeded');
    await until('the pool credential refused', 10_000, async () => (await whoami(credential)).status === 401);
    t.match(await whoami(key), { status: 200, body: { tenantId: id } }, "the tenant's runtime key still authenticates");
    t.equal(
      (await tenantRecord(api.db.pool, id)).pool_credential_id,
      null,
      'the tenant holds no pool credential any more',
    );
    t.ok(await tunnelConnected(id), "the tenant's tunnel is connected (with the new key)");
    t.notOk(runtime.seen.includes('disconnected'), 'the revocation did not drop it');
    t.ok(runtime.client.connected, 'the tunnel client is connected');

    const audit = await auditRows(api.db.pool, { targetId: id, actionPrefix: 'warm_pool.' });
    const claim = audit.find((r) => r.action === 'warm_pool.claim');
    const revoked = audit.find((r) => r.action === 'warm_pool.credential_revoked');
    const credentialId = (await storedKeys(api.db.pool, { keyHash: hashKey(credential) }))[0]!.id;
    t.match(
      claim?.after,
      {
        poolCredentialId: credentialId,
        runtimeKeyId: String,
        runtimeKeyPrefix: String,
        operationId: signup.operationId,
      },
      'the claim is audited with both keys, by id and prefix',
    );
    t.match(revoked?.after, { keyId: credentialId, operationId: signup.operationId }, 'the revocation is audited');
    t.equal(revoked?.actor, 'warm-pool', 'by the warm pool');
    const all = JSON.stringify(await auditRows(api.db.pool, { targetId: id }));
    t.notOk(all.includes(key) || all.includes(credential), 'no key in any audit row of the tenant');
    const logs = JSON.stringify(await tenantLogLines(api.db.pool, id));
    t.notOk(logs.includes(key) || logs.includes(credential), 'nor in its operation logs');
  },
);

t.test(
  'a failing bind keeps both keys working until its retry succeeds; a runtime that missed the change reconnects as soon as the file has the new key',
  async (t) => {
    await api.services.warmPool.refill();
    await fullPool({ 'root-eu': 2, 'root-us': 2 });
    const euEntries = (await entries()).filter((e) => e.cluster === 'root-eu');
    const creds = new Map<string, string>();
    for (const e of euEntries) {
      creds.set(e.id, await storedKey(e.id));
      await runtimeOf(e.id, creds.get(e.id)!);
    }
    failing.set('flaky-org', 2);
    const release = gate('flaky-org');
    const signup = await api.signup({ organization: 'flaky-org', plan: 'free', region: 'eu' });
    t.equal(signup.body.warm, true, 'served warm');
    const id = signup.tenantId;
    const credential = creds.get(id)!;
    const runtime = await runtimes.get(id)!;
    const key = await storedKey(id);

    await until('two failed bind runs', 10_000, async () =>
      engine.callsFor(id).filter((c) => c.kind === 'up' && c.outcome === 'failed').length === 2 ? true : undefined,
    );
    t.equal((await whoami(credential)).status, 200, 'after the failures the pool credential still authenticates');
    t.equal((await whoami(key)).status, 200, 'and so does the new key');
    t.ok(runtime.client.connected, 'the runtime, still on the pool credential, stays connected');
    await until('the third run started', 10_000, async () =>
      engine.callsFor(id).some((c) => c.kind === 'up' && c.outcome === undefined),
    );
    t.equal((await whoami(credential)).status, 200, 'while the retry runs, too');

    release();
    await until('the retry succeeded', 10_000, async () => {
      const r = await tenantRecord(api.db.pool, id);
      return r.observed_generation === r.generation && r.phase === 'Ready' && r.consecutive_failures === 0;
    });
    await until('the pool credential refused', 10_000, async () => (await whoami(credential)).status === 401);
    t.equal((await whoami(key)).status, 200, "the tenant's runtime key authenticates");

    // This runtime's file still held the pool credential: its tunnel was closed as revoked.
    await until('the revoked tunnel closed', 10_000, async () => runtime.seen.includes('disconnected'));
    t.notOk(runtime.client.connected, 'disconnected, waiting to retry slowly');
    runtime.write(key);
    await until('reconnected with the new key', 30_000, async () => runtime.client.connected);
    const tail = runtime.seen.slice(runtime.seen.lastIndexOf('disconnected'));
    t.same(
      tail.filter((e) => e !== 'rejected'),
      ['disconnected', 'rekeying', 'connected'],
      'the token check redialled as soon as the file changed (not the slow retry after a revocation)',
    );
    t.ok(await tunnelConnected(id), "the tenant's tunnel is connected");
  },
);

t.test('20 concurrent signups on the pool of two clusters: each entry to one signup', async (t) => {
  await api.services.warmPool.refill();
  await fullPool({ 'root-eu': 2, 'root-us': 2 });
  const results = await Promise.all(Array.from({ length: 20 }, () => api.signup({ plan: 'free' })));
  const warm = results.filter((r) => r.body.warm).map((r) => r.tenantId);
  t.equal(warm.length, 4, 'four signups served warm');
  t.equal(new Set(warm).size, 4, 'by four different entries');
  const keys = await storedKeys(api.db.pool, { tenantIds: warm, role: 'runtime', name: CLAIM_RUNTIME_KEY_NAME });
  t.equal(keys.length, 4, 'each with its own new runtime key');
});
