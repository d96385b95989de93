/**
 * Applications' history as the API stores and serves it (real Postgres, the real services and app):
 * event batches whose Application reports carry a `change` (runtime/protocol/sources.ts) become
 * history entries, newest first and paged; a monorepo commit that changes application A only makes
 * an entry for A only; an entry's result moves pending → running → succeeded (with its duration)
 * or to failed (Argo CD's message) and a final result is never rewritten; a stale report touches
 * nothing; the tenant's cap deletes its oldest entries and the retention loop the old ones; bad
 * `change` shapes are refused naming the field; another tenant cannot read; the per-application
 * change stream sends this application's entries only.
 */
import t from 'tap';
import { ApiClient, type QueryOf } from '../../../provisioner/http/api-client.ts';
import { createTestApi } from '../../helpers/api.ts';
import { application, batch } from '../../helpers/events.ts';
import { createKey } from '../../../provisioner/store/keys.ts';
import { EVENTS_PATH, type ApplicationSummary, type UpsertItem } from '../../../runtime/protocol/events.ts';
import type { ApplicationChange } from '../../../runtime/protocol/sources.ts';
import type { ApplicationHistoryEntry, ApplicationHistoryPage } from '../../../provisioner/api/types.ts';
import type { PeriodicLoop } from '../../../runtime/loops/periodic.ts';
import { until } from '../../../sandbox/until.ts';
import { ageHistoryEntry } from '../../helpers/runtime-objects.ts';

const CAP = 4;
const api = await createTestApi({ env: { PROVISIONER_APP_HISTORY_MAX_PER_TENANT: String(CAP) } });
const base = await api.app.listen({ port: 0, host: '127.0.0.1' });
t.teardown(() => api.close());

const runtimeKey = async (tenantId: string) =>
  (await createKey(api.db.pool, { role: 'runtime', tenantId, name: 'event reporter', createdBy: 'test' })).key;

const post = (key: string, body: unknown) => api.request('POST', EVENTS_PATH, { key, body });
const ingest = async (key: string, items: UpsertItem[]) => {
  const res = await post(key, batch('reporter-0', items));
  if (res.statusCode !== 200) throw new Error(`POST ${EVENTS_PATH}: ${res.statusCode} ${res.body}`);
  return res.json<{ applied: number; stale: number }>();
};

const sha = (n: number | string) => String(n).padStart(40, '0').slice(-40);

/** What the Source Server says changed an application: `changeRevision` at head `revision`. */
function change(
  changeRevision: string,
  revision = changeRevision,
  o: Partial<ApplicationChange> = {},
): ApplicationChange {
  return {
    revision,
    changeRevision,
    commit: {
      revision: changeRevision,
      author: 'Ada Lovelace <ada@example.com>',
      date: '2024-05-01T10:00:00Z',
      message: `deploy ${changeRevision.slice(-4)}\n\nwith a body`,
      tags: [],
    },
    resources: [
      {
        group: 'apps',
        kind: 'Deployment',
        namespace: 'default',
        name: 'web',
        action: 'modified',
        fields: ['spec.template.spec.containers[name=web].image'],
      },
    ],
    images: [{ resource: 'Deployment/default/web', container: 'web', before: 'web:1.0', after: 'web:1.1' }],
    truncated: false,
    ...o,
  };
}

/** An Application's report at `rv` with the summary's status and a change. */
function report(name: string, rv: number, summary: Partial<ApplicationSummary>, c?: ApplicationChange): UpsertItem {
  const item = application(name, rv);
  return {
    ...item,
    summary: { ...item.summary, ...summary },
    ...(c ? { change: c } : {}),
  };
}

type HistoryQuery = QueryOf<'GET /v1/tenants/:id/applications/:namespace/:name/history'>;
/** An argocd Application's history (the admin key unless `key` says another): an ApiError unless 200. */
const history = (tenantId: string, name: string, query: HistoryQuery = {}, key = api.adminKey) =>
  api.as(key).call('GET /v1/tenants/:id/applications/:namespace/:name/history', {
    params: { id: tenantId, namespace: 'argocd', name },
    query,
  });
/** The same, the client's answer (status and body), never thrown. */
const historyAnswer = (tenantId: string, name: string, key = api.adminKey) =>
  api.as(key).request('GET /v1/tenants/:id/applications/:namespace/:name/history', {
    params: { id: tenantId, namespace: 'argocd', name },
  });
const revisions = (p: ApplicationHistoryPage) => p.items.map((i) => i.changeRevision);

t.test('reports with a change revision become entries, newest first and paged', async (t) => {
  const tenant = await api.signup();
  const key = await runtimeKey(tenant.tenantId);
  await ingest(key, [report('web', 10, { syncStatus: 'OutOfSync', revision: sha(1) }, change(sha(1)))]);
  await ingest(key, [report('web', 11, { syncStatus: 'OutOfSync', revision: sha(1) }, change(sha(2)))]);
  await ingest(key, [report('web', 12, { syncStatus: 'OutOfSync', revision: sha(1) }, change(sha(3)))]);
  // A report without a change (a runtime without a Source Server) makes no entry.
  await ingest(key, [report('web', 13, { syncStatus: 'OutOfSync', revision: sha(1) })]);

  const all = await history(tenant.tenantId, 'web');
  t.same(revisions(all), [sha(3), sha(2), sha(1)], 'one entry per change revision, newest first');
  const top = all.items[0]!;
  t.match(
    top,
    {
      runtime: 'hosted',
      application: { namespace: 'argocd', name: 'web' },
      revision: sha(3),
      author: 'Ada Lovelace <ada@example.com>',
      message: 'deploy 0003\n\nwith a body',
      date: '2024-05-01T10:00:00.000Z',
      images: [{ container: 'web', before: 'web:1.0', after: 'web:1.1' }],
      resources: [{ kind: 'Deployment', name: 'web', fields: ['spec.template.spec.containers[name=web].image'] }],
      result: 'pending',
      truncated: false,
    },
    'the entry carries the commit, the images before → after and the changed field',
  );

  const p1 = await history(tenant.tenantId, 'web', { limit: 2 });
  t.same(revisions(p1), [sha(3), sha(2)], 'the first page holds the two newest');
  t.type(p1.nextCursor, 'string', 'a cursor while more remain');
  const p2 = await history(tenant.tenantId, 'web', { limit: 2, cursor: p1.nextCursor! });
  t.same(revisions(p2), [sha(1)], 'the second page continues after the first');
  t.equal(p2.nextCursor, null, 'no cursor after the last page');

  const runtimeScoped = await api
    .as(tenant.apiKey)
    .call('GET /v1/tenants/:id/runtimes/:name/objects/applications/:namespace/:objectName/history', {
      params: { id: tenant.tenantId, name: 'hosted', namespace: 'argocd', objectName: 'web' },
    });
  t.same(revisions(runtimeScoped), [sha(3), sha(2), sha(1)], 'the runtime-scoped route serves the same history');
  await t.rejects(
    history(tenant.tenantId, 'other', { cursor: p1.nextCursor! }),
    { status: 400, code: 'INVALID_CURSOR' },
    "another application's cursor is refused as INVALID_CURSOR",
  );
});

t.test('a monorepo commit that changes application A makes an entry for A only', async (t) => {
  const tenant = await api.signup();
  const key = await runtimeKey(tenant.tenantId);
  const head1 = sha('a1');
  const head2 = sha('a2');
  await ingest(key, [
    report('app-a', 20, { syncStatus: 'Synced', revision: head1 }, change(head1)),
    report('app-b', 21, { syncStatus: 'Synced', revision: head1 }, change(head1)),
  ]);
  // The head moves to a commit that touched A's path only: B's change revision stays head1.
  await ingest(key, [
    report('app-a', 22, { syncStatus: 'OutOfSync', revision: head1 }, change(head2, head2)),
    report('app-b', 23, { syncStatus: 'OutOfSync', revision: head1 }, change(head1, head2)),
  ]);
  t.same(revisions(await history(tenant.tenantId, 'app-a')), [head2, head1], 'A has a new entry for the commit');
  const b = await history(tenant.tenantId, 'app-b');
  t.same(revisions(b), [head1], "B's history is as it was: its change revision did not move");
  t.equal(b.items[0]!.result, 'succeeded', "B's entry keeps its result");
});

t.test('the result moves pending → running → succeeded with its duration, and stays', async (t) => {
  const tenant = await api.signup();
  const key = await runtimeKey(tenant.tenantId);
  const c = sha('b1');
  const one = async () => (await history(tenant.tenantId, 'paced')).items;
  await ingest(key, [report('paced', 30, { syncStatus: 'OutOfSync', revision: sha('b0') }, change(c))]);
  t.match(await one(), [{ result: 'pending', startedAt: null, durationMs: null }], 'pending before Argo CD syncs it');

  const started = '2024-05-01T10:00:00Z';
  await ingest(key, [
    report(
      'paced',
      31,
      { syncStatus: 'OutOfSync', operationPhase: 'Running', operationRevision: c, operationStartedAt: started },
      change(c),
    ),
  ]);
  t.match(await one(), [{ result: 'running', startedAt: '2024-05-01T10:00:00.000Z' }], 'running while it syncs');

  // A report that says less (an older operation's state) does not move it back.
  await ingest(key, [report('paced', 32, { syncStatus: 'OutOfSync', revision: sha('b0') }, change(c))]);
  t.equal((await one())[0]!.result, 'running', 'running does not go back to pending');

  await ingest(key, [
    report(
      'paced',
      33,
      {
        syncStatus: 'Synced',
        revision: c,
        operationPhase: 'Succeeded',
        operationRevision: c,
        operationStartedAt: started,
        operationFinishedAt: '2024-05-01T10:00:42.500Z',
        operationMessage: 'successfully synced (all tasks run)',
      },
      change(c),
    ),
  ]);
  const done = (await one())[0]!;
  t.match(
    done,
    {
      result: 'succeeded',
      resultMessage: 'successfully synced (all tasks run)',
      finishedAt: '2024-05-01T10:00:42.500Z',
      durationMs: 42_500,
    },
    'succeeded with its times and duration',
  );

  await ingest(key, [
    report(
      'paced',
      34,
      { syncStatus: 'Unknown', conditions: [{ type: 'ComparisonError', message: 'rpc error: repo unreachable' }] },
      change(c),
    ),
  ]);
  const after = (await one())[0]!;
  t.equal(after.result, 'succeeded', 'a final result is not rewritten by a later report');
  t.equal(after.updatedAt, done.updatedAt, 'the entry was not written again');
});

t.test('a commit Argo CD cannot render is a failed entry with its message', async (t) => {
  const tenant = await api.signup();
  const key = await runtimeKey(tenant.tenantId);
  const message = 'rpc error: code = Unknown desc = kustomize build failed: missing resource deployment.yaml';
  await ingest(key, [
    report(
      'broken',
      40,
      { syncStatus: 'Unknown', conditions: [{ type: 'ComparisonError', message }] },
      change(sha('c1')),
    ),
    report(
      'unrendered',
      41,
      { syncStatus: 'Unknown' },
      change(sha('c2'), sha('c2'), {
        error: 'Manifest generation error (cached): helm template failed',
        resources: [],
        images: [],
      }),
    ),
  ]);
  t.match(
    (await history(tenant.tenantId, 'broken')).items,
    [{ result: 'failed', resultMessage: message }],
    "a ComparisonError condition: failed with Argo CD's message",
  );
  t.match(
    (await history(tenant.tenantId, 'unrendered')).items,
    [{ result: 'failed', resultMessage: 'Manifest generation error (cached): helm template failed' }],
    "the Source Server's error: failed with its message",
  );
  await ingest(key, [report('unrendered', 43, { syncStatus: 'Unknown' }, change(sha('c2')))]);
  t.equal(
    (await history(tenant.tenantId, 'unrendered')).items[0]!.result,
    'failed',
    'a failure stays failed while nothing new happens (a report that says pending)',
  );
  await ingest(key, [report('broken', 42, { syncStatus: 'Synced', revision: sha('c1') }, change(sha('c1')))]);
  t.equal(
    (await history(tenant.tenantId, 'broken')).items[0]!.result,
    'succeeded',
    'a ComparisonError that cleared (no sync had run): succeeded once Argo CD reports the application Synced at it',
  );
  const retried = new Date(Date.now() + 60_000).toISOString();
  await ingest(key, [
    report(
      'unrendered',
      44,
      {
        syncStatus: 'Synced',
        revision: sha('c2'),
        operationPhase: 'Succeeded',
        operationRevision: sha('c2'),
        operationStartedAt: retried,
        operationFinishedAt: retried,
      },
      change(sha('c2')),
    ),
  ]);
  t.match(
    (await history(tenant.tenantId, 'unrendered')).items,
    [{ result: 'succeeded', startedAt: retried }],
    'a later sync of the same change decides its result',
  );
});

t.test('a stale report touches no history; the same state sent again with its change does', async (t) => {
  const tenant = await api.signup();
  const key = await runtimeKey(tenant.tenantId);
  await ingest(key, [report('late', 500, { syncStatus: 'OutOfSync' })]);
  const stale = await ingest(key, [report('late', 400, { syncStatus: 'OutOfSync' }, change(sha('d9')))]);
  t.equal(stale.stale, 1, 'the older report is stale');
  t.same((await history(tenant.tenantId, 'late')).items, [], 'and made no entry');
  // The reporter sends the stored state again once its Source Server answered.
  const again = await ingest(key, [report('late', 500, { syncStatus: 'OutOfSync' }, change(sha('d1')))]);
  t.equal(again.applied, 0, 'the same state is not stored again');
  t.same(revisions(await history(tenant.tenantId, 'late')), [sha('d1')], 'but its change makes the entry');
});

t.test("the tenant's cap deletes its oldest entries; the retention loop deletes old ones", async (t) => {
  const tenant = await api.signup();
  const key = await runtimeKey(tenant.tenantId);
  for (let i = 1; i <= CAP + 2; i++)
    await ingest(key, [report('busy', 600 + i, { syncStatus: 'OutOfSync' }, change(sha(`e${i}`)))]);
  const kept = revisions(await history(tenant.tenantId, 'busy', { limit: 200 }));
  t.same(
    kept,
    [sha('e6'), sha('e5'), sha('e4'), sha('e3')],
    `the ${CAP} newest stay (PROVISIONER_APP_HISTORY_MAX_PER_TENANT), the oldest went`,
  );

  t.ok(
    api.services.loops.status().some((l) => l.name === 'app-history-pruner' && l.state === 'running'),
    'the app-history-pruner runs under the loop manager',
  );
  await ageHistoryEntry(api.db.pool, tenant.tenantId, sha('e3'), 91 * 86_400);
  const loop: PeriodicLoop = api.services.appHistoryPruner.loop;
  const before = loop.status().rounds;
  loop.kick();
  await until('a round of app-history-pruner', 10_000, () => loop.status().rounds > before);
  t.equal(loop.status().consecutiveFailures, 0, 'the round succeeded');
  t.same(
    revisions(await history(tenant.tenantId, 'busy')),
    [sha('e6'), sha('e5'), sha('e4')],
    'the entry older than the 90 days of retention is gone, the others stay',
  );
});

t.test('bad change shapes are refused with 400 naming the field; nothing is stored', async (t) => {
  const tenant = await api.signup();
  const key = await runtimeKey(tenant.tenantId);
  const refused = async (item: unknown, field: string, what: string) => {
    const res = await post(key, batch('reporter-0', [item as UpsertItem]));
    t.equal(res.statusCode, 400, `${what}: 400`);
    t.equal(res.json<{ error: { field?: string } }>().error.field, field, `${what}: names ${field}`);
  };
  const ok = report('shapes', 700, {}, change(sha('f1')));
  await refused({ ...ok, change: { ...ok.change, truncated: undefined } }, 'items.0.change.truncated', 'no truncated');
  await refused(
    { ...ok, change: { ...ok.change, changeRevision: 'not a revision' } },
    'items.0.change.changeRevision',
    'a revision with spaces',
  );
  await refused(
    { ...ok, change: { ...ok.change, resources: Array.from({ length: 101 }, () => ok.change!.resources[0]) } },
    'items.0.change.resources',
    'more resources than MAX_CHANGED_RESOURCES',
  );
  await refused(
    {
      ...ok,
      change: {
        ...ok.change,
        images: [{ resource: 'Deployment/default/web', container: 'web', before: 'a\u001b[31m' }],
      },
    },
    'items.0.change.images.0.before',
    'an image with control characters',
  );
  const big = {
    ...ok.change!,
    resources: Array.from({ length: 100 }, (_, i) => ({
      ...ok.change!.resources[0]!,
      name: `web-${i}`,
      fields: Array.from({ length: 20 }, (_, j) => `spec.field${j}.${'x'.repeat(20)}`),
    })),
  };
  await refused({ ...ok, change: big }, 'items.0.change', 'a change over MAX_CHANGE_BYTES');
  const rollout = { ...ok, kind: 'Rollout' };
  await refused(rollout, 'items.0.change', 'a change on a Rollout');
  await t.rejects(
    history(tenant.tenantId, 'shapes'),
    { status: 404, code: 'RUNTIME_OBJECT_NOT_FOUND' },
    'nothing of the refused batches was stored: the application is unknown, with its code',
  );
});

t.test('another tenant cannot read the history; a known application without entries has an empty one', async (t) => {
  const a = await api.signup();
  const b = await api.signup();
  const key = await runtimeKey(a.tenantId);
  await ingest(key, [report('private', 800, {}, change(sha('g1')))]);
  await ingest(key, [report('quiet', 801, {})]);
  const own = await historyAnswer(a.tenantId, 'private', a.apiKey);
  t.equal(own.status, 200, 'the tenant reads its own');
  const cross = await historyAnswer(a.tenantId, 'private', b.apiKey);
  t.equal(cross.status, 404, "another tenant's key gets 404");
  t.notMatch(JSON.stringify(cross.body), /g1/, 'and learns nothing of the entries');
  const asRuntime = await historyAnswer(a.tenantId, 'private', key);
  t.equal(asRuntime.status, 403, 'a runtime key may not read');
  t.same((await history(a.tenantId, 'quiet')).items, [], 'an application reported without changes: an empty history');
  await t.rejects(
    api.client.call('GET /v1/tenants/:id/runtimes/:name/objects/applications/:namespace/:objectName/history', {
      params: { id: a.tenantId, name: 'nope', namespace: 'argocd', objectName: 'private' },
    }),
    { code: 'RUNTIME_NOT_FOUND' },
    'an unknown runtime',
  );
});

t.test("the change stream sends this application's entries only, as they are written", async (t) => {
  const tenant = await api.signup();
  const key = await runtimeKey(tenant.tenantId);
  await ingest(key, [
    report('streamed', 900, { syncStatus: 'OutOfSync' }, change(sha('h1'))),
    report('neighbour', 901, { syncStatus: 'OutOfSync' }, change(sha('h1'))),
  ]);
  const abort = new AbortController();
  t.teardown(() => abort.abort());
  const entries: { id: string; item: ApplicationHistoryEntry }[] = [];
  // after=0 fixes where the stream starts: the existing entry first, then every entry written later.
  const stream = new ApiClient({ baseUrl: base, token: tenant.apiKey }).events(
    'GET /v1/tenants/:id/applications/:namespace/:name/history/stream',
    {
      params: { id: tenant.tenantId, namespace: 'argocd', name: 'streamed' },
      query: { after: '0' },
      signal: abort.signal,
    },
  );
  void (async () => {
    for await (const e of stream) if (e.event === 'entry' && e.id) entries.push({ id: e.id, item: e.data.item });
  })().catch((err: unknown) => t.fail(`the stream failed: ${String(err)}`));
  await until('the existing entry', 10_000, () => entries.length >= 1);
  t.equal(entries[0]!.item.changeRevision, sha('h1'), 'after=0 sends the existing entry first');

  // The neighbour's commit, then ours: the next event is ours.
  await ingest(key, [report('neighbour', 902, { syncStatus: 'OutOfSync' }, change(sha('h2')))]);
  await ingest(key, [report('streamed', 903, { syncStatus: 'OutOfSync' }, change(sha('h3')))]);
  await until('the new entry', 10_000, () => entries.length >= 2);
  t.equal(entries[1]!.item.changeRevision, sha('h3'), "the next event is this application's new entry");
  t.equal(entries[1]!.item.application.name, 'streamed', "the neighbour's entry was not sent");

  await ingest(key, [report('streamed', 904, { syncStatus: 'Synced', revision: sha('h3') }, change(sha('h3')))]);
  await until('the entry updated', 10_000, () => entries.length >= 3);
  t.match(
    entries[2]!.item,
    { changeRevision: sha('h3'), result: 'succeeded' },
    'an entry whose result moved is sent again',
  );
  t.ok(
    entries.every((e) => e.item.application.name === 'streamed'),
    'every event is about this application',
  );
  // The page is JSON Postgres built, the stream's entries went through the schema's serializer:
  // both say the same of each entry, field for field (timestamps to the millisecond included).
  const page = await history(tenant.tenantId, 'streamed');
  t.strictSame(
    page.items,
    [entries[2]!.item, entries[0]!.item],
    'the history page and the stream agree on every field',
  );
});
