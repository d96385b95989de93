/**
 * How TenantReader forms batches, with a database double whose statements the test answers by
 * hand (test/integration/api/tenant-reads.test.ts runs the reader on real Postgres).
 */
import t from 'tap';
import { TenantReader } from '../../provisioner/store/tenant-reader.ts';
import type { TenantRow } from '../../provisioner/store/tenants.ts';
import type { Queryable } from '../../provisioner/db/tx.ts';

const ID = (n: number) => `00000000-0000-4000-8000-${String(n).padStart(12, '0')}`;

/** Database double: records each statement's ids and lets the test answer or fail it. */
class HeldStatements {
  readonly sent: { ids: string[]; answer: (known?: string[]) => void; fail: (err: Error) => void }[] = [];
  readonly db = {
    query: (q: { values: [string[]] }) => new Promise((resolve, reject) => {
      const ids = q.values[0];
      this.sent.push({
        ids,
        // Rows for the known ids (all of them unless told otherwise).
        answer: (known = ids) => resolve({ rows: known.map((id) => ({ id, organization: `org-${id.slice(-2)}` })) }),
        fail: reject,
      });
    }),
  } as unknown as Queryable;

  /** Waits until `n` statements have been sent. */
  async until(n: number): Promise<void> {
    for (let i = 0; i < 100 && this.sent.length < n; i++) await new Promise((r) => setImmediate(r));
    if (this.sent.length < n) throw new Error(`expected ${n} statements, ${this.sent.length} were sent`);
  }
}

const settle = () => new Promise((r) => setTimeout(r, 20));

t.test('reads made together go in one statement, each id once; every read gets its own row or undefined', async (t) => {
  const db = new HeldStatements();
  const reader = new TenantReader(db.db);
  const reads = [reader.get(ID(1)), reader.get(ID(2)), reader.get(ID(1)), reader.get(ID(3).toUpperCase())];
  await db.until(1);
  t.same(db.sent[0]!.ids, [ID(1), ID(2), ID(3)], 'one statement, duplicates once, ids lower-cased');
  db.sent[0]!.answer([ID(1), ID(3)]);
  const rows = await Promise.all(reads);
  t.same(rows.map((r?: Partial<TenantRow>) => r?.id), [ID(1), undefined, ID(1), ID(3)]);
  t.same(reader.stats(), { batches: 1, reads: 4 });
});

t.test('a read made while a statement is at the database is not added to it: it goes in the next one, after it', async (t) => {
  const db = new HeldStatements();
  const reader = new TenantReader(db.db);
  const first = reader.get(ID(1));
  await db.until(1);
  const later = [reader.get(ID(1)), reader.get(ID(2))];
  await settle();
  t.equal(db.sent.length, 1, 'nothing more is sent while the first statement runs (concurrency 1)');
  t.same(db.sent[0]!.ids, [ID(1)], 'the statement already sent did not grow');
  db.sent[0]!.answer();
  t.equal((await first)?.id, ID(1));
  await db.until(2);
  t.same(db.sent[1]!.ids, [ID(1), ID(2)], 'the reads that waited go together');
  db.sent[1]!.answer();
  t.same((await Promise.all(later)).map((r) => r?.id), [ID(1), ID(2)]);
});

t.test('with concurrency 2 a second statement goes while the first runs, a third waits for one of them', async (t) => {
  const db = new HeldStatements();
  const reader = new TenantReader(db.db, { concurrency: 2 });
  const a = reader.get(ID(1));
  await db.until(1);
  const b = reader.get(ID(2));
  await db.until(2);
  const c = reader.get(ID(3));
  await settle();
  t.equal(db.sent.length, 2);
  db.sent[1]!.answer();
  await db.until(3);
  t.same(db.sent[2]!.ids, [ID(3)]);
  db.sent[0]!.answer();
  db.sent[2]!.answer();
  t.same((await Promise.all([a, b, c])).map((r) => r?.id), [ID(1), ID(2), ID(3)]);
});

t.test('a failed statement fails its own reads only; the reader goes on', async (t) => {
  const db = new HeldStatements();
  const reader = new TenantReader(db.db);
  const failing = reader.get(ID(1));
  await db.until(1);
  const next = reader.get(ID(2));
  db.sent[0]!.fail(new Error('connection terminated'));
  await t.rejects(failing, /connection terminated/);
  await db.until(2);
  db.sent[1]!.answer();
  t.equal((await next)?.id, ID(2));
});

t.test('a malformed id is not found without a statement; batches are capped at maxBatchSize', async (t) => {
  const db = new HeldStatements();
  const reader = new TenantReader(db.db, { maxBatchSize: 2 });
  t.equal(await reader.get('not-a-uuid'), undefined);
  t.equal(await reader.get(`${ID(1)}' OR true --`), undefined);
  t.equal(db.sent.length, 0);
  const reads = [1, 2, 3].map((n) => reader.get(ID(n)));
  await db.until(1);
  t.same(db.sent[0]!.ids, [ID(1), ID(2)]);
  db.sent[0]!.answer();
  await db.until(2);
  t.same(db.sent[1]!.ids, [ID(3)]);
  db.sent[1]!.answer();
  t.equal((await Promise.all(reads)).length, 3);
});

t.test('concurrency must be a positive integer', async (t) => {
  const db = new HeldStatements();
  for (const concurrency of [0, -1, 1.5, Number.NaN]) {
    t.throws(() => new TenantReader(db.db, { concurrency }), /tenant read concurrency must be a positive integer/);
  }
});
