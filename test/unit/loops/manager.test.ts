/**
 * The loop manager and the one loop shape (provisioner/loops/): start order and its reverse at
 * stop, a stop bounded when a runnable hangs, and a periodic loop's rounds, backoff after
 * failures, kick and health, with the secrets of an error masked in its status.
 */
import t from 'tap';
import { EventEmitter, once } from 'node:events';
import { LoopManager, serviceRunnable } from '../../../provisioner/loops/manager.ts';
import { LoopHealth, type Runnable } from '../../../runtime/loops/health.ts';
import { PeriodicLoop } from '../../../runtime/loops/periodic.ts';
import { loopChecks } from '../../../provisioner/http/routes/doctor.ts';
import { until } from '../../../sandbox/until.ts';

function recorder(name: string, log: string[], o: { hang?: Promise<void> } = {}): Runnable {
  return serviceRunnable(name, {
    start: () => void log.push(`start ${name}`),
    stop: async () => {
      log.push(`stop ${name}`);
      await o.hang;
    },
  });
}

t.test('the list order is the start order, phase by phase, and its reverse the stop order', async (t) => {
  const log: string[] = [];
  const manager = new LoopManager([
    { phase: 'services', runnable: recorder('a', log) },
    undefined,
    { phase: 'services', runnable: recorder('b', log) },
    { phase: 'workers', runnable: recorder('c', log) },
  ]);
  t.same(manager.names, ['a', 'b', 'c'], 'absent entries are left out of the list');
  await manager.start('services');
  t.same(log, ['start a', 'start b'], 'start(services) starts only the services, in order');
  t.same(
    manager.status().map((s) => s.state),
    ['running', 'running', 'idle'],
    'the worker is idle until its phase starts',
  );
  await manager.start('workers');
  await manager.stop('workers');
  await manager.stop();
  t.same(
    log,
    ['start a', 'start b', 'start c', 'stop c', 'stop b', 'stop a'],
    'stopped in the reverse order, once each',
  );
});

t.test('a list with a service after a worker, or two runnables of one name, is refused', async (t) => {
  t.throws(
    () =>
      new LoopManager([
        { phase: 'workers', runnable: recorder('w', []) },
        { phase: 'services', runnable: recorder('s', []) },
      ]),
    /s \(services\) is listed after a worker/,
  );
  t.throws(
    () =>
      new LoopManager([
        { phase: 'services', runnable: recorder('x', []) },
        { phase: 'services', runnable: recorder('x', []) },
      ]),
    /two runnables are named x/,
  );
});

t.test('a runnable that does not stop within the bound is left behind: the next one still stops', async (t) => {
  const log: string[] = [];
  const never = new Promise<void>(() => {});
  const warnings: string[] = [];
  const logger = { warn: (_o: unknown, msg: string) => void warnings.push(msg) } as never;
  const manager = new LoopManager(
    [
      { phase: 'services', runnable: recorder('first', log) },
      { phase: 'services', runnable: recorder('stuck', log, { hang: never }) },
    ],
    { stopMs: 50, logger },
  );
  await manager.start('services');
  await manager.stop();
  t.same(log.slice(2), ['stop stuck', 'stop first'], 'the runnable after the stuck one was stopped');
  t.same(warnings, ['a loop did not stop in time; going on without it'], 'the stuck one is logged');
});

t.test('a periodic loop: rounds, a growing wait after failures, kick, health by name', async (t) => {
  const rounds = new EventEmitter();
  let n = 0;
  const waits: number[] = [];
  const loop = new PeriodicLoop({
    name: 'probe',
    round: async () => {
      n += 1;
      rounds.emit('round', n);
      if (n <= 3) throw new Error(`down with password s3cret (round ${n})`);
    },
    intervalMs: () => 60_000,
    retryMs: (failures) => {
      waits.push(failures);
      return 1;
    },
    onFailure: () => {},
    secrets: () => ['s3cret'],
  });
  t.equal(loop.status().state, 'idle', 'idle before start');
  await loop.start();
  await until('the fourth round recorded in the health', 10_000, () => loop.status().rounds >= 4);
  t.same(waits, [1, 2, 3], 'the retry wait is asked with the count of failures in a row');
  const s = loop.status();
  t.equal(s.state, 'running', 'running');
  t.equal(s.failures, 3, 'three failed rounds');
  t.equal(s.consecutiveFailures, 0, 'none in a row after the successful fourth round');
  t.ok(s.lastSuccessAt, 'the successful round is dated');
  t.equal(s.lastError, 'down with password *** (round 3)', 'the last error is kept with the secret masked');

  // The fourth round succeeded: the loop now waits 60 s unless kicked.
  const fifth = once(rounds, 'round');
  loop.kick();
  t.same(await fifth, [5], 'a kick runs the next round without waiting for the interval');
  await loop.stop();
  t.equal(loop.status().state, 'stopped', 'stopped');
  t.equal(loop.status().rounds, n, 'every round run is counted');
});

t.test('a periodic loop turned off by its configuration never runs a round', async (t) => {
  let ran = false;
  const loop = new PeriodicLoop({
    name: 'off',
    enabled: false,
    round: async () => {
      ran = true;
    },
    intervalMs: () => 1,
  });
  await loop.start();
  await loop.stop();
  t.equal(ran, false, 'no round ran');
  t.equal(loop.status().state, 'disabled', 'its status says disabled');
});

t.test('stop() waits for the round under way and aborts its signal', async (t) => {
  let release!: () => void;
  const held = new Promise<void>((r) => (release = r));
  const entered = new EventEmitter();
  let sawAbort = false;
  const order: string[] = [];
  const loop = new PeriodicLoop({
    name: 'held',
    round: async (signal) => {
      entered.emit('in');
      await held;
      sawAbort = signal.aborted;
      order.push('round ended');
    },
    intervalMs: () => 60_000,
  });
  const inRound = once(entered, 'in');
  await loop.start();
  await inRound;
  const stopping = loop.stop().then(() => void order.push('stop resolved'));
  t.equal(loop.status().state, 'stopping', 'stopping while the round runs');
  release();
  await stopping;
  t.same(order, ['round ended', 'stop resolved'], 'stop() resolved only after the round under way ended');
  t.equal(sawAbort, true, 'the round saw its signal aborted');
  t.equal(new LoopHealth('x').status().state, 'idle', 'a fresh health record is idle');
});

t.test(
  'GET /v1/doctor: a loop whose rounds fail is a warning naming its last error; a running one is ok',
  async (t) => {
    const failing = new LoopHealth('tombstone-purger', () => ['hunter2']);
    failing.state = 'running';
    failing.fail(new Error('connect ECONNREFUSED (password hunter2)'));
    const fine = new LoopHealth('reconciler');
    fine.state = 'running';
    fine.succeed(new Date('2026-11-26T10:00:00Z'));
    const off = new LoopHealth('managed-cluster-prober');
    off.state = 'disabled';
    const [bad, good, disabled] = loopChecks([failing.status(), fine.status(), off.status()]);
    t.equal(bad?.name, 'loop/tombstone-purger', 'named loop/<name>');
    t.equal(bad?.status, 'warning', 'a failing loop is a warning, not a problem');
    t.equal(
      bad?.message,
      'its last 1 round failed: connect ECONNREFUSED (password ***)',
      'the message has the last error with the secret masked',
    );
    t.same(
      [good?.status, good?.message],
      ['ok', 'running; last round 2026-11-26T10:00:00.000Z'],
      'a running loop is ok with its last round',
    );
    t.same([disabled?.status, disabled?.message], ['ok', 'turned off by the configuration'], 'a disabled one is ok');
  },
);
