import t from 'tap';
import {
  defaultEngineMemoryMb,
  ENGINE_RUN_PEAK_MB,
  LARGEST_RUN_MB,
  MemoryBudget,
} from '../../../provisioner/reconciler/memory-budget.ts';

// A table of its own (every kind 300 MiB but these), so the arithmetic below does not follow the
// measured estimates.
const estimates = {
  ...(Object.fromEntries(Object.keys(ENGINE_RUN_PEAK_MB).map((k) => [k, 300])) as Record<
    keyof typeof ENGINE_RUN_PEAK_MB,
    number
  >),
  upgrade: 400,
  resync: 100,
  delete: 50,
};

t.test('free slots: the idle workers, as far as the budget holds the largest run', async (t) => {
  const b = new MemoryBudget(1000, estimates);
  t.equal(b.freeSlots(8), 2, 'nothing running: floor(1000 / 400) = 2 of 8 idle workers');
  b.reserve('a');
  t.equal(b.inUseMb, 400, 'a claimed run is reserved at the largest estimate until its kind is known');
  t.equal(b.freeSlots(7), 1, 'floor((1000 - 400) / 400) = 1');
  t.equal(b.settle('a', 'resync'), true, 'settling to a smaller kind frees memory');
  t.equal(b.inUseMb, 100);
  t.equal(b.freeSlots(7), 2, 'floor((1000 - 100) / 400) = 2');
  b.reserve('b');
  b.reserve('c');
  t.equal(b.freeSlots(5), 0, '900 MiB reserved: no room for another run of any kind');
  t.equal(b.freeSlots(0), 0, 'never more than the idle workers');
  b.release('b');
  b.release('c');
  t.equal(b.freeSlots(1), 1, 'never more than the idle workers either way');
  b.release('a');
  t.equal(b.inUseMb, 0);
});

t.test('a budget below the largest run admits one run when nothing runs, never a second', async (t) => {
  const b = new MemoryBudget(100, estimates);
  t.equal(b.freeSlots(4), 1, 'nothing running: one run, though it alone exceeds the budget');
  b.reserve('a');
  b.settle('a', 'delete');
  t.equal(b.freeSlots(3), 0, 'one run at a time');
});

t.test('budget 0: the workers alone', async (t) => {
  const b = new MemoryBudget(0, estimates);
  b.reserve('a');
  t.equal(b.freeSlots(3), 3);
  t.equal(b.inUseMb, 400, 'reservations still count (the in-use metric)');
});

t.test('the default budget holds the configured workers at the largest estimate', async (t) => {
  t.equal(defaultEngineMemoryMb(3), 3 * LARGEST_RUN_MB);
  t.equal(new MemoryBudget(defaultEngineMemoryMb(3)).freeSlots(3), 3);
  t.equal(LARGEST_RUN_MB, Math.max(...Object.values(ENGINE_RUN_PEAK_MB)));
});
