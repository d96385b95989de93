/**
 * Fleet upgrades through the API (no driver runs here: test/integration/fleet/ drives them): the
 * dry-run plan with paths, waves and excluded tenants with reasons, the start, reads, pause,
 * resume and abort, and the 409 of an individual upgrade of a tenant a fleet upgrade holds.
 */
import t from 'tap';
import { createTestApi, type TestApi } from '../../helpers/api.ts';
import { insertCluster } from '../../../provisioner/store/clusters.ts';
import { catalog } from '../../../runtime/catalog.ts';
import { until } from '../../../sandbox/until.ts';
import { markReconciled } from '../../helpers/tenants.ts';
import { settleTenantOperations } from '../../helpers/operations.ts';
import { planFleetUpgrade, startFleetUpgrade } from '../../helpers/fleet.ts';
import { ApiClient } from '../../../provisioner/http/api-client.ts';
import { auditActions } from '../../helpers/audit.ts';

let api: TestApi;
/** The client with the operator key. */
let operator: ApiClient;
t.before(async () => {
  api = await createTestApi();
  operator = api.as(api.operatorKey);
});
t.teardown(() => api.close());

/** A signed-up tenant made to look provisioned: Ready on its version, placed on `cluster`. */
async function readyTenant(version: string, o: { cluster: string; plan?: string; state?: 'suspended' | 'stalled' }) {
  const { tenantId } = await api.signup({ runtimeVersion: version, plan: o.plan ?? 'team' });
  await markReconciled(api.db.pool, tenantId, {
    phase: o.state === 'suspended' ? 'Suspended' : 'Ready',
    cluster: o.cluster,
    suspended: o.state === 'suspended',
    stalled: o.state === 'stalled',
    readyCondition: true,
  });
  await settleTenantOperations(api.db.pool, tenantId, { finishedNow: false });
  return tenantId;
}

let cluster = 0;
async function addCluster(region = 'eu-1'): Promise<string> {
  cluster += 1;
  const name = `fleet-root-${cluster}`;
  await insertCluster(api.db.pool, {
    name,
    region,
    labels: {},
    capacity: 100,
    plans: [],
    kubeconfigEnc: api.services.box.encrypt('x', `cluster/${name}`),
  });
  return name;
}

t.test(
  'the dry run plans paths (multi-hop too) and waves, lists every excluded tenant with its reason, and writes nothing',
  async (t) => {
    const c1 = await addCluster();
    const a = await readyTenant('1.4.1', { cluster: c1 });
    const b = await readyTenant('1.4.1', { cluster: c1 });
    const c = await readyTenant('1.4.0', { cluster: c1 });
    const old = await readyTenant('1.3.0', { cluster: c1 });
    const suspended = await readyTenant('1.4.1', { cluster: c1, state: 'suspended' });
    const stalled = await readyTenant('1.4.1', { cluster: c1, state: 'stalled' });
    const done = await readyTenant('1.5.0', { cluster: c1 });
    const unknown = '00000000-0000-4000-8000-000000000001';
    const ids = [a, b, c, old, suspended, stalled, done, unknown];
    const res = await operator.request('POST /v1/fleet-upgrades', {
      query: { dryRun: '1' },
      body: { targetVersion: '1.5.0', selector: { tenantIds: ids }, waves: [{ count: 1 }, { percent: 100 }] },
    });
    t.equal(res.status, 200, `a dry run answers 200 with the plan (${JSON.stringify(res.body).slice(0, 300)})`);
    if (!res.ok || 'fleetUpgrade' in res.body) throw new Error('precondition: a plan');
    const plan = res.body;
    t.same(
      plan.tenants.map((p) => p.tenantId),
      [a, b, c, old],
      'the upgradeable tenants are planned oldest first',
    );
    const expectedOld = catalog.upgradePath('1.3.0', '1.5.0').path;
    t.ok(expectedOld.length > 1, 'the catalog needs a stepping stone from 1.3.0 to 1.5.0');
    t.same(
      plan.tenants.find((p) => p.tenantId === old)?.path,
      expectedOld,
      "1.3.0's path has every hop of the catalog's path",
    );
    t.same(plan.tenants.find((p) => p.tenantId === a)?.path, ['1.5.0'], '1.4.1 goes to 1.5.0 in one hop');
    t.same(
      plan.waves.map((w) => w.size),
      [1, 3],
      'a canary of one, then the remaining three',
    );
    t.same(plan.waves[0]!.tenants, [a], 'the canary is the oldest upgradeable tenant');
    const reasons = new Map(plan.excluded.map((e) => [e.tenantId, e.reason]));
    t.match(reasons.get(suspended), /suspended/, 'a suspended tenant is listed as excluded, with the reason');
    t.match(reasons.get(stalled), /stalled/, 'a stalled tenant is listed as excluded, with the reason');
    t.match(reasons.get(done), /already on 1\.5\.0/, 'a tenant on the target is listed as excluded');
    t.match(reasons.get(unknown), /no such tenant/, 'an id that is no tenant is listed, not silently dropped');
    t.same(plan.counts, { selected: 8, upgradeable: 4, excluded: 4 }, 'the counts add up to every id sent');
    const list = await operator.call('GET /v1/fleet-upgrades');
    t.same(list.items, [], 'a dry run writes no fleet upgrade');

    // Selecting by cluster and version.
    const c2 = await addCluster('us-1');
    const elsewhere = await readyTenant('1.4.1', { cluster: c2 });
    const byCluster = await planFleetUpgrade(operator, {
      targetVersion: '1.5.0',
      selector: { clusters: [c2], versions: ['1.4.1'] },
    });
    t.same(
      byCluster.tenants.map((p) => p.tenantId),
      [elsewhere],
      'a selector by cluster and version takes only the tenants matching both',
    );
    const byRegion = await planFleetUpgrade(operator, { targetVersion: '1.5.0', selector: { regions: ['us-1'] } });
    t.same(
      byRegion.tenants.map((p) => p.tenantId),
      [elsewhere],
      "a selector by region takes the tenants of that region's clusters",
    );
  },
);

t.test(
  'a started fleet upgrade holds its tenants: individual upgrades are 409 naming it; pause, resume, abort',
  async (t) => {
    const c1 = await addCluster();
    const a = await readyTenant('1.4.1', { cluster: c1 });
    const b = await readyTenant('1.4.1', { cluster: c1 });
    const start = await operator.request('POST /v1/fleet-upgrades', {
      body: {
        targetVersion: '1.5.0',
        selector: { tenantIds: [a, b] },
        waves: [{ count: 1 }, { count: 1 }],
        maxConcurrency: 1,
      },
    });
    t.equal(start.status, 201, `the start answers 201 (${JSON.stringify(start.body).slice(0, 300)})`);
    if (!start.ok || !('fleetUpgrade' in start.body)) throw new Error('precondition: a started fleet upgrade');
    const id = start.body.fleetUpgrade.id;
    t.equal(start.headers.get('location'), `/v1/fleet-upgrades/${id}`, 'Location names the new fleet upgrade');
    const got = await operator.request('GET /v1/fleet-upgrades/:id', { params: { id } });
    t.equal(got.status, 200, 'the fleet upgrade can be read');
    if (!got.ok) throw new Error('precondition: the fleet upgrade was read');
    const f = got.body;
    t.equal(f.state, 'running', 'a started fleet upgrade is running');
    t.same(
      f.waves.map((w) => [w.name, w.size, w.state]),
      [
        ['canary', 1, 'pending'],
        ['wave 1', 1, 'pending'],
      ],
      'the waves are stored as planned',
    );
    t.same(
      (f.tenants ?? []).map((x) => [x.tenantId, x.state, x.path]),
      [
        [a, 'pending', ['1.5.0']],
        [b, 'pending', ['1.5.0']],
      ],
      'every tenant is pending with its path',
    );

    const upgrade = (tenantId: string) =>
      operator.request('POST /v1/tenants/:id/upgrade', { params: { id: tenantId }, body: { version: '1.5.0' } });
    const up = await upgrade(a);
    t.equal(up.status, 409, 'an individual upgrade of a held tenant is refused');
    t.match(up.body, { error: { code: 'TENANT_IN_FLEET_UPGRADE' } }, 'the refusal has code TENANT_IN_FLEET_UPGRADE');
    t.match(up.body, { error: { message: id } }, 'the message names the fleet upgrade');
    t.match(up.body, { error: { details: { fleetUpgradeId: id } } }, 'details name the fleet upgrade');
    const patch = await operator.request('PATCH /v1/tenants/:id', {
      params: { id: b },
      body: { runtimeVersion: '1.5.0' },
    });
    t.equal(patch.status, 409, 'a PATCH of the version of a held tenant is refused too');
    const suspend = await operator.request('POST /v1/tenants/:id/suspend', { params: { id: b } });
    t.equal(suspend.status, 202, 'other changes of a held tenant are allowed');

    const again = await planFleetUpgrade(operator, { targetVersion: '1.5.0', selector: { tenantIds: [a] } });
    t.match(again.excluded[0]?.reason, `part of fleet upgrade ${id}`, 'a second plan lists a held tenant as excluded');
    await t.rejects(
      startFleetUpgrade(operator, { targetVersion: '1.5.0', selector: { tenantIds: [a] } }),
      { status: 422, code: 'NOTHING_TO_UPGRADE' },
      'a start that takes no tenant is refused with code NOTHING_TO_UPGRADE',
    );

    const params = { id };
    const pause = await operator.request('POST /v1/fleet-upgrades/:id/pause', { params, body: { reason: 'night' } });
    t.equal(pause.status, 200, 'pause answers 200');
    t.equal(pause.ok && pause.body.state, 'paused', 'pause answers the paused fleet upgrade');
    await t.rejects(
      operator.call('POST /v1/fleet-upgrades/:id/pause', { params }),
      { status: 409, code: 'FLEET_UPGRADE_STATE' },
      'pausing a paused fleet upgrade is a 409 with code FLEET_UPGRADE_STATE',
    );
    t.equal(
      (await operator.call('POST /v1/fleet-upgrades/:id/resume', { params })).state,
      'running',
      'resume answers the running fleet upgrade',
    );
    const abort = await operator.request('POST /v1/fleet-upgrades/:id/abort', { params, body: { rollback: true } });
    t.equal(abort.status, 200, 'abort answers 200');
    if (!abort.ok) throw new Error('precondition: the abort was answered');
    t.equal(abort.body.state, 'aborted', 'an abort with nothing started ends at once');
    t.equal(abort.body.counts.cancelled, 2, 'the tenants not started are cancelled');
    const free = await upgrade(a);
    t.equal(free.status, 202, 'after the abort the tenant can be upgraded on its own');

    t.same(
      await auditActions(api.db.pool, { targetType: 'fleet_upgrade', targetId: id }),
      ['fleet_upgrade.start', 'fleet_upgrade.pause', 'fleet_upgrade.resume', 'fleet_upgrade.abort'],
      'start, pause, resume and abort are audited',
    );
  },
);

t.test('bad requests are 4xx naming the field; only operators may call', async (t) => {
  // some bodies are of the wrong shape: all sent raw
  const bad = async (body: unknown, field: string, code = 'VALIDATION_FAILED') => {
    const res = await api.request('POST', '/v1/fleet-upgrades?dryRun=1', { key: api.operatorKey, body });
    t.equal(res.statusCode, 400, `${JSON.stringify(body)} is a 400`);
    t.equal(res.json().error.code, code, `${JSON.stringify(body)} answers ${code}`);
    t.equal(res.json().error.field, field, `the error names ${field}`);
  };
  await bad({ targetVersion: '1.5.0', selector: { all: true }, waves: [{ count: 6 }] }, 'waves.0.count');
  await bad({ targetVersion: '1.5.0', selector: { all: true }, waves: [{ percent: 5 }] }, 'waves.0.count');
  await bad(
    { targetVersion: '1.5.0', selector: { all: true }, waves: [{ count: 1 }, { count: 2, percent: 5 }] },
    'waves.1',
  );
  await bad({ targetVersion: '9.9.9', selector: { all: true } }, 'targetVersion', 'UNKNOWN_RUNTIME_VERSION');
  await bad({ targetVersion: '1.5.0', selector: {} }, 'selector');
  await bad({ targetVersion: '1.5.0', selector: { all: true, plans: ['team'] } }, 'selector.all');
  await bad({ targetVersion: '1.5.0', selector: { plans: [] } }, 'selector.plans');
  // strict like every other body: a string is not a number, an unknown field is refused, not dropped
  await bad({ targetVersion: '1.5.0', selector: { all: true }, maxConcurrency: '2' }, 'maxConcurrency');
  await bad({ targetVersion: '1.5.0', selector: { all: true }, maxConcurency: 2 }, 'maxConcurency');
  const { apiKey } = await api.signup();
  await t.rejects(
    planFleetUpgrade(api.as(apiKey), { targetVersion: '1.5.0', selector: { all: true } }),
    { name: 'ApiError', status: 403 },
    'a tenant key may not plan a fleet upgrade',
  );
  await t.rejects(
    operator.call('GET /v1/fleet-upgrades/:id', { params: { id: '00000000-0000-4000-8000-000000000002' } }),
    { status: 404, code: 'FLEET_UPGRADE_NOT_FOUND' },
    'an unknown fleet upgrade is a 404 with code FLEET_UPGRADE_NOT_FOUND',
  );
});

let base: string | undefined;
/** The operator's client on a loopback port (the API listening once for the whole file): streams need a socket. */
async function listening(): Promise<ApiClient> {
  base ??= await api.app.listen({ port: 0, host: '127.0.0.1' });
  return new ApiClient({ baseUrl: base, token: api.operatorKey });
}

type StreamEvent = { event: string; id?: string; data: Record<string, unknown> };
/**
 * Reads a fleet upgrade's progress stream until `end` (or `max` events): each event's name, id
 * and data; `seen` gets each event as it arrives.
 */
async function readEvents(
  id: string,
  opts: { lastEventId?: string; after?: number } = {},
  max = 100,
  seen: (e: StreamEvent) => void = () => {},
): Promise<StreamEvent[]> {
  const out: StreamEvent[] = [];
  const stream = (await listening()).events('GET /v1/fleet-upgrades/:id/events', {
    params: { id },
    ...(opts.after !== undefined ? { query: { after: opts.after } } : {}),
    lastEventId: opts.lastEventId,
  });
  for await (const e of stream) {
    out.push(e);
    seen(e);
    if (e.event === 'end' || out.length >= max) break;
  }
  return out;
}

t.test('the progress stream: every decision as an event, live, resumable with Last-Event-ID', async (t) => {
  const c1 = await addCluster();
  const a = await readyTenant('1.4.1', { cluster: c1 });
  const start = await startFleetUpgrade(operator, { targetVersion: '1.5.0', selector: { tenantIds: [a] } });
  const id = start.fleetUpgrade.id;
  // Live: the stream has sent the start (it is open and has caught up) before pause and abort happen.
  let started = false;
  const live = readEvents(id, {}, 100, (e) => (started ||= e.event === 'event' && e.data.action === 'start'));
  await until('the start event on the open stream', 10_000, () => started);
  await operator.call('POST /v1/fleet-upgrades/:id/pause', { params: { id } });
  await operator.call('POST /v1/fleet-upgrades/:id/abort', { params: { id } });
  const events = await live;
  t.equal(events[0]!.event, 'state', 'the stream starts with the state');
  const decisions = events.filter((e) => e.event === 'event');
  t.same(
    decisions.map((e) => e.data.action),
    ['start', 'pause', 'abort', 'aborted'],
    'every decision arrives as an event, in order',
  );
  t.ok(
    decisions.every((e) => e.id === String(e.data.seq)),
    "each event's id is its seq (for Last-Event-ID)",
  );
  t.same(events.at(-1), { event: 'end', data: { state: 'aborted' } }, 'the stream ends when the fleet upgrade does');
  const resumed = await readEvents(id, { lastEventId: decisions[1]!.id! });
  t.same(
    resumed.filter((e) => e.event === 'event').map((e) => e.data.action),
    ['abort', 'aborted'],
    'a reconnect with Last-Event-ID gets only the later events',
  );
});

t.test(
  'an override of the windows is in the progress stream: the state has it, an event names who and why',
  async (t) => {
    const c1 = await addCluster();
    const a = await readyTenant('1.4.1', { cluster: c1 });
    const start = await startFleetUpgrade(operator, { targetVersion: '1.5.0', selector: { tenantIds: [a] } });
    const id = start.fleetUpgrade.id;
    const params = { id };
    t.equal(start.fleetUpgrade.windowsOverride, null, 'no override at first');
    const over = await operator.request('POST /v1/fleet-upgrades/:id/override-windows', {
      params,
      body: { reason: 'CVE at 3 a.m.' },
    });
    t.equal(over.status, 200, `the override answers the fleet upgrade (${JSON.stringify(over.body).slice(0, 200)})`);
    if (!over.ok) throw new Error('precondition: the override was answered');
    t.match(over.body.windowsOverride, { by: String, reason: 'CVE at 3 a.m.', at: String }, 'with the override');
    await operator.call('POST /v1/fleet-upgrades/:id/abort', { params });
    const events = await readEvents(id, { after: 0 });
    t.match(
      events[0],
      { event: 'state', data: { windowsOverride: { reason: 'CVE at 3 a.m.' } } },
      'the state shows it',
    );
    const decisions = events.filter((e) => e.event === 'event');
    t.same(
      decisions.map((e) => e.data.action),
      ['start', 'override_windows', 'abort', 'aborted'],
      'the override is an event in its place',
    );
    t.match(
      decisions[1]!.data.data,
      { by: over.body.windowsOverride?.by, reason: 'CVE at 3 a.m.' },
      'the event names the operator and the reason',
    );
    await t.rejects(
      operator.call('POST /v1/fleet-upgrades/:id/override-windows', { params, body: { reason: 'too late' } }),
      { status: 409, code: 'FLEET_UPGRADE_STATE' },
      'an aborted fleet upgrade cannot be overridden: FLEET_UPGRADE_STATE',
    );
  },
);
