/**
 * Skipping a health-gate check of one tenant's step in a fleet upgrade (POST
 * /v1/fleet-upgrades/:id/tenants/:tenantId/skip-gate), against a real Postgres with the real fleet
 * driver. No reconciler runs: what it would do with a step's operation (the new version running,
 * Ready) is written as it writes it, and no tenant's tunnel ever connects again, so each step waits
 * on its tunnel check, as it does for a runtime whose agents are down for another reason. The
 * driver is ticked by hand (tickAll): each judgment happens when the test says, without sleeps.
 */
import t from 'tap';
import { createTestApi } from '../../helpers/api.ts';
import { FleetDriver } from '../../../provisioner/fleet/driver.ts';
import { insertCluster } from '../../../provisioner/store/clusters.ts';
import { createKey } from '../../../provisioner/store/keys.ts';
import { catalog } from '../../../runtime/catalog.ts';
import type { AnswerOf, BodyOf } from '../../../provisioner/http/api-client.ts';
import type { ErrorBody, FleetUpgrade } from '../../../provisioner/api/types.ts';
import { markReconciled } from '../../helpers/tenants.ts';
import { completeQueuedUpgrades, settleTenantOperations } from '../../helpers/operations.ts';
import { putTunnelRow } from '../../helpers/tunnels.ts';
import { auditCount, auditRows } from '../../helpers/audit.ts';
import { fleetEventsOf } from '../../helpers/fleet.ts';
import { fleetTenantRows } from '../../../provisioner/store/fleet-upgrades.ts';

const api = await createTestApi();
t.teardown(() => api.close());
const operator = await createKey(api.db.pool, { role: 'operator', name: 'ops-bob', createdBy: 'test' });

await insertCluster(api.db.pool, {
  name: 'skip-root',
  region: 'eu-1',
  labels: {},
  capacity: 10,
  plans: [],
  kubeconfigEnc: api.services.box.encrypt('x', 'cluster/skip-root'),
});

/** A tenant Ready on `version` whose tunnel connected once, an hour ago (it never reconnects). */
async function ready(version: string, organization: string): Promise<{ id: string; key: string }> {
  const { tenantId, apiKey } = await api.signup({ runtimeVersion: version, organization });
  await markReconciled(api.db.pool, tenantId, { cluster: 'skip-root', readyCondition: true });
  await settleTenantOperations(api.db.pool, tenantId);
  await putTunnelRow(api.db.pool, tenantId, {
    replicaId: 'test-replica',
    replicaUrl: 'http://127.0.0.1:1',
    connectedSecondsAgo: 3600,
  });
  return { id: tenantId, key: apiKey };
}

/** What the reconciler does with every queued upgrade: the version runs and the tenant is Ready. */
async function reconcileUpgrades(): Promise<void> {
  await completeQueuedUpgrades(api.db.pool);
}

const SKIP = 'POST /v1/fleet-upgrades/:id/tenants/:tenantId/skip-gate';
/** A skip through the typed client: the status, and the answer or its error (the assertions read either). */
async function skip(fleet: string, tenant: string, body: BodyOf<typeof SKIP>, key: string = operator.key) {
  const res = await api.as(key).request(SKIP, { params: { id: fleet, tenantId: tenant }, body });
  return { status: res.status, json: res.body as AnswerOf<typeof SKIP> & ErrorBody };
}
/** A body the route's types refuse on purpose (a check that is no skippable one, no reason): the raw request. */
async function skipRaw(fleet: string, tenant: string, body: unknown) {
  const res = await api.request('POST', `/v1/fleet-upgrades/${fleet}/tenants/${tenant}/skip-gate`, {
    key: operator.key,
    body,
  });
  return { status: res.statusCode, json: res.json<ErrorBody>() };
}
const operatorClient = api.as(operator.key);
const REASON = 'INC-4711: the reporter and tunnel client of this tenant are down for a cluster DNS outage';

const a = await ready('1.4.0', 'skip-a-org');
const b = await ready('1.4.0', 'skip-b-org');
const outside = await ready('1.4.0', 'skip-outside-org');
const started = await operatorClient.request('POST /v1/fleet-upgrades', {
  body: {
    targetVersion: '1.4.1',
    selector: { tenantIds: [a.id, b.id] },
    waves: [{ count: 2 }],
    maxConcurrency: 2,
    soakSeconds: 0,
    gateTimeoutSeconds: 3600,
  },
});
if (started.status !== 201 || !started.ok || !('fleetUpgrade' in started.body))
  throw new Error(`fleet start: ${started.status} ${JSON.stringify(started.body)}`);
const fleetId = started.body.fleetUpgrade.id;

// The driver starts both steps, the "reconciler" applies them, and the next judgment waits on the tunnel.
const first = new FleetDriver({ pool: api.db.pool, catalog, owner: 'replica-1' });
await first.tickAll();
await reconcileUpgrades();
await first.tickAll();
// Another replica judges from here on: the first hands its lease back, as at a shutdown.
await first.stop();

const view = (): Promise<FleetUpgrade> =>
  operatorClient.call('GET /v1/fleet-upgrades/:id', { params: { id: fleetId } });
const row = (f: FleetUpgrade, id: string) => f.tenants!.find((x) => x.tenantId === id)!;
{
  const f = await view();
  for (const x of [a, b])
    if (
      row(f, x.id)
        .gateWait?.waitingOn.map((c) => c.name)
        .join() !== 'tunnel'
    )
      throw new Error(`precondition: ${x.id} waits on the tunnel alone: ${JSON.stringify(row(f, x.id))}`);
}

t.test('the request is checked before anything is written: 4xx naming what was wrong', async (t) => {
  const unknown = await skipRaw(fleetId, a.id, { checks: ['operation'], reason: REASON });
  t.equal(unknown.status, 400, 'a check that cannot be skipped is a 400');
  t.equal(unknown.json.error.field, 'checks.0', 'naming the field checks.0');
  t.match(unknown.json.error.message, /tunnel, applications/, 'and saying which checks can be skipped');
  const made = await skipRaw(fleetId, a.id, { checks: ['bogus'], reason: REASON });
  t.equal(made.status, 400, 'an unknown check name is a 400 too');
  const noReason = await skipRaw(fleetId, a.id, { checks: ['tunnel'] });
  t.equal(noReason.status, 400, 'a skip without a reason is a 400');
  t.equal(noReason.json.error.field, 'reason', 'naming the field reason');
  const empty = await skip(fleetId, a.id, { checks: [], reason: REASON });
  t.equal(empty.status, 400, 'a skip of no check is a 400');
  t.equal(empty.json.error.field, 'checks', 'naming the field checks');

  const noFleet = await skip('00000000-0000-4000-8000-000000000000', a.id, {
    checks: ['tunnel'],
    reason: REASON,
  });
  t.equal(noFleet.status, 404, 'an unknown fleet upgrade is a 404');
  t.equal(noFleet.json.error.code, 'FLEET_UPGRADE_NOT_FOUND', 'FLEET_UPGRADE_NOT_FOUND');
  const notPart = await skip(fleetId, outside.id, { checks: ['tunnel'], reason: REASON });
  t.equal(notPart.status, 404, 'a tenant the fleet upgrade does not upgrade is a 404');
  t.equal(notPart.json.error.code, 'TENANT_NOT_FOUND', 'TENANT_NOT_FOUND');

  const notWaiting = await skip(fleetId, a.id, {
    checks: ['applications'],
    reason: REASON,
  });
  t.equal(notWaiting.status, 409, 'a check the step does not wait on is a 409');
  t.equal(notWaiting.json.error.code, 'GATE_NOT_WAITING', 'GATE_NOT_WAITING');
  t.match(
    notWaiting.json.error.message,
    /does not wait on applications: it waits on tunnel/,
    'saying what it waits on',
  );

  const tenantKey = await skip(fleetId, a.id, { checks: ['tunnel'], reason: REASON }, a.key);
  t.equal(tenantKey.status, 403, "the tenant's own key may not skip its gate");

  // The file's one fleet upgrade: its skips, its events and the audit log.
  const written =
    (await auditCount(api.db.pool, { action: 'fleet_upgrade.gate_skipped' })) +
    (await fleetEventsOf(api.db.pool, fleetId, { action: 'gate_skipped' })).length +
    (await fleetTenantRows(api.db.pool, fleetId)).filter((r) => r.gate_skips.length > 0).length;
  t.equal(written, 0, 'none of the refused requests wrote a skip, an event or an audit row');
});

t.test('a skip moves that tenant on at the next judgment while the other still waits', async (t) => {
  const skipped = await skip(fleetId, a.id, { checks: ['tunnel'], reason: REASON });
  t.equal(skipped.status, 200, `the skip is accepted (${JSON.stringify(skipped.json)})`);
  t.same(
    skipped.json.tenants?.map((x) => x.tenantId),
    [a.id],
    'the answer holds the tenant alone',
  );
  const mine = skipped.json.tenants![0]!;
  t.same(
    mine.gateSkipped.map((s) => ({ checks: s.checks, reason: s.reason, by: s.by, key: s.byKey?.name, step: s.step })),
    [
      {
        checks: ['tunnel'],
        reason: REASON,
        by: operator.info.id,
        key: 'ops-bob',
        step: { kind: 'upgrade', from: '1.4.0', to: '1.4.1' },
      },
    ],
    'its row says which check was skipped, why, by which key, for which step',
  );
  t.same(mine.gateWait?.waitingOn, [], 'the skipped check no longer holds the step');

  const second = new FleetDriver({ pool: api.db.pool, catalog, owner: 'replica-2' });
  t.teardown(() => second.stop());
  await second.tickAll();
  const f = await view();
  t.equal(row(f, a.id).state, 'succeeded', 'the tenant whose check was skipped succeeded at the next judgment');
  t.equal(row(f, a.id).gateWait, null, 'and waits no longer');
  const tunnel = row(f, a.id).gate?.checks.find((c) => c.name === 'tunnel');
  t.match(tunnel, { ok: true, skipped: true }, 'its gate shows the tunnel check as passed because it was skipped');
  t.ok(
    tunnel?.detail.endsWith(`before the upgrade: not reconnected yet; skipped by an operator: ${REASON}`),
    `with what it found and the reason (${tunnel?.detail})`,
  );
  t.equal(row(f, b.id).state, 'upgrading', 'the other tenant of the same fleet upgrade is still upgrading');
  t.same(
    row(f, b.id).gateWait?.waitingOn.map((c) => c.name),
    ['tunnel'],
    'and still waits on its tunnel',
  );
  t.same(row(f, b.id).gateSkipped, [], 'nothing was skipped for it');
  t.equal(f.state, 'running', 'the fleet upgrade runs on');

  const audit = (await auditRows(api.db.pool, { action: 'fleet_upgrade.gate_skipped' })).map((r) => ({
    actor: r.actor,
    actor_role: r.actorRole,
    target_id: r.targetId,
    after: r.after,
  }));
  t.same(
    audit,
    [
      {
        actor: operator.info.id,
        actor_role: 'operator',
        target_id: a.id,
        after: {
          fleetUpgradeId: fleetId,
          checks: ['tunnel'],
          reason: REASON,
          step: { kind: 'upgrade', from: '1.4.0', to: '1.4.1' },
        },
      },
    ],
    'one audit row with the key, the tenant, the checks and the reason',
  );
  const events = (await fleetEventsOf(api.db.pool, fleetId, { tenantId: a.id })).filter((e) =>
    ['gate_skipped', 'tenant_succeeded'].includes(e.action),
  );
  t.same(
    events.map((e) => e.action),
    ['gate_skipped', 'tenant_succeeded'],
    "the fleet upgrade's decisions say the gate was skipped, then the tenant succeeded",
  );
  t.match(
    events[0]?.data,
    { checks: ['tunnel'], reason: REASON, by: operator.info.id },
    'the decision names the check, the reason and who',
  );
});

t.test('a repeat changes nothing; a step that moved on or a check not waited on is a 409', async (t) => {
  const again = await skip(fleetId, a.id, { checks: ['tunnel'], reason: REASON });
  t.equal(again.status, 200, 'the same skip repeated is answered 200');
  t.equal(again.json.tenants?.[0]?.gateSkipped.length, 1, 'with the one skip recorded');
  const written =
    (await auditCount(api.db.pool, { action: 'fleet_upgrade.gate_skipped' })) +
    (await fleetEventsOf(api.db.pool, fleetId, { action: 'gate_skipped' })).length;
  t.equal(written, 2, 'and no second audit row or decision');

  const moved = await skip(fleetId, a.id, { checks: ['applications'], reason: REASON });
  t.equal(moved.status, 409, 'a skip for a tenant whose step is over is a 409');
  t.equal(moved.json.error.code, 'GATE_NOT_WAITING', 'GATE_NOT_WAITING');
  t.match(
    moved.json.error.message,
    /is succeeded in fleet upgrade .*no step of it waits on its health gate/,
    'saying so',
  );
});

t.test('once the fleet upgrade ended, its gates cannot be skipped', async (t) => {
  const last = await skip(fleetId, b.id, { checks: ['tunnel'], reason: REASON });
  t.equal(last.status, 200, 'the other tenant’s tunnel check is skipped too');
  const driver = new FleetDriver({ pool: api.db.pool, catalog, owner: 'replica-3' });
  t.teardown(() => driver.stop());
  await driver.tickAll();
  const f = await view();
  t.equal(f.state, 'completed', 'the fleet upgrade completed');
  const late = await skip(fleetId, b.id, { checks: ['applications'], reason: REASON });
  t.equal(late.status, 409, 'a skip in an ended fleet upgrade is a 409');
  t.equal(late.json.error.code, 'FLEET_UPGRADE_STATE', 'FLEET_UPGRADE_STATE');
  t.match(late.json.error.message, /is completed/, 'naming its state');
});
