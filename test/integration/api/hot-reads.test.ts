/**
 * The API's batched hot reads (store/batched-reads.ts) on real Postgres: GET /v1/tenants/:id and
 * key lookups. Many reads at once share statements and each still gets its own tenant and
 * identity, and a write committed before a read is always in its answer, also while other reads
 * keep batches at the database.
 */
import t from 'tap';
import { createTestApi, type TestApi } from '../../helpers/api.ts';
import { createKey } from '../../../provisioner/store/keys.ts';
import { HOT_READS_APPLICATION_NAME } from '../../../provisioner/store/batched-reads.ts';
import { until } from '../../../sandbox/until.ts';
import { setTenantStatus } from '../../helpers/tenants.ts';
import { revokeKeyUnannounced } from '../../helpers/keys.ts';
import { sessionCount, sessionSetting } from '../../helpers/postgres.ts';

const api = await createTestApi();
t.teardown(() => api.close());

const tenants = await Promise.all(Array.from({ length: 20 }, () => api.signup()));
/** GET /v1/tenants/:id with `key` (the admin key unless given): the client's answer, never thrown. */
const read = (id: string, key: string = api.adminKey, on: TestApi = api) =>
  on.as(key).request('GET /v1/tenants/:id', { params: { id } });
/** The answer's tenant id, or its error code. */
const idOrCode = (r: Awaited<ReturnType<typeof read>>) => (r.ok ? r.body.id : r.body.error.code);

t.test(
  '200 reads of 20 tenants at once, each with its own key: each gets its own tenant, in fewer statements',
  async (t) => {
    const before = api.services.reads.stats();
    const res = await Promise.all(
      Array.from({ length: 200 }, (_, i) => {
        const tenant = tenants[i % tenants.length]!;
        return read(tenant.tenantId, tenant.apiKey).then((r) => ({ r, tenant }));
      }),
    );
    t.same(
      res.map(({ r }) => r.status),
      res.map(() => 200),
    );
    t.same(
      res.map(({ r }) => (r.ok ? `${r.body.id} ${r.body.organization}` : r.body.error.code)),
      res.map(({ tenant }) => `${tenant.tenantId} ${tenant.body.tenant.organization}`),
      'every read answered with its own tenant',
    );
    const after = api.services.reads.stats();
    t.equal(after.tenants.reads - before.tenants.reads, 200);
    t.ok(
      after.tenants.batches - before.tenants.batches < 50,
      `200 reads took ${after.tenants.batches - before.tenants.batches} statements`,
    );
    const lookups = after.keys.reads - before.keys.reads;
    t.ok(lookups >= 20, `each of the 20 keys was looked up (${lookups} lookups)`);
    t.ok(
      after.keys.batches - before.keys.batches < lookups,
      `${lookups} key lookups took ${after.keys.batches - before.keys.batches} statements`,
    );
  },
);

t.test('a write committed before a read is in its answer, while other reads keep statements in flight', async (t) => {
  const { tenantId } = tenants[0]!;
  let stop = false;
  // Background pollers: a statement is at the database nearly all the time.
  const pollers = Array.from({ length: 8 }, async (_, i) => {
    let n = 0;
    while (!stop) {
      const other = tenants[1 + (i % (tenants.length - 1))]!;
      await read(other.tenantId, other.apiKey);
      n++;
    }
    return n;
  });
  let stale = 0;
  for (let i = 1; i <= 60; i++) {
    await setTenantStatus(api.db.pool, tenantId, { email: `round-${i}@example.com` });
    const res = await read(tenantId, api.operatorKey);
    if (!res.ok || res.body.email !== `round-${i}@example.com`) stale++;
  }
  stop = true;
  const polled = (await Promise.all(pollers)).reduce((a, b) => a + b, 0);
  t.equal(stale, 0, 'no read answered from before the write');
  t.ok(polled > 60, `the pollers read ${polled} times meanwhile`);
});

t.test(
  'key lookups in batches: unknown, revoked and valid keys presented together each get their own answer',
  async (t) => {
    const tenant = tenants[4]!;
    const fresh = await createKey(api.db.pool, {
      role: 'tenant',
      tenantId: tenant.tenantId,
      name: 'fresh',
      createdBy: 'test',
    });
    const revoked = await createKey(api.db.pool, {
      role: 'tenant',
      tenantId: tenant.tenantId,
      name: 'revoked',
      createdBy: 'test',
    });
    await revokeKeyUnannounced(api.db.pool, revoked.info.id);
    const unknown = fresh.key.slice(0, -4) + (fresh.key.endsWith('AAAA') ? 'BBBB' : 'AAAA');
    const before = api.services.reads.stats().keys;
    const res = await Promise.all(
      [fresh.key, revoked.key, unknown, fresh.key].map((key) => read(tenant.tenantId, key)),
    );
    t.same(
      res.map((r) => r.status),
      [200, 401, 401, 200],
    );
    t.same(res.map(idOrCode), [tenant.tenantId, 'INVALID_API_KEY', 'INVALID_API_KEY', tenant.tenantId]);
    t.ok(api.services.reads.stats().keys.batches - before.batches <= 2, 'looked up together');
  },
);

t.test('/metrics counts the reads and the statements that answered them, by kind', async (t) => {
  const scrape = async () => {
    // /metrics is outside the route map: raw
    const text = (await api.request('GET', '/metrics', { key: null })).body;
    const value = (name: string, kind: string) =>
      Number(new RegExp(`^${name}\\{kind="${kind}"\\} (\\d+)$`, 'm').exec(text)?.[1] ?? NaN);
    return {
      tenantReads: value('provisioner_hot_reads_total', 'tenant'),
      tenantStatements: value('provisioner_hot_read_statements_total', 'tenant'),
      keyReads: value('provisioner_hot_reads_total', 'key'),
    };
  };
  const before = await scrape();
  const tenant = tenants[5]!;
  const { key } = await createKey(api.db.pool, {
    role: 'tenant',
    tenantId: tenant.tenantId,
    name: 'never used',
    createdBy: 'test',
  });
  await Promise.all(Array.from({ length: 30 }, () => read(tenant.tenantId, key)));
  const after = await scrape();
  t.equal(after.tenantReads - before.tenantReads, 30);
  t.ok(
    after.tenantStatements - before.tenantStatements >= 1 && after.tenantStatements - before.tenantStatements < 30,
    'fewer statements than reads',
  );
  t.ok(after.keyReads > before.keyReads, "the new key's lookup is counted too");
});

t.test("unknown ids and other tenants' ids answer as before", async (t) => {
  const missing = await read('00000000-0000-4000-8000-000000000000');
  t.equal(missing.status, 404);
  t.equal(idOrCode(missing), 'TENANT_NOT_FOUND');
  const [a, b] = [tenants[2]!, tenants[3]!];
  const cross = await read(b.tenantId, a.apiKey);
  t.equal(cross.status, 404, 'tenant A cannot see B (not even that it exists)');
  t.equal(idOrCode(cross), 'TENANT_NOT_FOUND');
});

t.test(
  "the hot reads run on a connection of their own, leave the API pool's settings alone, and close when the provisioner stops",
  async (t) => {
    const other = await createTestApi();
    const readerSessions = () =>
      sessionCount(other.db.pool, {
        applicationName: HOT_READS_APPLICATION_NAME,
        // The tenant read's columns (the key lookups run on connections of the same name).
        statementPart: 't.id, t.organization,',
      });
    const { tenantId } = await other.signup();
    t.equal((await read(tenantId, other.adminKey, other)).status, 200);
    t.equal(await readerSessions(), 1, 'one connection for tenant reads (concurrency 1)');
    t.equal(
      await sessionSetting(other.db.pool, 'plan_cache_mode'),
      'auto',
      'the API pool keeps the default plan cache mode',
    );
    // Stopped as `provisioner serve` stops: the app, then the services (which own the hot reads).
    await other.app.close();
    await other.services.stop();
    await until(
      'the hot-read connection closed after the services stopped',
      10_000,
      async () => (await readerSessions()) === 0,
    );
    t.equal(await readerSessions(), 0, 'closed when the services stopped');
    await other.db.drop();
  },
);
