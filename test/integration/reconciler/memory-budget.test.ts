/**
 * Admission of engine runs by the memory budget (PROVISIONER_ENGINE_MEMORY_MB,
 * reconciler/memory-budget.ts), with the real reconciler and database and the scripted engine
 * (TEST DOUBLE: the real engine's per-run memory is what bench/engine.bench.ts measures).
 */
import t from 'tap';
import { ENGINE_RUN_PEAK_MB, LARGEST_RUN_MB } from '../../../provisioner/reconciler/memory-budget.ts';
import { createHarness, gate, scripted } from './harness.ts';
import { until } from '../../../sandbox/until.ts';
import { findTenants } from '../../helpers/tenants.ts';

const h = await createHarness();
t.teardown(() => h.close());
await h.addCluster('root-budget', { capacity: 1000 });

/** `n` tenants made Ready by a reconciler without a budget (then stopped). */
async function readyTenants(n: number): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < n; i++) ids.push((await h.createTenant({ runtimeVersion: '1.0.0' })).id);
  const r = await h.reconciler(scripted(), { workers: n, clusterParallelism: 1000, pollMs: 50, engineMemoryMb: 0 });
  await until(`${n} tenants Ready`, 20_000, async () => (await phases(ids)).every((p) => p === 'Ready'));
  await r.stop();
  return ids;
}

async function phases(ids: string[]): Promise<string[]> {
  return (await findTenants(h.db.pool, { ids })).map((r) => r.phase);
}

async function upgradedReady(ids: string[], version: string): Promise<number> {
  return (await findTenants(h.db.pool, { ids, phase: 'Ready' })).filter(
    (r) => r.actual_runtime_version === version && r.observed_generation === r.generation,
  ).length;
}

t.test('a burst of upgrades is admitted in budget-sized batches, and every one completes', async (t) => {
  const ids = await readyTenants(9);
  // Room for three upgrades and a part of a fourth: three at a time, with nine workers idle.
  const budget = 3 * ENGINE_RUN_PEAK_MB.upgrade + Math.floor(LARGEST_RUN_MB / 2);
  // Every engine call waits for the gate current when it starts; opening it lets one batch finish.
  let current = gate();
  const engine = scripted({ script: () => ({ gate: current.promise }) });
  const r = await h.reconciler(engine, { workers: 9, clusterParallelism: 1000, pollMs: 50, engineMemoryMb: budget });
  t.same(r.memory, { budgetMb: budget, inUseMb: 0 }, 'the budget as configured, nothing reserved before the burst');
  for (const id of ids) await h.change(id, { runtimeVersion: '1.1.0' }, 'upgrade');

  for (let batch = 1; batch <= 3; batch++) {
    const done = batch * 3;
    await until(`batch ${batch}: three upgrades running`, 10_000, async () => engine.running === 3);
    t.equal(
      r.memory.inUseMb,
      3 * ENGINE_RUN_PEAK_MB.upgrade,
      `batch ${batch}: three upgrades reserve ${3 * ENGINE_RUN_PEAK_MB.upgrade} MiB of the ${budget} MiB budget`,
    );
    t.equal(await upgradedReady(ids, '1.1.0'), done - 3, `batch ${batch}: ${done - 3} upgrades finished before it`);
    const opened = current;
    current = gate();
    opened.open();
    await until(`batch ${batch} finished`, 10_000, async () => (await upgradedReady(ids, '1.1.0')) >= done);
  }
  await until('all nine upgraded and Ready', 10_000, async () => (await upgradedReady(ids, '1.1.0')) === 9);
  t.equal(engine.peakConcurrency, 3, 'never more than three engine runs at once, though nine workers were idle');
  t.same(engine.violations, [], 'no tenant ran twice at once');
  // A run's reservation is released just after its outcome is written (which the check above reads).
  await until('the last runs to release their reservation', 10_000, () => r.memory.inUseMb === 0).catch(() => {});
  t.equal(r.memory.inUseMb, 0, 'nothing reserved once the burst is done');
  await r.stop();
});

t.test('a budget smaller than one run admits one run at a time: no deadlock', async (t) => {
  const ids = await readyTenants(4);
  const engine = scripted({ script: () => ({ delayMs: 30 }) });
  const budget = Math.floor(ENGINE_RUN_PEAK_MB.upgrade / 2);
  const r = await h.reconciler(engine, { workers: 4, clusterParallelism: 1000, pollMs: 50, engineMemoryMb: budget });
  for (const id of ids) await h.change(id, { runtimeVersion: '1.1.0' }, 'upgrade');
  await until('all four upgraded and Ready', 20_000, async () => (await upgradedReady(ids, '1.1.0')) === 4);
  t.equal(
    engine.peakConcurrency,
    1,
    `one run at a time under a ${budget} MiB budget (one upgrade: ${ENGINE_RUN_PEAK_MB.upgrade} MiB)`,
  );
  await r.stop();
});

t.test('budget 0: the worker count alone admits runs', async (t) => {
  const ids = await readyTenants(4);
  const g = gate();
  const engine = scripted({ script: () => ({ gate: g.promise }) });
  const r = await h.reconciler(engine, { workers: 4, clusterParallelism: 1000, pollMs: 50, engineMemoryMb: 0 });
  for (const id of ids) await h.change(id, { runtimeVersion: '1.1.0' }, 'upgrade');
  await until('four upgrades running at once', 10_000, async () => engine.running === 4);
  t.same(r.memory, { budgetMb: 0, inUseMb: 4 * ENGINE_RUN_PEAK_MB.upgrade }, 'no budget; the reservations still count');
  g.open();
  await until('all four upgraded and Ready', 10_000, async () => (await upgradedReady(ids, '1.1.0')) === 4);
  await r.stop();
});
