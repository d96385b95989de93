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

interface PlanBody {
  waves: Array<{ wave: number; size: number; tenants: string[]; maxConcurrency: number }>;
  tenants: Array<{ tenantId: string; path: string[]; wave: number; fromVersion: string }>;
  excluded: Array<{ tenantId: string; reason: string }>;
  counts: { selected: number; upgradeable: number; excluded: number };
}

let api: TestApi;
t.before(async () => {
  api = await createTestApi();
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
    const res = await api.request('POST', '/v1/fleet-upgrades?dryRun=1', {
      key: api.operatorKey,
      body: { targetVersion: '1.5.0', selector: { tenantIds: ids }, waves: [{ count: 1 }, { percent: 100 }] },
    });
    t.equal(res.statusCode, 200, `a dry run answers 200 with the plan (${res.body.slice(0, 300)})`);
    const plan = res.json<PlanBody>();
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
    const list = await api.request('GET', '/v1/fleet-upgrades', { key: api.operatorKey });
    t.same(list.json().items, [], 'a dry run writes no fleet upgrade');

    // Selecting by cluster and version.
    const c2 = await addCluster('us-1');
    const elsewhere = await readyTenant('1.4.1', { cluster: c2 });
    const byCluster = await api.request('POST', '/v1/fleet-upgrades?dryRun=1', {
      key: api.operatorKey,
      body: { targetVersion: '1.5.0', selector: { clusters: [c2], versions: ['1.4.1'] } },
    });
    t.same(
      byCluster.json<PlanBody>().tenants.map((p) => p.tenantId),
      [elsewhere],
      'a selector by cluster and version takes only the tenants matching both',
    );
    const byRegion = await api.request('POST', '/v1/fleet-upgrades?dryRun=1', {
      key: api.operatorKey,
      body: { targetVersion: '1.5.0', selector: { regions: ['us-1'] } },
    });
    t.same(
      byRegion.json<PlanBody>().tenants.map((p) => p.tenantId),
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
    const start = await api.request('POST', '/v1/fleet-upgrades', {
      key: api.operatorKey,
      body: {
        targetVersion: '1.5.0',
        selector: { tenantIds: [a, b] },
        waves: [{ count: 1 }, { count: 1 }],
        maxConcurrency: 1,
      },
    });
    t.equal(start.statusCode, 201, `the start answers 201 (${start.body.slice(0, 300)})`);
    const id = start.json().fleetUpgrade.id as string;
    t.equal(start.headers.location, `/v1/fleet-upgrades/${id}`, 'Location names the new fleet upgrade');
    const got = await api.request('GET', `/v1/fleet-upgrades/${id}`, { key: api.operatorKey });
    t.equal(got.statusCode, 200, 'the fleet upgrade can be read');
    const f = got.json();
    t.equal(f.state, 'running', 'a started fleet upgrade is running');
    t.same(
      f.waves.map((w: { name: string; size: number; state: string }) => [w.name, w.size, w.state]),
      [
        ['canary', 1, 'pending'],
        ['wave 1', 1, 'pending'],
      ],
      'the waves are stored as planned',
    );
    t.same(
      f.tenants.map((x: { tenantId: string; state: string; path: string[] }) => [x.tenantId, x.state, x.path]),
      [
        [a, 'pending', ['1.5.0']],
        [b, 'pending', ['1.5.0']],
      ],
      'every tenant is pending with its path',
    );

    const up = await api.request('POST', `/v1/tenants/${a}/upgrade`, {
      key: api.operatorKey,
      body: { version: '1.5.0' },
    });
    t.equal(up.statusCode, 409, 'an individual upgrade of a held tenant is refused');
    t.equal(up.json().error.code, 'TENANT_IN_FLEET_UPGRADE', 'the refusal has code TENANT_IN_FLEET_UPGRADE');
    t.match(up.json().error.message, id, 'the message names the fleet upgrade');
    t.equal(up.json().error.details.fleetUpgradeId, id, 'details name the fleet upgrade');
    const patch = await api.request('PATCH', `/v1/tenants/${b}`, {
      key: api.operatorKey,
      body: { runtimeVersion: '1.5.0' },
    });
    t.equal(patch.statusCode, 409, 'a PATCH of the version of a held tenant is refused too');
    const suspend = await api.request('POST', `/v1/tenants/${b}/suspend`, { key: api.operatorKey });
    t.equal(suspend.statusCode, 202, 'other changes of a held tenant are allowed');

    const again = await api.request('POST', '/v1/fleet-upgrades?dryRun=1', {
      key: api.operatorKey,
      body: { targetVersion: '1.5.0', selector: { tenantIds: [a] } },
    });
    t.match(
      again.json<PlanBody>().excluded[0]?.reason,
      `part of fleet upgrade ${id}`,
      'a second plan lists a held tenant as excluded',
    );
    const second = await api.request('POST', '/v1/fleet-upgrades', {
      key: api.operatorKey,
      body: { targetVersion: '1.5.0', selector: { tenantIds: [a] } },
    });
    t.equal(second.statusCode, 422, 'a start that takes no tenant is refused');
    t.equal(second.json().error.code, 'NOTHING_TO_UPGRADE', 'the refusal has code NOTHING_TO_UPGRADE');

    const pause = await api.request('POST', `/v1/fleet-upgrades/${id}/pause`, {
      key: api.operatorKey,
      body: { reason: 'night' },
    });
    t.equal(pause.statusCode, 200, 'pause answers 200');
    t.equal(pause.json().state, 'paused', 'pause answers the paused fleet upgrade');
    const pauseAgain = await api.request('POST', `/v1/fleet-upgrades/${id}/pause`, { key: api.operatorKey });
    t.equal(pauseAgain.statusCode, 409, 'pausing a paused fleet upgrade is a 409');
    t.equal(pauseAgain.json().error.code, 'FLEET_UPGRADE_STATE', 'the refusal has code FLEET_UPGRADE_STATE');
    t.equal(
      (await api.request('POST', `/v1/fleet-upgrades/${id}/resume`, { key: api.operatorKey })).json().state,
      'running',
      'resume answers the running fleet upgrade',
    );
    const abort = await api.request('POST', `/v1/fleet-upgrades/${id}/abort`, {
      key: api.operatorKey,
      body: { rollback: true },
    });
    t.equal(abort.statusCode, 200, 'abort answers 200');
    t.equal(abort.json().state, 'aborted', 'an abort with nothing started ends at once');
    t.equal(abort.json().counts.cancelled, 2, 'the tenants not started are cancelled');
    const free = await api.request('POST', `/v1/tenants/${a}/upgrade`, {
      key: api.operatorKey,
      body: { version: '1.5.0' },
    });
    t.equal(free.statusCode, 202, 'after the abort the tenant can be upgraded on its own');

    const { rows } = await api.db.pool.query<{ action: string }>(
      `SELECT action FROM audit_log WHERE target_type = 'fleet_upgrade' AND target_id = $1 ORDER BY id`,
      [id],
    );
    t.same(
      rows.map((r) => r.action),
      ['fleet_upgrade.start', 'fleet_upgrade.pause', 'fleet_upgrade.resume', 'fleet_upgrade.abort'],
      'start, pause, resume and abort are audited',
    );
  },
);

t.test('bad requests are 4xx naming the field; only operators may call', async (t) => {
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
  const { apiKey } = await api.signup();
  const asTenant = await api.request('POST', '/v1/fleet-upgrades?dryRun=1', {
    key: apiKey,
    body: { targetVersion: '1.5.0', selector: { all: true } },
  });
  t.equal(asTenant.statusCode, 403, 'a tenant key may not plan a fleet upgrade');
  const missing = await api.request('GET', '/v1/fleet-upgrades/00000000-0000-4000-8000-000000000002', {
    key: api.operatorKey,
  });
  t.equal(missing.statusCode, 404, 'an unknown fleet upgrade is a 404');
  t.equal(missing.json().error.code, 'FLEET_UPGRADE_NOT_FOUND', 'with code FLEET_UPGRADE_NOT_FOUND');
});

let base: string | undefined;
/** The API on a loopback port (listening once for the whole file). */
async function listening(): Promise<string> {
  base ??= await api.app.listen({ port: 0, host: '127.0.0.1' });
  return base;
}

/**
 * Reads a Server-Sent Events answer until `end` (or `max` events): each event's name, id and data;
 * `seen` gets each event as it arrives.
 */
async function readEvents(
  url: string,
  headers: Record<string, string>,
  max = 100,
  seen: (e: { event: string; id?: string; data: Record<string, unknown> }) => void = () => {},
): Promise<Array<{ event: string; id?: string; data: Record<string, unknown> }>> {
  const res = await fetch(url, { headers: { accept: 'text/event-stream', ...headers } });
  if (res.status !== 200) throw new Error(`events: ${res.status} ${await res.text()}`);
  const out: Array<{ event: string; id?: string; data: Record<string, unknown> }> = [];
  const decoder = new TextDecoder();
  let buffer = '';
  const reader = res.body!.getReader();
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let at;
    while ((at = buffer.indexOf('\n\n')) !== -1) {
      const block = buffer.slice(0, at);
      buffer = buffer.slice(at + 2);
      const fields = Object.fromEntries(
        block
          .split('\n')
          .filter((l) => !l.startsWith(':'))
          .map((l) => [l.slice(0, l.indexOf(':')), l.slice(l.indexOf(':') + 1).trim()]),
      );
      if (!fields.event) continue;
      const e = {
        event: fields.event,
        ...(fields.id ? { id: fields.id } : {}),
        data: JSON.parse(fields.data ?? 'null'),
      };
      out.push(e);
      seen(e);
      if (fields.event === 'end' || out.length >= max) {
        await reader.cancel();
        return out;
      }
    }
  }
  return out;
}

t.test('the progress stream: every decision as an event, live, resumable with Last-Event-ID', async (t) => {
  const c1 = await addCluster();
  const a = await readyTenant('1.4.1', { cluster: c1 });
  const start = await api.request('POST', '/v1/fleet-upgrades', {
    key: api.operatorKey,
    body: { targetVersion: '1.5.0', selector: { tenantIds: [a] } },
  });
  const id = start.json().fleetUpgrade.id as string;
  const url = `${await listening()}/v1/fleet-upgrades/${id}/events`;
  const auth = { authorization: `Bearer ${api.operatorKey}` };
  // Live: the stream has sent the start (it is open and has caught up) before pause and abort happen.
  let started = false;
  const live = readEvents(url, auth, 100, (e) => (started ||= e.event === 'event' && e.data.action === 'start'));
  await until('the start event on the open stream', 10_000, () => started);
  await api.request('POST', `/v1/fleet-upgrades/${id}/pause`, { key: api.operatorKey });
  await api.request('POST', `/v1/fleet-upgrades/${id}/abort`, { key: api.operatorKey });
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
  const resumed = await readEvents(url, { ...auth, 'last-event-id': decisions[1]!.id! });
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
    const start = await api.request('POST', '/v1/fleet-upgrades', {
      key: api.operatorKey,
      body: { targetVersion: '1.5.0', selector: { tenantIds: [a] } },
    });
    const id = start.json().fleetUpgrade.id as string;
    t.equal(start.json().fleetUpgrade.windowsOverride, null, 'no override at first');
    const over = await api.request('POST', `/v1/fleet-upgrades/${id}/override-windows`, {
      key: api.operatorKey,
      body: { reason: 'CVE at 3 a.m.' },
    });
    t.equal(over.statusCode, 200, `the override answers the fleet upgrade (${over.body.slice(0, 200)})`);
    t.match(over.json().windowsOverride, { by: String, reason: 'CVE at 3 a.m.', at: String }, 'with the override');
    await api.request('POST', `/v1/fleet-upgrades/${id}/abort`, { key: api.operatorKey });
    const events = await readEvents(`${await listening()}/v1/fleet-upgrades/${id}/events?after=0`, {
      authorization: `Bearer ${api.operatorKey}`,
    });
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
      { by: over.json().windowsOverride.by, reason: 'CVE at 3 a.m.' },
      'the event names the operator and the reason',
    );
    const late = await api.request('POST', `/v1/fleet-upgrades/${id}/override-windows`, {
      key: api.operatorKey,
      body: { reason: 'too late' },
    });
    t.equal(late.statusCode, 409, 'an aborted fleet upgrade cannot be overridden');
    t.equal(late.json().error.code, 'FLEET_UPGRADE_STATE', 'FLEET_UPGRADE_STATE');
  },
);
