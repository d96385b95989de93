import t from 'tap';
import { ReportQueue, type QueueItem } from '../../../runtime/agents/event-reporter/queue.ts';
import { prepare } from '../../../runtime/agents/event-reporter/items.ts';

const item = (name: string, rv: number): QueueItem =>
  prepare({
    type: 'delete',
    kind: 'Application',
    namespace: 'ns',
    name,
    uid: `uid-${name}`,
    resourceVersion: String(rv),
    observedAt: new Date(0).toISOString(),
  });

void t.test('latest state wins: a burst of updates to one object is one report', async (t) => {
  const q = new ReportQueue(10);
  for (let rv = 1; rv <= 1000; rv++) q.put('Application/ns/a', item('a', rv), 100);
  t.equal(q.size, 1, 'one queued entry for 1000 updates of one object');
  t.equal(q.coalesced, 999, '999 updates counted as coalesced');
  const batch = q.peek(500, 1 << 20);
  t.equal(batch.length, 1, 'one item to send');
  t.equal(batch[0]!.item.resourceVersion, '1000', 'and it is the last state');
});

void t.test('an entry replaced while its batch was in flight stays queued with the newer state', async (t) => {
  const q = new ReportQueue(10);
  q.put('k1', item('a', 1), 10);
  q.put('k2', item('b', 2), 10);
  const inFlight = q.peek(500, 1 << 20);
  q.put('k1', item('a', 3), 10);
  t.equal(q.ack(inFlight), 1, 'only the unchanged entry is acknowledged');
  t.equal(q.size, 1, 'the replaced one is still queued');
  t.equal(q.peek(500, 1 << 20)[0]!.item.resourceVersion, '3', 'with its newer state');
});

void t.test(
  'the bound counts distinct objects; a full queue refuses new objects, keeps coalescing, and wakes producers on room',
  async (t) => {
    const q = new ReportQueue(3);
    t.equal(q.put('a', item('a', 1), 10), 'queued');
    t.equal(q.put('b', item('b', 2), 10), 'queued');
    t.equal(q.put('c', item('c', 3), 10), 'queued');
    t.equal(q.put('d', item('d', 4), 10), 'full', 'a 4th object is refused when the limit is 3');
    t.equal(q.size, 3, 'nothing was dropped or added');
    t.equal(q.put('b', item('b', 5), 10), 'coalesced', 'an update of a queued object is still taken when full');
    let woke = false;
    const room = q.waitForRoom().then(() => {
      woke = true;
    });
    await new Promise((r) => setImmediate(r));
    t.notOk(woke, 'a producer waiting for room stays paused while the queue is full');
    q.ack(q.peek(1, 1 << 20));
    await room;
    t.ok(woke, 'it resumes once a delivery made room');
    t.equal(q.put('d', item('d', 4), 10), 'queued', 'and its object is queued then');
    t.same(
      q.peek(10, 1 << 20).map((e) => e.key),
      ['b', 'c', 'd'],
      'order of first arrival is kept: a replaced entry keeps its place',
    );
  },
);

void t.test('batches respect the item and byte limits; one oversized item still goes alone', async (t) => {
  const q = new ReportQueue(2000);
  for (let i = 0; i < 1200; i++) q.put(`k${i}`, item(`n${i}`, i + 1), 1000);
  t.equal(q.peek(500, 1 << 20).length, 500, 'at most 500 items');
  t.equal(q.peek(500, 100_000).length, 99, 'at most the byte budget (1001 bytes per item with its separator)');
  const big = new ReportQueue(5);
  big.put('x', item('x', 1), 5_000_000);
  t.equal(big.peek(500, 1 << 20).length, 1, 'an item larger than the budget is sent alone rather than never');
});

void t.test('dropping the objects this replica lost, and the oldest pending age', async (t) => {
  let now = 0;
  const q = new ReportQueue(10, () => now);
  q.put('Application/x/a', item('a', 1), 1);
  now = 5_000;
  q.put('Rollout/x/b', item('b', 2), 1);
  now = 8_000;
  t.equal(q.oldestPendingSeconds(), 8, 'the oldest entry waited 8 s');
  t.equal(
    q.drop((k) => k.startsWith('Application/')),
    1,
    'one lost object dropped',
  );
  t.equal(q.oldestPendingSeconds(), 3, 'the oldest remaining entry waited 3 s');
  t.throws(() => new ReportQueue(0), /positive integer/, 'a limit of 0 is refused');
});
