/**
 * Resync requests from the root-cluster watch, on real Postgres with the scripted engine (a test
 * double; test/e2e/drift-watch.test.ts runs the real watch, engine and API server): which
 * requests are taken, that a taken one runs as one resync (refresh + update) whose log says why,
 * and that the engine's own changes do not queue another run.
 */
import t from 'tap';
import { requestResyncs } from '../../../provisioner/store/resync-requests.ts';
import { createHarness, gate, scripted } from './harness.ts';
import { until } from '../../../sandbox/until.ts';
import { markLastReconciled, tenantRecord } from '../../helpers/tenants.ts';

const h = await createHarness();
t.teardown(() => h.close());
await h.addCluster('root-a');

const requested = async (id: string) =>
  tenantRecord(h.db.pool, id).then((r) => ({ at: r.resync_requested_at, reason: r.resync_reason }));

/** Makes the tenant's last run look `agoMs` old (the echo rule compares against it). */
const ranAgo = (id: string, agoMs: number) => markLastReconciled(h.db.pool, id, agoMs / 1000);

t.test('a request for a Ready tenant runs one resync that says why; the request is then cleared', async (t) => {
  const engine = scripted();
  const r = await h.reconciler(engine, { resyncMs: 0 });
  const { id } = await h.createTenant();
  await until('Ready', 10_000, async () => (await h.tenant(id)).phase === 'Ready');
  await ranAgo(id, 60_000);
  const reason = `ResourceQuota tenant-${id}/tenant-quota: deleted`;
  t.same(await requestResyncs(h.db.pool, [{ tenantId: id, reason, ageMs: 100 }]), [id], 'the request is taken');
  const op = await until('a resync ran', 10_000, async () =>
    (await h.operations(id)).find((o) => o.kind === 'resync' && o.state === 'succeeded'),
  );
  const lines = await h.logLines(op.id);
  t.ok(
    lines.includes(`resync requested by the root-cluster watch: ${reason}`),
    'the operation log names the watch and the change',
  );
  t.same(
    engine.callsFor(id).map((c) => c.kind),
    ['up', 'refresh', 'up'],
    'the create, then one refresh + update for the request',
  );
  t.same(await requested(id), { at: null, reason: null }, 'the request is cleared once its resync started');
  t.equal((await h.tenant(id)).phase, 'Ready', 'the tenant stays Ready');
  await r.stop();
});

t.test('requests that are not taken', async (t) => {
  const g = gate();
  const engine = scripted({
    script: (c) => (c.kind === 'up' && c.input.runtimeVersion === '1.0.0' ? { gate: g.promise } : undefined),
  });
  const r = await h.reconciler(engine, { resyncMs: 0 });
  const busy = await h.createTenant({ runtimeVersion: '1.0.0' });
  await until('the create runs', 10_000, async () => engine.callsFor(busy.id).length === 1);
  t.same(
    await requestResyncs(h.db.pool, [{ tenantId: busy.id, reason: 'Namespace x: changed', ageMs: 0 }]),
    [],
    'not for a tenant being provisioned (its objects are the engine run in progress)',
  );
  g.open();
  await until('Ready', 10_000, async () => (await h.tenant(busy.id)).phase === 'Ready');

  // The run just ended: a change seen now is taken as the run's own write arriving late.
  t.same(
    await requestResyncs(h.db.pool, [{ tenantId: busy.id, reason: 'Namespace x: changed', ageMs: 0 }]),
    [],
    'not for a change seen within the echo window after the last run ended',
  );
  // A change seen before the last run ended was that run's (or is corrected by it).
  await ranAgo(busy.id, 10_000);
  t.same(
    await requestResyncs(h.db.pool, [{ tenantId: busy.id, reason: 'Namespace x: changed', ageMs: 12_000 }]),
    [],
    'not for a change seen before the last run ended',
  );
  t.same(
    await requestResyncs(h.db.pool, [{ tenantId: busy.id, reason: 'Namespace x: changed', ageMs: 100 }]),
    [busy.id],
    'but for a change seen well after it',
  );
  t.same(
    await requestResyncs(h.db.pool, [{ tenantId: busy.id, reason: 'LimitRange y: deleted', ageMs: 100 }]),
    [],
    'a tenant with a request pending takes no second one (one resync answers both)',
  );
  await until('the requested resync ran', 10_000, async () =>
    (await h.operations(busy.id)).some((o) => o.kind === 'resync' && o.state === 'succeeded'),
  );
  t.same(
    await requestResyncs(h.db.pool, [
      { tenantId: '00000000-0000-4000-8000-000000000000', reason: 'Namespace z: deleted', ageMs: 100 },
    ]),
    [],
    'nothing for a tenant that does not exist',
  );
  await r.stop();
});

t.test("the engine's own changes queue nothing: no run follows a run by itself", async (t) => {
  const engine = scripted();
  const r = await h.reconciler(engine, { resyncMs: 0 });
  const { id } = await h.createTenant();
  await until('Ready', 10_000, async () => (await h.tenant(id)).phase === 'Ready');
  // What the watch does for every object the create wrote, as the events arrive just after it.
  t.same(
    await requestResyncs(h.db.pool, [{ tenantId: id, reason: `Namespace tenant-${id}: created`, ageMs: 0 }]),
    [],
    'the create’s own objects, seen right after it, request nothing',
  );
  // Three looks for due tenants after it: each would have claimed a run that was queued.
  const polled = r.stats.polls;
  await until('three polls after the watch events', 10_000, async () => r.stats.polls >= polled + 3);
  t.equal((await h.tenant(id)).lease_owner, null, 'no run claimed the tenant in three polls');
  t.same(
    engine.callsFor(id).map((c) => c.kind),
    ['up'],
    'only the create ran',
  );
  await r.stop();
});
