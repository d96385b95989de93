/**
 * GET /v1/tenants/:id reads through the batching TenantReader on real Postgres: many reads at once
 * share statements and each still gets its own tenant, and a write committed before a read is
 * always in its answer, also while other reads keep batches at the database.
 */
import t from 'tap';
import { createTestApi } from '../../helpers/api.ts';

const api = await createTestApi();
t.teardown(() => api.close());

const tenants = await Promise.all(Array.from({ length: 20 }, () => api.signup()));

t.test('200 reads of 20 tenants at once, each with its own key: each gets its own tenant, in fewer statements', async (t) => {
  const before = api.ctx.tenantReader.stats();
  const res = await Promise.all(Array.from({ length: 200 }, (_, i) => {
    const tenant = tenants[i % tenants.length]!;
    return api.request('GET', `/v1/tenants/${tenant.tenantId}`, { key: tenant.apiKey }).then((r) => ({ r, tenant }));
  }));
  t.same(res.map(({ r }) => r.statusCode), res.map(() => 200));
  t.same(res.map(({ r }) => `${r.json().id} ${r.json().organization}`), res.map(({ tenant }) => `${tenant.tenantId} ${tenant.body.tenant.organization}`),
    'every read answered with its own tenant');
  const after = api.ctx.tenantReader.stats();
  t.equal(after.reads - before.reads, 200);
  t.ok(after.batches - before.batches < 200, `200 reads took ${after.batches - before.batches} statements`);
});

t.test('a write committed before a read is in its answer, while other reads keep statements in flight', async (t) => {
  const { tenantId } = tenants[0]!;
  let stop = false;
  // Background pollers: a statement is at the database nearly all the time.
  const pollers = Array.from({ length: 8 }, async (_, i) => {
    let n = 0;
    while (!stop) {
      const other = tenants[1 + (i % (tenants.length - 1))]!;
      await api.request('GET', `/v1/tenants/${other.tenantId}`, { key: other.apiKey });
      n++;
    }
    return n;
  });
  let stale = 0;
  for (let i = 1; i <= 60; i++) {
    await api.db.pool.query(`UPDATE tenants SET email = $2 WHERE id = $1`, [tenantId, `round-${i}@example.com`]);
    const res = await api.request('GET', `/v1/tenants/${tenantId}`, { key: api.operatorKey });
    if (res.json().email !== `round-${i}@example.com`) stale++;
  }
  stop = true;
  const polled = (await Promise.all(pollers)).reduce((a, b) => a + b, 0);
  t.equal(stale, 0, 'no read answered from before the write');
  t.ok(polled > 60, `the pollers read ${polled} times meanwhile`);
});

t.test('unknown ids and other tenants\' ids answer as before', async (t) => {
  const missing = await api.request('GET', '/v1/tenants/00000000-0000-4000-8000-000000000000');
  t.equal(missing.statusCode, 404);
  t.equal(missing.json().error.code, 'TENANT_NOT_FOUND');
  const [a, b] = [tenants[2]!, tenants[3]!];
  const cross = await api.request('GET', `/v1/tenants/${b.tenantId}`, { key: a.apiKey });
  t.equal(cross.statusCode, 404, 'tenant A cannot see B (not even that it exists)');
  t.equal(cross.json().error.code, 'TENANT_NOT_FOUND');
});

t.test('the reader runs on a connection of its own, leaves the API pool\'s settings alone, and closes with the app', async (t) => {
  const other = await createTestApi();
  const readerSessions = async () => (await other.db.pool.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() AND query LIKE '%t.id = ANY($1::uuid[])%'`,
  )).rows[0]!.n;
  const { tenantId } = await other.signup();
  t.equal((await other.request('GET', `/v1/tenants/${tenantId}`)).statusCode, 200);
  t.equal(await readerSessions(), 1, 'one reader connection (concurrency 1)');
  const { rows } = await other.db.pool.query<{ plan: string }>(
    `SELECT current_setting('plan_cache_mode') AS plan`,
  );
  t.equal(rows[0]!.plan, 'auto', 'the API pool keeps the default plan cache mode');
  await other.app.close();
  for (let i = 0; i < 50 && (await readerSessions()) > 0; i++) await new Promise((r) => setTimeout(r, 20));
  t.equal(await readerSessions(), 0, 'closed with the app');
  await other.db.drop();
});
