import t from 'tap';
import pg from 'pg';
import { createTestApi, uniqueOrg } from '../../helpers/api.ts';
import { catalog } from '../../../runtime/catalog.ts';
import { addRootCluster } from '../../helpers/clusters.ts';
import { settleTenantOperations } from '../../helpers/operations.ts';
import { markStalled, setTenantStatus } from '../../helpers/tenants.ts';

const api = await createTestApi();
t.teardown(() => api.close());

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
  const res = await api.request('GET', `/v1/tenants/${tenantId}`);
  t.equal(res.statusCode, 200);
  t.equal(res.json().id, tenantId);
  const missing = await api.request('GET', '/v1/tenants/00000000-0000-4000-8000-000000000000');
  t.equal(missing.statusCode, 404);
  t.equal(missing.json().error.code, 'TENANT_NOT_FOUND');
  const bad = await api.request('GET', '/v1/tenants/not-a-uuid');
  t.equal(bad.statusCode, 400);
  t.match(bad.json(), { error: { code: 'VALIDATION_FAILED', field: 'id' } });
});

t.test('every spec change bumps the generation, queues one operation, writes an audit row and NOTIFYs', async (t) => {
  const { tenantId } = await api.signup({ runtimeVersion: v1 });
  const listener = new pg.Client({ connectionString: api.db.url });
  await listener.connect();
  await listener.query('LISTEN tenant_due');
  const notified = new Promise<string>((resolve) =>
    listener.on('notification', (n) => {
      if (n.payload === tenantId) resolve(n.payload);
    }),
  );

  const res = await api.request('POST', `/v1/tenants/${tenantId}/suspend`, { key: api.operatorKey });
  t.equal(res.statusCode, 202);
  const body = res.json();
  t.equal(body.tenant.generation, 2);
  t.equal(body.tenant.spec.suspended, true);
  t.match(
    body.tenant.status.conditions.find((c: { type: string }) => c.type === 'Reconciling'),
    { status: 'True', reason: 'SpecChanged' },
  );
  const op = (await api.request('GET', `/v1/operations/${body.operationId}`)).json();
  t.match(op, { kind: 'suspend', state: 'queued', generation: 2 });
  const audit = await api.db.pool.query(
    `SELECT action, before, after FROM audit_log WHERE target_id = $1 AND action = 'tenant.suspend'`,
    [tenantId],
  );
  t.equal(audit.rows.length, 1);
  t.match(audit.rows[0], { before: { suspended: false }, after: { suspended: true } });
  const timeout = new Promise<string>((resolve) =>
    setTimeout(() => resolve('no notification within 10 s'), 10_000).unref(),
  );
  t.equal(await Promise.race([notified, timeout]), tenantId, 'workers were notified with the tenant id');
  await listener.end();
});

t.test('suspend and resume are idempotent: repeating them queues nothing', async (t) => {
  const { tenantId } = await api.signup();
  const first = (await api.request('POST', `/v1/tenants/${tenantId}/suspend`)).json();
  const again = await api.request('POST', `/v1/tenants/${tenantId}/suspend`);
  t.equal(again.statusCode, 202);
  t.equal(again.json().operationId, first.operationId);
  t.equal(again.json().tenant.generation, first.tenant.generation);
  const resumed = (await api.request('POST', `/v1/tenants/${tenantId}/resume`)).json();
  t.equal(resumed.tenant.spec.suspended, false);
  t.equal(resumed.tenant.generation, first.tenant.generation + 1);
  const ops = (await api.request('GET', `/v1/tenants/${tenantId}/operations`)).json();
  t.same(
    ops.items.map((o: { kind: string }) => o.kind),
    ['resume', 'suspend', 'create'],
    'newest first, no duplicates',
  );
});

t.test('PATCH changes plan, version and suspension; bad bodies name the field', async (t) => {
  const { tenantId } = await api.signup({ runtimeVersion: v1 });
  const res = await api.request('PATCH', `/v1/tenants/${tenantId}`, { body: { plan: 'team' }, key: api.operatorKey });
  t.equal(res.statusCode, 202);
  t.equal(res.json().tenant.spec.plan, 'team');
  const op = (await api.request('GET', `/v1/operations/${res.json().operationId}`)).json();
  t.equal(op.kind, 'update');
  const cases: Array<[unknown, number, string, string]> = [
    [{}, 400, 'VALIDATION_FAILED', 'body'],
    [{ plan: 'gold' }, 400, 'UNKNOWN_PLAN', 'plan'],
    [{ suspended: 'yes' }, 400, 'VALIDATION_FAILED', 'suspended'],
    [{ runtimeVersion: '0.0.1' }, 400, 'UNKNOWN_RUNTIME_VERSION', 'runtimeVersion'],
    [{ owner: 'me' }, 400, 'VALIDATION_FAILED', 'owner'],
  ];
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
    const skip = await api.request('POST', `/v1/tenants/${tenantId}/upgrade`, { body: { version: refused } });
    t.equal(skip.statusCode, 422);
    t.match(skip.json().error, { code: 'UPGRADE_PATH_REFUSED', field: 'version' });
    t.match(skip.json().error.message, `cannot be reached from ${v1}`);
    t.same(skip.json().error.details.path, answer.path, 'the error carries the path to follow');
    const viaPatch = await api.request('PATCH', `/v1/tenants/${tenantId}`, { body: { runtimeVersion: refused } });
    t.match(
      viaPatch.json().error,
      { code: 'UPGRADE_PATH_REFUSED', field: 'runtimeVersion' },
      'through PATCH the same refusal names runtimeVersion, the field sent',
    );
    const unknown = await api.request('POST', `/v1/tenants/${tenantId}/upgrade`, { body: { version: '0.0.9' } });
    t.equal(unknown.statusCode, 400, 'an upgrade to a version outside the catalog is a 400');
    t.match(
      unknown.json().error,
      { code: 'UNKNOWN_RUNTIME_VERSION', field: 'version' },
      'the upgrade error names version, the field sent',
    );
    const up = await api.request('POST', `/v1/tenants/${tenantId}/upgrade`, { body: { version: v2 } });
    t.equal(up.statusCode, 202);
    const op = (await api.request('GET', `/v1/operations/${up.json().operationId}`)).json();
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
  t.equal((await api.request('POST', `/v1/tenants/${tenantId}/upgrade`, { body: { version: from } })).statusCode, 202);
  await observe(tenantId, from, to);
  const back = await api.request('POST', `/v1/tenants/${tenantId}/upgrade`, { body: { version: to } });
  t.equal(back.statusCode, 202);
  t.equal(back.json().tenant.spec.runtimeVersion, to);

  const other = await api.signup({ runtimeVersion: from });
  await observe(other.tenantId, from);
  const noHistory = await api.request('POST', `/v1/tenants/${other.tenantId}/upgrade`, { body: { version: to } });
  t.equal(noHistory.statusCode, 422, 'no rollback without a recorded previous version');
  t.match(noHistory.json().error, { code: 'UPGRADE_PATH_REFUSED', message: /last ran/ });

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
  const r = await api.request('POST', `/v1/tenants/${third.tenantId}/upgrade`, { body: { version: lo } });
  t.equal(r.statusCode, 422, `catalog refuses ${hi} -> ${lo} even though it ran before`);
  t.equal(r.json().error.message, (catalog.rollbackAnswer(hi, lo) as { reason: string }).reason);
});

function compareDesc(a: string, b: string): boolean {
  return catalog.versions.findIndex((v) => v.version === a) > catalog.versions.findIndex((v) => v.version === b);
}

t.test('a tenant key cannot upgrade to a deprecated version; an operator can; nobody to a withdrawn one', async (t) => {
  const { tenantId, apiKey } = await api.signup({ runtimeVersion: v1 });
  await api.request('PUT', `/v1/runtime-versions/${v2}/availability`, {
    body: { availability: 'deprecated' },
    key: api.operatorKey,
  });
  const byTenant = await api.request('POST', `/v1/tenants/${tenantId}/upgrade`, { key: apiKey, body: { version: v2 } });
  t.equal(byTenant.statusCode, 422);
  t.equal(byTenant.json().error.code, 'RUNTIME_VERSION_UNAVAILABLE');
  const byOperator = await api.request('POST', `/v1/tenants/${tenantId}/upgrade`, {
    key: api.operatorKey,
    body: { version: v2 },
  });
  t.equal(byOperator.statusCode, 202);
  const second = await api.signup({ runtimeVersion: v1 });
  await api.request('PUT', `/v1/runtime-versions/${v2}/availability`, { body: { availability: 'withdrawn' } });
  const withdrawn = await api.request('POST', `/v1/tenants/${second.tenantId}/upgrade`, {
    key: api.operatorKey,
    body: { version: v2 },
  });
  t.equal(withdrawn.statusCode, 422);
  t.match(withdrawn.json().error.message, /withdrawn/);
  await api.request('PUT', `/v1/runtime-versions/${v2}/availability`, { body: { availability: 'available' } });
});

t.test('delete keeps a tombstone, is idempotent, and refuses later changes with 409', async (t) => {
  const { tenantId, apiKey } = await api.signup();
  const del = await api.request('DELETE', `/v1/tenants/${tenantId}`, { key: apiKey });
  t.equal(del.statusCode, 202);
  t.equal(del.json().tenant.spec.deleted, true);
  t.equal(del.json().tenant.status.phase, 'Deleting');
  t.ok(del.json().tenant.deletedAt);
  const again = await api.request('DELETE', `/v1/tenants/${tenantId}`);
  t.equal(again.statusCode, 202);
  t.equal(again.json().operationId, del.json().operationId, 'second delete queues nothing');
  for (const [method, url, body] of [
    ['POST', `/v1/tenants/${tenantId}/suspend`, undefined],
    ['PATCH', `/v1/tenants/${tenantId}`, { plan: 'team' }],
    ['POST', `/v1/tenants/${tenantId}/upgrade`, { version: v2 }],
  ] as const) {
    const r = await api.request(method, url, body ? { body } : {});
    t.equal(r.statusCode, 409, `${method} ${url}`);
    t.equal(r.json().error.code, 'TENANT_DELETED');
  }
  const read = await api.request('GET', `/v1/tenants/${tenantId}`);
  t.equal(read.statusCode, 200, 'the tombstone can still be read');
  await setTenantStatus(api.db.pool, tenantId, { phase: 'Deleted' });
  const reuse = await api.app.inject({
    method: 'POST',
    url: '/v1/signup',
    payload: { organization: read.json().organization, email: 'n@n.io' },
  });
  t.equal(reuse.statusCode, 202, 'a deleted organization name can be signed up again');
});

t.test('retry clears Stalled and makes the tenant due at once without changing the spec', async (t) => {
  const { tenantId } = await api.signup();
  await markStalled(api.db.pool, tenantId, { failures: 5 });
  const res = await api.request('POST', `/v1/tenants/${tenantId}/retry`, { key: api.operatorKey });
  t.equal(res.statusCode, 202);
  t.equal(res.json().tenant.generation, 1, 'spec untouched');
  t.match(
    res.json().tenant.status.conditions.find((c: { type: string }) => c.type === 'Stalled'),
    { status: 'False', reason: 'RetryRequested' },
  );
  const { rows } = await api.db.pool.query(
    'SELECT stalled, consecutive_failures, next_attempt_at <= now() AS due FROM tenants WHERE id = $1',
    [tenantId],
  );
  t.same(rows[0], { stalled: false, consecutive_failures: 0, due: true });
});

t.test('retry queues nothing for a tenant that is neither stalled nor failing', async (t) => {
  const { tenantId, operationId } = await api.signup();
  const opsBefore = await api.db.pool.query('SELECT count(*)::int AS n FROM operations WHERE tenant_id = $1', [
    tenantId,
  ]);
  const under = await api.request('POST', `/v1/tenants/${tenantId}/retry`, { key: api.operatorKey });
  t.equal(under.statusCode, 202, 'a tenant whose create is queued: accepted');
  t.equal(under.json().operationId, operationId, 'the answer is the operation already under way');
  const opsAfter = await api.db.pool.query('SELECT count(*)::int AS n FROM operations WHERE tenant_id = $1', [
    tenantId,
  ]);
  t.equal(opsAfter.rows[0].n, opsBefore.rows[0].n, 'no second operation was queued');

  await settleTenantOperations(api.db.pool, tenantId);
  await setTenantStatus(api.db.pool, tenantId, { phase: 'Ready' });
  const settled = await api.request('POST', `/v1/tenants/${tenantId}/retry`, { key: api.operatorKey });
  t.equal(settled.statusCode, 409, 'a Ready tenant with nothing under way: 409');
  t.equal(settled.json().error.code, 'NOTHING_TO_RETRY');
  t.match(settled.json().error.message, /is Ready/, 'the message names the state');
  const opsSettled = await api.db.pool.query('SELECT count(*)::int AS n FROM operations WHERE tenant_id = $1', [
    tenantId,
  ]);
  t.equal(opsSettled.rows[0].n, opsBefore.rows[0].n, 'still no operation queued');
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
      const q: string = `/v1/tenants?plan=${plan}&limit=2${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`;
      const res = await api.request('GET', q);
      t.equal(res.statusCode, 200);
      const body = res.json();
      t.ok(body.items.length <= 2);
      seen.push(...body.items.map((x: { id: string }) => x.id));
      cursor = body.nextCursor;
      pages++;
    } while (cursor && pages < 10);
    t.same(seen, created, 'all five, in creation order, no duplicates');
    t.equal(pages, 3);

    const first = (await api.request('GET', `/v1/tenants?plan=${plan}&limit=2`)).json();
    const [body, mac] = (first.nextCursor as string).split('.');
    const forged = Buffer.from(JSON.stringify(['tenants', '1970-01-01 00:00:00+00', created[0]])).toString('base64url');
    for (const bad of [`${forged}.${mac}`, `${body}.AAAA`, 'garbage', `${body}`]) {
      const r = await api.request('GET', `/v1/tenants?cursor=${encodeURIComponent(bad)}`);
      t.equal(r.statusCode, 400);
      t.match(r.json().error, { code: 'INVALID_CURSOR', field: 'cursor' });
    }
    // Positive and negative cases for each filter: one of the five is made Ready and placed on a
    // cluster (as the reconciler would record it), the others stay Pending and unplaced.
    const [placed, ...unplaced] = created as [string, ...string[]];
    const cluster = `list-filter-${Date.now()}`;
    const { id: clusterId } = await addRootCluster(api.db.pool, cluster);
    await setTenantStatus(api.db.pool, placed, { phase: 'Ready', clusterId });
    const ids = (body: { items: Array<{ id: string }> }): string[] => body.items.map((x) => x.id);
    const byReady = (await api.request('GET', `/v1/tenants?phase=Ready&plan=${plan}&limit=200`)).json();
    t.same(ids(byReady), [placed], 'phase=Ready lists the Ready tenant and no Pending one');
    const byPending = (await api.request('GET', `/v1/tenants?phase=Pending&plan=${plan}&limit=200`)).json();
    t.same(ids(byPending), unplaced, 'phase=Pending lists the four Pending tenants and not the Ready one');
    const byVersion = (await api.request('GET', `/v1/tenants?runtimeVersion=${v1}&limit=200`)).json();
    t.ok(
      byVersion.items.length > 0 &&
        byVersion.items.every((x: { spec: { runtimeVersion: string } }) => x.spec.runtimeVersion === v1),
      `runtimeVersion=${v1} lists at least one tenant, each on ${v1}`,
    );
    const byCluster = (await api.request('GET', `/v1/tenants?cluster=${cluster}&limit=200`)).json();
    t.same(ids(byCluster), [placed], 'cluster= lists exactly the tenant placed there');
    t.equal(byCluster.items[0].status.cluster, cluster, 'and shows the cluster in its status');
    const byNowhere = (await api.request('GET', '/v1/tenants?cluster=nowhere')).json();
    t.same(byNowhere.items, [], 'an unknown cluster lists nothing');
    for (const q of ['limit=0', 'limit=201', 'limit=ten', 'phase=Happy', 'sort=name']) {
      const r = await api.request('GET', `/v1/tenants?${q}`);
      t.equal(r.statusCode, 400, q);
      t.equal(r.json().error.code, 'VALIDATION_FAILED', q);
    }
  },
);

t.test('operations list pages newest first and a missing operation is 404', async (t) => {
  const { tenantId } = await api.signup();
  for (const a of ['suspend', 'resume', 'suspend', 'resume']) await api.request('POST', `/v1/tenants/${tenantId}/${a}`);
  const p1 = (await api.request('GET', `/v1/tenants/${tenantId}/operations?limit=3`)).json();
  t.same(
    p1.items.map((o: { kind: string }) => o.kind),
    ['resume', 'suspend', 'resume'],
  );
  const p2 = (
    await api.request('GET', `/v1/tenants/${tenantId}/operations?limit=3&cursor=${encodeURIComponent(p1.nextCursor)}`)
  ).json();
  t.same(
    p2.items.map((o: { kind: string }) => o.kind),
    ['suspend', 'create'],
  );
  t.equal(p2.nextCursor, null);
  const missing = await api.request('GET', '/v1/operations/00000000-0000-4000-8000-000000000000');
  t.equal(missing.statusCode, 404);
  t.equal(missing.json().error.code, 'OPERATION_NOT_FOUND');
});
