/**
 * Crash safety of fleet upgrades: a provisioner (reconciler and fleet driver, in a child process)
 * killed with SIGKILL in the middle of a wave, then a restart; and two replicas driving at once.
 * Either way every tenant is upgraded exactly once: one spec change (one upgrade operation, one
 * audit row) per tenant, none skipped.
 */
import t, { type Test } from 'tap';
import { createFleetHarness, type FleetHarness } from './fleet-harness.ts';
import { expireLease } from '../../helpers/tenants.ts';
import { expireFleetLeases } from '../../helpers/fleet.ts';
import { auditCount, auditRows } from '../../helpers/audit.ts';
import { getFleetRow } from '../../../provisioner/store/fleet-upgrades.ts';

let f: FleetHarness;
t.beforeEach(async () => {
  f = await createFleetHarness();
  await f.h.addCluster('root-a');
});
t.afterEach(() => f.close());

async function exactlyOnce(t: Test, fleetId: string, ids: string[], version: string): Promise<void> {
  const audited = new Map<string, number>();
  for (const r of await auditRows(f.h.db.pool, { action: 'fleet_upgrade.tenant_upgrade' }))
    audited.set(r.targetId, (audited.get(r.targetId) ?? 0) + 1);
  const states = await f.tenants(fleetId);
  for (const id of ids) {
    t.equal(await f.upgradesTo(id, version), 1, `tenant ${id} got exactly one upgrade operation to ${version}`);
    t.equal(audited.get(id), 1, `tenant ${id} has exactly one upgrade decision in the audit log`);
    t.equal((await f.h.tenant(id)).actual_runtime_version, version, `tenant ${id} runs ${version}`);
    t.equal(states.get(id)?.state, 'succeeded', `tenant ${id} succeeded`);
  }
}

t.test(
  'SIGKILL of the provisioner in the middle of a wave, then a restart: the upgrade goes on; every tenant upgraded exactly once',
  async (t) => {
    const ids = await f.readyTenants(6, '1.4.1', 'root-a');
    const fleetId = await f.start(
      {
        targetVersion: '1.5.0',
        waves: [{ count: 1 }, { percent: 100 }],
        maxConcurrency: 2,
        gate: { tunnel: false, applications: false },
      },
      ids,
    );
    const doomed = await f.h.doomedWorker({
      owner: 'doomed-fleet',
      leaseTtlMs: 60_000,
      script: new URL('./doomed-fleet-worker.ts', import.meta.url),
      args: ['1'], // the canary's upgrade finishes; the next ones hang
    });
    await doomed.started(ids[1]!);
    await doomed.started(ids[2]!);
    await doomed.kill();
    const mid = await f.tenants(fleetId);
    t.equal(mid.get(ids[0]!)!.state, 'succeeded', 'the canary had passed its gate before the kill');
    t.same(
      [mid.get(ids[1]!)!.state, mid.get(ids[2]!)!.state, mid.get(ids[3]!)!.state],
      ['upgrading', 'upgrading', 'pending'],
      'the kill came in the middle of the second wave',
    );
    t.equal(
      (await getFleetRow(f.h.db.pool, fleetId))?.lease_owner,
      'doomed-fleet',
      'the killed process still holds the lease',
    );
    // Its leases (60 s) have not run out: a restarted provisioner waits for them. The test moves them into the past.
    await expireFleetLeases(f.h.db.pool);
    await expireLease(f.h.db.pool, { owner: 'doomed-fleet' });
    const engine = f.engine();
    await f.h.reconciler(engine, { workers: 4 });
    f.driver();
    t.equal(
      await f.waitState(fleetId, ['completed', 'halted']),
      'completed',
      'the restarted provisioner completes the fleet upgrade',
    );
    await exactlyOnce(t, fleetId, ids, '1.5.0');
    const recovered = engine.calls
      .filter((c) => c.kind === 'cancel')
      .map((c) => c.tenantId)
      .sort();
    t.same(
      recovered,
      [ids[1]!, ids[2]!].sort(),
      'the two upgrades the kill interrupted were recovered, not started again',
    );
  },
);

t.test(
  'two replicas at once: each wave is driven by one of them; every tenant upgraded exactly once within the limits',
  async (t) => {
    const ids = await f.readyTenants(8, '1.4.1', 'root-a');
    const engines = [f.engine({ delayMs: 100 }), f.engine({ delayMs: 100 })];
    for (const e of engines) await f.h.reconciler(e, { workers: 4 });
    const fleetId = await f.start(
      { targetVersion: '1.5.0', waves: [{ count: 2 }, { count: 3 }, { percent: 100 }], maxConcurrency: 3 },
      ids,
    );
    const drivers = [f.driver({ clusterParallelism: 10 }), f.driver({ clusterParallelism: 10 })];
    t.equal(await f.waitState(fleetId, ['completed', 'halted']), 'completed', 'the fleet upgrade completes');
    await exactlyOnce(t, fleetId, ids, '1.5.0');
    const calls = engines
      .flatMap((e) => e.calls)
      .filter((c) => c.kind === 'up' && c.input.runtimeVersion === '1.5.0')
      .map((c) => ({ start: c.startedAt, end: c.endedAt ?? Infinity }));
    let peak = 0;
    for (const a of calls) peak = Math.max(peak, calls.filter((b) => b.start <= a.start && a.start < b.end).length);
    t.ok(peak <= 3, `at most maxConcurrency (3) upgrades ran at once across both replicas (peak ${peak})`);
    const decided = drivers.map((d) => d.stats.decisions.get('started') ?? 0);
    t.equal(decided[0]! + decided[1]!, 8, 'the two drivers together started each tenant once');
    t.equal(await auditCount(f.h.db.pool, { action: 'fleet_upgrade.wave_start' }), 3, 'each wave was started once');
  },
);

t.test('the per-cluster cap holds across waves: at most K fleet engine runs per root cluster', async (t) => {
  await f.h.addCluster('root-b');
  const a = await f.readyTenants(3, '1.4.1', 'root-a');
  const b = await f.readyTenants(3, '1.4.1', 'root-b');
  const engine = f.engine({ delayMs: 150 });
  await f.h.reconciler(engine, { workers: 8 });
  const fleetId = await f.start(
    { targetVersion: '1.5.0', waves: [{ count: 1 }, { percent: 100 }], maxConcurrency: 5 },
    [...a, ...b],
  );
  f.driver({ clusterParallelism: 1 });
  t.equal(await f.waitState(fleetId, ['completed', 'halted']), 'completed', 'the fleet upgrade completes');
  for (const [name, ids] of [
    ['root-a', a],
    ['root-b', b],
  ] as const) {
    const calls = engine.calls
      .filter((c) => c.kind === 'up' && ids.includes(c.tenantId))
      .map((c) => ({ start: c.startedAt, end: c.endedAt ?? Infinity }));
    let peak = 0;
    for (const x of calls) peak = Math.max(peak, calls.filter((y) => y.start <= x.start && x.start < y.end).length);
    t.equal(peak, 1, `at most one fleet engine run at a time on ${name}`);
  }
});
