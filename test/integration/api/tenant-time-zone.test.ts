/**
 * A tenant's time zone through the API, over real HTTP on real Postgres: set at signup (optional),
 * set and cleared with PATCH /v1/tenants/:id by the tenant's own key or an operator (a tenant key
 * not another tenant's), stored as the time zone database spells it, shown in every answer that
 * holds the tenant, audited, no operation queued; a zone the database does not know is a 400
 * naming `timeZone` and the value, with an example. Then the idle loop: a plan's keep-awake window
 * (09:00–17:00 on weekdays) is read in each tenant's own zone, so of two idle free tenants only the
 * one where it is night is put to sleep, and a tenant without a zone keeps the window's own. The
 * round's instant is the service's `now` argument: the test does not depend on the real time.
 */
import t from 'tap';
import { createTestApi } from '../../helpers/api.ts';
import { countTenantRecords, markIdle, markReconciled, tenantRecord } from '../../helpers/tenants.ts';
import { auditRows } from '../../helpers/audit.ts';
import { ApiClient, type BodyOf } from '../../../provisioner/http/api-client.ts';

const api = await createTestApi({
  env: {
    PROVISIONER_SLEEP_IDLE_SECONDS: 'free=600',
    // Free tenants are kept awake on weekdays 09:00–17:00: UTC for those without a zone of their own.
    PROVISIONER_SLEEP_AWAKE_WINDOWS: 'free=FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR;BYHOUR=9 UTC 480',
  },
});
const url = await api.app.listen({ port: 0, host: '127.0.0.1' });
t.teardown(() => api.close());

/** The client at the socket, with a key (`null`: none). */
const client = new ApiClient({ baseUrl: url });
const as = (key: string | null) => client.withToken(key ?? undefined);

let orgs = 0;
/** POST /v1/signup with no key: the status and the answer, or the error body. */
async function signup(extra: Partial<BodyOf<'POST /v1/signup'>> = {}) {
  orgs += 1;
  return as(null).request('POST /v1/signup', {
    body: { organization: `tz-${orgs}-${process.pid}`, email: 'o@example.com', ...extra },
  });
}
/** A signup the test needs accepted: its answer. */
async function signedUp(extra: Partial<BodyOf<'POST /v1/signup'>> = {}) {
  const res = await signup(extra);
  if (!res.ok) throw new Error(`signup refused: ${res.status} ${res.body.error.message}`);
  return res.body;
}
const get = (id: string, key = api.operatorKey) => as(key).call('GET /v1/tenants/:id', { params: { id } });
const patch = (id: string, key: string, body: BodyOf<'PATCH /v1/tenants/:id'>) =>
  as(key).request('PATCH /v1/tenants/:id', { params: { id }, body });
/** A PATCH the test needs accepted: its answer. */
async function patched(id: string, key: string, body: BodyOf<'PATCH /v1/tenants/:id'>) {
  const res = await patch(id, key, body);
  if (!res.ok) throw new Error(`PATCH refused: ${res.status} ${res.body.error.message}`);
  return res.body;
}
const audits = async (id: string) =>
  (await auditRows(api.db.pool, { action: 'tenant.time_zone', targetId: id })).map((r) => ({
    actor_role: r.actorRole,
    before: r.before,
    after: r.after,
  }));

t.test('set at signup (optional), stored as the time zone database spells it, shown in every answer', async (t) => {
  const res = await signup({ timeZone: 'europe/berlin' });
  t.equal(res.status, 202);
  if (!res.ok) return void t.fail(res.body.error.message);
  const body = res.body;
  t.equal(body.tenant.timeZone, 'Europe/Berlin', "the signup's answer has the zone, as the database spells it");
  t.equal((await get(body.tenant.id, body.apiKey)).timeZone, 'Europe/Berlin', 'GET with its own key shows it');
  const page = await as(api.operatorKey).call('GET /v1/tenants', { query: { limit: 200 } });
  t.equal(page.items.find((i) => i.id === body.tenant.id)?.timeZone, 'Europe/Berlin', 'so does the listing');

  const none = await signedUp();
  t.equal(none.tenant.timeZone, null, 'not given: null (not set)');
  t.equal((await get(none.tenant.id)).timeZone, null);

  const before = await countTenantRecords(api.db.pool);
  const refused = await signup({ timeZone: 'Mars/Olympus' });
  t.equal(refused.status, 400, 'a zone the database does not know is refused');
  const error = refused.ok ? undefined : refused.body.error;
  t.equal(error?.code, 'VALIDATION_FAILED');
  t.equal(error?.field, 'timeZone', 'naming the field');
  t.match(
    error?.message,
    /'Mars\/Olympus' is not a known IANA time zone \(e\.g\. Europe\/Berlin/,
    'and the value, with an example',
  );
  t.equal(await countTenantRecords(api.db.pool), before, 'nothing was created');
});

t.test('PATCH: the tenant sets and clears its own; an operator any; audited; no operation', async (t) => {
  const s = await signedUp();
  const id = s.tenant.id;
  const seq = async () => (await tenantRecord(api.db.pool, id)).change_seq;
  const seqBefore = await seq();

  const res = await patch(id, s.apiKey, { timeZone: 'America/New_York' });
  t.equal(res.status, 202, "the tenant's own key sets its time zone");
  if (!res.ok) return void t.fail(res.body.error.message);
  const set = res.body;
  t.equal(set.tenant.timeZone, 'America/New_York', 'the answer shows it');
  t.equal(set.queued, false, 'not a spec change: nothing queued');
  t.equal(set.operationId, s.tenant.status.lastOperationId, 'the answer names the last operation (the signup)');
  t.equal(set.tenant.generation, 1, 'the generation stays');
  t.equal((await get(id)).timeZone, 'America/New_York', 'GET shows it');
  t.not(await seq(), seqBefore, "the fleet's change stream sees the change");
  t.match(
    await audits(id),
    [{ actor_role: 'tenant', before: { timeZone: null }, after: { timeZone: 'America/New_York' } }],
    'audited as tenant.time_zone, with the value before and after',
  );

  t.equal((await patch(id, s.apiKey, { timeZone: 'America/New_York' })).status, 202, 'the same zone again');
  t.equal((await audits(id)).length, 1, 'changes nothing: no second audit row');

  const byOperator = await patched(id, api.operatorKey, { timeZone: 'Asia/Tokyo' });
  t.equal(byOperator.tenant.timeZone, 'Asia/Tokyo', "an operator sets a tenant's time zone");
  t.equal((await audits(id)).at(-1)?.actor_role, 'operator', 'audited as the operator');

  const cleared = await patched(id, s.apiKey, { timeZone: null });
  t.equal(cleared.tenant.timeZone, null, 'null clears it');
  t.equal((await get(id, s.apiKey)).timeZone, null);

  const other = await signedUp();
  const foreign = await patch(other.tenant.id, s.apiKey, { timeZone: 'Europe/Berlin' });
  t.equal(foreign.status, 404, "a tenant key cannot set another tenant's (it does not see it)");
  t.equal((await get(other.tenant.id)).timeZone, null, 'nothing was written');

  const withPlan = await patch(id, s.apiKey, { plan: 'team', timeZone: 'Europe/Berlin' });
  t.equal(withPlan.status, 403, 'with a plan change a tenant key may not make, the whole request is refused');
  t.match(withPlan.ok ? undefined : withPlan.body.error.message, /cannot change its plan/);
  t.equal((await get(id)).timeZone, null, 'and the zone is not set either');

  const both = await patch(id, api.operatorKey, { suspended: true, timeZone: 'Europe/Berlin' });
  t.equal(both.status, 202, 'a spec change and the zone in one request');
  if (!both.ok) return void t.fail(both.body.error.message);
  const withSpec = both.body;
  t.equal(withSpec.queued, true, 'the spec change queues its operation');
  t.equal(withSpec.tenant.timeZone, 'Europe/Berlin', 'and the zone is set with it');
});

t.test('a bad zone is a 400 naming timeZone and the value, with an example; nothing is written', async (t) => {
  const s = await signedUp({ timeZone: 'Europe/Berlin' });
  for (const [zone, message] of [
    ['Europe/Atlantis', /'Europe\/Atlantis' is not a known IANA time zone \(e\.g\. Europe\/Berlin/],
    ['+01:00', /'\+01:00' is not an IANA time zone \(e\.g\. Europe\/Berlin/],
    ['Berlin time', /'Berlin time' is not a known IANA time zone/],
  ] as const) {
    const res = await patch(s.tenant.id, s.apiKey, { timeZone: zone });
    t.equal(res.status, 400, `${zone}: 400`);
    const error = res.ok ? undefined : res.body.error;
    t.equal(error?.field, 'timeZone', `${zone}: naming the field`);
    t.match(error?.message, message, `${zone}: the value and an example`);
  }
  const tooLong = await patch(s.tenant.id, s.apiKey, { timeZone: `Europe/${'x'.repeat(60)}` });
  t.equal(tooLong.status, 400, 'longer than 64 characters: refused by the schema');
  t.equal(tooLong.ok ? undefined : tooLong.body.error.field, 'timeZone', 'naming the field');
  t.equal((await get(s.tenant.id)).timeZone, 'Europe/Berlin', 'the zone is unchanged');
  t.equal((await audits(s.tenant.id)).length, 0, 'and nothing audited');
});

t.test("the keep-awake window is read in each tenant's zone: only the one where it is night sleeps", async (t) => {
  const day = await signedUp({ timeZone: 'Europe/Berlin' });
  const night = await signedUp({ timeZone: 'Asia/Tokyo' });
  const plain = await signedUp();
  const ids = [day.tenant.id, night.tenant.id, plain.tenant.id];
  await markReconciled(api.db.pool, ids);
  await markIdle(api.db.pool, ids, 3600);

  // Monday 2026-11-30 14:00 UTC: 15:00 in Berlin (inside 09:00–17:00), 23:00 in Tokyo (night), and
  // 14:00 UTC for the tenant without a zone (inside the window read in its own zone, UTC).
  t.equal(await api.services.sleep.sleepIdle(Date.parse('2026-11-30T14:00:00Z')), 1, 'one tenant put to sleep');
  t.equal((await get(night.tenant.id)).status.sleep?.asleep, true, 'the tenant in Tokyo, where it is night');
  t.equal((await get(day.tenant.id)).status.sleep?.asleep, false, 'not the one in Berlin, in its business hours');
  t.equal((await get(plain.tenant.id)).status.sleep?.asleep, false, 'nor the one without a zone (the window in UTC)');
  const ops = await as(api.operatorKey).call('GET /v1/tenants/:id/operations', { params: { id: night.tenant.id } });
  t.equal(ops.items[0]?.kind, 'sleep', 'through a sleep operation');

  // Tuesday 2026-12-01 01:00 UTC: 10:00 in Tokyo (asleep already), 02:00 in Berlin, 01:00 UTC.
  t.equal(await api.services.sleep.sleepIdle(Date.parse('2026-12-01T01:00:00Z')), 2, 'at night in Berlin and UTC');
  t.equal((await get(day.tenant.id)).status.sleep?.asleep, true, 'the tenant in Berlin sleeps');
  t.equal((await get(plain.tenant.id)).status.sleep?.asleep, true, 'and the one without a zone');
});

t.test("a tenant's zone changed applies from the next round", async (t) => {
  const s = await signedUp({ timeZone: 'Asia/Tokyo' });
  await markReconciled(api.db.pool, s.tenant.id);
  await markIdle(api.db.pool, s.tenant.id, 3600);
  const mondayAfternoonUtc = Date.parse('2026-11-30T14:00:00Z');
  await patch(s.tenant.id, s.apiKey, { timeZone: 'America/New_York' });
  t.equal(await api.services.sleep.sleepIdle(mondayAfternoonUtc), 0, '09:00 in New York: kept awake');
  await patch(s.tenant.id, s.apiKey, { timeZone: 'Pacific/Auckland' });
  t.equal(await api.services.sleep.sleepIdle(mondayAfternoonUtc), 1, '03:00 on Tuesday in Auckland: asleep');
});
