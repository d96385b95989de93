import t from 'tap';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { fileURLToPath } from 'node:url';
import type pg from 'pg';
import { createTestDatabase } from '../../helpers/postgres.ts';
import { loadMigrations, migrate, migrationsApplied } from '../../../provisioner/db/migrate.ts';

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
