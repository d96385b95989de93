/**
 * Tests reach their starting state and read what they check through the API, the store's
 * functions and the test-data builders and readers of test/helpers/ (docs/testing.md "Test
 * data"), so that a schema change is made in the store and in one helper, not in every test. SQL
 * in a test file (a `.query(` call or a statement literal, found as test/unit/layers.test.ts
 * finds it in provisioner/) is left to test/helpers/ and the database's own tests
 * (test/integration/db/: migrations, notifications, outages; test/integration/store/, the
 * store's). Every other file of test/ and bench/ that still holds SQL is named in
 * STILL_TO_MOVE; the list only shrinks: a file moved off SQL leaves it, and a file not on it
 * that writes SQL fails here.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { ROOT, sources, sqlIn } from '../helpers/sql-scan.ts';

/** Where tests may write SQL: the builders and readers, and the tests whose subject is the database itself. */
const SQL_HOME = /^test\/(helpers|integration\/db|integration\/store)\//;

/**
 * Files that still hold SQL, to move onto test/helpers/ (or the store's functions). Each group
 * says what its SQL does.
 */
const STILL_TO_MOVE = new Set([
  // Benchmarks. engine: the operations' run times, the database's clock, a pg_notify waking the
  // reconciler. fleet: the plan's read timed as a raw baseline, a fleet upgrade's state and its
  // steps' times. reconciler: databases of its own, a job table of the baseline run, counts of
  // Ready tenants. reporter: counts of stored objects and history entries, report latencies from
  // the stored rows. rest: PostgreSQL's statistics (pg_stat_database, pg_stat_user_tables), a
  // transaction held on root_clusters, a database of its own.
  'bench/engine.bench.ts',
  'bench/fleet.bench.ts',
  'bench/reconciler.bench.ts',
  'bench/reporter.bench.ts',
  'bench/rest.bench.ts',
]);

const FILES = [...sources('test'), ...sources('bench')];

/** The files outside SQL_HOME that hold SQL, each with where. */
function withSql(files: readonly string[], read: (path: string) => string): Map<string, string[]> {
  const out = new Map<string, string[]>();
  for (const p of files.filter((f) => !SQL_HOME.test(f))) {
    const found = sqlIn(p, read(p));
    if (found.length) out.set(p, found);
  }
  return out;
}

/** The files with SQL the list does not name, and the listed files that hold none (or are gone). */
function verdict(found: Map<string, string[]>, listed: ReadonlySet<string>): { unlisted: string[]; moved: string[] } {
  return {
    unlisted: [...found].filter(([p]) => !listed.has(p)).flatMap(([, where]) => where),
    moved: [...listed].filter((p) => !found.has(p)).sort(),
  };
}

const readRepo = (p: string): string => readFileSync(join(ROOT, p), 'utf8');

t.test("SQL in tests is written only in test/helpers/ and the database's own tests", async (t) => {
  t.ok(FILES.length > 300, `the test and benchmark files were found (${FILES.length}, more than 300)`);
  const { unlisted, moved } = verdict(withSql(FILES, readRepo), STILL_TO_MOVE);
  t.same(unlisted, [], 'no .query( call and no SQL statement in a test file outside test/helpers/ and the list');
  t.same(moved, [], 'every listed file still holds SQL (a moved file leaves STILL_TO_MOVE)');
  // The check sees SQL where it is: the builders are full of it.
  const inHelpers = FILES.filter((p) => p.startsWith('test/helpers/')).flatMap((p) => sqlIn(p, readRepo(p)));
  t.ok(inHelpers.length > 50, `the check finds the helpers' statements (${inHelpers.length} found, more than 50)`);
});

t.test('the check refuses SQL in a test file not on the list, and a listed file without SQL', async (t) => {
  const files: Record<string, string> = {
    'test/integration/api/made-up.test.ts': [
      "import { markReconciled } from '../../helpers/tenants.ts';",
      "t.test('NOTIFY wakes a reconciler', async () => {",
      "  await api.db.pool.query(`UPDATE tenants SET phase = 'Ready' WHERE id = $1`, [id]);",
      '  await markReconciled(api.db.pool, id);',
      '});',
    ].join('\n'),
    'test/integration/api/moved.test.ts': "await markReconciled(api.db.pool, id, { phase: 'Ready' });",
    'test/helpers/made-up.ts': "await db.query('UPDATE tenants SET phase = $2 WHERE id = $1', [id, phase]);",
    'test/integration/db/made-up.test.ts': "await pool.query('SELECT version FROM schema_migrations');",
  };
  const { unlisted, moved } = verdict(
    withSql(Object.keys(files), (p) => files[p]!),
    new Set(['test/integration/api/moved.test.ts']),
  );
  t.same(
    unlisted.map((f) => f.split(': ')[0]),
    ['test/integration/api/made-up.test.ts:3', 'test/integration/api/made-up.test.ts:3'],
    "the made-up test's call and its UPDATE on line 3 (not the test's name, not the builder's call; not the helper or the database test)",
  );
  t.same(moved, ['test/integration/api/moved.test.ts'], 'the listed file that holds no SQL is named');
});
