/**
 * Maintenance windows and freezes in the fleet upgrade driver, on a real Postgres with the
 * driver's clock injected (no reconciler runs: a started tenant is one whose upgrade was queued,
 * state upgrading): windows across the DST changes of Europe/Berlin and America/New_York (exact
 * UTC instants), a freeze wins over an open window, the duration-fits rule with the p95 of seeded
 * operations, the override audited, and a wave whose tenant's window will not open before the
 * wave's deadline goes on without it (skipped, outside-window).
 */
import t from 'tap';
import { FleetDriver } from '../../../provisioner/fleet/driver.ts';
import { catalog } from '../../../runtime/catalog.ts';
import { createFleetHarness, OPERATOR, type FleetHarness } from './fleet-harness.ts';
import type { MaintenanceWindow } from '../../../provisioner/store/tenants.ts';
import { setMaintenanceWindows } from '../../helpers/tenants.ts';
import { insertPastOperation } from '../../helpers/operations.ts';
import { auditRows } from '../../helpers/audit.ts';
import { fleetEventsOf } from '../../helpers/fleet.ts';

let f: FleetHarness;
let driver: FleetDriver;
t.beforeEach(async () => {
  f = await createFleetHarness();
  await f.h.addCluster('root-a');
  // Ticks are made by the test (no loop): each one a decision round at the clock's instant. The
  // service plans with the same clock.
  driver = new FleetDriver({ pool: f.h.db.pool, catalog, now: () => f.clock.now, clusterParallelism: 10 });
});
t.afterEach(() => f.close());

const at = (iso: string) => {
  f.clock.now = Date.parse(iso);
};
const setWindows = (id: string, windows: MaintenanceWindow[]) => setMaintenanceWindows(f.h.db.pool, id, windows);
async function tenant(fleetId: string, tenantId: string) {
  const v = await f.service.get(fleetId);
  return v!.tenants!.find((x) => x.tenantId === tenantId)!;
}
const nightly = (timeZone: string): MaintenanceWindow => ({
  rrule: 'FREQ=DAILY;BYHOUR=2;BYMINUTE=0',
  timeZone,
  durationMinutes: 120,
});

t.test('Europe/Berlin, spring forward: a 02:00-04:00 window opens at 03:00 CEST (01:00Z) that night', async (t) => {
  const [id] = await f.readyTenants(1, '1.4.0', 'root-a');
  await setWindows(id!, [nightly('Europe/Berlin')]);
  at('2026-03-28T23:30:00Z'); // 00:30 CET on 2026-03-29, the night the clocks jump from 02:00 to 03:00
  const fleet = await f.start({ targetVersion: '1.4.1', defaultUpgradeSeconds: 600 }, [id!]);
  await driver.tickAll();
  let s = await tenant(fleet, id!);
  t.equal(s.state, 'pending', 'outside its window the tenant is not started');
  t.equal(s.deferredUntil, '2026-03-29T01:00:00.000Z', 'deferred until 03:00 CEST (02:00 does not exist that night)');
  t.match(s.reason, /waiting for its maintenance window: .* opens at 2026-03-29T01:00:00.000Z/, 'the reason says when');
  at('2026-03-29T00:59:59Z');
  await driver.tickAll();
  t.equal((await tenant(fleet, id!)).state, 'pending', 'one second before, still waiting');
  at('2026-03-29T01:00:00Z');
  await driver.tickAll();
  s = await tenant(fleet, id!);
  t.equal(s.state, 'upgrading', 'at 01:00Z the window is open: started');
  t.equal(s.deferredUntil, null, 'no longer deferred');
  t.equal(await f.upgradesTo(id!, '1.4.1'), 1, 'one upgrade was queued');
  const events = await fleetEventsOf(f.h.db.pool, fleet, { tenantId: id! });
  t.same(
    events.map((e) => e.action),
    ['tenant_deferred', 'tenant_upgrade'],
    'the stream says it was deferred once (not every tick), then upgraded',
  );
  t.equal(events[0]!.data.until, '2026-03-29T01:00:00.000Z', 'the deferral event names the instant');
});

t.test('Berlin: with 10 min needed and 5 min left of the change night window, the next night is taken', async (t) => {
  const [id] = await f.readyTenants(1, '1.4.0', 'root-a');
  await setWindows(id!, [nightly('Europe/Berlin')]);
  at('2026-03-29T01:55:00Z'); // 03:55 CEST: the window (03:00-04:00 CEST that night) ends at 02:00Z
  const fleet = await f.start({ targetVersion: '1.4.1', defaultUpgradeSeconds: 600 }, [id!]);
  await driver.tickAll();
  t.equal(
    (await tenant(fleet, id!)).deferredUntil,
    '2026-03-30T00:00:00.000Z',
    'the window ends at 04:00 CEST (02:00Z); the next opens at 02:00 CEST on the 30th (00:00Z)',
  );
});

t.test('America/New_York, fall back: a 02:00-04:00 window opens at 02:00 EST (07:00Z), not 06:00Z', async (t) => {
  const [id] = await f.readyTenants(1, '1.4.0', 'root-a');
  await setWindows(id!, [nightly('America/New_York')]);
  at('2026-11-01T05:30:00Z'); // 01:30 EDT; at 06:00Z the clocks go back from 02:00 EDT to 01:00 EST
  const fleet = await f.start({ targetVersion: '1.4.1', defaultUpgradeSeconds: 600 }, [id!]);
  await driver.tickAll();
  t.equal((await tenant(fleet, id!)).deferredUntil, '2026-11-01T07:00:00.000Z', 'deferred until 02:00 EST');
  at('2026-11-01T06:30:00Z'); // 01:30 EST, the second 01:30 of the night
  await driver.tickAll();
  t.equal((await tenant(fleet, id!)).state, 'pending', 'at the second 01:30 the window is not open yet');
  at('2026-11-01T07:00:00Z');
  await driver.tickAll();
  t.equal((await tenant(fleet, id!)).state, 'upgrading', 'at 02:00 EST it starts');
});

t.test('a freeze wins over an open window, and over the override', async (t) => {
  const [id, other] = await f.readyTenants(2, '1.4.0', 'root-a');
  const sixHours = { rrule: 'FREQ=DAILY;BYHOUR=0', timeZone: 'UTC', durationMinutes: 360 };
  await setWindows(id!, [sixHours]);
  at('2026-06-10T01:00:00Z'); // inside the 00:00-06:00Z window
  const freezes = [{ from: '2026-06-10T00:30:00Z', until: '2026-06-10T03:00:00Z', reason: 'incident 42' }];
  const fleet = await f.start(
    { targetVersion: '1.4.1', waves: [{ count: 2 }], maxConcurrency: 2, defaultUpgradeSeconds: 600, freezes },
    [id!, other!],
  );
  await driver.tickAll();
  t.equal((await tenant(fleet, id!)).state, 'pending', 'its window is open, but the freeze holds it');
  t.equal((await tenant(fleet, id!)).deferredUntil, '2026-06-10T03:00:00.000Z', 'until the freeze ends');
  t.equal((await tenant(fleet, other!)).state, 'pending', 'a tenant without windows is held by the freeze too');
  await f.service.overrideWindows(fleet, OPERATOR, 'page from the on-call');
  await driver.tickAll();
  t.equal((await tenant(fleet, other!)).state, 'pending', 'the override does not lift a freeze');
  at('2026-06-10T03:00:00Z');
  await driver.tickAll();
  t.equal((await tenant(fleet, id!)).state, 'upgrading', 'when the freeze ends it starts');
  t.equal((await tenant(fleet, other!)).state, 'upgrading', 'so does the tenant without windows');
});

t.test('duration fits: the p95 of the edge from the operations decides which tenant starts', async (t) => {
  const [early, late, history] = await f.readyTenants(3, '1.4.0', 'root-a');
  // 20 past upgrades 1.4.0 -> 1.4.1 lasting 1, 2, …, 20 minutes: p95 (continuous) = 19.05 min = 1143 s.
  for (let i = 1; i <= 20; i++)
    await insertPastOperation(f.h.db.pool, history!, {
      kind: 'upgrade',
      fromVersion: '1.4.0',
      toVersion: '1.4.1',
      state: 'succeeded',
      createdSecondsAgo: 2 * 86_400,
      durationSeconds: i * 60,
    });
  // A rollback of the edge and a failed upgrade do not count.
  for (const [fromVersion, toVersion, state] of [
    ['1.4.1', '1.4.0', 'succeeded'],
    ['1.4.0', '1.4.1', 'failed'],
  ] as const)
    await insertPastOperation(f.h.db.pool, history!, {
      kind: 'upgrade',
      fromVersion,
      toVersion,
      state,
      createdSecondsAgo: 0,
      durationSeconds: 5 * 3600,
    });
  await setWindows(early!, [{ rrule: 'FREQ=DAILY;BYHOUR=0', timeZone: 'UTC', durationMinutes: 60 }]); // 00:00-01:00Z
  await setWindows(late!, [{ rrule: 'FREQ=DAILY;BYHOUR=0;BYMINUTE=20', timeZone: 'UTC', durationMinutes: 60 }]); // 00:20-01:20Z
  at('2026-06-10T00:45:00Z');
  const plan = await f.service.plan({
    targetVersion: '1.4.1',
    selector: { tenantIds: [early!, late!] },
    waves: [{ count: 2 }],
  });
  t.same(
    plan.tenants.map((x) => x.expectedSeconds),
    [1143, 1143],
    'the plan gives the expected duration: the p95 of the 20 seeded upgrades (1143 s)',
  );
  const fleet = await f.start({ targetVersion: '1.4.1', waves: [{ count: 2 }], maxConcurrency: 2 }, [early!, late!]);
  await driver.tickAll();
  const e = await tenant(fleet, early!);
  t.equal(e.state, 'pending', 'its window has 15 min left, less than the p95 (19.05 min): not started');
  t.equal(e.deferredUntil, '2026-06-11T00:00:00.000Z', "it waits for the next day's window");
  t.match(e.reason, /p95 of 1\.4\.0 -> 1\.4\.1 over 20 upgrades 20 min/, 'the reason names the p95 and its sample');
  t.equal((await tenant(fleet, late!)).state, 'upgrading', 'its window has 35 min left, more than the p95: started');
});

t.test('override at 3 a.m.: a waiting tenant starts at once; audited with the operator and the reason', async (t) => {
  const [id] = await f.readyTenants(1, '1.4.0', 'root-a');
  await setWindows(id!, [{ rrule: 'FREQ=WEEKLY;BYDAY=SA;BYHOUR=2', timeZone: 'Europe/Berlin', durationMinutes: 240 }]);
  at('2026-06-10T01:00:00Z'); // a Wednesday
  const fleet = await f.start({ targetVersion: '1.4.1' }, [id!]);
  await driver.tickAll();
  t.equal((await tenant(fleet, id!)).deferredUntil, '2026-06-13T00:00:00.000Z', 'waits for Saturday 02:00 CEST');
  const view = await f.service.overrideWindows(fleet, OPERATOR, 'CVE-2026-0001: cannot wait for Saturday');
  t.match(
    view.windowsOverride,
    { by: 'test-operator', reason: 'CVE-2026-0001: cannot wait for Saturday' },
    'the fleet upgrade shows the override',
  );
  t.equal((await tenant(fleet, id!)).deferredUntil, null, 'the override clears the deferral');
  await driver.tickAll();
  t.equal((await tenant(fleet, id!)).state, 'upgrading', 'the next tick starts it');
  const audit = await auditRows(f.h.db.pool, { action: 'fleet_upgrade.override_windows', targetId: fleet });
  t.equal(audit.length, 1, 'one audit row');
  t.equal(audit[0]!.actor, 'test-operator', 'naming the operator');
  t.equal(audit[0]!.after?.reason, 'CVE-2026-0001: cannot wait for Saturday', 'and the reason');
  const ev = await fleetEventsOf(f.h.db.pool, fleet, { action: 'override_windows' });
  t.match(ev[0]?.data, { by: 'test-operator', reason: 'CVE-2026-0001: cannot wait for Saturday' }, 'an event');
  await f.service.abort(fleet, OPERATOR, { rollback: false });
  await t.rejects(
    f.service.overrideWindows(fleet, OPERATOR, 'too late'),
    { code: 'FLEET_UPGRADE_STATE' },
    'a finished fleet upgrade cannot be overridden',
  );
});

t.test("a tenant whose window will not open before the wave's deadline is skipped; the waves go on", async (t) => {
  const [canary, next] = await f.readyTenants(2, '1.4.0', 'root-a');
  await setWindows(canary!, [{ rrule: 'FREQ=DAILY;BYHOUR=0', timeZone: 'UTC', durationMinutes: 60 }]);
  at('2026-06-10T23:30:00Z');
  const fleet = await f.start(
    {
      targetVersion: '1.4.1',
      waves: [{ count: 1 }, { percent: 100 }],
      windowWaitSeconds: 7200,
      defaultUpgradeSeconds: 600,
    },
    [canary!, next!],
  );
  await driver.tickAll();
  t.equal((await tenant(fleet, canary!)).deferredUntil, '2026-06-11T00:00:00.000Z', 'the canary waits 30 min');
  // The tenant moves its window to weekends meanwhile: it no longer opens before the deadline (01:30Z).
  await setWindows(canary!, [{ rrule: 'FREQ=WEEKLY;BYDAY=SA;BYHOUR=0', timeZone: 'UTC', durationMinutes: 60 }]);
  at('2026-06-10T23:45:00Z');
  await driver.tickAll();
  const s = await tenant(fleet, canary!);
  t.equal(s.state, 'skipped', 'the canary is skipped');
  t.match(s.reason, /^outside every maintenance window: .*the wave's deadline/, 'reason outside-window');
  t.equal((await tenant(fleet, next!)).state, 'upgrading', 'the next wave started: no deadlock');
  const audit = await auditRows(f.h.db.pool, { action: 'fleet_upgrade.tenant_skipped', targetId: canary! });
  t.equal(audit[0]?.after?.outsideWindow, true, 'the skip is audited as outside-window');
});
