/**
 * Tombstone retention (docs/runtime.md "Tombstone retention"), on a real Postgres: tombstones older
 * than the retention are purged in bounded batches by one replica at a time, counted in the
 * metrics; what they guarded stays guarded: a late, older state of a purged object is refused as
 * stale (it does not come back), while a current state of an object the control plane never
 * stored, reported by a relist, is stored; and a change stream resuming from before a purged
 * deletion is told to start over (`reset`, then every live object).
 */
import t from 'tap';
import { createTestApi } from '../../helpers/api.ts';
import { ApiClient } from '../../../provisioner/http/api-client.ts';
import type { RuntimeObjectChangeEvents, StreamEventOf } from '../../../provisioner/api/types.ts';
import { application, batch, deletion } from '../../helpers/events.ts';
import { createKey } from '../../../provisioner/store/keys.ts';
import { encodeStreamCursor } from '../../../provisioner/http/stream-cursor.ts';
import { EVENTS_PATH, type EventBatchResult } from '../../../runtime/protocol/events.ts';
import { ageTombstones, storedObjects } from '../../helpers/runtime-objects.ts';
import { holdTransaction } from '../../helpers/postgres.ts';
import { tryLockForTransaction } from '../../../provisioner/db/tx.ts';

const api = await createTestApi();
t.teardown(() => api.close());
// The background loop would purge at a moment of its own; the test runs the rounds itself.
await api.services.tombstonePurger.loop.stop();
const purger = api.services.tombstonePurger;
const base = await api.app.listen({ port: 0, host: '127.0.0.1' });

const tenant = await api.signup();
const key = (
  await createKey(api.db.pool, { role: 'runtime', tenantId: tenant.tenantId, name: 'reporter', createdBy: 'test' })
).key;
const ingest = async (items: Parameters<typeof batch>[1]): Promise<EventBatchResult> => {
  const res = await api.request('POST', EVENTS_PATH, { key, body: batch('reporter-0', items) });
  if (res.statusCode !== 200) throw new Error(`POST ${EVENTS_PATH}: ${res.statusCode} ${res.body}`);
  return res.json<EventBatchResult>();
};
const rows = async () =>
  (await storedObjects(api.db.pool, tenant.tenantId)).map((o) => ({
    name: o.name,
    deleted: o.deleted,
    rv: o.resourceVersion,
  }));
const getApp = (name: string) =>
  api.as(tenant.apiKey).request('GET /v1/tenants/:id/applications/:namespace/:name', {
    params: { id: tenant.tenantId, namespace: 'argocd', name },
  });
const hoursAgo = (h: number) => new Date(Date.now() - h * 3600_000).toISOString();

/**
 * Reads the tenant's change stream from `lastEventId` with the typed client at the socket until
 * `n` events (of any name) arrived, or 10 s passed: the events that arrived.
 */
async function readStream(lastEventId: string, n: number) {
  const events: StreamEventOf<RuntimeObjectChangeEvents>[] = [];
  const stream = new ApiClient({ baseUrl: base, token: tenant.apiKey }).events('GET /v1/tenants/:id/changes', {
    params: { id: tenant.tenantId },
    lastEventId,
    // A bound, not a pace: at 10 s the stream is closed and the caller sees how many arrived.
    signal: AbortSignal.timeout(10_000),
  });
  for await (const e of stream) {
    events.push(e);
    if (events.length >= n) break;
  }
  return events;
}

t.test('old tombstones are purged in bounded batches, by one replica at a time, and counted', async (t) => {
  t.same(
    await ingest([
      application('kept', 100),
      application('gone', 101),
      ...[1, 2, 3, 4].map((i) => application(`wf-${i}`, 110 + i)),
      application('fresh', 120),
    ]),
    { applied: 7, stale: 0, removedByDigest: 0 },
    'seven objects stored',
  );
  const keptSeq = (await storedObjects(api.db.pool, tenant.tenantId)).find((o) => o.name === 'kept')!.seq;
  await ingest([
    deletion('Application', 'argocd', 'gone', 200),
    ...[1, 2, 3, 4].map((i) => deletion('Application', 'argocd', `wf-${i}`, 200 + i)),
    deletion('Application', 'argocd', 'fresh', 210),
  ]);
  // Five tombstones stored 25 hours ago (past the default retention of 24 h), one just now.
  await ageTombstones(api.db.pool, tenant.tenantId, 25 * 3600, ['fresh']);

  // Another replica purging: this one leaves the round to it.
  const other = await holdTransaction(api.db.pool, (c) => tryLockForTransaction(c, 'runtime_objects:purge'));
  try {
    t.same(
      await purger.runOnce(),
      { purged: 0, batches: 0, busy: true },
      'while another replica holds the purge lock, this one purges nothing and says it was busy',
    );
  } finally {
    await other.release();
  }

  t.same(
    await purger.runOnce({ batchSize: 2 }),
    { purged: 5, batches: 3, busy: false },
    'the five old tombstones go in batches of at most 2 (2 + 2 + 1)',
  );
  t.same(
    (await rows()).map((r) => `${r.name}:${r.deleted ? 'tombstone' : 'live'}`),
    ['fresh:tombstone', 'kept:live'],
    'the old tombstones are gone; the recent tombstone and the live object stay',
  );
  t.same(await purger.runOnce(), { purged: 0, batches: 0, busy: false }, 'a second round finds nothing to purge');
  const hosted = await api.services.runtimeObjects.hostedRuntime(tenant.tenantId);
  const horizon = await api.services.runtimeObjects.horizon(hosted!);
  t.equal(horizon?.purgedRv, '204', "the tenant's horizon keeps the largest purged resourceVersion");

  const metrics = await api.request('GET', '/metrics');
  t.match(
    metrics.body,
    /^provisioner_runtime_object_tombstones_purged_total 5$/m,
    'the metric counts the 5 purged tombstones',
  );

  t.test('a late, older state of a purged object does not bring it back', async (t) => {
    // The state the reporter saw before the deletion, delivered only now (a delayed retry).
    const late = { ...application('gone', 150, { health: 'Degraded' }), observedAt: hoursAgo(26) };
    t.same(
      await ingest([late]),
      { applied: 0, stale: 1, removedByDigest: 0 },
      'the late state (resourceVersion 150 < the purged deletion at 200, seen before it) is stale',
    );
    t.equal((await getApp('gone')).status, 404, 'GET of the purged object is still 404');
    t.notOk(
      (await rows()).some((r) => r.name === 'gone'),
      'no row was written for it (neither live nor a new tombstone)',
    );
    const lateDelete = { ...deletion('Application', 'argocd', 'wf-1', 199), observedAt: hoursAgo(26) };
    t.equal((await ingest([lateDelete])).applied, 0, 'a late, older deletion of a purged object is not stored either');
  });

  t.test('a current state below the horizon (a relist of an object never stored) is stored', async (t) => {
    // An object that exists since resourceVersion 130 (before the purged deletions), reported by a
    // relist now: observed after the purged tombstones were stored, so it is current.
    t.same(await ingest([application('relisted', 130)]), { applied: 1, stale: 0, removedByDigest: 0 }, 'stored');
    t.equal((await getApp('relisted')).status, 200, 'and served');
    t.same(
      await ingest([application('gone', 300, { uid: 'uid-recreated' })]),
      { applied: 1, stale: 0, removedByDigest: 0 },
      'an object created again under a purged name (new uid, newer resourceVersion) is stored',
    );
    const served = await getApp('gone');
    t.equal(served.ok && served.body.uid, 'uid-recreated', 'the new object is served');
  });

  t.test('a change stream resuming from before a purged deletion starts over with a reset', async (t) => {
    // The id the stream gave out for the change of `kept` (ids are opaque: the test makes it as the stream did).
    const events = await readStream(encodeStreamCursor(api.services.box, `changes/${tenant.tenantId}`, keptSeq), 4);
    t.same(
      events.map((e) => e.event),
      ['reset', 'change', 'change', 'change'],
      'a reset event first, then a change per live object',
    );
    t.equal(events[0]?.event === 'reset' && events[0].data.reason, 'TombstonesPurged', 'the reset says why');
    t.same(
      events.slice(1).map((e) => e.event === 'change' && e.data.item.name),
      ['kept', 'relisted', 'gone'],
      'the replay holds every live object in change order (seq 3 before 14: as numbers), the recent tombstone not replayed',
    );
    // Resuming from the last change's id: a change written after it is sent, whether it is written
    // before or after the stream is served.
    const resuming = readStream(events.at(-1)!.id!, 1);
    await ingest([application('kept', 400)]);
    t.same(
      (await resuming).map((e) => `${e.event}:${e.event === 'change' ? e.data.item.name : undefined}`),
      ['change:kept'],
      'a stream resuming after the horizon gets no reset, only the new change',
    );
  });
});
