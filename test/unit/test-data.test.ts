/**
 * Tests reach their starting state and read what they check through the API, the store's
 * functions and the test-data builders and readers of test/helpers/ (docs/testing.md "Test
 * data"), so that a schema change is made in the store and in one helper, not in every test. SQL
 * in a test file (a `.query(` call or a statement literal, found as test/unit/layers.test.ts
 * finds it in provisioner/) is left to test/helpers/ and the database's own tests
 * (test/integration/db/: migrations, notifications, outages; test/integration/store/, the
 * store's). No other file of test/ and bench/ holds SQL: one that writes it fails here (the
 * benchmarks' SQL, too, is in test/helpers/).
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { ROOT, sources, sqlIn } from '../helpers/sql-scan.ts';

/** Where tests may write SQL: the builders and readers, and the tests whose subject is the database itself. */
const SQL_HOME = /^test\/(helpers|integration\/db|integration\/store)\//;

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

/** Where the files hold SQL, each as `path:line: what`, in file order. */
function sqlFound(found: Map<string, string[]>): string[] {
  return [...found].flatMap(([, where]) => where);
}

const readRepo = (p: string): string => readFileSync(join(ROOT, p), 'utf8');

t.test("SQL in tests is written only in test/helpers/ and the database's own tests", async (t) => {
  t.ok(FILES.length > 300, `the test and benchmark files were found (${FILES.length}, more than 300)`);
  t.same(
    sqlFound(withSql(FILES, readRepo)),
    [],
    'no .query( call and no SQL statement in a test or benchmark file outside test/helpers/',
  );
  // The check sees SQL where it is: the builders are full of it.
  const inHelpers = FILES.filter((p) => p.startsWith('test/helpers/')).flatMap((p) => sqlIn(p, readRepo(p)));
  t.ok(inHelpers.length > 50, `the check finds the helpers' statements (${inHelpers.length} found, more than 50)`);
});

t.test('the check refuses SQL in a test file, not in a helper or a database test', async (t) => {
  const files: Record<string, string> = {
    'test/integration/api/made-up.test.ts': [
      "import { markReconciled } from '../../helpers/tenants.ts';",
      "t.test('NOTIFY wakes a reconciler', async () => {",
      "  await api.db.pool.query(`UPDATE tenants SET phase = 'Ready' WHERE id = $1`, [id]);",
      '  await markReconciled(api.db.pool, id);',
      '});',
    ].join('\n'),
    'bench/made-up.bench.ts': "const n = await countTenantRecords(pool, { phase: 'Ready' });",
    'test/helpers/made-up.ts': "await db.query('UPDATE tenants SET phase = $2 WHERE id = $1', [id, phase]);",
    'test/integration/db/made-up.test.ts': "await pool.query('SELECT version FROM schema_migrations');",
  };
  t.same(
    sqlFound(withSql(Object.keys(files), (p) => files[p]!)).map((f) => f.split(': ')[0]),
    ['test/integration/api/made-up.test.ts:3', 'test/integration/api/made-up.test.ts:3'],
    "the made-up test's call and its UPDATE on line 3 (not the test's name, not the builder's calls; not the helper or the database test)",
  );
});
