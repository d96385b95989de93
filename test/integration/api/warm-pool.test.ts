/**
 * The warm pool: the `warm-pool` loop's round provisions entries up to the plan's size within its
 * parallelism, they stay out of every tenant listing, a signup of the plan claims a Ready one and is
 * Ready at once (its names applied by a `bind` operation that keeps it Ready), a signup past the
 * pool falls back to the cold path, the pool refills, and entries of another plan or version are
 * recycled. 100 concurrent claims on 10 entries never give one entry twice. Real Postgres, the real
 * app and reconciler; the engine is the ScriptedEngine TEST DOUBLE (docs/e2e.md names the e2e gap).
 */
import t from 'tap';
import { ScriptedEngine } from '../../helpers/scripted-engine.ts';
import { Reconciler } from '../../../provisioner/reconciler/reconciler.ts';
import { WarmPool } from '../../../provisioner/pool/service.ts';
import { withTx } from '../../../provisioner/db/tx.ts';
import { claimPoolEntry, insertPoolEntry } from '../../../provisioner/store/pool.ts';
import { catalog } from '../../../runtime/catalog.ts';
import { createTestApi } from '../../helpers/api.ts';
import { cliAgainst } from '../../helpers/cli.ts';
import { until } from '../../../sandbox/until.ts';
import {
  countTenantRecords,
  findTenants,
  markReconciled,
  setTenantStatus,
  tenantRecord,
} from '../../helpers/tenants.ts';
import { auditCount, auditRows } from '../../helpers/audit.ts';

const KUBECONFIG =
  'apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: "https://203.0.113.10:6443"}}]\n' +
  'users: [{name: u, user: {token: root-cluster-token-0123456789}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n';

const api = await createTestApi({ env: { PROVISIONER_WARM_POOL: 'free=2' } });
t.teardown(() => api.close());
// TEST DOUBLE engine: every run succeeds at once, reporting the version it installed.
const engine = new ScriptedEngine({
  script: (c) => (c.kind === 'up' ? { outputs: { runtimeVersion: c.input.runtimeVersion } } : undefined),
});
const reconciler = new Reconciler({ pool: api.db.pool, engine, box: api.services.box, pollMs: 100, logFlushMs: 10 });
await reconciler.start();
t.teardown(() => reconciler.stop({ graceMs: 0 }));
const operator = api.as(api.operatorKey);
t.equal(
  (
    await operator.request('POST /v1/clusters', {
      body: { name: 'root-pool', region: 'eu', capacity: 200, kubeconfig: KUBECONFIG, force: true },
    })
  ).status,
  201,
);

const pooled = async () => findTenants(api.db.pool, { pooled: true, deleted: false });
const readyPooled = async (n: number) =>
  until(
    `${n} Ready pool entries`,
    30_000,
    async () => (await pooled()).filter((p) => p.phase === 'Ready').length === n,
    50,
  );

t.test('the pool fills up to its size, one entry in flight at a time, and stays out of the listings', async (t) => {
  const first = await api.services.warmPool.refill();
  t.same(first, { added: 1, recycled: 0 }, 'one entry added: the parallelism is 1');
  t.same((await api.services.warmPool.refill()).added, 0, 'none more while it provisions');
  await readyPooled(1);
  t.same((await api.services.warmPool.refill()).added, 1, 'the second once the first is Ready');
  await readyPooled(2);
  t.same((await api.services.warmPool.refill()).added, 0, 'full: nothing added');
  const entries = await pooled();
  t.match(entries[0]?.organization, /^warm-pool-[0-9a-f]{8}$/, 'an entry has no customer name');

  const listing = await operator.call('GET /v1/tenants', { query: { limit: 200 } });
  t.notOk(
    listing.items.some((i) => entries.some((e) => e.id === i.id)),
    'GET /v1/tenants lists no pool entry',
  );
  const summary = await operator.call('GET /v1/tenants/summary');
  t.equal(summary.total, 0, 'and the counts count none');
  // /metrics is outside the route map: raw
  const metrics = (await api.request('GET', '/metrics', { key: null })).body;
  t.match(
    metrics,
    new RegExp(
      `provisioner_warm_pool_entries\\{plan="free",version="${catalog.defaultVersion().replaceAll('.', '\\.')}",state="ready",cluster="root-pool"\\} 2`,
    ),
    '/metrics: two Ready entries on the one root cluster',
  );
});

t.test('signups claim Ready entries and are Ready at once; past the pool, the cold path', async (t) => {
  const entries = await pooled();
  const started = Date.now();
  const res = await api.signup({ organization: 'acme-warm', plan: 'free' });
  const ms = Date.now() - started;
  t.comment(`signup → Ready from the warm pool: ${ms} ms`);
  t.equal(res.body.warm, true, 'served warm');
  t.equal(res.body.tenant.status.phase, 'Ready', 'Ready in the signup answer');
  t.equal(res.tenantId, entries[0]!.id, 'the oldest entry, its id (and namespace) kept');
  t.equal(res.body.tenant.organization, 'acme-warm', 'named for its customer');
  const asTenant = api.as(res.apiKey);
  const op = await asTenant.call('GET /v1/operations/:id', { params: { id: res.body.operationId } });
  t.equal(op.kind, 'bind', "the signup's operation binds the entry to the tenant");
  const own = await asTenant.request('GET /v1/tenants/:id', { params: { id: res.tenantId } });
  t.equal(own.status, 200, "the tenant's key reads its tenant");
  if (!own.ok) throw new Error('precondition: the tenant was read');
  await until('the bind applied', 10_000, async () => {
    const v = own.body;
    const now = await asTenant.call('GET /v1/tenants/:id', { params: { id: res.tenantId } });
    return now.status.observedGeneration === now.generation && now.generation > v.generation - 1 && now;
  });
  const bindRun = engine.calls.filter((c) => c.tenantId === res.tenantId && c.kind === 'up').at(-1);
  t.equal(bindRun?.input.organization, 'acme-warm', "the bind ran the program with the customer's name");
  t.equal((await tenantRecord(api.db.pool, res.tenantId)).phase, 'Ready', 'and it stayed Ready');

  const second = await api.signup({ organization: 'globex-warm', plan: 'free' });
  t.equal(second.body.warm, true, 'the second signup: warm too');
  t.equal(second.tenantId, entries[1]!.id);
  const third = await api.signup({ organization: 'initech-cold', plan: 'free' });
  t.notOk(third.body.warm, 'the third: the pool is empty, the cold path');
  t.not(third.body.tenant.status.phase, 'Ready', 'not Ready at signup');
  const team = await api.signup({ organization: 'team-cold', plan: 'team' });
  t.notOk(team.body.warm, 'a plan without a pool: cold');

  const taken = await api.as(null).request('POST /v1/signup', {
    body: { organization: 'acme-warm', email: 'x@example.com' },
  });
  t.equal(taken.status, 409, 'an organization already signed up is refused as before');
  t.equal((await pooled()).length, 0, 'and took no entry');

  t.same((await api.services.warmPool.refill()).added, 1, 'the pool refills');
  await readyPooled(1);
  const audit = await auditRows(api.db.pool, { action: 'tenant.signup', targetId: res.tenantId });
  t.equal(audit[0]?.after?.warmPool, true, 'the signup audit says it was served warm');
  t.match(
    (await api.request('GET', '/metrics', { key: null })).body,
    /provisioner_signups_total\{source="warm"\} 2/,
    '/metrics: two signups served warm',
  );
});

t.test('entries of a plan or version the pool no longer keeps are recycled', async (t) => {
  await readyPooled(1);
  const [entry] = await pooled();
  const other = new WarmPool({
    pool: api.db.pool,
    config: { size: { team: 0 }, parallelism: 1, checkSeconds: 30 },
    defaultVersion: async () => catalog.defaultVersion(),
    enabled: false,
  });
  t.same(await other.refill(), { added: 0, recycled: 1 }, 'the free entry is recycled when free is not pooled');
  t.equal(
    (await tenantRecord(api.db.pool, entry!.id)).deleted,
    true,
    'deleted (its stack destroyed by the reconciler)',
  );
  t.equal(await auditCount(api.db.pool, { action: 'warm_pool.recycle', targetId: entry!.id }), 1, 'audited');
});

t.test('an entry that failed to provision is recycled, and the pool refills after it', async (t) => {
  const stuck = await withTx(api.db.pool, (tx) => insertPoolEntry(tx, 'free', catalog.defaultVersion(), 'stuck000'));
  await until('the entry provisioned', 10_000, async () =>
    (await pooled()).some((p) => p.id === stuck.id && p.phase === 'Ready'),
  );
  // What a create that failed past its retries leaves (the reconciler's Stalled state).
  await setTenantStatus(api.db.pool, stuck.id, { stalled: true, phase: 'Failed' });
  const first = await api.services.warmPool.refill();
  t.ok(first.recycled >= 1, 'the failed entry is recycled');
  t.equal(
    first.added,
    0,
    'and no entry is added for its plan in the same round (no churn on a create that always fails)',
  );
  t.equal((await tenantRecord(api.db.pool, stuck.id)).deleted, true, 'deleted');
  const audit = await auditRows(api.db.pool, { action: 'warm_pool.recycle', targetId: stuck.id });
  t.equal(audit[0]?.after?.failed, true, 'audited as failed');
  t.ok(
    (await api.services.warmPool.refill()).added >= 1,
    'the next round refills: the failed entry no longer holds a place',
  );
});

t.test('100 concurrent claims on 10 entries: each entry goes to one claim', async (t) => {
  // No reconciler from here: an entry it leased (to provision it) is rightly not claimable.
  await reconciler.stop({ graceMs: 0 });
  const version = catalog.defaultVersion();
  const ids: string[] = [];
  for (let i = 0; i < 10; i++) {
    const e = await withTx(api.db.pool, (tx) => insertPoolEntry(tx, 'enterprise', version, `race-${i}`));
    ids.push(e.id);
  }
  // Ready without waiting for the engine: what a claim looks at.
  await markReconciled(api.db.pool, ids);
  const claims = await Promise.all(
    Array.from({ length: 100 }, (_, i) =>
      withTx(api.db.pool, (tx) =>
        claimPoolEntry(tx, {
          organization: `racer-${i}`,
          email: 'r@example.com',
          plan: 'enterprise',
          runtimeVersion: version,
          region: null,
        }),
      ),
    ),
  );
  const won = claims.filter((c) => c !== undefined).map((c) => c.id);
  t.equal(won.length, 10, 'ten claims got an entry');
  t.equal(new Set(won).size, 10, 'ten different entries');
  t.same([...won].sort(), [...ids].sort(), 'exactly the ten entries');
  const owners = new Set(
    (await findTenants(api.db.pool, { ids })).map((r) => r.organization).filter((o) => o.startsWith('racer-')),
  );
  t.equal(owners.size, 10, 'each named for the one claim that got it');
});

t.test(
  'GET /v1/capacity: per plan the tenants awake and asleep, what they reserve, the pool, signups warm and cold',
  async (t) => {
    const res = await operator.request('GET /v1/capacity');
    t.equal(res.status, 200);
    if (!res.ok) throw new Error('precondition: the capacity was read');
    const c = res.body;
    t.equal(c.defaultVersion, catalog.defaultVersion());
    const free = c.plans.find((p) => p.plan === 'free')!;
    t.equal(
      free.tenants.awake + free.tenants.asleep + free.tenants.waking,
      await countTenantRecords(api.db.pool, { plan: 'free', pooled: false, deleted: false }),
      'the free tenants, pool entries left out',
    );
    t.same(free.signups24h, { warm: 2, cold: 1 }, 'two free signups served warm, one cold');
    t.equal(free.warmPool.size, 2, 'the pool size configured for free (per root cluster)');
    t.equal(free.warmPool.target, 2, 'one root cluster: two in all');
    t.equal(free.sleepAfterSeconds, 1800, 'free tenants sleep after 30 minutes (the default)');
    t.ok(
      free.reservation.awakeTenant.cpuMillicores > 0,
      `an awake free tenant reserves ${free.reservation.awakeTenant.cpuMillicores}m CPU`,
    );
    t.same(free.reservation.asleepTenant, { cpuMillicores: 0, memoryBytes: 0 }, 'an asleep one nothing');
    t.equal(
      free.reservation.now.cpuMillicores,
      (free.tenants.awake + free.tenants.waking) * free.reservation.awakeTenant.cpuMillicores,
      'the plan now: its awake tenants',
    );
    t.equal(c.plans.find((p) => p.plan === 'team')?.sleepAfterSeconds, null, 'team never sleeps');
    const tenantKey = (await api.signup({ plan: 'team' })).apiKey;
    t.equal((await api.as(tenantKey).request('GET /v1/capacity')).status, 403, "a tenant's key may not read it");
  },
);

t.test('provisioner capacity prints it as a table', async (t) => {
  const url = await api.app.listen({ port: 0, host: '127.0.0.1' });
  const run = await cliAgainst(url, api.operatorKey)(['capacity']);
  t.equal(run.code, 0, run.err);
  const free = run.out.split('\n').find((l) => l.startsWith('free'));
  t.match(
    free,
    /free\s+\d+\s+\d+\s+\d+\s+\S+, \S+\s+.*\s+30m\s+\d+\/2 ready.*2 warm, 1 cold/,
    'the free plan: sleeps after 30m, the pool, 2 warm and 1 cold',
  );
  t.match(run.out, /an asleep tenant reserves nothing/);
  t.match(run.out, /wakes in 24 h: 0/);
});
