/**
 * Maintenance windows through the API: a tenant sets its own (an operator any tenant's) with
 * PATCH /v1/tenants/:id, they are stored normalised, shown by GET, audited, queue no operation;
 * bad windows are 400s naming the field. The fleet upgrade's dry run lists tenants outside every
 * window; the override (with a reason) plans them and is audited.
 */
import t from 'tap';
import { createTestApi, type TestApi } from '../../helpers/api.ts';
import { insertCluster } from '../../../provisioner/store/clusters.ts';
import { markReconciled } from '../../helpers/tenants.ts';
import { settleTenantOperations } from '../../helpers/operations.ts';
import { fleetEventsOf, planFleetUpgrade, startFleetUpgrade } from '../../helpers/fleet.ts';
import type { BodyOf } from '../../../provisioner/http/api-client.ts';
import { auditRows } from '../../helpers/audit.ts';

let api: TestApi;
t.before(async () => {
  api = await createTestApi();
});
t.teardown(() => api.close());

type Windows = NonNullable<BodyOf<'PATCH /v1/tenants/:id'>['maintenanceWindows']>;
/** Sets a tenant's windows with `key`. */
const setWindows = (key: string, id: string, maintenanceWindows: Windows) =>
  api.as(key).request('PATCH /v1/tenants/:id', { params: { id }, body: { maintenanceWindows } });
const windowsOf = async (key: string, id: string) =>
  (await api.as(key).call('GET /v1/tenants/:id', { params: { id } })).maintenanceWindows;

const weekly = { rrule: 'FREQ=WEEKLY;BYDAY=SA;BYHOUR=2;BYMINUTE=0', timeZone: 'Europe/Berlin', durationMinutes: 240 };

t.test('a tenant sets its own windows; GET shows them; audited; no operation is queued', async (t) => {
  const { tenantId, apiKey, operationId } = await api.signup();
  t.same(await windowsOf(apiKey, tenantId), [], 'a new tenant has no windows (any time)');
  const res = await setWindows(apiKey, tenantId, [
    { ...weekly, rrule: 'RRULE:freq=weekly;byday=sa;byhour=2;byminute=0', timeZone: 'europe/berlin' },
    {
      rrule: 'FREQ=DAILY;BYHOUR=3',
      timeZone: 'America/New_York',
      durationMinutes: 60,
      dtstart: '2026-01-01T03:00',
    },
  ]);
  t.equal(res.status, 202, `the tenant's own key sets its windows (${JSON.stringify(res.body).slice(0, 200)})`);
  if (!res.ok) throw new Error('precondition: the windows were set');
  t.equal(res.body.operationId, operationId, 'no operation is queued: the answer names the last one (the signup)');
  t.equal(res.body.tenant.generation, 1, 'windows are not a spec change: the generation stays');
  t.same(
    await windowsOf(apiKey, tenantId),
    [
      weekly,
      { rrule: 'FREQ=DAILY;BYHOUR=3', timeZone: 'America/New_York', durationMinutes: 60, dtstart: '2026-01-01T03:00' },
    ],
    'GET shows the windows, normalised (rule upper-case without RRULE:, canonical zone)',
  );
  const audit = await auditRows(api.db.pool, { action: 'tenant.maintenance_windows', targetId: tenantId });
  t.equal(audit.length, 1, 'the change is audited once');
  t.equal(audit[0]!.actorRole, 'tenant', 'the audit row names the tenant as the actor');
  const again = await setWindows(api.operatorKey, tenantId, []);
  t.equal(again.status, 202, 'an operator may set any tenant its windows');
  t.same(again.ok && again.body.tenant.maintenanceWindows, [], 'an empty list: any time again');
  const other = await api.signup();
  const foreign = await setWindows(apiKey, other.tenantId, [weekly]);
  t.equal(foreign.status, 404, "a tenant key cannot set another tenant's windows (it does not see it)");
});

t.test('bad windows are refused with a 400 naming the field, and nothing is written', async (t) => {
  const { tenantId, apiKey } = await api.signup();
  const cases: Array<[string, unknown, string, RegExp]> = [
    ['a bad RRULE', { ...weekly, rrule: 'FREQ=SOMETIMES' }, 'maintenanceWindows.0.rrule', /DAILY, WEEKLY/],
    ['garbage', { ...weekly, rrule: 'every saturday' }, 'maintenanceWindows.0.rrule', /recurrence rule/],
    ['an unknown zone', { ...weekly, timeZone: 'Europe/Atlantis' }, 'maintenanceWindows.0.timeZone', /IANA/],
    ['too short', { ...weekly, durationMinutes: 5 }, 'maintenanceWindows.0.durationMinutes', /15/],
    ['too long', { ...weekly, durationMinutes: 100_000 }, 'maintenanceWindows.0.durationMinutes', /10080/],
    ['an unknown field', { ...weekly, start: '02:00' }, 'maintenanceWindows.0.start', /./],
    ['a bad dtstart', { ...weekly, dtstart: '2026-13-01T02:00' }, 'maintenanceWindows.0.dtstart', /valid/],
  ];
  // some windows are of the wrong shape: all sent raw
  for (const [what, w, field, message] of cases) {
    const r = await api.request('PATCH', `/v1/tenants/${tenantId}`, {
      key: apiKey,
      body: { maintenanceWindows: [w] },
    });
    t.equal(r.statusCode, 400, `${what}: 400`);
    t.equal(r.json().error?.field, field, `${what}: names ${field}`);
    t.match(r.json().error?.message, message, `${what}: says why (${r.json().error?.message})`);
  }
  const many = await setWindows(apiKey, tenantId, Array<typeof weekly>(21).fill(weekly));
  t.equal(many.status, 400, 'more than 20 windows: 400');
  t.match(many.body, { error: { field: 'maintenanceWindows' } }, 'names maintenanceWindows');
  t.same(await windowsOf(apiKey, tenantId), [], 'nothing was written');
});

t.test(
  'the dry run lists tenants outside every window with the reason; the override plans them, audited',
  async (t) => {
    await insertCluster(api.db.pool, {
      name: 'windows-root',
      region: 'eu-1',
      labels: {},
      capacity: 100,
      plans: [],
      kubeconfigEnc: api.services.box.encrypt('x', 'cluster/windows-root'),
    });
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) {
      const { tenantId } = await api.signup({ runtimeVersion: '1.4.1' });
      await markReconciled(api.db.pool, tenantId, { cluster: 'windows-root', readyCondition: true });
      await settleTenantOperations(api.db.pool, tenantId, { finishedNow: false });
      ids.push(tenantId);
    }
    const [always, never, short] = ids as [string, string, string];
    const patch = (id: string, maintenanceWindows: Windows) => setWindows(api.operatorKey, id, maintenanceWindows);
    // A window that ended in 2020 (COUNT) never opens again; a 15-minute window cannot hold a 30-minute upgrade.
    t.equal((await patch(never, [{ ...weekly, rrule: 'FREQ=DAILY;BYHOUR=2;COUNT=1' }])).status, 202);
    t.equal((await patch(short, [{ rrule: 'FREQ=DAILY;BYHOUR=2', timeZone: 'UTC', durationMinutes: 15 }])).status, 202);
    const operator = api.as(api.operatorKey);
    const body = { targetVersion: '1.5.0', selector: { tenantIds: ids }, waves: [{ count: 1 }, { percent: 100 }] };
    const p = await planFleetUpgrade(operator, body);
    t.same(
      p.tenants.map((x) => x.tenantId),
      [always],
      'only the tenant without windows is planned',
    );
    const reasons = Object.fromEntries(p.excluded.map((e) => [e.tenantId, e.reason]));
    t.match(
      reasons[never],
      /^outside every maintenance window: none of its windows opens before /,
      'never in a window',
    );
    t.match(
      reasons[short],
      /^outside every maintenance window: no window before .* has 30 min left \(1\.4\.1 -> 1\.5\.0 has no history: default 30 min\)/,
      'windows too short for the expected duration (the default, no history)',
    );
    await t.rejects(
      planFleetUpgrade(operator, { ...body, overrideWindows: { reason: '' } }),
      { name: 'ApiError', status: 400, field: 'overrideWindows.reason' },
      'an override without a reason is refused, naming overrideWindows.reason',
    );
    await t.rejects(
      planFleetUpgrade(operator, {
        ...body,
        freezes: [{ from: '2026-12-27T00:00:00Z', until: '2026-12-24T00:00:00Z' }],
      }),
      { name: 'ApiError', status: 400, field: 'freezes.0.until' },
      'a freeze ending before it begins is refused, naming freezes.0.until',
    );

    const started = await startFleetUpgrade(operator, {
      ...body,
      overrideWindows: { reason: 'CVE-2026-1234, approved by the CTO' },
    });
    t.equal(started.plan.counts.upgradeable, 3, 'the override starts all three: with it every tenant is planned');
    const id = started.fleetUpgrade.id;
    const got = await operator.call('GET /v1/fleet-upgrades/:id', { params: { id } });
    t.match(
      got.windowsOverride,
      { by: String, reason: 'CVE-2026-1234, approved by the CTO', at: String },
      'GET shows the override, by whom and why',
    );
    const audit = await auditRows(api.db.pool, { action: 'fleet_upgrade.override_windows', targetId: id });
    t.equal(audit.length, 1, 'the override has its audit row');
    t.equal(audit[0]!.after?.reason, 'CVE-2026-1234, approved by the CTO', 'the audit row has the reason');
    t.equal(audit[0]!.actor, got.windowsOverride?.by, 'the audit row names the operator (its key id)');
    t.equal(audit[0]!.actorRole, 'operator', 'an operator');
    const events = await fleetEventsOf(api.db.pool, id, { action: 'override_windows' });
    t.equal(events[0]?.data.reason, 'CVE-2026-1234, approved by the CTO', 'the progress stream has the override');
    // an override body without its reason: sent raw
    const noReason = await api.request('POST', `/v1/fleet-upgrades/${id}/override-windows`, {
      key: api.operatorKey,
      body: {},
    });
    t.equal(noReason.statusCode, 400, 'overriding a running fleet upgrade needs a reason');
    await operator.call('POST /v1/fleet-upgrades/:id/abort', { params: { id }, body: {} });
  },
);
