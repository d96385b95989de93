/**
 * Per-tenant budgets at the API, over real sockets and a real Postgres, with small limits set
 * through the provisioner's configuration: stored runtime objects (count and bytes: a batch that
 * would go over is refused whole with 413, nothing stored is lost, and the refusal is counted on
 * /metrics), event batches per second and digests per minute of one runtime (429 with
 * Retry-After), managed clusters and API keys per tenant (409 TENANT_LIMIT_REACHED).
 */
import t from 'tap';
import { ApiClient, type BodyOf } from '../../../provisioner/http/api-client.ts';
import { createTestApi } from '../../helpers/api.ts';
import { application, deletion } from '../../helpers/events.ts';
import { createKey } from '../../../provisioner/store/keys.ts';
import { EVENTS_PATH, type EventBatch } from '../../../runtime/protocol/events.ts';
import { MAX_BATCHES_IN_FLIGHT_PER_TENANT } from '../../../provisioner/runtime-objects/service.ts';
import { until } from '../../../sandbox/until.ts';
import { holdTransaction, waitingAdvisoryLocks } from '../../helpers/postgres.ts';
import { lockTenantObjects } from '../../../provisioner/store/runtime-objects.ts';

const OBJECTS = 50;
const BYTES = 1024 * 1024;
const BATCHES_PER_SECOND = 5;
const DIGESTS_PER_MINUTE = 4;
const api = await createTestApi({
  env: {
    PROVISIONER_RUNTIME_OBJECTS_PER_TENANT: String(OBJECTS),
    PROVISIONER_RUNTIME_OBJECT_BYTES_PER_TENANT: String(BYTES),
    PROVISIONER_RUNTIME_EVENT_BATCHES_PER_SECOND: String(BATCHES_PER_SECOND),
    PROVISIONER_RUNTIME_DIGESTS_PER_MINUTE: String(DIGESTS_PER_MINUTE),
    PROVISIONER_MANAGED_CLUSTERS_PER_TENANT: '1',
    PROVISIONER_KEYS_PER_TENANT: '2',
  },
});
const base = await api.app.listen({ port: 0, host: '127.0.0.1' });
t.teardown(() => api.close());

interface ErrorBody {
  error?: { code: string; message: string; details?: Record<string, unknown> };
}

/** The runtime's own route (outside the route map), over the socket with a runtime key. */
const call = async (method: string, path: string, key: string, body?: unknown) => {
  const res = await fetch(`${base}${path}`, {
    method,
    headers: { authorization: `Bearer ${key}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  return { status: res.status, headers: res.headers, json: (await res.json()) as ErrorBody & Record<string, unknown> };
};

/** A tenant with a runtime key (a tenant's signup key plus this one: 2 keys). */
async function tenantWithRuntime() {
  const tenant = await api.signup();
  const runtimeKey = (
    await createKey(api.db.pool, { role: 'runtime', tenantId: tenant.tenantId, name: 'r', createdBy: 'test' })
  ).key;
  return { ...tenant, runtimeKey };
}

/** The mapped routes, with the typed client at the socket. */
const client = new ApiClient({ baseUrl: base });
const names = async (tenantId: string, key: string) => {
  const page = await client
    .withToken(key)
    .call('GET /v1/tenants/:id/applications', { params: { id: tenantId }, query: { limit: 500 } });
  return page.items.map((i) => i.name).sort();
};

const refusals = async (budget: string) => {
  const text = await (await fetch(`${base}/metrics`)).text();
  const line = text
    .split('\n')
    .find((l) => l.startsWith(`provisioner_runtime_event_batches_refused_total{budget="${budget}"}`));
  if (!line) throw new Error(`/metrics has no provisioner_runtime_event_batches_refused_total{budget="${budget}"}`);
  return Number(line.split(' ').pop());
};

t.test(`a batch that would store more than ${OBJECTS} objects is refused whole; nothing stored is lost`, async (t) => {
  const tenant = await tenantWithRuntime();
  const post = (items: EventBatch['items']) => call('POST', EVENTS_PATH, tenant.runtimeKey, { replica: 'r', items });
  const first = Array.from({ length: 40 }, (_, i) => application(`app-${i}`, 100 + i));
  t.equal((await post(first)).status, 200, 'a batch of 40 objects is stored');
  const before = await refusals('objects');

  const over = await post(Array.from({ length: 20 }, (_, i) => application(`more-${i}`, 200 + i)));
  t.equal(over.status, 413, `20 more objects (60 in all, over ${OBJECTS}) are refused with 413`);
  t.equal(over.json.error?.code, 'RUNTIME_OBJECT_BUDGET_EXCEEDED', 'RUNTIME_OBJECT_BUDGET_EXCEEDED');
  t.match(
    over.json.error?.details,
    { budget: 'objects', usage: 60, limit: OBJECTS },
    'details name the budget, usage and limit',
  );
  t.match(over.json.error?.message, /PROVISIONER_RUNTIME_OBJECTS_PER_TENANT/, 'the message names the setting');
  t.same(
    await names(tenant.tenantId, tenant.apiKey),
    first.map((i) => i.name).sort(),
    'the 40 stored objects are all there, none of the 20',
  );
  t.equal(
    await refusals('objects'),
    before + 1,
    'the refusal is counted in provisioner_runtime_event_batches_refused_total{budget="objects"}',
  );

  const fill = await post([
    ...Array.from({ length: 10 }, (_, i) => application(`more-${i}`, 300 + i)),
    application('app-0', 400, { health: 'Degraded' }),
  ]);
  t.equal(fill.status, 200, `10 new objects and an update: exactly ${OBJECTS}, stored`);
  const swap = await post([deletion('Application', 'argocd', 'app-1', 500), application('swapped-in', 501)]);
  t.equal(swap.status, 200, `at the budget, a batch that deletes one and adds one (still ${OBJECTS}) is stored`);
  const names50 = await names(tenant.tenantId, tenant.apiKey);
  t.equal(names50.length, OBJECTS, `${OBJECTS} live objects`);
  t.ok(
    names50.includes('swapped-in') && !names50.includes('app-1'),
    'the deletion and the new object both took effect',
  );
});

t.test(`a batch that would store more than ${BYTES} bytes of objects is refused whole`, async (t) => {
  const tenant = await tenantWithRuntime();
  const post = (items: EventBatch['items']) => call('POST', EVENTS_PATH, tenant.runtimeKey, { replica: 'r', items });
  const big = (name: string, rv: number) => application(name, rv, { padBytes: 200 * 1024 });
  t.equal(
    (await post([big('a', 1), big('b', 2), big('c', 3), big('d', 4)])).status,
    200,
    '4 objects of 200 KiB are stored',
  );
  const over = await post([big('e', 5), big('f', 6)]);
  t.equal(over.status, 413, `2 more (about 1.2 MiB in all, over ${BYTES}) are refused with 413`);
  t.equal(over.json.error?.code, 'RUNTIME_OBJECT_BUDGET_EXCEEDED', 'RUNTIME_OBJECT_BUDGET_EXCEEDED');
  t.equal(over.json.error?.details?.budget, 'bytes', 'details.budget is bytes');
  t.same(
    await names(tenant.tenantId, tenant.apiKey),
    ['a', 'b', 'c', 'd'],
    'the 4 stored objects are there, neither new one',
  );
  t.equal(
    (await post([deletion('Application', 'argocd', 'a', 7), big('e', 8)])).status,
    200,
    'deleting one makes room for one',
  );
});

t.test(`a runtime posts at most ${BATCHES_PER_SECOND} batches a second; more are 429 with Retry-After`, async (t) => {
  const tenant = await tenantWithRuntime();
  const other = await tenantWithRuntime();
  // Rounds of 4 at once (the batches one runtime may have in progress) until one is refused.
  const started = performance.now();
  let stored = 0;
  let refusal: Awaited<ReturnType<typeof call>> | undefined;
  for (let round = 0; round < 25 && !refusal; round++) {
    const answers = await Promise.all(
      Array.from({ length: 4 }, (_, i) =>
        call('POST', EVENTS_PATH, tenant.runtimeKey, { replica: 'r', items: [application(`x-${round}-${i}`, 1)] }),
      ),
    );
    stored += answers.filter((r) => r.status === 200).length;
    refusal = answers.find((r) => r.status !== 200);
  }
  const elapsed = (performance.now() - started) / 1000;
  if (!refusal) throw new Error('100 batches sent as fast as answered were all stored: no rate limit');
  t.equal(refusal.status, 429, 'a batch over the rate is refused with 429');
  t.equal(refusal.json.error?.code, 'RATE_LIMITED', 'RATE_LIMITED');
  t.ok(Number(refusal.headers.get('retry-after')) >= 1, `with Retry-After (${refusal.headers.get('retry-after')})`);
  t.match(refusal.json.error?.message, /PROVISIONER_RUNTIME_EVENT_BATCHES_PER_SECOND/, 'the message names the setting');
  const allowed = BATCHES_PER_SECOND * (Math.ceil(elapsed) + 1);
  t.ok(
    stored <= allowed,
    `${stored} stored in ${elapsed.toFixed(2)} s: at most ${allowed} (${BATCHES_PER_SECOND} a second)`,
  );
  const theirs = await call('POST', EVENTS_PATH, other.runtimeKey, { replica: 'r', items: [application('y', 1)] });
  t.equal(theirs.status, 200, "another tenant's runtime is not limited by this one's batches");
});

t.test(`a runtime sends at most ${DIGESTS_PER_MINUTE} digests a minute; more are 429 with Retry-After`, async (t) => {
  const tenant = await tenantWithRuntime();
  const digests = (['Application', 'Rollout', 'Workflow'] as const).map((kind) => ({
    replica: 'r',
    members: ['r'],
    kind,
    listResourceVersion: '10',
    objects: [],
  }));
  const first = await call('POST', EVENTS_PATH, tenant.runtimeKey, { replica: 'r', items: [], digests });
  t.equal(first.status, 200, 'a batch with 3 digests passes');
  const second = await call('POST', EVENTS_PATH, tenant.runtimeKey, { replica: 'r', items: [], digests });
  t.equal(second.status, 429, `3 more within the minute (6, over ${DIGESTS_PER_MINUTE}) are refused with 429`);
  t.ok(Number(second.headers.get('retry-after')) >= 1, `with Retry-After (${second.headers.get('retry-after')})`);
  t.match(second.json.error?.message, /PROVISIONER_RUNTIME_DIGESTS_PER_MINUTE/, 'the message names the setting');
  const withoutDigests = await call('POST', EVENTS_PATH, tenant.runtimeKey, {
    replica: 'r',
    items: [application('z', 11)],
  });
  t.equal(withoutDigests.status, 200, 'a batch without digests still passes');
});

t.test(
  'a tenant has at most 1 managed cluster here: another bootstrap or registration is 409 TENANT_LIMIT_REACHED',
  async (t) => {
    const tenant = await api.signup();
    const register = (body: BodyOf<'POST /v1/tenants/:id/managed-clusters'>) =>
      client
        .withToken(tenant.apiKey)
        .request('POST /v1/tenants/:id/managed-clusters', { params: { id: tenant.tenantId }, body });
    const first = await register({ name: 'prod', bootstrap: { namespaces: ['apps'] } });
    t.equal(first.status, 201, 'the first bootstrap token is issued');
    const second = await register({ name: 'staging', bootstrap: { namespaces: ['apps'] } });
    t.equal(second.status, 409, 'a second bootstrap is refused with 409');
    const refused = second.ok ? undefined : second.body.error;
    t.equal(refused?.code, 'TENANT_LIMIT_REACHED', 'TENANT_LIMIT_REACHED');
    t.match(
      refused?.details,
      { limit: 1, setting: 'PROVISIONER_MANAGED_CLUSTERS_PER_TENANT' },
      'naming the limit and setting',
    );
    const direct = await register({
      name: 'direct',
      server: 'https://127.0.0.1:1',
      token: 'a-token',
      namespaces: ['apps'],
    });
    t.equal(
      direct.ok ? undefined : direct.body.error.code,
      'TENANT_LIMIT_REACHED',
      'a registration with credentials is refused too, before any connection',
    );
  },
);

t.test('a tenant has at most 2 unrevoked keys here: a third is 409 TENANT_LIMIT_REACHED', async (t) => {
  const tenant = await tenantWithRuntime(); // its signup key and a runtime key
  const admin = client.withToken(api.adminKey);
  const third = await admin.request('POST /v1/keys', {
    body: { role: 'runtime', tenantId: tenant.tenantId, name: 'third' },
  });
  t.equal(third.status, 409, 'a third key is refused with 409');
  const refused = third.ok ? undefined : third.body.error;
  t.equal(refused?.code, 'TENANT_LIMIT_REACHED', 'TENANT_LIMIT_REACHED');
  t.match(refused?.message, /PROVISIONER_KEYS_PER_TENANT/, 'the message names the setting');
  const listed = await admin.call('GET /v1/keys', { query: { tenantId: tenant.tenantId } });
  const signupKey = listed.items.find((k) => k.role === 'tenant');
  if (!signupKey) throw new Error(`precondition: the tenant's signup key is listed (${JSON.stringify(listed)})`);
  t.equal((await admin.request('DELETE /v1/keys/:id', { params: { id: signupKey.id } })).status, 200, 'one is revoked');
  const again = await admin.request('POST /v1/keys', {
    body: { role: 'tenant', tenantId: tenant.tenantId, name: 'again' },
  });
  t.equal(again.status, 201, 'then a new key is created: revoked keys do not count');
});

t.test(
  `a runtime has at most ${MAX_BATCHES_IN_FLIGHT_PER_TENANT} batches in progress; one more is 429 at once`,
  async (t) => {
    const tenant = await tenantWithRuntime();
    // A barrier: the tenant's ingest lock, held by the test, so that batches stay in progress.
    const holder = await holdTransaction(api.db.pool, (c) => lockTenantObjects(c, tenant.tenantId));
    const post = (name: string) =>
      call('POST', EVENTS_PATH, tenant.runtimeKey, { replica: 'r', items: [application(name, 1)] });
    const held = Array.from({ length: MAX_BATCHES_IN_FLIGHT_PER_TENANT }, (_, i) => post(`held-${i}`));
    // Waiting advisory locks of this test's own database only: the server is shared with other tests.
    await until(`${MAX_BATCHES_IN_FLIGHT_PER_TENANT} batches waiting on the tenant's lock`, 30_000, async () => {
      return (await waitingAdvisoryLocks(api.db.pool)) >= MAX_BATCHES_IN_FLIGHT_PER_TENANT;
    });
    const extra = await post('extra');
    t.equal(
      extra.status,
      429,
      `with ${MAX_BATCHES_IN_FLIGHT_PER_TENANT} batches waiting, one more is refused with 429`,
    );
    t.ok(Number(extra.headers.get('retry-after')) >= 1, `with Retry-After (${extra.headers.get('retry-after')})`);
    t.match(extra.json.error?.message, /in progress/, `the message says why (${extra.json.error?.message})`);
    await holder.release();
    t.same(
      (await Promise.all(held)).map((r) => r.status),
      Array.from({ length: MAX_BATCHES_IN_FLIGHT_PER_TENANT }, () => 200),
      'the batches in progress are stored once the lock is free',
    );
  },
);
