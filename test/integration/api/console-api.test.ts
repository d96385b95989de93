/**
 * What the ops console needs from the public API: the tenant listing's search and sorts (paged by
 * cursor in any order), the counts by phase, the fleet's change stream (Server-Sent Events,
 * resumable), whoami, the catalog's paths, the staleness of a status, and the console's own
 * files under /console.
 */
import t from 'tap';
import { ApiClient, type AnswerOf, type ApiResult, type QueryOf } from '../../../provisioner/http/api-client.ts';
import type { StreamEventOf, TenantStreamEvents } from '../../../provisioner/api/types.ts';
import { createTestApi, uniqueOrg } from '../../helpers/api.ts';
import { createKey } from '../../../provisioner/store/keys.ts';
import { catalog } from '../../../runtime/catalog.ts';
import { until } from '../../../sandbox/until.ts';
import { setTenantStatus } from '../../helpers/tenants.ts';

const api = await createTestApi();
t.teardown(() => api.close());
const client = api.client;

const prefix = uniqueOrg('console');
const made: { id: string; org: string; key: string }[] = [];
for (const n of ['c', 'a', 'e', 'b', 'd']) {
  const { tenantId, apiKey } = await api.signup({ organization: `${prefix}-${n}` });
  made.push({ id: tenantId, org: `${prefix}-${n}`, key: apiKey });
}
/** The id of the tenant made with organization `${prefix}-${n}`. */
const idOf = (n: string): string => made.find((m) => m.org === `${prefix}-${n}`)!.id;
await setTenantStatus(api.db.pool, [idOf('a'), idOf('b')], { phase: 'Ready' });

t.test('search and sort by organization, paged by cursor in both orders, without a row twice', async (t) => {
  for (const order of ['asc', 'desc'] as const) {
    const seen: string[] = [];
    let cursor: string | null = null;
    do {
      const res: ApiResult<'GET /v1/tenants'> = await client.request('GET /v1/tenants', {
        query: { q: prefix, sort: 'organization', order, limit: 2, ...(cursor ? { cursor } : {}) },
      });
      t.equal(res.status, 200, `a page of the ${order} listing is answered`);
      if (!res.ok) break;
      const page: AnswerOf<'GET /v1/tenants'> = res.body;
      seen.push(...page.items.map((i) => i.organization));
      cursor = page.nextCursor;
    } while (cursor);
    const expected = ['a', 'b', 'c', 'd', 'e'].map((n) => `${prefix}-${n}`);
    t.same(seen, order === 'asc' ? expected : expected.reverse(), `every match once, in ${order} order`);
  }
  const list = (query: QueryOf<'GET /v1/tenants'>, as = client) => as.call('GET /v1/tenants', { query });
  const first = await list({ q: prefix, sort: 'organization', limit: 2 });
  await t.rejects(
    list({ q: prefix, sort: 'updatedAt', limit: 2, cursor: first.nextCursor! }),
    { status: 400, code: 'INVALID_CURSOR' },
    'a cursor of another order is refused with INVALID_CURSOR',
  );
  const byId = await list({ q: made[2]!.id });
  t.same(
    byId.items.map((i) => i.id),
    [made[2]!.id],
    'a whole tenant id finds that tenant',
  );
  const wild = await list({ q: '%' });
  t.equal(wild.items.length, 0, "'%' is searched for as a character, not as a wildcard");
  // a sort outside the schema: sent raw
  const bad = await api.request('GET', '/v1/tenants?sort=email');
  t.match(bad.json(), { error: { code: 'VALIDATION_FAILED', field: 'sort' } }, 'an unknown sort is a 400 naming sort');
});

t.test('counts by phase follow the filters; a tenant key counts only its tenant', async (t) => {
  const summary = (as = client) => as.call('GET /v1/tenants/summary', { query: { q: prefix } });
  const res = await summary();
  t.match(res, { phases: { Ready: 2, Pending: 3, Failed: 0 }, total: 5 }, 'two Ready, three Pending');
  const version = catalog.get(res.runtimeVersions[0]!.version)?.version;
  t.ok(version, 'the versions counted are catalog versions');
  t.same(
    res.runtimeVersions,
    [{ version, tenants: 5, running: 0 }],
    'the five signups name one version, and none has it installed yet',
  );
  t.equal(res.suspended, 0, 'no tenant suspended yet');
  // One suspended whose suspension is applied, one whose suspension is not applied yet (still Ready),
  // one running an older version.
  await setTenantStatus(api.db.pool, idOf('c'), { suspended: true, phase: 'Suspended' });
  await setTenantStatus(api.db.pool, idOf('a'), { suspended: true, actualRuntimeVersion: version });
  await setTenantStatus(api.db.pool, idOf('b'), { actualRuntimeVersion: '1.0.0' });
  const after = await summary();
  t.equal(after.phases.Suspended, 1, 'the phase counts hold the one tenant whose suspension is applied');
  t.equal(after.suspended, 2, 'suspended counts both suspended tenants, the one still Ready too');
  t.same(
    after.runtimeVersions,
    [
      { version: '1.0.0', tenants: 0, running: 1 },
      { version, tenants: 5, running: 1 },
    ],
    'per version: tenants whose spec names it and tenants running it, oldest version first',
  );
  await setTenantStatus(api.db.pool, idOf('c'), { suspended: false, phase: 'Pending' });
  await setTenantStatus(api.db.pool, [idOf('a'), idOf('b')], { suspended: false, actualRuntimeVersion: null });
  const tenantClient = api.as(made[0]!.key);
  const own = await summary(tenantClient);
  t.equal(own.total, 1, "a tenant key's counts hold its own tenant only");
  const list = await tenantClient.call('GET /v1/tenants', { query: { q: prefix } });
  t.same(
    list.items.map((i) => i.id),
    [made[0]!.id],
    "a tenant key's listing holds its own tenant only",
  );
});

t.test('whoami names the role and tenant of the key', async (t) => {
  t.match(await api.as(api.operatorKey).call('GET /v1/whoami'), {
    role: 'operator',
    tenantId: null,
  });
  t.match(await api.as(made[1]!.key).call('GET /v1/whoami'), {
    role: 'tenant',
    tenantId: made[1]!.id,
  });
  await t.rejects(api.as(null).call('GET /v1/whoami'), { name: 'ApiError', status: 401 }, 'no key: 401');
});

t.test('the catalog paths: a skipped step is refused with the path to follow', async (t) => {
  const res = await api.as(null).request('GET /v1/runtime-versions/paths');
  t.equal(res.status, 200, 'public');
  if (!res.ok) return;
  const items = res.body.items;
  t.match(
    items.find((p) => p.from === '1.3.0' && p.to === '1.5.0'),
    { allowed: false, path: catalog.upgradePath('1.3.0', '1.5.0').path },
  );
  t.match(
    items.find((p) => p.from === '1.3.0' && p.to === '1.4.0'),
    { allowed: true, path: ['1.4.0'] },
  );
});

t.test('a settled status older than two resync periods is stale', async (t) => {
  const { id } = made[3]!; // Ready
  const read = () => client.call('GET /v1/tenants/:id', { params: { id } });
  t.equal((await read()).status.stale, false, 'fresh while just written');
  await setTenantStatus(api.db.pool, id, { lastReconciledSecondsAgo: 3 * 86_400, updatedSecondsAgo: 3 * 86_400 });
  const body = await read();
  t.equal(body.status.stale, true, 'stale after three days with the default one-day resync');
  t.ok(body.status.observedAt, 'with when it was last observed');
});

t.test(
  'the change stream sends a tenant at each change, resumes without repeats, and keeps tenant keys to their own',
  async (t) => {
    // A stream needs a socket: the typed client at the listening app.
    const socket = new ApiClient({ baseUrl: await api.app.listen({ host: '127.0.0.1', port: 0 }) });
    const operator = socket.withToken(api.operatorKey);
    type Event = StreamEventOf<TenantStreamEvents>;
    /** Follows the fleet's change stream (from `lastEventId` when given): the events as they arrive. */
    const follow = (lastEventId?: string) => {
      const abort = new AbortController();
      const events: Event[] = [];
      const reading = (async () => {
        for await (const e of operator.events('GET /v1/tenants/events', { lastEventId, signal: abort.signal }))
          events.push(e);
      })();
      t.teardown(() => abort.abort());
      return {
        events,
        /** Closes the stream (a failure of the read is the test's). */
        stop: async () => {
          abort.abort();
          await reading;
        },
      };
    };
    const target = made[4]!;
    const isTarget = (e: Event) => e.event === 'tenant' && e.data.id === target.id;

    // The stream's media type, on the answer as sent.
    const head = new AbortController();
    const answer = await operator.fetch('GET /v1/tenants/events', { accept: 'text/event-stream', signal: head.signal });
    t.equal(answer.headers.get('content-type'), 'text/event-stream; charset=utf-8');
    head.abort();
    await answer.body?.cancel().catch(() => {});

    const first = follow();
    // `ready` is sent once the stream's starting point is fixed: every change after it is sent.
    await until("the stream's ready event", 10_000, () => first.events.some((e) => e.event === 'ready'));
    t.ok(await operator.call('POST /v1/tenants/:id/suspend', { params: { id: target.id } }), 'the suspend is accepted');
    await until('the suspended tenant on the stream', 10_000, () => first.events.some(isTarget));
    await first.stop();
    t.equal(first.events[0]?.event, 'ready', 'the stream starts with ready');
    const change = first.events.find(isTarget);
    if (change?.event !== 'tenant') return void t.fail('the suspended tenant is sent');
    t.equal(change.data.generation, 2, 'at its new generation');
    t.match(change.id, /^[A-Za-z0-9_-]{40,}$/, 'its id is an opaque cursor, not the platform-wide change number');

    // Resuming from the change: only what came after it.
    const again = follow(change.id);
    await until("the resumed stream's ready event", 10_000, () => again.events.some((e) => e.event === 'ready'));
    await operator.call('POST /v1/tenants/:id/resume', { params: { id: target.id } });
    await until('a change after the Last-Event-ID', 10_000, () => again.events.some((e) => e.event === 'tenant'));
    await again.stop();
    const after = again.events.flatMap((e) => (e.event === 'tenant' ? [e] : []));
    t.ok(
      after.length >= 1 && after.every((e) => e.id !== change.id && (e.data.id !== target.id || e.data.generation > 2)),
      'nothing at or before the Last-Event-ID is sent again (the change at generation 2 is not repeated)',
    );
    t.equal(after[0]!.data.generation, 3, 'the resume is sent');

    const other = await socket.withToken(made[0]!.key).request('GET /v1/tenants/events', { query: { id: target.id } });
    t.equal(other.status, 404, "a tenant key asking for another tenant's changes gets 404");
    const badId = await operator.request('GET /v1/tenants/events', { headers: { 'last-event-id': 'x' } });
    t.equal(badId.status, 400, 'a Last-Event-ID that is not a number is a 400');
  },
);

t.test('/console serves the page and its assets, with its own CSP, from the built files only', async (t) => {
  // the console's files are outside the route map: raw
  const page = await api.request('GET', '/console', { key: null });
  t.equal(page.statusCode, 200, 'the page needs no key');
  t.match(page.headers['content-type'], /text\/html/);
  t.match(page.headers['content-security-policy'], /script-src 'self'/, "the console's CSP");
  t.notMatch(page.headers['content-security-policy'], /unsafe-inline/, 'nothing inline is allowed');
  const script = /src="\/console\/assets\/([^"]+)"/.exec(page.body)?.[1];
  t.ok(script, 'the page names its script');
  const asset = await api.request('GET', `/console/assets/${script}`, { key: null });
  t.equal(asset.statusCode, 200);
  t.match(asset.headers['cache-control'], /immutable/);
  for (const path of [
    '/console/assets/nope.js',
    '/console/assets/..%2F..%2Fpackage.json',
    '/console/assets/index.html',
  ])
    t.equal((await api.request('GET', path, { key: null })).statusCode, 404, `${path} is not served`);
});

t.test('operator keys see every tenant', async (t) => {
  const key = (await createKey(api.db.pool, { role: 'operator', name: 'x', createdBy: 'test' })).key;
  const list = await api.as(key).call('GET /v1/tenants', { query: { q: prefix } });
  t.equal(list.items.length, 5);
});
