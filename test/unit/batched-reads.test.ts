/**
 * How BatchedReads forms batches, with a load function double whose batches the test answers by
 * hand (test/integration/api/hot-reads.test.ts runs the batched reads on real Postgres).
 */
import t from 'tap';
import { BatchedReads, hotReadsOn } from '../../provisioner/store/batched-reads.ts';
import type { Queryable } from '../../provisioner/db/tx.ts';

const ID = (n: number) => `00000000-0000-4000-8000-${String(n).padStart(12, '0')}`;

/** Load function double: records each batch's keys and lets the test answer or fail it. */
class HeldBatches {
  readonly sent: { keys: string[]; answer: (known?: string[]) => void; fail: (err: Error) => void }[] = [];
  readonly load = (keys: string[]) =>
    new Promise<Map<string, string>>((resolve, reject) => {
      this.sent.push({
        keys,
        // Values for the known keys (all of them unless told otherwise).
        answer: (known = keys) => resolve(new Map(known.map((k) => [k, `value of ${k}`]))),
        fail: reject,
      });
    });

  /** Waits until `n` batches have been sent. */
  async sentBatches(n: number): Promise<void> {
    for (let i = 0; i < 100 && this.sent.length < n; i++) await new Promise((r) => setImmediate(r));
    if (this.sent.length < n) throw new Error(`expected ${n} batches, ${this.sent.length} were sent`);
  }
}

/**
 * BatchedReads sends a batch from a setImmediate callback: after ten turns of the event loop, a
 * batch it would send now has been sent (the positive signal before asserting that none was).
 */
const settle = async () => {
  for (let i = 0; i < 10; i++) await new Promise((r) => setImmediate(r));
};

t.test('reads made together go in one batch, each key once; every read gets its own value or undefined', async (t) => {
  const db = new HeldBatches();
  const reads = new BatchedReads(db.load);
  const pending = [reads.get('a'), reads.get('b'), reads.get('a'), reads.get('c')];
  await db.sentBatches(1);
  t.same(db.sent[0]!.keys, ['a', 'b', 'c'], 'one batch, duplicates once');
  db.sent[0]!.answer(['a', 'c']);
  t.same(await Promise.all(pending), ['value of a', undefined, 'value of a', 'value of c']);
  t.same(reads.stats(), { batches: 1, reads: 4 });
});

t.test(
  'a read made while a batch is at the database is not added to it: it goes in the next one, after it',
  async (t) => {
    const db = new HeldBatches();
    const reads = new BatchedReads(db.load);
    const first = reads.get('a');
    await db.sentBatches(1);
    const later = [reads.get('a'), reads.get('b')];
    await settle();
    t.equal(db.sent.length, 1, 'nothing more is sent while the first batch runs (concurrency 1)');
    t.same(db.sent[0]!.keys, ['a'], 'the batch already sent did not grow');
    db.sent[0]!.answer();
    t.equal(await first, 'value of a');
    await db.sentBatches(2);
    t.same(db.sent[1]!.keys, ['a', 'b'], 'the reads that waited go together');
    db.sent[1]!.answer();
    t.same(await Promise.all(later), ['value of a', 'value of b']);
  },
);

t.test('with concurrency 2 a second batch goes while the first runs, a third waits for one of them', async (t) => {
  const db = new HeldBatches();
  const reads = new BatchedReads(db.load, { concurrency: 2 });
  const a = reads.get('a');
  await db.sentBatches(1);
  const b = reads.get('b');
  await db.sentBatches(2);
  const c = reads.get('c');
  await settle();
  t.equal(db.sent.length, 2);
  db.sent[1]!.answer();
  await db.sentBatches(3);
  t.same(db.sent[2]!.keys, ['c']);
  db.sent[0]!.answer();
  db.sent[2]!.answer();
  t.same(await Promise.all([a, b, c]), ['value of a', 'value of b', 'value of c']);
});

t.test('a failed batch fails its own reads only; the reads go on', async (t) => {
  const db = new HeldBatches();
  const reads = new BatchedReads(db.load);
  const failing = reads.get('a');
  await db.sentBatches(1);
  const next = reads.get('b');
  db.sent[0]!.fail(new Error('connection terminated'));
  await t.rejects(failing, /connection terminated/);
  await db.sentBatches(2);
  db.sent[1]!.answer();
  t.equal(await next, 'value of b');
});

t.test('batches are capped at maxBatchSize; concurrency must be a positive integer', async (t) => {
  const db = new HeldBatches();
  const reads = new BatchedReads(db.load, { maxBatchSize: 2 });
  const pending = ['a', 'b', 'c'].map((k) => reads.get(k));
  await db.sentBatches(1);
  t.same(db.sent[0]!.keys, ['a', 'b']);
  db.sent[0]!.answer();
  await db.sentBatches(2);
  t.same(db.sent[1]!.keys, ['c']);
  db.sent[1]!.answer();
  t.same(await Promise.all(pending), ['value of a', 'value of b', 'value of c']);
  for (const concurrency of [0, -1, 1.5, Number.NaN]) {
    t.throws(() => new BatchedReads(db.load, { concurrency }), /read concurrency must be a positive integer/);
  }
});

t.test('tenant reads: a malformed id is not found without a statement, ids are compared lower-case', async (t) => {
  const statements: unknown[][] = [];
  const db = {
    query: async (q: { values: unknown[] }) => (statements.push(q.values), { rows: [{ id: ID(1) }] }),
  } as unknown as Queryable;
  const hot = hotReadsOn(db);
  t.equal(await hot.tenant('not-a-uuid'), undefined);
  t.equal(await hot.tenant(`${ID(1)}' OR true --`), undefined);
  t.equal(statements.length, 0);
  t.match(await hot.tenant(ID(1).toUpperCase()), { id: ID(1) });
  t.same(statements, [[[ID(1)]]]);
});
