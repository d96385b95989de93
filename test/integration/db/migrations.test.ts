import t from 'tap';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { fileURLToPath } from 'node:url';
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
  const { rows } = await db.pool.query<{ version: number; n: number }>(
    'SELECT version, count(*)::int AS n FROM schema_migrations GROUP BY version ORDER BY version',
  );
  t.same(
    rows.map((r) => r.version),
    (await loadMigrations()).map((m) => m.version),
  );
  t.ok(rows.every((r) => r.n === 1));
});

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
