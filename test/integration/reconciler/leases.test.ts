import t from 'tap';
import { createPool } from '../../../provisioner/db/database.ts';
import { setCordoned } from '../../../provisioner/store/clusters.ts';
import { createHarness, gate, scripted } from './harness.ts';
import { until } from '../../../sandbox/until.ts';
import { setAllClustersCordoned } from '../../helpers/clusters.ts';
import { countTenantRecords, expireLease, findTenants } from '../../helpers/tenants.ts';
import { databaseNow } from '../../helpers/postgres.ts';
import { operationRecords } from '../../helpers/operations.ts';

// The file starts worker processes (doomed workers, a second reconciler's pool): on a loaded
// 2-core machine it ran past tap's 120 s limit (.taprc); alone it took 20–70 s.
t.setTimeout(300_000);

const h = await createHarness();
t.teardown(() => h.close());
await h.addCluster('root-a', { capacity: 1000 });
await h.addCluster('root-b', { capacity: 1000 });

t.test(
  "a crashed worker's tenant is taken over once its lease expires, and the stack is recovered first",
  async (t) => {
    const doomed = await h.doomedWorker({ owner: 'crashing-worker', leaseTtlMs: 60_000 });
    const { id, operationId } = await h.createTenant();
    await doomed.started(id);
    await doomed.kill();
    const held = await h.tenant(id);
    t.equal(held.lease_owner, 'crashing-worker', 'the dead worker still holds the lease');

    const engine2 = scripted();
    const r2 = await h.reconciler(engine2, { owner: 'survivor', pollMs: 50 });
    // Three looks for due tenants (each one a claim transaction that would have taken the lease).
    const polled = r2.stats.polls;
    await until('three polls by the survivor', 10_000, async () => r2.stats.polls >= polled + 3);
    t.equal(
      (await h.tenant(id)).lease_owner,
      'crashing-worker',
      'no takeover while the lease is live: the lease is unchanged after three polls',
    );
    t.equal(engine2.callsFor(id).length, 0, 'and the survivor ran nothing for the tenant');
    // Simulate the passage of the TTL instead of sleeping it.
    await expireLease(h.db.pool, id);
    const row = await until('Ready on the survivor', 10_000, async () => {
      const x = await h.tenant(id);
      return x.phase === 'Ready' && x;
    });
    t.equal(row.lease_owner, null);
    t.same(
      engine2.callsFor(id).map((c) => [c.kind, c.clearPendingCreates]),
      [
        ['cancel', false],
        ['interrupted', false],
        ['refresh', true],
        ['up', false],
      ],
      'recovery: cancel the stale lock, refresh with pending creates cleared, then up',
    );
    const [op] = await h.operations(id);
    t.match(
      op,
      { id: operationId, state: 'succeeded', attempt: 2, owner: 'survivor' },
      'the interrupted operation continues as attempt 2',
    );
    const lines = await h.logLines(operationId);
    t.ok(
      lines.some((l) => /recovery: operation .* \(owner crashing-worker\) did not finish/.test(l)),
      'recovery recorded in the log',
    );
    t.ok(lines.some((l) => l.startsWith('recovery: refresh --clear-pending-creates')));
    await r2.stop();
  },
);

t.test("heartbeats keep a long operation's lease alive", async (t) => {
  const g = gate();
  const engine = scripted({ script: () => ({ gate: g.promise }) });
  // A TTL of 20 heartbeats: a loaded machine may delay a heartbeat, not twenty in a row.
  const r = await h.reconciler(engine, { leaseTtlMs: 2000, heartbeatMs: 100 });
  const { id } = await h.createTenant();
  await until('running', 10_000, async () => engine.callsFor(id).length === 1);
  const first = (await h.tenant(id)).lease_expires_at!;
  await until(
    'lease renewed',
    10_000,
    async () => (await h.tenant(id)).lease_expires_at!.getTime() > first.getTime() + 150,
  );
  const other = scripted();
  const r2 = await h.reconciler(other, { pollMs: 50 });
  // Wait until the first lease would have expired (by the database's clock), plus several polls.
  await until("the first lease's expiry passed", 10_000, async () => {
    return (await databaseNow(h.db.pool)).getTime() > first.getTime() + 300;
  });
  t.ok(
    (await h.tenant(id)).lease_expires_at!.getTime() > first.getTime(),
    'the lease was renewed past its first expiry',
  );
  t.equal(other.callsFor(id).length, 0, 'nobody took over the renewed lease after its first expiry passed');
  g.open();
  await until('Ready', 10_000, async () => (await h.tenant(id)).phase === 'Ready');
  await r.stop();
  await r2.stop();
});

t.test('two reconcilers on one database never run one tenant twice', async (t) => {
  const engine = scripted({ script: () => ({ delayMs: 1 + Math.floor(Math.random() * 4) }) });
  const a = await h.reconciler(engine, { owner: 'pool-a', workers: 8, clusterParallelism: 100, pollMs: 50 });
  // A second process: its own connection pool (and so its own LISTEN connection) on the same database.
  const otherPool = createPool(h.db.url, 12);
  const b = await h.reconciler(engine, {
    pool: otherPool,
    owner: 'pool-b',
    workers: 8,
    clusterParallelism: 100,
    pollMs: 50,
  });
  t.teardown(async () => {
    // Its LISTEN connection is a client of that pool: hand it back so the pool can end.
    await h.notificationsOf(b)?.stop();
    await otherPool.end();
  });
  const ids: string[] = [];
  for (let i = 0; i < 300; i++) ids.push((await h.createTenant()).id);
  // A second spec change for a third of them, while the first round runs.
  for (const id of ids.slice(0, 100)) await h.change(id, { runtimeVersion: '1.1.0' }, 'upgrade');
  await until(
    'all applied',
    60_000,
    async () => {
      const ready = await findTenants(h.db.pool, { ids, phase: 'Ready' });
      return ready.filter((r) => r.observed_generation === r.generation).length === ids.length;
    },
    100,
  );
  t.same(engine.violations, [], 'the in-engine detector saw no overlapping calls on one tenant');
  const ops = (await Promise.all(ids.map((id) => operationRecords(h.db.pool, id)))).flat();
  t.equal(ops.filter((o) => o.state === 'queued' || o.state === 'running').length, 0, 'no operation left open');
  const succeeded = (await Promise.all(ids.map((id) => operationRecords(h.db.pool, id)))).map((list) =>
    list.filter((o) => o.state === 'succeeded'),
  );
  const twice = succeeded.filter((list) => new Set(list.map((o) => o.generation)).size < list.length).length;
  t.equal(twice, 0, 'no generation succeeded twice');
  const owners = new Map<string | null, number>();
  for (const o of succeeded.flat()) owners.set(o.owner, (owners.get(o.owner) ?? 0) + 1);
  t.equal(owners.size, 2, `both pools did work (${[...owners].map(([owner, n]) => `${owner}: ${n}`).join(', ')})`);
  const ups = engine.calls.filter((c) => ids.includes(c.tenantId) && c.kind === 'up').length;
  t.ok(ups >= 300 && ups <= 400, `${ups} engine runs for 300 creates + 100 upgrades (coalescing may save some)`);
  await a.stop();
  await b.stop();
});

t.test('graceful shutdown waits for running operations, then hands leases back', async (t) => {
  const quick = gate();
  const slow = gate();
  let n = 0;
  const engine = scripted({ script: () => ({ gate: n++ === 0 ? quick.promise : slow.promise }) });
  const r = await h.reconciler(engine, { owner: 'leaving', leaseTtlMs: 60_000 });
  const a = await h.createTenant();
  const b = await h.createTenant();
  await until('both running', 10_000, async () => engine.calls.length === 2);
  // The grace is long enough for the released operation to finish on a loaded machine; the
  // other one stays gated, so the stop waits the whole grace before handing it back.
  const stopping = r.stop({ graceMs: 3000 });
  quick.open();
  await stopping;
  const first = engine.calls[0]!.tenantId;
  const second = engine.calls[1]!.tenantId;
  t.equal((await h.tenant(first)).phase, 'Ready', 'the operation that finished within the grace period is recorded');
  const handed = await h.tenant(second);
  t.equal(handed.lease_owner, null, "the unfinished one's lease is handed back (no waiting for expiry)");
  t.equal(handed.phase, 'Provisioning');
  t.equal(r.stats.handedBack, 1);
  const [op] = await h.operations(second);
  t.equal(op!.state, 'running', 'its operation stays running so that the next owner recovers the stack');
  t.ok((await h.logLines(op!.id)).some((l) => l.includes('shutting down')));
  const next = scripted();
  const r2 = await h.reconciler(next, { owner: 'next' });
  await until('taken over at once', 5000, async () => (await h.tenant(second)).phase === 'Ready');
  t.same(
    next.callsFor(second).map((c) => c.kind),
    ['cancel', 'interrupted', 'refresh', 'up'],
  );
  t.ok([a.id, b.id].includes(second));
  await r2.stop();
});

t.test('per-cluster parallelism holds across processes', async (t) => {
  const g = gate();
  const engine = scripted({ script: () => ({ gate: g.promise, delayMs: 20 }) });
  const clusterId = await h.addCluster('root-narrow', { capacity: 100 });
  for (const name of ['root-a', 'root-b']) await setCordoned(h.db.pool, name, true);
  t.teardown(() => setAllClustersCordoned(h.db.pool, false));
  const a = await h.reconciler(engine, { workers: 5, clusterParallelism: 3, pollMs: 50 });
  const b = await h.reconciler(engine, { workers: 5, clusterParallelism: 3, pollMs: 50 });
  const ids: string[] = [];
  for (let i = 0; i < 8; i++) ids.push((await h.createTenant()).id);
  await until('3 running', 10_000, async () => engine.running === 3);
  // Three more looks for due tenants by each process, each a claim that would have taken a fourth.
  const [pa, pb] = [a.stats.polls, b.stats.polls];
  await until(
    'three more polls by each process',
    10_000,
    async () => a.stats.polls >= pa + 3 && b.stats.polls >= pb + 3,
  );
  t.equal(engine.running, 3, 'still 3 running on the cluster after three more polls by each process (10 workers free)');
  const leased = (await findTenants(h.db.pool, { clusterId })).filter((r) => r.lease_owner !== null);
  t.equal(leased.length, 3, 'three live leases on the cluster');
  g.open();
  await until('all Ready', 10_000, async () => {
    return (await countTenantRecords(h.db.pool, { ids, phase: 'Ready' })) === ids.length;
  });
  t.ok(engine.peakConcurrency <= 3, `peak ${engine.peakConcurrency} concurrent engine calls`);
  await a.stop();
  await b.stop();
});
