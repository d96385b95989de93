/**
 * The loop shape of the control plane and the agents (runtime/loops/): kicks during a round never
 * start a second round beside it, a stop waits for the round in flight, runNow() waits for a round
 * that began after it was called (or runs one itself while the loop does not run), start() can wait
 * for the first round; and the one armed wait ends on wake, on abort, or after its time.
 */
import t from 'tap';
import { PeriodicLoop } from '../../../runtime/loops/periodic.ts';
import { armWait, wait } from '../../../runtime/loops/wait.ts';
import { until } from '../../../sandbox/until.ts';

/** A loop whose rounds each wait for `release()`, counting rounds in flight. */
function gatedLoop(o: { startAfterFirstRound?: boolean } = {}) {
  const seen = { inFlight: 0, most: 0, begun: 0, ended: 0 };
  let open: () => void = () => {};
  let gate = new Promise<void>((r) => (open = r));
  const loop = new PeriodicLoop({
    name: 'gated',
    round: async () => {
      seen.begun += 1;
      seen.inFlight += 1;
      seen.most = Math.max(seen.most, seen.inFlight);
      await gate;
      seen.inFlight -= 1;
      seen.ended += 1;
    },
    intervalMs: () => 60_000,
    ...o,
  });
  const release = () => {
    open();
    gate = new Promise<void>((r) => (open = r));
  };
  return { loop, seen, release };
}

t.test('kicks during a round make one more round after it, never a second one beside it', async (t) => {
  const { loop, seen, release } = gatedLoop();
  await loop.start();
  await until('the first round', 10_000, async () => seen.begun === 1);
  for (let i = 0; i < 5; i++) loop.kick();
  release();
  await until('the round the kicks asked for', 10_000, async () => seen.begun === 2);
  t.equal(seen.most, 1, 'one round at a time');
  release();
  await until('it ended', 10_000, async () => seen.ended === 2);
  await wait(50);
  t.equal(seen.begun, 2, 'five kicks during a round made one more round, not five');
  const stopped = loop.stop();
  await stopped;
  t.equal(loop.status().state, 'stopped');
});

t.test('a stop waits for the round in flight', async (t) => {
  const { loop, seen, release } = gatedLoop();
  await loop.start();
  await until('a round in flight', 10_000, async () => seen.inFlight === 1);
  let done = false;
  const stopped = loop.stop().then(() => (done = true));
  await wait(50);
  t.notOk(done, 'not stopped while the round runs');
  t.equal(loop.status().state, 'stopping');
  release();
  await stopped;
  t.equal(seen.inFlight, 0, 'stopped once the round ended');
  t.equal(seen.begun, 1, 'and no round after it');
});

t.test('runNow waits for a round that began after it was called', async (t) => {
  const { loop, seen, release } = gatedLoop();
  await loop.start();
  await until('the first round', 10_000, async () => seen.inFlight === 1);
  let done = false;
  const now = loop.runNow().then(() => (done = true));
  release();
  await until('the first round ended', 10_000, async () => seen.ended === 1);
  await wait(20);
  t.notOk(done, 'the round under way at the call does not count');
  await until('the next round', 10_000, async () => seen.begun === 2);
  release();
  await now;
  t.equal(seen.ended, 2, 'resolved once the round it asked for ended');
  const pending = loop.runNow();
  await until('a round for it', 10_000, async () => seen.inFlight === 1);
  const stopped = loop.stop();
  release();
  await pending;
  await stopped;
  t.equal(seen.ended, 3, 'a runNow pending at the stop resolves with its round ended');
});

t.test('while the loop does not run, runNow runs the round itself, one at a time', async (t) => {
  const { loop, seen, release } = gatedLoop();
  const a = loop.runNow();
  const b = loop.runNow();
  await until('a round', 10_000, async () => seen.inFlight === 1);
  release();
  await a;
  await until('the second', 10_000, async () => seen.begun === 2);
  t.equal(seen.most, 1, 'one at a time');
  release();
  await b;
  t.equal(loop.status().rounds, 2, 'both counted in its health');
});

t.test('startAfterFirstRound: start() resolves once the first round ended', async (t) => {
  const { loop, seen, release } = gatedLoop({ startAfterFirstRound: true });
  let started = false;
  const starting = loop.start().then(() => (started = true));
  await until('the first round', 10_000, async () => seen.inFlight === 1);
  await wait(20);
  t.notOk(started, 'not yet');
  release();
  await starting;
  t.equal(seen.ended, 1, 'started after the first round');
  await loop.stop();
});

t.test('an armed wait ends on wake, on abort, or after its time, whichever first', async (t) => {
  const began = Date.now();
  const woken = armWait(10_000);
  setTimeout(woken.wake, 20);
  await woken.done;
  t.ok(Date.now() - began < 5_000, 'woken');
  const controller = new AbortController();
  const aborted = armWait(10_000, controller.signal);
  controller.abort();
  await aborted.done;
  t.ok(Date.now() - began < 5_000, 'aborted');
  await armWait(10_000, controller.signal).done;
  t.ok(Date.now() - began < 5_000, 'a signal already aborted ends it at once');
  const timed = Date.now();
  await wait(30);
  t.ok(Date.now() - timed >= 25, 'after its time');
});
