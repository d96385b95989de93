/**
 * A hybrid runtime's event reports and the health shown from them, through the real app on
 * loopback with real Postgres: hybrid runtimes registered and bootstrapped (their keys from the
 * bootstrap route), their batches stored under them and listed by the runtime's routes, never in
 * the hosted runtime's listings; the same Application name in two runtimes kept apart; the
 * heartbeat, reported version, skew and conditions on the runtime; the tenant's object budget
 * shared by its runtimes; removal dropping what the runtime reported.
 */
import http from 'node:http';
import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import t from 'tap';
import { createTestApi } from '../../helpers/api.ts';
import { application, batch, deletion } from '../../helpers/events.ts';
import { createKey } from '../../../provisioner/store/keys.ts';
import { startTunnelClient } from '../../../runtime/agents/tunnel-client/client.ts';
import { EVENTS_PATH, STALE_AFTER_SECONDS } from '../../../runtime/protocol/events.ts';
import type { ReportedKind } from '../../../runtime/protocol/kinds.ts';
import { ApiClient } from '../../../provisioner/http/api-client.ts';
import type { ErrorBody, Runtime } from '../../../provisioner/api/types.ts';
import { until } from '../../../sandbox/until.ts';
import { setHeartbeatAgo, storedHeartbeatAt } from '../../helpers/runtimes.ts';
import { readUsage } from '../../../provisioner/store/runtime-objects.ts';

/** The tenant's stored-object budget here: small, so that the shared limit is reached with a few objects. */
const OBJECTS = 6;

t.setTimeout(240_000);
const api = await createTestApi({
  env: { PROVISIONER_PUBLIC_URL: 'https://cp.example.test', PROVISIONER_RUNTIME_OBJECTS_PER_TENANT: String(OBJECTS) },
});
const base = await api.app.listen({ port: 0, host: '127.0.0.1' });
t.teardown(() => api.close());

/** The one client over the loopback socket (the tunnel and the change stream below need it). */
const client = new ApiClient({ baseUrl: base });
const as = (key: string) => client.withToken(key);

const names = (p: { items: Array<{ namespace: string; name: string }> }) =>
  p.items.map((i) => `${i.namespace}/${i.name}`);

/** Registers a hybrid runtime and redeems its bootstrap token as the bundle's Job would: its id, version and runtime key. */
async function hybrid(tenantId: string, tenantKey: string, body: { name: string }) {
  const reg = await as(tenantKey).call('POST /v1/tenants/:id/runtimes', {
    params: { id: tenantId },
    body: { mode: 'hybrid', access: 'tunnel', argo: 'existing', argoNamespace: 'argocd', ...body },
  });
  const ex = await client.call('POST /v1/runtimes/bootstrap', { body: {}, token: reg.bootstrapToken });
  return { id: reg.runtime.id, version: reg.runtime.version!, key: ex.runtimeToken };
}
const hostedKey = async (tenantId: string) =>
  (await createKey(api.db.pool, { role: 'runtime', tenantId, name: 'event reporter', createdBy: 'test' })).key;
/** A runtime's event report (a runtimes' own route, outside the route map: the one raw request). */
const report = async (key: string, body: unknown) => {
  const res = await api.request('POST', EVENTS_PATH, { key, body });
  return {
    status: res.statusCode,
    body: res.json<{ applied: number; stale: number; removedByDigest: number } & Partial<ErrorBody>>(),
  };
};
/** A runtime's Applications as a tenant's key lists them. */
const runtimeApps = (tenantId: string, key: string, name: string, query: { limit?: number; cursor?: string } = {}) =>
  as(key).call('GET /v1/tenants/:id/runtimes/:name/objects/applications', { params: { id: tenantId, name }, query });
/** The tenant's (its hosted runtime's) Applications. */
const tenantApps = (tenantId: string, key: string) =>
  as(key).call('GET /v1/tenants/:id/applications', { params: { id: tenantId } });
/** A runtime as its tenant's key reads it. */
const runtimeOf = (tenantId: string, key: string, name: string) =>
  as(key).call('GET /v1/tenants/:id/runtimes/:name', { params: { id: tenantId, name } });

const a = await api.signup();
const b = await api.signup();
const hostedA = await hostedKey(a.tenantId);
const edge = await hybrid(a.tenantId, a.apiKey, { name: 'edge' });
const plant = await hybrid(a.tenantId, a.apiKey, { name: 'plant' });

t.test(
  "a hybrid runtime's reports are stored under it: listed by its routes, never in the hosted runtime's",
  async (t) => {
    const hostedSent = await report(hostedA, batch('hosted-0', [application('guestbook', 100)]));
    t.equal(hostedSent.status, 200, `the hosted runtime's batch is accepted (got ${JSON.stringify(hostedSent.body)})`);
    const edgeSent = await report(
      edge.key,
      batch('edge-0', [application('guestbook', 5, { health: 'Degraded' }), application('edge-only', 6)]),
    );
    t.equal(edgeSent.status, 200, `the hybrid runtime's batch is accepted (got ${JSON.stringify(edgeSent.body)})`);
    t.same(
      edgeSent.body,
      { applied: 2, stale: 0, removedByDigest: 0 },
      "both stored: its guestbook at resourceVersion 5 is not compared with the hosted runtime's at 100",
    );

    const tenantLevel = await tenantApps(a.tenantId, a.apiKey);
    t.same(names(tenantLevel), ['argocd/guestbook'], "the tenant's listing shows the hosted runtime's objects only");
    t.equal(tenantLevel.items[0]?.resourceVersion, '100', "and its guestbook is the hosted runtime's");
    const hostedByName = await runtimeApps(a.tenantId, a.apiKey, 'hosted');
    // ageSeconds counts from the time of each answer: it may tick between the two reads.
    const withoutAge = (p: typeof tenantLevel) => ({ ...p, items: p.items.map((i) => ({ ...i, ageSeconds: 0 })) });
    t.same(
      withoutAge(hostedByName),
      withoutAge(tenantLevel),
      'the hosted runtime by name lists the same page as the tenant (ageSeconds aside)',
    );

    const edgeList = await runtimeApps(a.tenantId, a.apiKey, 'edge');
    t.same(names(edgeList), ['argocd/edge-only', 'argocd/guestbook'], "the hybrid runtime's listing: its own two");
    t.same(
      edgeList.items.map((i) => [i.name, i.health, i.resourceVersion]),
      [
        ['edge-only', 'Healthy', '6'],
        ['guestbook', 'Degraded', '5'],
      ],
      'each as the hybrid runtime reported it',
    );
    const paged = await runtimeApps(a.tenantId, a.apiKey, 'edge', { limit: 1 });
    t.same(names(paged), ['argocd/edge-only'], 'paged: the first of one');
    const next = await runtimeApps(a.tenantId, a.apiKey, 'edge', { limit: 1, cursor: paged.nextCursor! });
    t.same(names(next), ['argocd/guestbook'], 'the next page after its cursor');
    t.equal(next.nextCursor, null, 'and no further page');
    const plantList = await runtimeApps(a.tenantId, a.apiKey, 'plant');
    t.same(names(plantList), [], 'another hybrid runtime of the tenant lists nothing it did not report');

    const one = await as(a.apiKey).call(
      'GET /v1/tenants/:id/runtimes/:name/objects/applications/:namespace/:objectName',
      { params: { id: a.tenantId, name: 'edge', namespace: 'argocd', objectName: 'guestbook' } },
    );
    t.match(
      one.object,
      { status: { health: { status: 'Degraded' } } },
      "the detail route serves the hybrid runtime's object",
    );
    await t.rejects(
      as(a.apiKey).call('GET /v1/tenants/:id/applications/:namespace/:name', {
        params: { id: a.tenantId, namespace: 'argocd', name: 'edge-only' },
      }),
      { status: 404, code: 'RUNTIME_OBJECT_NOT_FOUND' },
      "the tenant's detail route does not serve a hybrid runtime's object",
    );

    const deleted = await report(edge.key, batch('edge-0', [deletion('Application', 'argocd', 'guestbook', 7)]));
    t.equal(deleted.body.applied, 1, "the hybrid runtime's deletion is stored");
    const after = await runtimeApps(a.tenantId, a.apiKey, 'edge');
    t.same(names(after), ['argocd/edge-only'], 'its guestbook is gone from its listing');
    const hostedAfter = await tenantApps(a.tenantId, a.apiKey);
    t.same(names(hostedAfter), ['argocd/guestbook'], "the hosted runtime's guestbook of the same name stays");

    await t.rejects(
      runtimeApps(a.tenantId, a.apiKey, 'nowhere'),
      { name: 'ApiError', status: 404, message: /nowhere/ },
      'an unknown runtime name is 404, naming the runtime',
    );
    await t.rejects(
      runtimeApps(a.tenantId, b.apiKey, 'edge'),
      { name: 'ApiError', status: 404 },
      "another tenant's key does not see the runtime's objects",
    );
    await t.rejects(
      runtimeApps(a.tenantId, edge.key, 'edge'),
      { name: 'ApiError', status: 403 },
      'a runtime key cannot read the listings',
    );
  },
);

t.test("a runtime's change stream carries its own changes only", async (t) => {
  const abort = new AbortController();
  t.teardown(() => abort.abort());
  const changes = (name: string, signal?: AbortSignal) =>
    as(a.apiKey).events('GET /v1/tenants/:id/runtimes/:name/objects/changes', {
      params: { id: a.tenantId, name },
      query: { after: '0' },
      ...(signal ? { signal } : {}),
    });
  const names: string[] = [];
  let failed: unknown;
  const reader = (async () => {
    try {
      for await (const e of changes('edge', abort.signal)) if (e.event === 'change') names.push(e.data.item.name);
    } catch (err) {
      failed = err; // the stream did not open (an abort ends the loop without one)
    }
  })();
  await until('the replay of its live object', 10_000, () => (names.length >= 1 || failed ? true : undefined));
  t.equal(failed, undefined, 'the stream opens');
  t.equal((await report(edge.key, batch('edge-0', [application('fresh', 8)]))).status, 200);
  await until('its new object', 10_000, () => (names.includes('fresh') ? true : undefined));
  t.equal((await report(hostedA, batch('hosted-0', [application('hosted-new', 101)]))).status, 200);
  t.equal((await report(edge.key, batch('edge-0', [application('last', 9)]))).status, 200);
  await until('its next object', 10_000, () => (names.includes('last') ? true : undefined));
  abort.abort();
  await reader;
  t.same(
    names,
    ['edge-only', 'fresh', 'last'],
    "its live object replayed, then its own changes in order; the hosted runtime's change between them is not sent",
  );
  await t.rejects(changes('nowhere').next(), { name: 'ApiError', status: 404 }, "an unknown runtime's stream is 404");
});

t.test("a hybrid runtime's heartbeat, reported version, skew and conditions come from its reports", async (t) => {
  const get = () => runtimeOf(a.tenantId, a.apiKey, 'plant');
  const cond = (r: Runtime, type: string) => r.conditions.find((c) => c.type === type);
  const before = await get();
  t.same(
    [before.lastHeartbeatAt, before.reportedVersion, before.versionSkew],
    [null, null, null],
    'before any report: no heartbeat, no reported version, no skew',
  );
  t.match(cond(before, 'Reporting'), { status: 'False', reason: 'NeverReported' }, 'Reporting: never reported');
  t.match(cond(before, 'Ready'), { status: 'False', reason: 'NotReporting' }, 'Ready is False: not reporting');

  const heartbeat = (runtimeVersion: string, listed: ReportedKind[]) => ({
    replica: 'plant-0',
    ownedObjects: 0,
    queueDepth: 0,
    oldestPendingSeconds: 0,
    runtimeVersion,
    listed,
  });
  const first = await report(plant.key, batch('plant-0', [], { heartbeat: heartbeat(plant.version, ['Application']) }));
  t.equal(first.status, 200, `a batch with a heartbeat is accepted (got ${JSON.stringify(first.body)})`);
  const reported = await get();
  t.ok(reported.lastHeartbeatAt, 'lastHeartbeatAt is set');
  t.equal(reported.reportedVersion, plant.version, 'reportedVersion is the version the heartbeat stated');
  t.equal(reported.versionSkew, false, 'no skew: the bundle was made for that version');
  t.match(cond(reported, 'Reporting'), { status: 'True', reason: 'Heartbeat' }, 'Reporting is True');
  t.match(cond(reported, 'VersionSkew'), { status: 'False', reason: 'VersionMatches' }, 'VersionSkew is False');
  t.match(
    cond(reported, 'ArgoCDReachable'),
    { status: 'True', reason: 'ApplicationsListed', message: /namespace argocd/ },
    'ArgoCDReachable is True, naming the Argo CD namespace',
  );
  t.match(
    cond(reported, 'Ready'),
    { status: 'False', reason: 'TunnelDisconnected' },
    'Ready is False while its tunnel is not connected',
  );

  // Its tunnel client connects with the same key: Ready.
  const upstream = http.createServer((_req, res) => res.end('{}')).listen(0, '127.0.0.1');
  await once(upstream, 'listening');
  t.teardown(() => upstream.close());
  const tunnel = startTunnelClient({
    url: base.replace('http', 'ws') + '/v1/tunnel',
    token: plant.key,
    upstream: `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`,
    backoff: { initialMs: 50, maxMs: 200 },
  });
  t.teardown(() => tunnel.close());
  const ready = await until('the runtime Ready with its tunnel connected', 30_000, async () => {
    const r = await get();
    return cond(r, 'Ready')?.status === 'True' ? r : undefined;
  });
  t.match(cond(ready, 'Ready'), { reason: 'Ready' }, 'Ready is True: installed, reporting, tunnel connected');

  const storedAt = async () => storedHeartbeatAt(api.db.pool, plant.id);
  const written = await storedAt();
  const again = await report(plant.key, batch('plant-0', [], { heartbeat: heartbeat(plant.version, ['Application']) }));
  t.equal(again.status, 200);
  t.equal(
    await storedAt(),
    written,
    'a second batch stating the same, within RUNTIME_HEARTBEAT_WRITE_SECONDS of the first, does not write the row again',
  );

  const skewed = await report(plant.key, batch('plant-0', [], { heartbeat: heartbeat('9.9.9', []) }));
  t.equal(skewed.status, 200);
  const changed = await get();
  t.equal(changed.reportedVersion, '9.9.9', 'a changed version is written at once');
  t.equal(changed.versionSkew, true, 'versionSkew: 9.9.9 is not the version the bundle was made for');
  t.match(
    cond(changed, 'VersionSkew'),
    {
      status: 'True',
      reason: 'VersionDiffers',
      message: new RegExp(`9\\.9\\.9.*${plant.version.replaceAll('.', '\\.')}`),
    },
    'VersionSkew is True, naming both versions',
  );
  t.match(
    cond(changed, 'ArgoCDReachable'),
    { status: 'False', reason: 'ApplicationsNotListed', message: /namespace argocd/ },
    'ArgoCDReachable is False once the reporter no longer lists Applications',
  );
  t.not(await storedAt(), written, 'and the heartbeat time was written with them');

  // The last report grows old (moved into the past, as the database would see it later).
  await setHeartbeatAgo(api.db.pool, plant.id, STALE_AFTER_SECONDS + 1);
  const stale = await get();
  t.match(
    cond(stale, 'Reporting'),
    { status: 'False', reason: 'Stale', message: new RegExp(`stale after ${STALE_AFTER_SECONDS} s`) },
    `Reporting is False after ${STALE_AFTER_SECONDS} s without a report`,
  );
  t.match(cond(stale, 'Ready'), { status: 'False', reason: 'NotReporting' }, 'Ready is False: not reporting');
  const listed = await as(a.apiKey).call('GET /v1/tenants/:id/runtimes', { params: { id: a.tenantId } });
  t.match(
    listed.items.find((r) => r.name === 'plant'),
    { reportedVersion: '9.9.9', versionSkew: true, lastHeartbeatAt: stale.lastHeartbeatAt },
    "the tenant's runtime list shows the same",
  );

  const hosted = await runtimeOf(a.tenantId, a.apiKey, 'hosted');
  t.notOk(
    hosted.conditions.some((c) => c.type === 'VersionSkew' || c.type === 'ArgoCDReachable'),
    "the hosted runtime's conditions stay the tenant's",
  );
});

t.test("a tenant's runtimes share its stored-object budget; removing one frees what it reported", async (t) => {
  const c = await api.signup();
  const hostedC = await hostedKey(c.tenantId);
  const site = await hybrid(c.tenantId, c.apiKey, { name: 'site' });
  const four = ['a', 'b', 'c', 'd'].map((n, i) => application(n, 10 + i));
  t.equal((await report(hostedC, batch('h-0', four))).status, 200, 'the hosted runtime stores 4 objects');

  const over = await report(
    site.key,
    batch(
      's-0',
      ['x', 'y', 'z'].map((n, i) => application(n, 20 + i)),
    ),
  );
  t.equal(over.status, 413, `the hybrid runtime's 3 more would make 7 of the tenant's ${OBJECTS}: refused`);
  t.match(
    over.body.error,
    { code: 'RUNTIME_OBJECT_BUDGET_EXCEEDED', details: { limit: OBJECTS } },
    `the refusal names the tenant's budget of ${OBJECTS}`,
  );
  t.match(over.body.error?.message, /PROVISIONER_RUNTIME_OBJECTS_PER_TENANT/, 'and its setting');
  const siteList = () => runtimeApps(c.tenantId, c.apiKey, 'site');
  t.same(names(await siteList()), [], 'nothing of the refused batch was stored');

  const fits = await report(
    site.key,
    batch(
      's-0',
      ['x', 'y'].map((n, i) => application(n, 20 + i)),
    ),
  );
  t.equal(fits.status, 200, `2 more make ${OBJECTS}: accepted`);
  t.same(names(await siteList()), ['argocd/x', 'argocd/y'], 'the hybrid runtime holds its 2');
  const full = await report(hostedC, batch('h-0', [application('e', 30)]));
  t.equal(full.status, 413, "the hosted runtime's next object is refused: the budget is the tenant's");

  const removed = await as(c.apiKey).call('DELETE /v1/tenants/:id/runtimes/:name', {
    params: { id: c.tenantId, name: 'site' },
  });
  t.equal(removed.runtime.state, 'removed', 'the hybrid runtime is removed');
  const usage = await readUsage(api.db.pool, c.tenantId);
  t.equal(usage.objects, 4, "the removed runtime's objects no longer count: the hosted runtime's 4 are left");
  t.equal(
    (await report(hostedC, batch('h-0', [application('e', 30)]))).status,
    200,
    'so the hosted runtime stores a fifth',
  );
  const afterRemoval = await report(site.key, batch('s-0', [application('w', 40)]));
  t.equal(afterRemoval.status, 401, "the removed runtime's key is refused");
});
