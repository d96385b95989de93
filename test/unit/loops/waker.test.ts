import t from 'tap';
import { Waker } from '../../../runtime/loops/waker.ts';

/** Whether `p` settles within `ms` (a sleep of a minute must not). */
async function settlesWithin(p: Promise<void>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<false>((resolve) => {
    timer = setTimeout(() => resolve(false), ms);
  });
  const settled = await Promise.race([p.then(() => true as const), late]);
  clearTimeout(timer);
  return settled;
}

t.test('a sleep nobody kicks lasts its time', async (t) => {
  const w = new Waker();
  const began = performance.now();
  await w.sleep(30);
  const took = performance.now() - began;
  t.ok(took >= 25, `sleep(30) returned after ${took.toFixed(1)} ms, not before about 30 ms`);
});

t.test('a kick ends the sleep under way at once', async (t) => {
  const w = new Waker();
  const sleeping = w.sleep(60_000);
  t.notOk(await settlesWithin(sleeping, 20), 'sleep(60 s) is still sleeping before the kick');
  w.kick();
  t.ok(await settlesWithin(sleeping, 1000), 'the kick ended sleep(60 s) within a second');
  t.notOk(w.kicked, 'the sleep took the kick');
  t.notOk(await settlesWithin(w.sleep(60_000), 50), 'the next sleep waits again: one kick wakes one sleep');
  w.kick();
});

t.test('a kick while busy is remembered: the next sleep returns at once, once', async (t) => {
  const w = new Waker();
  w.kick();
  w.kick();
  t.ok(w.kicked, 'kicked while nobody slept');
  t.ok(await settlesWithin(w.sleep(60_000), 1000), 'the next sleep(60 s) returned at once');
  t.notOk(w.kicked, 'the kick was taken');
  const after = w.sleep(60_000);
  t.notOk(await settlesWithin(after, 50), 'two kicks while busy wake one sleep, not two');
  w.kick();
  await after;
});

t.test('clear forgets a kick not taken yet', async (t) => {
  const w = new Waker();
  w.kick();
  w.clear();
  t.notOk(w.kicked, 'no kick pending after clear');
  const sleeping = w.sleep(60_000);
  t.notOk(await settlesWithin(sleeping, 50), 'the sleep after clear waits for its time or a new kick');
  w.kick();
  t.ok(await settlesWithin(sleeping, 1000), 'a new kick still wakes it');
});
