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
import type { Runtime, RuntimeBootstrapAnswer, RuntimeRegistered } from '../../../provisioner/api/types.ts';
import { until } from '../../../sandbox/until.ts';
import { setHeartbeatAgo } from '../../helpers/runtimes.ts';

/** The tenant's stored-object budget here: small, so that the shared limit is reached with a few objects. */
const OBJECTS = 6;

t.setTimeout(240_000);
const api = await createTestApi({
  env: { PROVISIONER_PUBLIC_URL: 'https://cp.example.test', PROVISIONER_RUNTIME_OBJECTS_PER_TENANT: String(OBJECTS) },
});
const base = await api.app.listen({ port: 0, host: '127.0.0.1' });
t.teardown(() => api.close());

interface Answer<T> {
  status: number;
  body: T;
}
type ErrorAnswer = { error: { code: string; message: string; details?: Record<string, unknown> } };
async function call<T = unknown>(method: string, path: string, key: string, body?: unknown): Promise<Answer<T>> {
  const res = await fetch(base + path, {
    method,
    headers: {
      authorization: `Bearer ${key}`,
      ...(body !== undefined ? { 'content-type': 'application/json' } : {}),
    },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
  const text = await res.text();
  return { status: res.status, body: (text ? JSON.parse(text) : null) as T };
}

interface Item {
  namespace: string;
  name: string;
  health: string | null;
  resourceVersion: string;
}
interface Page {
  items: Item[];
  nextCursor: string | null;
}
const names = (p: Page) => p.items.map((i) => `${i.namespace}/${i.name}`);

/** Registers a hybrid runtime and redeems its bootstrap token as the bundle's Job would: its id, version and runtime key. */
async function hybrid(tenantId: string, tenantKey: string, body: Record<string, unknown>) {
  const reg = await call<RuntimeRegistered>('POST', `/v1/tenants/${tenantId}/runtimes`, tenantKey, {
    mode: 'hybrid',
    access: 'tunnel',
    argo: 'existing',
    argoNamespace: 'argocd',
    ...body,
  });
  if (reg.status !== 201) throw new Error(`register: ${reg.status} ${JSON.stringify(reg.body)}`);
  const ex = await call<RuntimeBootstrapAnswer>('POST', '/v1/runtimes/bootstrap', reg.body.bootstrapToken, {});
  if (ex.status !== 200) throw new Error(`bootstrap: ${ex.status} ${JSON.stringify(ex.body)}`);
  return { id: reg.body.runtime.id, version: reg.body.runtime.version!, key: ex.body.runtimeToken };
}
const hostedKey = async (tenantId: string) =>
  (await createKey(api.db.pool, { role: 'runtime', tenantId, name: 'event reporter', createdBy: 'test' })).key;
const report = (key: string, body: unknown) =>
  call<{ applied: number; stale: number; removedByDigest: number } & ErrorAnswer>('POST', EVENTS_PATH, key, body);

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

    const tenantLevel = await call<Page>('GET', `/v1/tenants/${a.tenantId}/applications`, a.apiKey);
    t.same(
      names(tenantLevel.body),
      ['argocd/guestbook'],
      "the tenant's listing shows the hosted runtime's objects only",
    );
    t.equal(tenantLevel.body.items[0]?.resourceVersion, '100', "and its guestbook is the hosted runtime's");
    const hostedByName = await call<Page>(
      'GET',
      `/v1/tenants/${a.tenantId}/runtimes/hosted/objects/applications`,
      a.apiKey,
    );
    // ageSeconds counts from the time of each answer: it may tick between the two reads.
    const withoutAge = (p: Page) => ({ ...p, items: p.items.map((i) => ({ ...i, ageSeconds: 0 })) });
    t.same(
      withoutAge(hostedByName.body),
      withoutAge(tenantLevel.body),
      'the hosted runtime by name lists the same page as the tenant (ageSeconds aside)',
    );

    const edgeList = await call<Page>('GET', `/v1/tenants/${a.tenantId}/runtimes/edge/objects/applications`, a.apiKey);
    t.equal(edgeList.status, 200);
    t.same(names(edgeList.body), ['argocd/edge-only', 'argocd/guestbook'], "the hybrid runtime's listing: its own two");
    t.same(
      edgeList.body.items.map((i) => [i.name, i.health, i.resourceVersion]),
      [
        ['edge-only', 'Healthy', '6'],
        ['guestbook', 'Degraded', '5'],
      ],
      'each as the hybrid runtime reported it',
    );
    const paged = await call<Page>(
      'GET',
      `/v1/tenants/${a.tenantId}/runtimes/edge/objects/applications?limit=1`,
      a.apiKey,
    );
    t.same(names(paged.body), ['argocd/edge-only'], 'paged: the first of one');
    const next = await call<Page>(
      'GET',
      `/v1/tenants/${a.tenantId}/runtimes/edge/objects/applications?limit=1&cursor=${encodeURIComponent(paged.body.nextCursor!)}`,
      a.apiKey,
    );
    t.same(names(next.body), ['argocd/guestbook'], 'the next page after its cursor');
    t.equal(next.body.nextCursor, null, 'and no further page');
    const plantList = await call<Page>(
      'GET',
      `/v1/tenants/${a.tenantId}/runtimes/plant/objects/applications`,
      a.apiKey,
    );
    t.same(names(plantList.body), [], 'another hybrid runtime of the tenant lists nothing it did not report');

    const one = await call<Item & { object: { status: { health: { status: string } } } }>(
      'GET',
      `/v1/tenants/${a.tenantId}/runtimes/edge/objects/applications/argocd/guestbook`,
      a.apiKey,
    );
    t.equal(one.status, 200);
    t.equal(one.body.object.status.health.status, 'Degraded', "the detail route serves the hybrid runtime's object");
    const notHosted = await call<ErrorAnswer>(
      'GET',
      `/v1/tenants/${a.tenantId}/applications/argocd/edge-only`,
      a.apiKey,
    );
    t.equal(notHosted.status, 404, "the tenant's detail route does not serve a hybrid runtime's object");
    t.equal(notHosted.body.error.code, 'RUNTIME_OBJECT_NOT_FOUND');

    const deleted = await report(edge.key, batch('edge-0', [deletion('Application', 'argocd', 'guestbook', 7)]));
    t.equal(deleted.body.applied, 1, "the hybrid runtime's deletion is stored");
    const after = await call<Page>('GET', `/v1/tenants/${a.tenantId}/runtimes/edge/objects/applications`, a.apiKey);
    t.same(names(after.body), ['argocd/edge-only'], 'its guestbook is gone from its listing');
    const hostedAfter = await call<Page>('GET', `/v1/tenants/${a.tenantId}/applications`, a.apiKey);
    t.same(names(hostedAfter.body), ['argocd/guestbook'], "the hosted runtime's guestbook of the same name stays");

    const unknown = await call<ErrorAnswer>(
      'GET',
      `/v1/tenants/${a.tenantId}/runtimes/nowhere/objects/applications`,
      a.apiKey,
    );
    t.equal(unknown.status, 404, 'an unknown runtime name is 404');
    t.match(unknown.body.error.message, /nowhere/, 'naming the runtime');
    const otherTenant = await call<ErrorAnswer>(
      'GET',
      `/v1/tenants/${a.tenantId}/runtimes/edge/objects/applications`,
      b.apiKey,
    );
    t.equal(otherTenant.status, 404, "another tenant's key does not see the runtime's objects");
    const asRuntime = await call<ErrorAnswer>(
      'GET',
      `/v1/tenants/${a.tenantId}/runtimes/edge/objects/applications`,
      edge.key,
    );
    t.equal(asRuntime.status, 403, 'a runtime key cannot read the listings');
  },
);

t.test("a runtime's change stream carries its own changes only", async (t) => {
  const abort = new AbortController();
  t.teardown(() => abort.abort());
  const res = await fetch(`${base}/v1/tenants/${a.tenantId}/runtimes/edge/objects/changes?after=0`, {
    headers: { authorization: `Bearer ${a.apiKey}`, accept: 'text/event-stream' },
    signal: abort.signal,
  });
  t.equal(res.status, 200, 'the stream opens');
  const names: string[] = [];
  const reader = (async () => {
    const decoder = new TextDecoder();
    let buf = '';
    try {
      for await (const chunk of res.body!) {
        buf += decoder.decode(chunk as Uint8Array, { stream: true });
        let i: number;
        while ((i = buf.indexOf('\n\n')) >= 0) {
          const block = buf.slice(0, i);
          buf = buf.slice(i + 2);
          const data = /^data: (.*)$/m.exec(block)?.[1];
          if (/^event: change$/m.test(block) && data)
            names.push((JSON.parse(data) as { item: { name: string } }).item.name);
        }
      }
    } catch {
      // aborted at the end
    }
  })();
  await until('the replay of its live object', 10_000, () => (names.length >= 1 ? true : undefined));
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
  const unknown = await call<ErrorAnswer>(
    'GET',
    `/v1/tenants/${a.tenantId}/runtimes/nowhere/objects/changes`,
    a.apiKey,
  );
  t.equal(unknown.status, 404, "an unknown runtime's stream is 404");
});

t.test("a hybrid runtime's heartbeat, reported version, skew and conditions come from its reports", async (t) => {
  const get = async () => (await call<Runtime>('GET', `/v1/tenants/${a.tenantId}/runtimes/plant`, a.apiKey)).body;
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
  const client = startTunnelClient({
    url: base.replace('http', 'ws') + '/v1/tunnel',
    token: plant.key,
    upstream: `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`,
    backoff: { initialMs: 50, maxMs: 200 },
  });
  t.teardown(() => client.close());
  const ready = await until('the runtime Ready with its tunnel connected', 30_000, async () => {
    const r = await get();
    return cond(r, 'Ready')?.status === 'True' ? r : undefined;
  });
  t.match(cond(ready, 'Ready'), { reason: 'Ready' }, 'Ready is True: installed, reporting, tunnel connected');

  const storedAt = async () =>
    (
      await api.db.pool.query<{ at: string }>('SELECT last_heartbeat_at::text AS at FROM runtimes WHERE id = $1', [
        plant.id,
      ])
    ).rows[0]!.at;
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
  const listed = await call<{ items: Runtime[] }>('GET', `/v1/tenants/${a.tenantId}/runtimes`, a.apiKey);
  t.match(
    listed.body.items.find((r) => r.name === 'plant'),
    { reportedVersion: '9.9.9', versionSkew: true, lastHeartbeatAt: stale.lastHeartbeatAt },
    "the tenant's runtime list shows the same",
  );

  const hosted = await call<Runtime>('GET', `/v1/tenants/${a.tenantId}/runtimes/hosted`, a.apiKey);
  t.notOk(
    hosted.body.conditions.some((c) => c.type === 'VersionSkew' || c.type === 'ArgoCDReachable'),
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
  t.match(over.body.error.message, /PROVISIONER_RUNTIME_OBJECTS_PER_TENANT/, 'and its setting');
  const siteList = () => call<Page>('GET', `/v1/tenants/${c.tenantId}/runtimes/site/objects/applications`, c.apiKey);
  t.same(names((await siteList()).body), [], 'nothing of the refused batch was stored');

  const fits = await report(
    site.key,
    batch(
      's-0',
      ['x', 'y'].map((n, i) => application(n, 20 + i)),
    ),
  );
  t.equal(fits.status, 200, `2 more make ${OBJECTS}: accepted`);
  t.same(names((await siteList()).body), ['argocd/x', 'argocd/y'], 'the hybrid runtime holds its 2');
  const full = await report(hostedC, batch('h-0', [application('e', 30)]));
  t.equal(full.status, 413, "the hosted runtime's next object is refused: the budget is the tenant's");

  const removed = await call('DELETE', `/v1/tenants/${c.tenantId}/runtimes/site`, c.apiKey);
  t.equal(removed.status, 200, 'the hybrid runtime is removed');
  const usage = await api.db.pool.query<{ objects: string }>(
    'SELECT objects::text FROM runtime_object_usage WHERE tenant_id = $1',
    [c.tenantId],
  );
  t.equal(
    usage.rows[0]?.objects,
    '4',
    "the removed runtime's objects no longer count: the hosted runtime's 4 are left",
  );
  t.equal(
    (await report(hostedC, batch('h-0', [application('e', 30)]))).status,
    200,
    'so the hosted runtime stores a fifth',
  );
  const afterRemoval = await report(site.key, batch('s-0', [application('w', 40)]));
  t.equal(afterRemoval.status, 401, "the removed runtime's key is refused");
});
