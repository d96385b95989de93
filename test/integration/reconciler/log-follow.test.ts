import t from 'tap';
import { Notifications } from '../../../provisioner/db/notifications.ts';
import {
  followOperationLog,
  OperationLogHub,
  OperationNotFoundError,
} from '../../../provisioner/reconciler/log-follow.ts';
import { createHarness, gate, scripted } from './harness.ts';
import { until } from '../../../sandbox/until.ts';
import { isOperationStateRead } from '../../helpers/operations.ts';

const h = await createHarness();
t.teardown(() => h.close());
await h.addCluster('root-a');

t.test('following a running operation streams lines as they are written and ends with the operation', async (t) => {
  const g = gate();
  const engine = scripted({ script: () => ({ lines: ['step one', 'step two'], gate: g.promise }) });
  const r = await h.reconciler(engine);
  const notifications = new Notifications({ pool: h.db.pool });
  await notifications.start();
  const hub = new OperationLogHub(h.db.pool, notifications);
  t.teardown(async () => {
    await hub.close();
    await notifications.stop();
  });
  const { id, operationId } = await h.createTenant();
  await until('running', 10_000, async () => engine.callsFor(id).length === 1);
  const got: Array<{ line: string; at: number }> = [];
  const following = (async () => {
    for await (const l of hub.follow(operationId, { pollMs: 60_000 })) got.push({ line: l.line, at: Date.now() });
  })();
  await until('first lines streamed', 5000, async () => got.some((l) => l.line === 'step two'), 5);
  t.ok(!got.some((l) => l.line.startsWith('operation succeeded')), 'the operation is still running');
  const opened = Date.now();
  g.open();
  await following;
  const last = got.at(-1)!;
  t.match(last.line, /^operation succeeded/);
  t.ok(
    last.at - opened < 2000,
    `streamed and ended ${last.at - opened} ms after the engine finished (poll interval 60 s: by NOTIFY)`,
  );
  const seqs: number[] = [];
  for await (const l of followOperationLog(h.db.pool, operationId, { afterSeq: 0 })) seqs.push(l.seq);
  t.equal(seqs.length, got.length, 'a finished operation reads the whole log and ends');
  t.same(
    [...seqs].sort((a, b) => a - b),
    seqs,
    'in order',
  );
  const tail: string[] = [];
  for await (const l of followOperationLog(h.db.pool, operationId, { afterSeq: seqs[1]! })) tail.push(l.line);
  t.equal(tail.length, seqs.length - 2, 'afterSeq resumes (SSE Last-Event-ID)');
  await r.stop();
});

t.test('an unknown operation is an error; an abort ends the follow', async (t) => {
  await t.rejects(async () => {
    for await (const _ of followOperationLog(h.db.pool, '00000000-0000-0000-0000-000000000000')) break;
  }, OperationNotFoundError);
  const { operationId } = await h.createTenant(); // queued, no reconciler: never finishes
  // The real pool, counting the follower's reads of the operation's state (one per poll).
  let stateReads = 0;
  const pool = new Proxy(h.db.pool, {
    get(target, prop) {
      const v = Reflect.get(target, prop, target) as unknown;
      if (prop !== 'query' || typeof v !== 'function') return typeof v === 'function' ? v.bind(target) : v;
      return (...args: unknown[]) => {
        if (isOperationStateRead(args[0])) stateReads += 1;
        return (v as (...a: unknown[]) => unknown).apply(target, args);
      };
    },
  });
  const ac = new AbortController();
  const lines: string[] = [];
  let ended = false;
  const following = (async () => {
    for await (const l of followOperationLog(pool, operationId, { signal: ac.signal, pollMs: 50 })) lines.push(l.line);
  })().finally(() => {
    ended = true;
  });
  // The existence check, then three polls of an operation that never finishes.
  await until('three polls of the unfinished operation', 10_000, async () => stateReads >= 4);
  t.equal(ended, false, 'the follow of an unfinished operation keeps waiting after three polls');
  ac.abort();
  await following; // the abort ends it (otherwise the test times out here)
  t.same(lines, [], 'an operation nobody ran has no log lines');
});
