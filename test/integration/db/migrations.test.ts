import t from 'tap';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { fileURLToPath } from 'node:url';
import type pg from 'pg';
import { createTestDatabase } from '../../helpers/postgres.ts';
import { loadMigrations, migrate, migrationsApplied } from '../../../provisioner/db/migrate.ts';
import { insertTenant, type InsertTenant } from '../../../provisioner/store/tenants.ts';

const run = promisify(execFile);
const bin = fileURLToPath(new URL('../../../bin/provisioner.ts', import.meta.url));

t.test('migrations apply once: a second run applies nothing', async (t) => {
  const db = await createTestDatabase({ migrate: false });
  t.teardown(() => db.drop());
  t.notOk(await migrationsApplied(db.pool), 'not ready before migrating');
  const all = (await loadMigrations()).map((m) => m.version);
  t.same(await migrate(db.pool), all);
  t.same(await migrate(db.pool), []);
  t.ok(await migrationsApplied(db.pool));
});

t.test('two processes migrating one database at once apply each migration exactly once', async (t) => {
  const db = await createTestDatabase({ migrate: false });
  t.teardown(() => db.drop());
  const env = { ...process.env, DATABASE_URL: db.url };
  const results = await Promise.all([1, 2, 3].map(() => run(process.execPath, [bin, 'migrate'], { env })));
  for (const r of results) t.match(r.stdout, /migrations applied/);
  const files = (await loadMigrations()).map((m) => ({ version: m.version, name: m.name }));
  const { rows } = await db.pool.query<{ version: number; name: string }>(
    'SELECT version, name FROM schema_migrations ORDER BY version',
  );
  t.same(rows, files, 'schema_migrations records every migration file by version and name, in order');

  // The racing processes must leave the database a single migrate leaves: the same tables,
  // columns, constraints, indexes and seed rows.
  const once = await createTestDatabase({ migrate: false });
  t.teardown(() => once.drop());
  await migrate(once.pool);
  const [raced, single] = await Promise.all([schemaOf(db.pool), schemaOf(once.pool)]);
  t.ok(
    single.columns.length > 0 && single.indexes.length > 0,
    'precondition: the single migrate created tables and indexes',
  );
  t.same(raced.columns, single.columns, 'the same tables and columns (type, default, nullability) as one migrate');
  t.same(raced.constraints, single.constraints, 'the same constraints as one migrate');
  t.same(raced.indexes, single.indexes, 'the same indexes as one migrate');
  t.same(raced.rows, single.rows, 'the same number of rows in every table (seed data once) as one migrate');
});

/** The public schema's tables, columns, constraints and indexes, and each table's row count. */
async function schemaOf(
  pool: pg.Pool,
): Promise<{ columns: string[]; constraints: string[]; indexes: string[]; rows: string[] }> {
  const q = async (sql: string): Promise<string[]> => (await pool.query<{ s: string }>(sql)).rows.map((r) => r.s);
  const columns = await q(`SELECT concat_ws(' ', table_name, column_name, data_type, is_nullable, column_default) AS s
    FROM information_schema.columns WHERE table_schema = 'public' ORDER BY 1`);
  const constraints =
    await q(`SELECT conrelid::regclass::text || ' ' || conname || ' ' || pg_get_constraintdef(oid) AS s
    FROM pg_constraint WHERE connamespace = 'public'::regnamespace ORDER BY 1`);
  const indexes = await q(`SELECT indexdef AS s FROM pg_indexes WHERE schemaname = 'public' ORDER BY 1`);
  const tables = await q(
    `SELECT tablename AS s FROM pg_tables WHERE schemaname = 'public' AND tablename <> 'schema_migrations' ORDER BY 1`,
  );
  const rows: string[] = [];
  for (const table of tables) {
    const { rows: r } = await pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${table}"`);
    rows.push(`${table} ${r[0]!.n}`);
  }
  return { columns, constraints, indexes, rows };
}

t.test('a failing migration rolls back whole and names itself', async (t) => {
  const db = await createTestDatabase({ migrate: false });
  t.teardown(() => db.drop());
  const bad = [
    { version: 1, name: 'good', sql: 'CREATE TABLE a (x int)' },
    { version: 2, name: 'broken', sql: 'CREATE TABLE b (y int); SELECT nope FROM nowhere' },
  ];
  await t.rejects(migrate(db.pool, bad), /migration 2_broken failed/);
  const { rows } = await db.pool.query(`SELECT to_regclass('b') AS b, to_regclass('a') AS a`);
  t.equal(rows[0].b, null, 'nothing of the failed migration remains');
  t.equal(rows[0].a, 'a', 'the earlier migration stays applied');
});

t.test(
  '022_runtimes gives every existing tenant its hosted runtime, and every new tenant one in its insert',
  async (t) => {
    const db = await createTestDatabase({ migrate: false });
    t.teardown(() => db.drop());
    const all = await loadMigrations();
    const at = all.findIndex((m) => m.name === 'runtimes');
    if (at === -1) throw new Error('precondition: migration 022_runtimes exists');
    await migrate(db.pool, all.slice(0, at));
    const before: string[] = [];
    for (const org of ['before-a', 'before-b']) before.push(await insertTenant(db.pool, tenantFixture(org)));
    await migrate(db.pool, all);
    const hosted = async (): Promise<Array<{ tenant_id: string; name: string; state: string | null }>> =>
      (
        await db.pool.query<{ tenant_id: string; name: string; state: string | null }>(
          `SELECT tenant_id, name, state FROM runtimes WHERE mode = 'hosted' ORDER BY created_at, tenant_id`,
        )
      ).rows;
    t.same(
      (await hosted()).map((r) => r.tenant_id).sort(),
      [...before].sort(),
      'the migration backfilled one hosted runtime per tenant that existed',
    );
    const after = await insertTenant(db.pool, tenantFixture('after'));
    const rows = await hosted();
    t.same(
      rows.filter((r) => r.tenant_id === after),
      [{ tenant_id: after, name: 'hosted', state: null }],
      "a tenant inserted after the migration has exactly one hosted runtime, named 'hosted', with no state of its own",
    );
    await t.rejects(
      db.pool.query(
        `INSERT INTO runtimes (tenant_id, name, mode, created_by) VALUES ($1, 'hosted', 'hosted', 'test')`,
        [after],
      ),
      /runtimes_tenant_name/,
      'a second hosted runtime for one tenant is refused by the unique name',
    );
  },
);

function tenantFixture(organization: string): InsertTenant {
  return { organization, email: 'owner@example.com', plan: 'small', runtimeVersion: '1.3.0' };
}

t.test(
  "025 puts every stored runtime object, reporter and purge horizon under its tenant's hosted runtime, usage unchanged",
  async (t) => {
    const db = await createTestDatabase({ migrate: false });
    t.teardown(() => db.drop());
    const all = await loadMigrations();
    const at = all.findIndex((m) => m.name === 'runtime_objects_by_runtime');
    if (at === -1) throw new Error('precondition: migration 025_runtime_objects_by_runtime exists');
    await migrate(db.pool, all.slice(0, at));
    const tenants = [
      await insertTenant(db.pool, tenantFixture('objects-a')),
      await insertTenant(db.pool, tenantFixture('objects-b')),
    ];
    for (const [i, id] of tenants.entries()) {
      await db.pool.query(
        `INSERT INTO runtime_objects (tenant_id, kind, namespace, name, uid, resource_version, reported_by, observed_at,
                                      summary, object, deleted)
         SELECT $1, 'Application', 'argocd', 'app-' || n, 'uid-' || n, 100 + n, 'r-0', now(), '{}',
                CASE WHEN n = 0 THEN NULL ELSE jsonb_build_object('n', n) END, n = 0
           FROM generate_series(0, $2::int) n`,
        [id, 3 + i],
      );
      await db.pool.query(`INSERT INTO runtime_reporters (tenant_id, replica) VALUES ($1, 'r-0'), ($1, 'r-1')`, [id]);
    }
    await db.pool.query(
      `INSERT INTO runtime_object_horizons (tenant_id, purged_rv, purged_seq, purged_through) VALUES ($1, 90, 1, now())`,
      [tenants[0]],
    );
    const usage = async () =>
      (await db.pool.query('SELECT tenant_id, objects, bytes FROM runtime_object_usage ORDER BY tenant_id')).rows;
    const usageBefore = await usage();

    await migrate(db.pool, all);
    for (const table of ['runtime_objects', 'runtime_reporters', 'runtime_object_horizons']) {
      const { rows } = await db.pool.query<{ rows: number; hosted: number }>(
        `SELECT count(*)::int AS rows, count(*) FILTER (WHERE r.mode = 'hosted')::int AS hosted
           FROM ${table} x JOIN runtimes r ON r.id = x.runtime_id AND r.tenant_id = x.tenant_id`,
      );
      const total = (await db.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${table}`)).rows[0]!.n;
      t.same(
        [rows[0]!.rows, rows[0]!.hosted],
        [total, total],
        `${table}: each of its ${total} rows is under its own tenant's hosted runtime`,
      );
    }
    t.same(await usage(), usageBefore, "each tenant's usage (objects, bytes) is what it was");

    const hybrid = (
      await db.pool.query<{ id: string }>(
        `INSERT INTO runtimes (tenant_id, name, mode, access, argo, upgrades, version, state, bootstrap_token_hash,
                               bootstrap_expires_at, created_by)
         VALUES ($1, 'edge', 'hybrid', 'tunnel', 'new', 'customer', '1.3.0', 'installed', 'h', now(), 'test')
         RETURNING id`,
        [tenants[0]],
      )
    ).rows[0]!.id;
    const insert = (tenantId: string | undefined, runtimeId: string) =>
      db.pool.query(
        `INSERT INTO runtime_objects (tenant_id, runtime_id, kind, namespace, name, uid, resource_version, reported_by,
                                      observed_at)
         VALUES ($1, $2, 'Application', 'argocd', 'app-1', 'uid-x', 5, 'r-0', now())`,
        [tenantId, runtimeId],
      );
    await insert(tenants[0], hybrid);
    const sameName = await db.pool.query<{ n: number }>(
      `SELECT count(DISTINCT runtime_id)::int AS n FROM runtime_objects WHERE tenant_id = $1 AND name = 'app-1'`,
      [tenants[0]],
    );
    t.equal(
      sameName.rows[0]!.n,
      2,
      "the hosted runtime's Application argocd/app-1 and the hybrid runtime's of the same name are both stored",
    );
    await t.rejects(
      insert(tenants[1], hybrid),
      /runtime_objects_runtime/,
      "a row naming another tenant's runtime is refused by the foreign key",
    );
  },
);
