/**
 * A fleet upgrade blocked on a health gate, as the API and `provisioner fleet status` answer it:
 * which checks the step waits on, since when, the time left before the gate times out, what
 * happens then and what the operator can do (wait, skip the check, abort, each with its command),
 * and `fleet skip-gate` naming the tenant by organization; the fleet upgrades a tenant is part of;
 * who started it by key name and role; a runtime named by its tenant's organization. No driver
 * runs here: the step is written as the driver leaves it while its gate waits (fleet-skip-gate.test.ts
 * and the browser tier's gate-wait test run the real driver).
 */
import t from 'tap';
import { createTestApi } from '../../helpers/api.ts';
import { cliAgainst } from '../../helpers/cli.ts';
import { insertCluster } from '../../../provisioner/store/clusters.ts';
import { updateFleetTenant } from '../../../provisioner/store/fleet-upgrades.ts';
import { catalog } from '../../../runtime/catalog.ts';
import { markReconciled } from '../../helpers/tenants.ts';

const api = await createTestApi();
const url = await api.app.listen({ port: 0, host: '127.0.0.1' });
t.teardown(() => api.close());

const cli = cliAgainst(url, api.operatorKey);

/** The API's reads with the operator key (the CLI above needs the socket; these go in process). */
const operator = api.as(api.operatorKey);
const fleetView = () => operator.call('GET /v1/fleet-upgrades/:id', { params: { id: fleetId } });

await insertCluster(api.db.pool, {
  name: 'gate-root',
  region: 'eu-1',
  labels: {},
  capacity: 10,
  plans: [],
  kubeconfigEnc: api.services.box.encrypt('x', 'cluster/gate-root'),
});
async function ready(version: string, organization: string): Promise<string> {
  const { tenantId } = await api.signup({ runtimeVersion: version, organization });
  await markReconciled(api.db.pool, tenantId, { cluster: 'gate-root' });
  return tenantId;
}

if (!catalog.rollbackAnswer('1.4.1', '1.4.0').allowed)
  throw new Error('precondition: the catalog allows the rollback 1.4.1 -> 1.4.0');

const GATE_TIMEOUT = 3600;
const blocked = await ready('1.4.0', 'gated-org');
const waiting = await ready('1.4.0', 'waiting-org');
const outside = await ready('1.4.0', 'outside-org');
const start = await cli([
  'fleet',
  'start',
  '1.4.1',
  '--tenants',
  `${blocked},${waiting}`,
  '--waves',
  '1,100%',
  '--gate-timeout',
  String(GATE_TIMEOUT),
]);
if (start.code !== 0) throw new Error(`fleet start: ${start.err}`);
const fleetId = /started fleet upgrade (\S+)/.exec(start.out)![1]!;
// The step as the driver leaves it while the gate waits: upgraded 10 minutes ago, every check
// passing but the tunnel, which never connected again.
const since = new Date(Date.now() - 10 * 60_000);
await updateFleetTenant(api.db.pool, fleetId, blocked, {
  state: 'upgrading',
  step_from: '1.4.0',
  step_to: '1.4.1',
  started_at: since,
  generation: 2,
  step_started_at: since,
  gate: JSON.stringify({
    passed: false,
    at: new Date().toISOString(),
    checks: [
      { name: 'operation', ok: true, detail: 'succeeded' },
      { name: 'ready', ok: true, detail: 'phase Ready, Ready' },
      { name: 'tunnel', ok: false, detail: 'not connected' },
    ],
  }),
});

t.test(
  'GET /v1/fleet-upgrades/:id: the step waiting on its gate, with the time left and what happens then',
  async (t) => {
    const f = await fleetView();
    t.equal(f.id, fleetId, 'the fleet upgrade is answered');
    const mine = f.tenants!.find((x) => x.tenantId === blocked)!;
    const w = mine.gateWait;
    t.ok(w, 'the blocked tenant has a gate wait');
    t.equal(w?.step, 'upgrade', 'of its upgrade step');
    t.same(
      w?.waitingOn.map((c) => [c.name, c.detail]),
      [['tunnel', 'not connected']],
      'it waits on the tunnel check alone, with its detail',
    );
    t.equal(w?.since, since.toISOString(), 'since the step started');
    t.equal(
      w?.timeoutAt,
      new Date(since.getTime() + GATE_TIMEOUT * 1000).toISOString(),
      'the timeout is the step start plus the gate timeout',
    );
    t.ok(
      w !== null && w.secondsLeft <= GATE_TIMEOUT - 600 && w.secondsLeft > GATE_TIMEOUT - 600 - 120,
      `about 50 minutes left (${w?.secondsLeft} s, at most ${GATE_TIMEOUT - 600})`,
    );
    t.match(w?.onTimeout, /rolled back to 1\.4\.0 automatically, then quarantined/, 'then: the automatic rollback');
    const pending = f.tenants!.find((x) => x.tenantId === waiting)!;
    t.equal(pending.gateWait, null, 'a tenant not started has no gate wait');
    t.same(
      f.createdByKey && { name: f.createdByKey.name, role: f.createdByKey.role },
      { name: 'test operator', role: 'operator' },
      'who started it: the key by name and role',
    );
    t.equal(f.createdByKey?.id, f.createdBy, 'the key named is the actor recorded');
  },
);

t.test('GET /v1/fleet-upgrades?tenantId=: the fleet upgrade a tenant is part of, with its own row alone', async (t) => {
  const part = await operator.call('GET /v1/fleet-upgrades', { query: { tenantId: blocked } });
  t.same(
    part.items.map((f) => f.id),
    [fleetId],
    'the blocked tenant is part of the fleet upgrade',
  );
  t.same(
    part.items[0]?.tenants?.map((x) => x.tenantId),
    [blocked],
    'with the tenant alone in its tenants',
  );
  t.same(
    part.items[0]?.tenants?.[0]?.gateWait?.waitingOn.map((c) => c.name),
    ['tunnel'],
    'and its gate wait',
  );
  const none = await operator.call('GET /v1/fleet-upgrades', { query: { tenantId: outside } });
  t.same(none.items, [], 'a tenant in no fleet upgrade is in none');
  await t.rejects(
    operator.call('GET /v1/fleet-upgrades', { query: { tenantId: outside, state: 'running' } }),
    { name: 'ApiError', status: 400, field: 'state' },
    'state and tenantId together are refused, naming the field',
  );
});

t.test('fleet status prints the gate a step waits on, since when, the time left and the actions', async (t) => {
  const status = await cli(['fleet', 'status', fleetId]);
  t.equal(status.code, 0, `status exits 0 (${status.err})`);
  const out = status.out;
  t.match(out, /waiting on their health gate: 1 tenant\b/, 'it counts the tenants waiting on their gate');
  t.match(out, new RegExp(`gated-org \\(${blocked}\\) upgrade 1\\.4\\.0 -> 1\\.4\\.1`), 'names the tenant and step');
  t.match(out, /gate waits on: tunnel \(not connected\)/, 'names the check it waits on, with its detail');
  const minute = since.toISOString().slice(0, 16).replace('T', ' ');
  t.match(out, new RegExp(`since ${minute} UTC; (49|50) min left`), 'since when, and the time left');
  t.match(out, /then: the hop fails .* rolled back to 1\.4\.0 automatically/, 'what happens when it times out');
  const actions = out
    .split('\n')
    .slice(out.split('\n').indexOf('      what you can do:') + 1)
    .slice(0, 3)
    .map((l) => l.trim());
  t.match(
    actions[0],
    /^wait: (49|50) min left before the gate times out; it passes as soon as its checks do$/,
    'first action: wait, with the time left',
  );
  t.match(
    actions[1],
    `skip: provisioner fleet skip-gate ${fleetId} ${blocked} --check tunnel --reason "<why>"`,
    'second: the skip-gate command for the check it waits on, exactly',
  );
  t.match(actions[2], `abort: provisioner fleet abort ${fleetId} [--rollback]`, 'third: the abort command, exactly');
  t.match(out, new RegExp(`or pause: provisioner fleet pause ${fleetId}`), 'and pausing the fleet upgrade');
});

t.test('fleet skip-gate takes the tenant by organization and says what the skip did', async (t) => {
  const none = await cli(['fleet', 'skip-gate', fleetId, 'gated-org', '--reason', 'INC-1']);
  t.equal(none.code, 1, 'without --check it fails');
  t.match(none.err, /say which checks to skip: --check tunnel/, 'saying which checks it takes');
  const unknown = await cli(['fleet', 'skip-gate', fleetId, 'nobody-org', '--check', 'tunnel', '--reason', 'INC-1']);
  t.equal(unknown.code, 1, 'an organization not in the fleet upgrade fails');
  t.match(unknown.err, /has no tenant of organization 'nobody-org'/, 'saying so');
  const skip = await cli([
    'fleet',
    'skip-gate',
    fleetId,
    'gated-org',
    '--check',
    'tunnel',
    '--reason',
    'INC-1: its tunnel client is down for a DNS outage',
  ]);
  t.equal(skip.code, 0, `skip-gate exits 0 (${skip.err})`);
  t.equal(
    skip.out,
    `gated-org (${blocked}): tunnel skipped for its upgrade 1.4.0 -> 1.4.1; the driver moves it on at its next judgment if the other checks pass`,
    'it says which check was skipped for which step, and what happens next',
  );
  const f = await fleetView();
  const mine = f.tenants!.find((x) => x.tenantId === blocked)!;
  t.same(
    mine.gateSkipped.map((s) => [s.checks, s.reason, s.byKey?.name]),
    [[['tunnel'], 'INC-1: its tunnel client is down for a DNS outage', 'test operator']],
    "the tenant's row records the skip with the reason and the key",
  );
  const status = await cli(['fleet', 'status', fleetId]);
  t.match(
    status.out,
    /gate waits on: the driver's next judgment/,
    'fleet status no longer shows the tunnel as waited on',
  );
  t.match(status.out, /skip: nothing to skip before the driver's next judgment/, 'nor offers to skip it again');
});

t.test('GET /v1/runtimes names each runtime by its tenant’s organization', async (t) => {
  const body = await operator.call('GET /v1/runtimes', { query: { limit: 200 } });
  const hosted = body.items.find((r) => r.tenantId === blocked && r.mode === 'hosted');
  t.ok(hosted, 'the tenant’s hosted runtime is listed');
  t.equal(hosted?.organization, 'gated-org', 'with its organization');
});
