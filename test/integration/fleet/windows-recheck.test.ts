/**
 * A fleet upgrade judges its tenants' maintenance windows again at each decision, with the windows
 * they have then: a tenant left out for its windows (excluded by the plan, or skipped by the
 * driver) while its wave has not completed is picked up when its windows change so that one opens
 * before the wave's deadline, or when the operator overrides the windows; and it is upgraded once.
 * With the reconciler and the ScriptedEngine TEST DOUBLE on a real Postgres, the driver's clock
 * injected (the service plans with the same clock).
 */
import t from 'tap';
import { createFleetHarness, OPERATOR, type FleetHarness } from './fleet-harness.ts';
import type { MaintenanceWindow } from '../../../provisioner/store/tenants.ts';
import { until } from '../../../sandbox/until.ts';
import { setMaintenanceWindows } from '../../helpers/tenants.ts';
import { auditRows } from '../../helpers/audit.ts';
import { fleetEventsOf } from '../../helpers/fleet.ts';

let f: FleetHarness;
t.beforeEach(async () => {
  f = await createFleetHarness();
  await f.h.addCluster('root-a');
});
t.afterEach(() => f.close());

const setWindows = (id: string, windows: MaintenanceWindow[]) => setMaintenanceWindows(f.h.db.pool, id, windows);
/** Saturdays 00:00-01:00 UTC: from a Wednesday noon, not within the 2-hour wave deadline used here. */
const saturdays: MaintenanceWindow = { rrule: 'FREQ=WEEKLY;BYDAY=SA;BYHOUR=0', timeZone: 'UTC', durationMinutes: 60 };
/** Every day 12:00-14:00 UTC: open at the test's clock. */
const middays: MaintenanceWindow = { rrule: 'FREQ=DAILY;BYHOUR=12', timeZone: 'UTC', durationMinutes: 120 };

/**
 * Three tenants on 1.4.1: a canary and a second one without windows, and `late` with
 * `lateWindows` (by default only Saturdays, past the wave's deadline). Waves: the canary, then the rest. The second
 * tenant's engine run is held until `release()`, so wave 1 stays under way.
 */
async function scenario(lateWindows: MaintenanceWindow[] = [saturdays]) {
  f.clock.now = Date.parse('2026-06-10T12:00:00Z'); // a Wednesday
  const [canary, second, late] = await f.readyTenants(3, '1.4.1', 'root-a');
  await setWindows(late!, lateWindows);
  let release!: () => void;
  const held = new Promise<void>((resolve) => (release = resolve));
  const engine = f.engine({ hold: (call) => (call.tenantId === second ? held : undefined) });
  await f.h.reconciler(engine, { workers: 4 });
  const out = await f.service.create(
    {
      targetVersion: '1.5.0',
      selector: { tenantIds: [canary!, second!, late!] },
      waves: [{ count: 1 }, { percent: 100 }],
      soakSeconds: 0,
      windowWaitSeconds: 7200,
      defaultUpgradeSeconds: 600,
    },
    OPERATOR,
  );
  const id = out.fleetUpgrade.id;
  const driver = f.driver({ clusterParallelism: 10 });
  const state = async (tenant: string) => (await f.tenants(id)).get(tenant)!.state;
  await until('wave 1 under way', 20_000, async () => ((await state(second!)) === 'upgrading' ? true : undefined), 50);
  return { id, canary: canary!, second: second!, late: late!, release, state, plan: out.plan, driver };
}

t.test('a tenant the plan excluded for its windows is upgraded in its wave once a window opens', async (t) => {
  const s = await scenario();
  t.match(
    s.plan.excluded.find((e) => e.tenantId === s.late)?.reason,
    /^outside every maintenance window/,
    'the plan lists it as excluded: outside every maintenance window',
  );
  t.equal(await s.state(s.late), 'excluded', 'while its window is far off it stays out');
  // The tenant changes its windows (PATCH /v1/tenants/:id maintenanceWindows): one is open now.
  await setWindows(s.late, [middays]);
  await until(
    'the tenant to be started',
    10_000,
    async () => ((await s.state(s.late)) !== 'excluded' ? true : undefined),
    50,
  );
  s.release();
  t.equal(await f.waitState(s.id, ['completed', 'halted']), 'completed', 'the fleet upgrade completes');
  const states = await f.tenants(s.id);
  for (const id of [s.canary, s.second, s.late]) {
    t.equal(states.get(id)!.state, 'succeeded', `tenant ${id} succeeded`);
    t.equal(await f.upgradesTo(id, '1.5.0'), 1, `tenant ${id} got exactly one upgrade`);
  }
  t.equal(states.get(s.late)!.wave, 1, 'the late tenant went in wave 1, the wave it would have had');
  t.equal((await f.service.get(s.id))!.waves[1]!.size, 2, 'wave 1 counts the tenant it took back');
  const ev = await fleetEventsOf(f.h.db.pool, s.id, { tenantId: s.late });
  t.same(
    ev.map((r) => r.action),
    ['tenant_requeued', 'tenant_upgrade', 'tenant_succeeded'],
    'the stream says it was taken back, then upgraded',
  );
  t.match(ev[0]!.data.reason, /maintenance windows changed/, 'saying why');
});

t.test('an override picks up the tenants left out for their windows while their wave runs', async (t) => {
  const s = await scenario();
  t.equal(await s.state(s.late), 'excluded', 'excluded by the plan');
  await f.service.overrideWindows(s.id, OPERATOR, 'CVE-2026-0002');
  await until(
    'the tenant to be started',
    10_000,
    async () => ((await s.state(s.late)) !== 'excluded' ? true : undefined),
    50,
  );
  s.release();
  t.equal(await f.waitState(s.id, ['completed', 'halted']), 'completed', 'the fleet upgrade completes');
  t.equal((await f.tenants(s.id)).get(s.late)!.state, 'succeeded', 'the tenant excluded for its windows succeeded');
  t.equal(await f.upgradesTo(s.late, '1.5.0'), 1, 'with one upgrade');
  const audit = await auditRows(f.h.db.pool, { action: 'fleet_upgrade.tenant_requeued', targetId: s.late });
  t.match(audit[0]?.after, { reason: /overridden/ }, 'audited, naming the override');
});

t.test('a tenant the driver skipped for its windows is taken back when they change while its wave runs', async (t) => {
  // 13:00-14:00 UTC: at the plan (12:00) it opens with room before the wave's deadline (14:00): planned.
  const s = await scenario([{ rrule: 'FREQ=DAILY;BYHOUR=13', timeZone: 'UTC', durationMinutes: 60 }]);
  t.equal(await s.state(s.late), 'pending', 'planned in wave 1, waiting for 13:00');
  // Its windows move to Saturdays: none opens before the deadline, so the driver skips it.
  await setWindows(s.late, [saturdays]);
  await until('the skip', 10_000, async () => ((await s.state(s.late)) === 'skipped' ? true : undefined), 50);
  // And back to a window open now, while wave 1 still runs: it is taken back and upgraded.
  await setWindows(s.late, [middays]);
  await until(
    'the late tenant to start',
    10_000,
    async () => ((await s.state(s.late)) === 'upgrading' ? true : undefined),
    50,
  );
  s.release();
  t.equal(await f.waitState(s.id, ['completed', 'halted']), 'completed', 'the fleet upgrade completes');
  t.equal((await f.tenants(s.id)).get(s.late)!.state, 'succeeded', 'the tenant skipped for its windows succeeded');
  t.equal(await f.upgradesTo(s.late, '1.5.0'), 1, 'with one upgrade');
  t.equal((await f.service.get(s.id))!.waves[1]!.size, 2, 'wave 1 still counts it once');
  const ev = await fleetEventsOf(f.h.db.pool, s.id, { tenantId: s.late });
  t.same(
    ev.map((r) => r.action),
    ['tenant_deferred', 'tenant_skipped', 'tenant_requeued', 'tenant_upgrade', 'tenant_succeeded'],
    'deferred, skipped, taken back, upgraded',
  );
});

t.test('a tenant left out for its windows is not taken back once its wave completed', async (t) => {
  const s = await scenario();
  s.release();
  t.equal(await f.waitState(s.id, ['completed', 'halted']), 'completed', 'the fleet upgrade completes without it');
  await setWindows(s.late, [middays]);
  // A whole round of the driver after the change: any take-back would be decided in it.
  await s.driver.tickAll();
  t.equal((await f.tenants(s.id)).get(s.late)!.state, 'excluded', 'it stays excluded after a driver round');
  t.equal(await f.upgradesTo(s.late, '1.5.0'), 0, 'and is not upgraded');
});
