/**
 * The application state a runtime reports (POST /v1/runtime/events) as the API stores and serves it:
 * listing and getting objects, the ordering rule (an older state never overwrites a newer one, also
 * across a delete and a re-creation), digests, who may post and read, 400s naming the field, the
 * tenant's Reporting condition, the metrics, and a 503 when the database cannot be reached.
 */
import t from 'tap';
import type { AnswerOf, QueryOf } from '../../../provisioner/http/api-client.ts';
import { createTestApi, startReplica } from '../../helpers/api.ts';
import { application, batch, deletion } from '../../helpers/events.ts';
import { createKey } from '../../../provisioner/store/keys.ts';
import { hashKeyBase64 } from '../../../provisioner/store/key-format.ts';
import { createPool } from '../../../provisioner/db/database.ts';
import { freePort } from '../../helpers/ports.ts';
import { EVENTS_PATH, ownerOf, type EventBatchResult } from '../../../runtime/protocol/events.ts';
import { reporterRows, setReportersSeenAgo } from '../../helpers/runtimes.ts';
import { storedKeys } from '../../helpers/keys.ts';

// Nine subtests with their own replicas and a database outage: about a minute on a quiet machine,
// near the 120 s per-file default of .taprc when two tiers share two busy cores.
t.setTimeout(240_000);

const api = await createTestApi();
t.teardown(() => api.close());

const a = await api.signup();
const b = await api.signup();
const runtimeKey = async (tenantId: string) =>
  (await createKey(api.db.pool, { role: 'runtime', tenantId, name: 'event reporter', createdBy: 'test' })).key;
const keyA = await runtimeKey(a.tenantId);
const keyB = await runtimeKey(b.tenantId);

// the runtime's event reports are outside the route map (and the bad-input cases are malformed): raw
const post = (key: string, body: unknown) => api.request('POST', EVENTS_PATH, { key, body });
const ingest = async (key: string, body: unknown): Promise<EventBatchResult> => {
  const res = await post(key, body);
  if (res.statusCode !== 200) throw new Error(`POST ${EVENTS_PATH}: ${res.statusCode} ${res.body}`);
  return res.json<EventBatchResult>();
};
type ListQuery = QueryOf<'GET /v1/tenants/:id/applications'>;
const list = (tenantId: string, query: ListQuery = {}, key = api.adminKey) =>
  api.as(key).call('GET /v1/tenants/:id/applications', { params: { id: tenantId }, query });
/** One Application of the tenant (argocd namespace unless given). */
const getApp = (tenantId: string, name: string, key = api.adminKey, namespace = 'argocd') =>
  api
    .as(key)
    .request('GET /v1/tenants/:id/applications/:namespace/:name', { params: { id: tenantId, namespace, name } });

t.test('a batch is stored and listed, filtered and paged; one object is served with its object', async (t) => {
  const items = [
    application('guestbook', 100, { health: 'Degraded', sync: 'OutOfSync' }),
    application('billing', 101),
    application('billing-api', 102, { namespace: 'team-a' }),
    application('web', 103, { health: 'Progressing' }),
  ];
  t.same(await ingest(keyA, batch('reporter-0', items)), { applied: 4, stale: 0, removedByDigest: 0 }, 'all 4 stored');

  const all = await list(a.tenantId);
  t.same(
    all.items.map((i) => `${i.namespace}/${i.name}`),
    ['argocd/billing', 'argocd/guestbook', 'argocd/web', 'team-a/billing-api'],
    'listed in namespace, name order',
  );
  const g = all.items.find((i) => i.name === 'guestbook')!;
  t.equal(g.health, 'Degraded', 'health comes from the summary');
  t.equal(g.sync, 'OutOfSync', 'sync comes from the summary');
  t.equal(g.resourceVersion, '100', 'resourceVersion as reported');
  t.ok(g.ageSeconds >= 0 && g.ageSeconds < 30 && !Number.isNaN(Date.parse(g.updatedAt)), 'item carries its age');

  t.same(
    (await list(a.tenantId, { health: 'Degraded' })).items.map((i) => i.name),
    ['guestbook'],
    'health filter',
  );
  t.same(
    (await list(a.tenantId, { sync: 'Synced', namespace: 'argocd' })).items.map((i) => i.name),
    ['billing', 'web'],
    'sync + namespace',
  );
  t.same(
    (await list(a.tenantId, { namePrefix: 'bill' })).items.map((i) => i.name),
    ['billing', 'billing-api'],
    'name prefix',
  );

  const p1 = await list(a.tenantId, { limit: 3 });
  t.equal(p1.items.length, 3, 'first page holds 3');
  t.type(p1.nextCursor, 'string', 'a next cursor while more remain');
  const p2 = await list(a.tenantId, { limit: 3, cursor: p1.nextCursor! });
  t.same(
    p2.items.map((i) => i.name),
    ['billing-api'],
    'second page continues after the first',
  );
  t.equal(p2.nextCursor, null, 'no cursor after the last page');
  await t.rejects(
    list(a.tenantId, { cursor: p1.nextCursor! + 'x' }),
    { code: 'INVALID_CURSOR' },
    'an altered cursor is refused',
  );

  const one = await getApp(a.tenantId, 'guestbook', a.apiKey);
  t.equal(one.status, 200, 'the tenant gets its own object');
  if (!one.ok) throw new Error('precondition: the object was read');
  t.match(one.body.object, { spec: { project: 'default' } }, 'the stored object is served');
  t.equal(one.body.truncated, false, 'truncated as reported');
  const missing = await getApp(a.tenantId, 'nope');
  t.equal(missing.status, 404, 'an unknown object is a 404');
  t.match(missing.body, { error: { code: 'RUNTIME_OBJECT_NOT_FOUND' } }, 'with its code');
  const rollouts = await api.client.call('GET /v1/tenants/:id/rollouts', { params: { id: a.tenantId } });
  t.same(rollouts.items, [], 'applications are not listed as rollouts');
});

t.test('an older state never overwrites a newer one, also across a delete and a re-creation', async (t) => {
  await ingest(keyA, batch('reporter-0', [application('order', 200, { health: 'Healthy' })]));
  const stale = await ingest(keyA, batch('reporter-1', [application('order', 150, { health: 'Degraded' })]));
  t.same(stale, { applied: 0, stale: 1, removedByDigest: 0 }, 'the older state counts as stale');
  const again = await ingest(keyA, batch('reporter-0', [application('order', 200, { health: 'Degraded' })]));
  t.equal(again.stale, 1, 'the same resourceVersion again is not newer either');
  let got = await getApp(a.tenantId, 'order');
  t.match(got.body, { health: 'Healthy' }, 'the newer state stays');

  // Within one batch, the newest of several states of one object wins whatever their order.
  const dup = await ingest(
    keyA,
    batch('reporter-0', [
      application('order', 260, { health: 'Progressing' }),
      application('order', 250, { health: 'Degraded' }),
    ]),
  );
  t.same(dup, { applied: 1, stale: 1, removedByDigest: 0 }, 'one of two states of one object stored');
  got = await getApp(a.tenantId, 'order');
  t.match(got.body, { resourceVersion: '260' }, 'the larger resourceVersion of the batch is stored');

  t.equal(
    (await ingest(keyA, batch('reporter-0', [deletion('Application', 'argocd', 'order', 300)]))).applied,
    1,
    'deleted',
  );
  got = await getApp(a.tenantId, 'order');
  t.equal(got.status, 404, 'a deleted object is a 404');
  t.notOk(
    (await list(a.tenantId)).items.some((i) => i.name === 'order'),
    'and is not listed',
  );

  const late = await ingest(keyA, batch('reporter-1', [application('order', 280)]));
  t.equal(late.stale, 1, 'a state older than the deletion is refused');
  t.equal((await getApp(a.tenantId, 'order')).status, 404, 'it does not bring the deleted object back');

  // A delete of an object the control plane never heard of leaves a tombstone too.
  await ingest(keyA, batch('reporter-0', [deletion('Application', 'argocd', 'ghost', 500)]));
  t.equal((await ingest(keyA, batch('reporter-1', [application('ghost', 450)]))).stale, 1, 'older than its deletion');

  const recreated = await ingest(keyA, batch('reporter-0', [application('order', 400, { uid: 'uid-new' })]));
  t.equal(recreated.applied, 1, 'the re-created object (new uid, larger resourceVersion) is stored');
  got = await getApp(a.tenantId, 'order');
  t.equal(got.status, 200, 'the re-created object is served');
  const lateDelete = await ingest(
    keyA,
    batch('reporter-1', [deletion('Application', 'argocd', 'order', 300, 'uid-order')]),
  );
  t.equal(lateDelete.stale, 1, 'the old deletion arriving again does not delete the re-created object');
  t.equal((await getApp(a.tenantId, 'order')).status, 200, 'still there');
});

t.test('a digest removes the objects its replica owns that it no longer lists', async (t) => {
  const tenant = await api.signup();
  const key = await runtimeKey(tenant.tenantId);
  const members = ['reporter-0', 'reporter-1'];
  const names = Array.from({ length: 40 }, (_, i) => `app-${i}`);
  await ingest(
    key,
    batch(
      'reporter-0',
      names.map((n, i) => application(n, 1000 + i)),
    ),
  );
  const mine = names.filter(
    (n) => ownerOf({ kind: 'Application', namespace: 'argocd', name: n }, members) === 'reporter-0',
  );
  t.ok(mine.length > 5 && mine.length < 35, `reporter-0 owns some of the objects (${mine.length} of 40)`);
  const gone = mine.slice(0, 3);
  // Objects written after the digest's list (resourceVersion larger than listResourceVersion) stay.
  const newer = mine[3]!;
  await ingest(key, batch('reporter-1', [application(newer, 3000)]));
  const kept = mine.filter((n) => !gone.includes(n) && n !== newer);
  const result = await ingest(
    key,
    batch('reporter-0', [], {
      digests: [
        {
          replica: 'reporter-0',
          members,
          kind: 'Application',
          listResourceVersion: '2000',
          objects: kept.map((n) => ({ namespace: 'argocd', name: n, uid: `uid-argocd-${n}`, resourceVersion: '1000' })),
        },
      ],
    }),
  );
  t.equal(result.removedByDigest, 3, 'the 3 objects missing from the digest are removed');
  const listed = (await list(tenant.tenantId, { limit: 100 })).items.map((i) => i.name);
  for (const n of gone) t.notOk(listed.includes(n), `${n} (missing from the digest) is gone`);
  t.ok(listed.includes(newer), 'an object newer than the digest stays');
  t.equal(listed.length, 40 - 3, "the other replica's objects stay");
  const late = await ingest(key, batch('reporter-1', [application(gone[0]!, 1500)]));
  t.equal(late.stale, 1, 'a state older than the digest does not bring a removed object back');
});

t.test('who may post and read', async (t) => {
  const asB = await post(keyB, batch('reporter-0', [application('only-b', 10)]));
  t.equal(asB.statusCode, 200, "tenant B's runtime reports");
  t.notOk(
    (await list(a.tenantId)).items.some((i) => i.name === 'only-b'),
    "B's runtime key writes into B only",
  );
  t.ok(
    (await list(b.tenantId)).items.some((i) => i.name === 'only-b'),
    "B's object is B's",
  );

  await t.rejects(
    list(b.tenantId, {}, keyA),
    { name: 'ApiError', status: 403 },
    "a runtime key cannot read the listings (not even its own tenant's)",
  );
  await t.rejects(
    list(b.tenantId, {}, a.apiKey),
    { status: 404, code: 'TENANT_NOT_FOUND' },
    "a tenant key gets 404 for another tenant's listing, as for an unknown tenant",
  );
  const getOther = await getApp(b.tenantId, 'only-b', a.apiKey);
  t.equal(getOther.status, 404, "and for another tenant's object");
  t.equal((await list(a.tenantId, {}, a.apiKey)).items.length > 0, true, 'a tenant key reads its own');
  t.ok(await list(b.tenantId, {}, api.operatorKey), "an operator reads any tenant's");
  await t.rejects(
    list('00000000-0000-4000-8000-000000000000'),
    { code: 'TENANT_NOT_FOUND' },
    'an unknown tenant is a 404',
  );

  for (const [who, key] of [
    ['a tenant key', a.apiKey],
    ['an operator key', api.operatorKey],
    ['an admin key', api.adminKey],
  ] as const) {
    const res = await post(key, batch('reporter-0', [application('intruder', 10)]));
    t.equal(res.statusCode, 403, `${who} cannot post events`);
  }
  t.notOk(
    (await list(a.tenantId)).items.some((i) => i.name === 'intruder'),
    'nothing was stored by them',
  );
});

t.test('bad input is a 400 naming the field, and nothing of the batch is stored', async (t) => {
  const ok = application('never-stored', 10);
  /** A batch with items the contract's types refuse (the API must refuse them too). */
  const raw = (items: unknown[]) => ({ replica: 'r', items });
  const cases: [string, unknown, string][] = [
    ['unknown kind', raw([ok, { ...application('x', 10), kind: 'Secret' }]), 'items.1.kind'],
    ['resourceVersion not an integer', batch('r', [ok, application('x', 'abc')]), 'items.1.resourceVersion'],
    [
      'resourceVersion over 19 digits',
      batch('r', [ok, application('x', '99999999999999999999')]),
      'items.1.resourceVersion',
    ],
    ['upsert without object', raw([{ ...application('x', 10), object: undefined }]), 'items.0.object'],
    ['unknown field', raw([{ ...application('x', 10), data: { password: 'x' } }]), 'items.0.data'],
    [
      'too many items',
      batch(
        'r',
        Array.from({ length: 501 }, (_, i) => application(`x${i}`, 10)),
      ),
      'items',
    ],
    ['missing replica', { items: [] }, 'replica'],
    [
      'digest with a bad listResourceVersion',
      batch('r', [ok], {
        digests: [{ replica: 'r', members: ['r'], kind: 'Application', listResourceVersion: 'x1', objects: [] }],
      }),
      'digests.0.listResourceVersion',
    ],
  ];
  for (const [what, body, field] of cases) {
    const res = await post(keyA, body);
    const err = res.json<{ error: { code: string; field?: string; message: string } }>().error;
    t.equal(res.statusCode, 400, `${what}: 400`);
    t.equal(err.code, 'VALIDATION_FAILED', `${what}: VALIDATION_FAILED`);
    t.equal(err.field, field, `${what}: names ${field} (${err.message})`);
  }
  t.equal((await getApp(a.tenantId, 'never-stored')).status, 404, 'the valid item of a refused batch was not stored');
  const big = await post(keyA, batch('r', [application('huge', 10, { padBytes: 1200 * 1024 })]));
  t.equal(big.statusCode, 413, 'a body over the batch limit is a 413');
  const object = await post(keyA, batch('r', [application('fat', 10, { padBytes: 300 * 1024 })]));
  t.equal(
    object.json<{ error: { field?: string } }>().error.field,
    'items.0.object',
    'an object over 256 KiB is refused',
  );
  const fits = await post(
    keyA,
    batch('r', [application('wide', 10, { padBytes: 200 * 1024 }), application('wide2', 10, { padBytes: 200 * 1024 })]),
  );
  t.equal(fits.statusCode, 200, 'a batch over the default body limit but within the batch limit is accepted');
});

t.test("heartbeats make the tenant's Reporting condition; silence makes it Stale", async (t) => {
  const tenant = await api.signup();
  const key = await runtimeKey(tenant.tenantId);
  type View = AnswerOf<'GET /v1/tenants/:id'>;
  const view = () => api.as(tenant.apiKey).call('GET /v1/tenants/:id', { params: { id: tenant.tenantId } });
  const reporting = (v: View) => v.status.conditions.find((c) => c.type === 'Reporting');

  let v = await view();
  t.equal(reporting(v), undefined, 'no Reporting condition before the reporter ever reported');
  t.equal(v.status.reporting, undefined, 'and no status.reporting');

  const hb = (replica: string, owned: number) =>
    batch(replica, [], { heartbeat: { replica, ownedObjects: owned, queueDepth: 0, oldestPendingSeconds: 0 } });
  await ingest(key, hb('reporter-0', 30));
  await ingest(key, hb('reporter-1', 12));
  v = await view();
  t.match(reporting(v), { status: 'True', reason: 'Heartbeat' }, 'Reporting=True while heartbeats flow');
  t.match(v.status.reporting, { replicas: 2, objects: 42, stale: false }, 'two replicas owning 42 objects');

  // Both replicas fall silent: their last heartbeats are now older than the stale window.
  await setReportersSeenAgo(api.db.pool, tenant.tenantId, 61);
  v = await view();
  t.match(reporting(v), { status: 'False', reason: 'Stale' }, 'Reporting=False, reason Stale, after 60 s of silence');
  t.match(v.status.reporting, { replicas: 0, objects: 42, stale: true }, 'stale, with the last known object count');
  const listed = await api.as(api.operatorKey).call('GET /v1/tenants', { query: { limit: 200 } });
  t.match(
    reporting(listed.items.find((i) => i.id === tenant.tenantId)!),
    { status: 'False', reason: 'Stale' },
    'the tenant listing shows it too',
  );
  // /metrics is outside the route map: raw
  const metrics = await api.request('GET', '/metrics', { key: null });
  t.match(metrics.body, /provisioner_runtime_reporting_stale [1-9]/, 'the stale runtime is counted in the metrics');

  await ingest(key, hb('reporter-0', 31));
  v = await view();
  t.match(reporting(v), { status: 'True' }, 'Reporting=True again once a heartbeat arrives');
  t.match(v.status.reporting, { replicas: 1, objects: 31, stale: false }, 'one replica reporting again');
  t.ok(Date.now() - Date.parse(reporting(v)!.lastTransitionTime) < 30_000, 'the condition changed just now');
});

t.test('ingest metrics count items by result and batch sizes', async (t) => {
  const m = (await api.request('GET', '/metrics', { key: null })).body;
  t.match(m, /provisioner_runtime_event_items_total\{result="applied"\} [1-9]/, 'applied items are counted');
  t.match(m, /provisioner_runtime_event_items_total\{result="stale"\} [1-9]/, 'stale items are counted');
  t.match(m, /provisioner_runtime_event_batch_items_count [1-9]/, 'batch sizes are observed');
  t.match(m, /provisioner_runtime_objects\{tenant=""\} \d+/, 'the total of reported objects is exported');
});

t.test('a database that cannot be reached is a 503 with Retry-After, not a crash', async (t) => {
  // A replica whose pool points at a port where no database listens (its key is in the key cache,
  // so the request gets as far as the ingest's transaction).
  const url = `postgres://nobody@127.0.0.1:${await freePort()}/none`;
  const pool = createPool(url, 2);
  const down = await startReplica(api.config, { pool, url }, { replicaId: 'replica-without-db' });
  t.teardown(async () => {
    await down.close();
    await pool.end();
  });
  const rows = await storedKeys(api.db.pool, { tenantId: a.tenantId, role: 'runtime' });
  down.services.keyCache.set(hashKeyBase64(keyA), { keyId: rows[0]!.id, role: 'runtime', tenantId: a.tenantId });
  const res = await down.app.inject({
    method: 'POST',
    url: EVENTS_PATH,
    headers: { authorization: `Bearer ${keyA}` },
    payload: batch('reporter-0', [application('during-outage', 10)]),
  });
  t.equal(res.statusCode, 503, 'the batch is answered 503');
  t.equal(res.json<{ error: { code: string } }>().error.code, 'DATABASE_UNAVAILABLE', 'DATABASE_UNAVAILABLE');
  t.ok(Number(res.headers['retry-after']) > 0, 'with Retry-After, so the reporter retries the batch');
});

t.test('a heartbeat with a fractional oldest pending age (as the reporter sends it) is stored', async (t) => {
  const tenant = await api.signup();
  const key = await runtimeKey(tenant.tenantId);
  const heartbeat = { replica: 'reporter-0', ownedObjects: 3, queueDepth: 2, oldestPendingSeconds: 1.234 };
  for (let i = 0; i < 2; i++) {
    const res = await post(key, batch('reporter-0', [], { heartbeat }));
    t.equal(
      res.statusCode,
      200,
      `heartbeat ${i + 1} (first insert, then update) is accepted: ${res.body.slice(0, 200)}`,
    );
  }
  const rows = (await reporterRows(api.db.pool, tenant.tenantId)).map((r) => ({
    oldest_pending_seconds: r.oldest_pending_seconds,
  }));
  t.same(rows, [{ oldest_pending_seconds: 1.234 }], 'its oldest pending age is stored as sent');
});
