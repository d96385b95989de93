import t from 'tap';
import type { AnswerOf, ApiError, QueryOf } from '../../../provisioner/http/api-client.ts';
import { createTestApi, uniqueOrg } from '../../helpers/api.ts';
import { catalog } from '../../../runtime/catalog.ts';
import { addRootCluster } from '../../helpers/clusters.ts';
import { settleTenantOperations, tenantOperations } from '../../helpers/operations.ts';
import { markStalled, setTenantStatus, tenantRecord } from '../../helpers/tenants.ts';
import { auditRows } from '../../helpers/audit.ts';
import { listenTo } from '../../helpers/postgres.ts';
import { TENANT_CHANNEL } from '../../../provisioner/store/tenants.ts';

const api = await createTestApi();
t.teardown(() => api.close());
const client = api.client;
const operator = api.as(api.operatorKey);

const versions = catalog.versions.map((v) => v.version);
const [v1, v2] = versions as [string, string, ...string[]];

/** Marks the tenant as running `version` (what the reconciler records after a successful up). */
async function observe(id: string, version: string, previous: string | null = null) {
  await setTenantStatus(api.db.pool, id, {
    actualRuntimeVersion: version,
    previousRuntimeVersion: previous,
    observed: true,
    phase: 'Ready',
  });
}

t.test('GET /v1/tenants/:id returns the tenant; an unknown id is 404; a malformed id is 400 naming id', async (t) => {
  const { tenantId } = await api.signup();
  const tenant = await client.call('GET /v1/tenants/:id', { params: { id: tenantId } });
  t.equal(tenant.id, tenantId);
  await t.rejects(client.call('GET /v1/tenants/:id', { params: { id: '00000000-0000-4000-8000-000000000000' } }), {
    status: 404,
    code: 'TENANT_NOT_FOUND',
  });
  await t.rejects(client.call('GET /v1/tenants/:id', { params: { id: 'not-a-uuid' } }), {
    status: 400,
    code: 'VALIDATION_FAILED',
    field: 'id',
  });
});

t.test('every spec change bumps the generation, queues one operation, writes an audit row and NOTIFYs', async (t) => {
  const { tenantId } = await api.signup({ runtimeVersion: v1 });
  const listener = await listenTo(api.db.url, TENANT_CHANNEL);
  const notified = listener.notified(tenantId);

  const res = await operator.request('POST /v1/tenants/:id/suspend', { params: { id: tenantId } });
  t.equal(res.status, 202);
  if (!res.ok) throw new Error('precondition: the suspend was accepted');
  const body = res.body;
  t.equal(body.tenant.generation, 2);
  t.equal(body.tenant.spec.suspended, true);
  t.match(
    body.tenant.status.conditions.find((c) => c.type === 'Reconciling'),
    { status: 'True', reason: 'SpecChanged' },
  );
  const op = await client.call('GET /v1/operations/:id', { params: { id: body.operationId } });
  t.match(op, { kind: 'suspend', state: 'queued', generation: 2 });
  const audit = await auditRows(api.db.pool, { targetId: tenantId, action: 'tenant.suspend' });
  t.equal(audit.length, 1);
  t.match(audit[0], { before: { suspended: false }, after: { suspended: true } });
  const timeout = new Promise<string>((resolve) =>
    setTimeout(() => resolve('no notification within 10 s'), 10_000).unref(),
  );
  t.equal(await Promise.race([notified, timeout]), tenantId, 'workers were notified with the tenant id');
  await listener.end();
});

t.test('suspend and resume are idempotent: repeating them queues nothing', async (t) => {
  const { tenantId } = await api.signup();
  const params = { id: tenantId };
  const first = await client.call('POST /v1/tenants/:id/suspend', { params });
  const again = await client.request('POST /v1/tenants/:id/suspend', { params });
  t.equal(again.status, 202);
  if (!again.ok) throw new Error('precondition: the second suspend was accepted');
  t.equal(again.body.operationId, first.operationId);
  t.equal(again.body.tenant.generation, first.tenant.generation);
  const resumed = await client.call('POST /v1/tenants/:id/resume', { params });
  t.equal(resumed.tenant.spec.suspended, false);
  t.equal(resumed.tenant.generation, first.tenant.generation + 1);
  const ops = await client.call('GET /v1/tenants/:id/operations', { params });
  t.same(
    ops.items.map((o) => o.kind),
    ['resume', 'suspend', 'create'],
    'newest first, no duplicates',
  );
});

t.test('PATCH changes plan, version and suspension; bad bodies name the field', async (t) => {
  const { tenantId } = await api.signup({ runtimeVersion: v1 });
  const res = await operator.request('PATCH /v1/tenants/:id', { params: { id: tenantId }, body: { plan: 'team' } });
  t.equal(res.status, 202);
  if (!res.ok) throw new Error('precondition: the PATCH was accepted');
  t.equal(res.body.tenant.spec.plan, 'team');
  const op = await client.call('GET /v1/operations/:id', { params: { id: res.body.operationId } });
  t.equal(op.kind, 'update');
  const cases: Array<[unknown, number, string, string]> = [
    [{}, 400, 'VALIDATION_FAILED', 'body'],
    [{ plan: 'gold' }, 400, 'UNKNOWN_PLAN', 'plan'],
    [{ suspended: 'yes' }, 400, 'VALIDATION_FAILED', 'suspended'],
    [{ runtimeVersion: '0.0.1' }, 400, 'UNKNOWN_RUNTIME_VERSION', 'runtimeVersion'],
    [{ owner: 'me' }, 400, 'VALIDATION_FAILED', 'owner'],
  ];
  // bodies of the wrong shape: sent raw
  for (const [body, status, code, field] of cases) {
    const r = await api.request('PATCH', `/v1/tenants/${tenantId}`, { body });
    t.equal(r.statusCode, status, JSON.stringify(body));
    t.match(r.json().error, { code, field }, JSON.stringify(body));
  }
});

t.test(
  'upgrade follows the catalog: allowed step, refused skip with the path; errors name the field sent',
  async (t) => {
    const { tenantId } = await api.signup({ runtimeVersion: v1 });
    await observe(tenantId, v1);
    const refused = versions.find(
      (to) => !catalog.upgradePath(v1, to).allowed && catalog.upgradePath(v1, to).path.length > 1,
    );
    t.ok(refused, 'the catalog has a version that cannot be reached directly from the oldest');
    const answer = catalog.upgradePath(v1, refused!);
    const params = { id: tenantId };
    const skip = await t.rejects(client.call('POST /v1/tenants/:id/upgrade', { params, body: { version: refused! } }), {
      status: 422,
      code: 'UPGRADE_PATH_REFUSED',
      field: 'version',
    });
    t.match((skip as ApiError).message, `cannot be reached from ${v1}`);
    t.same((skip as ApiError).details?.path, answer.path, 'the error carries the path to follow');
    await t.rejects(
      client.call('PATCH /v1/tenants/:id', { params, body: { runtimeVersion: refused! } }),
      { code: 'UPGRADE_PATH_REFUSED', field: 'runtimeVersion' },
      'through PATCH the same refusal names runtimeVersion, the field sent',
    );
    await t.rejects(
      client.call('POST /v1/tenants/:id/upgrade', { params, body: { version: '0.0.9' } }),
      { status: 400, code: 'UNKNOWN_RUNTIME_VERSION', field: 'version' },
      'an upgrade to a version outside the catalog is a 400; the error names version, the field sent',
    );
    const up = await client.call('POST /v1/tenants/:id/upgrade', { params, body: { version: v2 } });
    const op = await client.call('GET /v1/operations/:id', { params: { id: up.operationId } });
    t.match(op, { kind: 'upgrade', fromVersion: v1, toVersion: v2 });
  },
);

t.test('rollback returns only to the version the tenant last ran, when the catalog allows it', async (t) => {
  const pair = versions
    .flatMap((from) => versions.map((to) => [from, to] as const))
    .find(([from, to]) => from !== to && catalog.upgradePath(to, from).allowed && catalog.canRollback(from, to));
  t.ok(pair, 'the catalog allows at least one rollback');
  const [from, to] = pair!;
  const { tenantId } = await api.signup({ runtimeVersion: to });
  await observe(tenantId, to);
  const upgrade = (id: string, version: string) =>
    client.call('POST /v1/tenants/:id/upgrade', { params: { id }, body: { version } });
  t.ok(await upgrade(tenantId, from), 'the upgrade is accepted');
  await observe(tenantId, from, to);
  const back = await upgrade(tenantId, to);
  t.equal(back.tenant.spec.runtimeVersion, to);

  const other = await api.signup({ runtimeVersion: from });
  await observe(other.tenantId, from);
  await t.rejects(
    upgrade(other.tenantId, to),
    { status: 422, code: 'UPGRADE_PATH_REFUSED', message: /last ran/ },
    'no rollback without a recorded previous version',
  );

  const crossing = versions
    .flatMap((a) => versions.map((b) => [a, b] as const))
    .find(([a, b]) => compareDesc(a, b) && !catalog.canRollback(a, b));
  if (!crossing) throw new Error('precondition: the catalog has a pair of versions whose rollback it refuses');
  const [hi, lo] = crossing;
  const third = await api.signup({ runtimeVersion: lo });
  await setTenantStatus(api.db.pool, third.tenantId, {
    runtimeVersion: hi,
    actualRuntimeVersion: hi,
    previousRuntimeVersion: lo,
  });
  await t.rejects(
    upgrade(third.tenantId, lo),
    { status: 422, message: (catalog.rollbackAnswer(hi, lo) as { reason: string }).reason },
    `catalog refuses ${hi} -> ${lo} even though it ran before`,
  );
});

function compareDesc(a: string, b: string): boolean {
  return catalog.versions.findIndex((v) => v.version === a) > catalog.versions.findIndex((v) => v.version === b);
}

t.test('a tenant key cannot upgrade to a deprecated version; an operator can; nobody to a withdrawn one', async (t) => {
  const { tenantId, apiKey } = await api.signup({ runtimeVersion: v1 });
  const availability = { params: { version: v2 } };
  await operator.call('PUT /v1/runtime-versions/:version/availability', {
    ...availability,
    body: { availability: 'deprecated' },
  });
  const upgrade = { params: { id: tenantId }, body: { version: v2 } };
  await t.rejects(api.as(apiKey).call('POST /v1/tenants/:id/upgrade', upgrade), {
    status: 422,
    code: 'RUNTIME_VERSION_UNAVAILABLE',
  });
  const byOperator = await operator.request('POST /v1/tenants/:id/upgrade', upgrade);
  t.equal(byOperator.status, 202);
  const second = await api.signup({ runtimeVersion: v1 });
  await client.call('PUT /v1/runtime-versions/:version/availability', {
    ...availability,
    body: { availability: 'withdrawn' },
  });
  await t.rejects(
    operator.call('POST /v1/tenants/:id/upgrade', { params: { id: second.tenantId }, body: { version: v2 } }),
    { status: 422, message: /withdrawn/ },
  );
  await client.call('PUT /v1/runtime-versions/:version/availability', {
    ...availability,
    body: { availability: 'available' },
  });
});

t.test('delete keeps a tombstone, is idempotent, and refuses later changes with 409', async (t) => {
  const { tenantId, apiKey } = await api.signup();
  const params = { id: tenantId };
  const del = await api.as(apiKey).request('DELETE /v1/tenants/:id', { params });
  t.equal(del.status, 202);
  if (!del.ok) throw new Error('precondition: the delete was accepted');
  t.equal(del.body.tenant.spec.deleted, true);
  t.equal(del.body.tenant.status.phase, 'Deleting');
  t.ok(del.body.tenant.deletedAt);
  const again = await client.request('DELETE /v1/tenants/:id', { params });
  t.equal(again.status, 202);
  t.equal(again.ok && again.body.operationId, del.body.operationId, 'second delete queues nothing');
  for (const [name, change] of [
    ['POST /v1/tenants/:id/suspend', () => client.call('POST /v1/tenants/:id/suspend', { params })],
    ['PATCH /v1/tenants/:id', () => client.call('PATCH /v1/tenants/:id', { params, body: { plan: 'team' } })],
    [
      'POST /v1/tenants/:id/upgrade',
      () => client.call('POST /v1/tenants/:id/upgrade', { params, body: { version: v2 } }),
    ],
  ] as const)
    await t.rejects(change(), { status: 409, code: 'TENANT_DELETED' }, name);
  const read = await client.request('GET /v1/tenants/:id', { params });
  t.equal(read.status, 200, 'the tombstone can still be read');
  if (!read.ok) throw new Error('precondition: the tombstone was read');
  await setTenantStatus(api.db.pool, tenantId, { phase: 'Deleted' });
  const reuse = await api.as(null).request('POST /v1/signup', {
    body: { organization: read.body.organization, email: 'n@n.io' },
  });
  t.equal(reuse.status, 202, 'a deleted organization name can be signed up again');
});

t.test('retry clears Stalled and makes the tenant due at once without changing the spec', async (t) => {
  const { tenantId } = await api.signup();
  await markStalled(api.db.pool, tenantId, { failures: 5 });
  const res = await operator.request('POST /v1/tenants/:id/retry', { params: { id: tenantId } });
  t.equal(res.status, 202);
  if (!res.ok) throw new Error('precondition: the retry was accepted');
  t.equal(res.body.tenant.generation, 1, 'spec untouched');
  t.match(
    res.body.tenant.status.conditions.find((c) => c.type === 'Stalled'),
    { status: 'False', reason: 'RetryRequested' },
  );
  const { stalled, consecutive_failures, due } = await tenantRecord(api.db.pool, tenantId);
  t.same({ stalled, consecutive_failures, due }, { stalled: false, consecutive_failures: 0, due: true });
});

t.test('retry queues nothing for a tenant that is neither stalled nor failing', async (t) => {
  const { tenantId, operationId } = await api.signup();
  const opsBefore = (await tenantOperations(api.db.pool, tenantId)).length;
  const retry = () => operator.call('POST /v1/tenants/:id/retry', { params: { id: tenantId } });
  const under = await retry();
  t.ok(under, 'a tenant whose create is queued: accepted');
  t.equal(under.operationId, operationId, 'the answer is the operation already under way');
  t.equal((await tenantOperations(api.db.pool, tenantId)).length, opsBefore, 'no second operation was queued');

  await settleTenantOperations(api.db.pool, tenantId);
  await setTenantStatus(api.db.pool, tenantId, { phase: 'Ready' });
  await t.rejects(
    retry(),
    { status: 409, code: 'NOTHING_TO_RETRY', message: /is Ready/ },
    'a Ready tenant with nothing under way: 409; the message names the state',
  );
  t.equal((await tenantOperations(api.db.pool, tenantId)).length, opsBefore, 'still no operation queued');
});

t.test(
  'list filters by phase, plan, version and cluster, pages with a cursor, and refuses tampered cursors',
  async (t) => {
    const plan = 'enterprise';
    const created: string[] = [];
    for (let i = 0; i < 5; i++) created.push((await api.signup({ plan, organization: uniqueOrg('page') })).tenantId);
    const seen: string[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const body: AnswerOf<'GET /v1/tenants'> = await client.call('GET /v1/tenants', {
        query: { plan, limit: 2, ...(cursor ? { cursor } : {}) },
      });
      t.ok(body.items.length <= 2);
      seen.push(...body.items.map((x) => x.id));
      cursor = body.nextCursor;
      pages++;
    } while (cursor && pages < 10);
    t.same(seen, created, 'all five, in creation order, no duplicates');
    t.equal(pages, 3);

    const first = await client.call('GET /v1/tenants', { query: { plan, limit: 2 } });
    const [body, mac] = first.nextCursor!.split('.');
    const forged = Buffer.from(JSON.stringify(['tenants', '1970-01-01 00:00:00+00', created[0]])).toString('base64url');
    for (const bad of [`${forged}.${mac}`, `${body}.AAAA`, 'garbage', `${body}`])
      await t.rejects(client.call('GET /v1/tenants', { query: { cursor: bad } }), {
        status: 400,
        code: 'INVALID_CURSOR',
        field: 'cursor',
      });
    // Positive and negative cases for each filter: one of the five is made Ready and placed on a
    // cluster (as the reconciler would record it), the others stay Pending and unplaced.
    const [placed, ...unplaced] = created as [string, ...string[]];
    const cluster = `list-filter-${Date.now()}`;
    const { id: clusterId } = await addRootCluster(api.db.pool, cluster);
    await setTenantStatus(api.db.pool, placed, { phase: 'Ready', clusterId });
    const ids = (body: { items: Array<{ id: string }> }): string[] => body.items.map((x) => x.id);
    const list = (query: QueryOf<'GET /v1/tenants'>) => client.call('GET /v1/tenants', { query });
    const byReady = await list({ phase: 'Ready', plan, limit: 200 });
    t.same(ids(byReady), [placed], 'phase=Ready lists the Ready tenant and no Pending one');
    const byPending = await list({ phase: 'Pending', plan, limit: 200 });
    t.same(ids(byPending), unplaced, 'phase=Pending lists the four Pending tenants and not the Ready one');
    const byVersion = await list({ runtimeVersion: v1, limit: 200 });
    t.ok(
      byVersion.items.length > 0 && byVersion.items.every((x) => x.spec.runtimeVersion === v1),
      `runtimeVersion=${v1} lists at least one tenant, each on ${v1}`,
    );
    const byCluster = await list({ cluster, limit: 200 });
    t.same(ids(byCluster), [placed], 'cluster= lists exactly the tenant placed there');
    t.equal(byCluster.items[0]!.status.cluster, cluster, 'and shows the cluster in its status');
    const byNowhere = await list({ cluster: 'nowhere' });
    t.same(byNowhere.items, [], 'an unknown cluster lists nothing');
    // queries outside the schema: sent raw
    for (const q of ['limit=0', 'limit=201', 'limit=ten', 'phase=Happy', 'sort=name']) {
      const r = await api.request('GET', `/v1/tenants?${q}`);
      t.equal(r.statusCode, 400, q);
      t.equal(r.json().error.code, 'VALIDATION_FAILED', q);
    }
  },
);

t.test('operations list pages newest first and a missing operation is 404', async (t) => {
  const { tenantId } = await api.signup();
  const params = { id: tenantId };
  for (const a of ['suspend', 'resume', 'suspend', 'resume'] as const)
    await client.call(`POST /v1/tenants/:id/${a}`, { params });
  const p1 = await client.call('GET /v1/tenants/:id/operations', { params, query: { limit: 3 } });
  t.same(
    p1.items.map((o) => o.kind),
    ['resume', 'suspend', 'resume'],
  );
  const p2 = await client.call('GET /v1/tenants/:id/operations', {
    params,
    query: { limit: 3, cursor: p1.nextCursor! },
  });
  t.same(
    p2.items.map((o) => o.kind),
    ['suspend', 'create'],
  );
  t.equal(p2.nextCursor, null);
  await t.rejects(client.call('GET /v1/operations/:id', { params: { id: '00000000-0000-4000-8000-000000000000' } }), {
    status: 404,
    code: 'OPERATION_NOT_FOUND',
  });
});
