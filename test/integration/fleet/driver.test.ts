/**
 * The fleet upgrade driver with the reconciler and the ScriptedEngine TEST DOUBLE, on a real
 * Postgres, with an injectable clock: waves in order, concurrency per wave and per cluster, the
 * health gate on post-upgrade state only, the failure budget, automatic rollback, pause, abort with
 * rollback in reverse wave order, multi-hop paths.
 */
import t from 'tap';
import { createFleetHarness, OPERATOR, type FleetHarness } from './fleet-harness.ts';
import { until } from '../../../sandbox/until.ts';
import { hostedRuntimeId, recordReporter } from '../../../provisioner/store/runtime-objects.ts';
import { putHostedApplication } from '../../helpers/runtime-objects.ts';
import { auditCountsByAction } from '../../helpers/audit.ts';
import { fleetEventsOf, heldFleetTenants } from '../../helpers/fleet.ts';
import { fleetTenantRows } from '../../../provisioner/store/fleet-upgrades.ts';

let f: FleetHarness;
t.beforeEach(async () => {
  f = await createFleetHarness();
  await f.h.addCluster('root-a');
});
t.afterEach(() => f.close());

/** Intervals of the engine's up calls to `version`, by tenant. */
function ups(engine: ReturnType<FleetHarness['engine']>, version: string) {
  return engine.calls
    .filter((c) => c.kind === 'up' && c.input.runtimeVersion === version)
    .map((c) => ({ tenant: c.tenantId, start: c.startedAt, end: c.endedAt ?? Infinity }));
}

/** Most intervals overlapping at once. */
function peak(intervals: Array<{ start: number; end: number }>): number {
  let most = 0;
  for (const a of intervals)
    most = Math.max(most, intervals.filter((b) => b.start <= a.start && a.start < b.end).length);
  return most;
}

t.test('waves run in order within maxConcurrency; every tenant is upgraded exactly once; audited', async (t) => {
  const ids = await f.readyTenants(7, '1.4.1', 'root-a');
  const engine = f.engine({ delayMs: 150 });
  await f.h.reconciler(engine, { workers: 8 });
  const id = await f.start(
    { targetVersion: '1.5.0', waves: [{ count: 1 }, { count: 2 }, { percent: 100 }], maxConcurrency: 2 },
    ids,
  );
  f.driver({ clusterParallelism: 10 });
  t.equal(await f.waitState(id, ['completed', 'halted']), 'completed', 'the fleet upgrade completes');
  const calls = ups(engine, '1.5.0');
  const waves = [[ids[0]!], ids.slice(1, 3), ids.slice(3)];
  for (const id of ids) t.equal(await f.upgradesTo(id, '1.5.0'), 1, `tenant ${id} got exactly one upgrade operation`);
  t.equal(calls.length, 7, 'the engine ran one upgrade per tenant');
  for (let w = 1; w < waves.length; w++) {
    const before = calls.filter((c) => waves[w - 1]!.includes(c.tenant));
    const now = calls.filter((c) => waves[w]!.includes(c.tenant));
    t.ok(
      Math.min(...now.map((c) => c.start)) >= Math.max(...before.map((c) => c.end)),
      `no tenant of wave ${w} started before every tenant of wave ${w - 1} finished`,
    );
    t.ok(peak(now) <= 2, `wave ${w} ran at most maxConcurrency (2) upgrades at once (peak ${peak(now)})`);
  }
  t.equal(peak(calls.filter((c) => waves[2]!.includes(c.tenant))), 2, 'the last wave used its concurrency of 2');
  const states = await f.tenants(id);
  t.same(
    [...states.values()].map((s) => s.state),
    Array(7).fill('succeeded'),
    'every tenant succeeded',
  );
  const audit = await auditCountsByAction(f.h.db.pool, { actionPrefix: 'fleet_upgrade.' });
  t.match(
    audit,
    {
      'fleet_upgrade.start': 1,
      'fleet_upgrade.wave_start': 3,
      'fleet_upgrade.wave_complete': 3,
      'fleet_upgrade.tenant_upgrade': 7,
      'fleet_upgrade.tenant_succeeded': 7,
      'fleet_upgrade.complete': 1,
    },
    'every decision has its audit row',
  );
  const events = await fleetEventsOf(f.h.db.pool, id, { action: 'tenant_succeeded' });
  t.equal(events.length, 7, "every tenant's success is an event of the progress stream");
  t.equal(await heldFleetTenants(f.h.db.pool), 0, 'a completed fleet upgrade holds no tenant any more');
});

t.test(
  'a failing canary is rolled back automatically, quarantined, and halts the fleet upgrade; the rest stay untouched',
  async (t) => {
    const ids = await f.readyTenants(3, '1.4.0', 'root-a');
    const engine = f.engine({ fail: (c) => c.input.runtimeVersion === '1.4.1' });
    await f.h.reconciler(engine);
    const id = await f.start({ targetVersion: '1.4.1', waves: [{ count: 1 }, { percent: 100 }] }, ids);
    f.driver();
    t.equal(await f.waitState(id, ['halted', 'completed']), 'halted', 'the failed canary halts the fleet upgrade');
    const states = await f.tenants(id);
    const canary = states.get(ids[0]!)!;
    t.equal(canary.state, 'quarantined', 'the canary is quarantined');
    t.ok(canary.rolled_back, 'the canary was rolled back');
    t.match(
      canary.reason,
      /gate failed on 1\.4\.0 -> 1\.4\.1: the upgrade operation failed.*rolled back to 1\.4\.0/,
      'the reason says what failed and that it was rolled back',
    );
    const tenant = await f.h.tenant(ids[0]!);
    t.equal(tenant.actual_runtime_version, '1.4.0', 'the canary runs its old version again');
    t.equal(tenant.runtime_version, '1.4.0', "the canary's spec is back on its old version");
    for (const other of ids.slice(1)) {
      t.equal(states.get(other)!.state, 'pending', 'the other tenants were not started');
      t.equal(await f.upgradesTo(other, '1.4.1'), 0, 'the other tenants got no upgrade');
    }
    t.match((await f.fleet(id)).state_reason, /the canary: 1 of 1 tenants failed/, 'the halt says why');
    const abort = await f.service.abort(id, OPERATOR, { rollback: false });
    t.equal(abort.state, 'aborted', 'an abort of the halted fleet upgrade ends it');
    t.equal(abort.counts.cancelled, 2, 'its pending tenants are cancelled');
  },
);

t.test(
  'an edge the catalog cannot roll back is not rolled back: the tenant is quarantined with the reason',
  async (t) => {
    const ids = await f.readyTenants(1, '1.4.1', 'root-a');
    const engine = f.engine({ fail: (c) => c.input.runtimeVersion === '1.5.0' });
    await f.h.reconciler(engine);
    const id = await f.start({ targetVersion: '1.5.0' }, ids);
    f.driver();
    await f.waitState(id, ['halted', 'completed']);
    const s = (await f.tenants(id)).get(ids[0]!)!;
    t.equal(s.state, 'quarantined', 'the tenant is quarantined');
    t.notOk(s.rolled_back, 'it was not rolled back');
    t.match(
      s.reason,
      /not rolled back: runtime version 1\.5\.0 cannot be rolled back to 1\.4\.1/,
      "the reason quotes the catalog's rule",
    );
    t.equal((await f.h.tenant(ids[0]!)).runtime_version, '1.5.0', 'its spec stays on the new version');
  },
);

t.test('the gate judges post-upgrade state only: a stale Ready status with an old tunnel never passes', async (t) => {
  // No reconciler runs: the tenant keeps its status from before the upgrade (Ready, tunnel connected).
  const ids = await f.readyTenants(1, '1.4.0', 'root-a');
  const id = await f.start({ targetVersion: '1.4.1', gateTimeoutSeconds: 60 }, ids);
  const d = f.driver({ pollMs: 60_000 });
  await until('the upgrade to start', 10_000, async () => (await f.tenants(id)).get(ids[0]!)!.state === 'upgrading');
  for (let i = 0; i < 3; i++) await d.tickAll();
  const [row] = await fleetTenantRows(f.h.db.pool, id);
  const failing = row!.gate!.checks.filter((c) => !c.ok).map((c) => c.name);
  t.same(
    failing,
    ['operation', 'observedGeneration', 'version', 'ready', 'tunnel'],
    'a Ready status, version and tunnel from before the upgrade count for nothing',
  );
  t.equal((await f.tenants(id)).get(ids[0]!)!.state, 'upgrading', 'the gate waits');
  f.clock.now += 61_000;
  await d.tickAll();
  const s = (await f.tenants(id)).get(ids[0]!)!;
  t.equal(s.state, 'rolling_back', 'after the gate timeout the tenant is rolled back');
  t.match(
    s.reason,
    /gate timed out after 60 s \(.*observedGeneration: observed 1, step generation 2/,
    'the reason names the checks that failed',
  );
});

t.test('Applications worse than before the upgrade fail the gate; as good pass', async (t) => {
  const ids = await f.readyTenants(2, '1.4.0', 'root-a');
  const pool = f.h.db.pool;
  const app = (tenant: string, name: string, health: string, rv: number) =>
    putHostedApplication(pool, tenant, name, health, rv);
  // Reporter r1 of the tenant's hosted runtime reported now (the store's write, without a heartbeat's figures).
  const heartbeat = async (tenant: string) =>
    recordReporter(pool, { tenantId: tenant, runtimeId: (await hostedRuntimeId(pool, tenant))! }, 'r1', undefined);
  for (const id of ids) {
    await app(id, 'guestbook', 'Healthy', 1);
    await heartbeat(id);
  }
  const engine = f.engine();
  await f.h.reconciler(engine);
  const fleetId = await f.start(
    {
      targetVersion: '1.4.1',
      waves: [{ count: 1 }, { count: 1 }],
      gateTimeoutSeconds: 30,
      failureBudget: { maxFailures: 5 },
    },
    ids,
  );
  const d = f.driver({ pollMs: 60_000 });
  await d.tickAll();
  // The canary's upgrade finishes; its runtime then reports the Application as Degraded.
  await until(
    'the canary upgrade to finish',
    10_000,
    async () => (await f.h.tenant(ids[0]!)).actual_runtime_version === '1.4.1',
  );
  await app(ids[0]!, 'guestbook', 'Degraded', 2);
  await heartbeat(ids[0]!);
  await d.tickAll();
  t.equal((await f.tenants(fleetId)).get(ids[0]!)!.state, 'upgrading', 'a worse report waits until the timeout');
  f.clock.now += 31_000;
  await d.tickAll();
  t.equal(
    (await f.tenants(fleetId)).get(ids[0]!)!.state,
    'rolling_back',
    'fewer Healthy and Synced Applications fail the gate',
  );
  await until(
    'the rollback to finish',
    10_000,
    async () => (await f.h.tenant(ids[0]!)).actual_runtime_version === '1.4.0',
  );
  await d.tickAll();
  t.match(
    (await f.tenants(fleetId)).get(ids[0]!)!.reason,
    /applications: 0 Healthy and Synced, 1 before/,
    'the reason gives the counts',
  );
  // The second tenant: the same Application stays Healthy, reported after the upgrade.
  await until('the second upgrade to finish', 10_000, async () => {
    await d.tickAll();
    return (await f.h.tenant(ids[1]!)).actual_runtime_version === '1.4.1';
  });
  await heartbeat(ids[1]!);
  await d.tickAll();
  t.equal((await f.tenants(fleetId)).get(ids[1]!)!.state, 'succeeded', 'as many Healthy and Synced Applications pass');
});

t.test('pause stops new starts at once; resume goes on; multi-hop paths run hop by hop', async (t) => {
  const ids = await f.readyTenants(4, '1.3.0', 'root-a');
  const engine = f.engine({ delayMs: 200 });
  await f.h.reconciler(engine, { workers: 8 });
  const id = await f.start({ targetVersion: '1.5.0', waves: [{ count: 1 }, { percent: 100 }], maxConcurrency: 1 }, ids);
  const driver = f.driver();
  await until(
    'the second wave to start',
    10_000,
    async () => (await f.tenants(id)).get(ids[1]!)!.state === 'upgrading',
  );
  const paused = await f.service.pause(id, OPERATOR, 'night shift');
  const pausedAt = Date.now();
  t.equal(paused.state, 'paused', 'pause answers the paused fleet upgrade');
  await until(
    'the running tenant to finish its path',
    10_000,
    async () => (await f.tenants(id)).get(ids[1]!)!.state === 'succeeded',
  );
  // Two whole rounds of the driver after it: a start would be decided in them.
  await driver.tickAll();
  await driver.tickAll();
  const startedAfter = engine.calls.filter(
    (c) => c.kind === 'up' && c.startedAt > pausedAt && ![ids[1]].includes(c.tenantId),
  );
  t.same(startedAfter, [], 'no other tenant started after the pause answered');
  t.equal((await f.tenants(id)).get(ids[2]!)!.state, 'pending', 'the rest wait');
  await f.service.resume(id, OPERATOR);
  t.equal(await f.waitState(id, ['completed', 'halted']), 'completed', 'after resume the fleet upgrade completes');
  const path = (await f.service.get(id))!.tenants!.find((x) => x.tenantId === ids[0])!.path;
  t.same(path, ['1.4.1', '1.5.0'], 'the path from 1.3.0 has the stepping stone');
  for (const tenant of ids) {
    t.equal(await f.upgradesTo(tenant, '1.4.1'), 1, `tenant ${tenant} made the first hop once`);
    t.equal(await f.upgradesTo(tenant, '1.5.0'), 1, `tenant ${tenant} made the second hop once`);
    t.equal((await f.h.tenant(tenant)).actual_runtime_version, '1.5.0', `tenant ${tenant} runs 1.5.0`);
  }
});

t.test(
  'abort with rollback rolls the moved tenants back in reverse wave order; pending ones are cancelled',
  async (t) => {
    const ids = await f.readyTenants(5, '1.4.0', 'root-a');
    const engine = f.engine();
    await f.h.reconciler(engine, { workers: 8 });
    const id = await f.start(
      {
        targetVersion: '1.4.1',
        waves: [{ count: 1 }, { count: 2 }, { count: 2 }],
        maxConcurrency: 2,
        soakSeconds: 3600,
      },
      ids,
    );
    f.driver();
    await until(
      'the canary to soak',
      10_000,
      async () => (await f.service.get(id, false))!.waves[0]!.state === 'soaking',
    );
    f.clock.now += 3_601_000;
    await until('wave 1 to soak', 10_000, async () => (await f.service.get(id, false))!.waves[1]!.state === 'soaking');
    const abortedAt = Date.now();
    const abort = await f.service.abort(id, OPERATOR, { rollback: true, reason: 'bad release' });
    t.equal(abort.state, 'aborting', 'an abort with tenants to roll back is aborting');
    t.equal(await f.waitState(id, ['aborted']), 'aborted', 'the abort ends');
    const back = ups(engine, '1.4.0').filter((c) => c.start >= abortedAt);
    t.equal(back.length, 3, 'the three moved tenants were rolled back');
    const canary = back.find((c) => c.tenant === ids[0])!;
    const wave1 = back.filter((c) => ids.slice(1, 3).includes(c.tenant));
    t.ok(
      wave1.every((c) => c.end <= canary.start),
      'wave 1 was rolled back before the canary',
    );
    const states = await f.tenants(id);
    t.same(
      ids.map((x) => states.get(x)!.state),
      ['reverted', 'reverted', 'reverted', 'cancelled', 'cancelled'],
      'moved tenants reverted, the last wave cancelled',
    );
    for (const x of ids) t.equal((await f.h.tenant(x)).actual_runtime_version, '1.4.0', `tenant ${x} runs 1.4.0`);
  },
);
