import t from 'tap';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import pino from 'pino';
import { EVENTS_PATH, MAX_BATCH_ITEMS, type EventBatch } from '../../../runtime/protocol/events.ts';
import { retryAfterMs, Sender } from '../../../runtime/agents/event-reporter/delivery.ts';
import { createMetrics } from '../../../runtime/agents/event-reporter/metrics.ts';
import { ReportQueue, type QueueItem } from '../../../runtime/agents/event-reporter/queue.ts';
import { prepare } from '../../../runtime/agents/event-reporter/items.ts';
import { until } from '../../../sandbox/until.ts';

const TOKEN = 'rt_' + 'x'.repeat(40);
const item = (name: string, rv: number): QueueItem =>
  prepare({
    type: 'delete',
    kind: 'Application',
    namespace: 'ns',
    name,
    uid: `uid-${name}`,
    resourceVersion: String(rv),
    observedAt: new Date().toISOString(),
  });

/** A control plane on loopback answering each batch with `answer` (real HTTP). */
async function controlPlane(answer: (batch: EventBatch, n: number, res: ServerResponse) => void) {
  const batches: EventBatch[] = [];
  const auth: (string | undefined)[] = [];
  const server = createServer((req: IncomingMessage, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const batch = JSON.parse(Buffer.concat(chunks).toString()) as EventBatch;
      if (req.url !== EVENTS_PATH) return void res.writeHead(404).end();
      batches.push(batch);
      auth.push(req.headers.authorization);
      answer(batch, batches.length, res);
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as { port: number }).port;
  return { url: `http://127.0.0.1:${port}`, batches, auth, close: () => new Promise((r) => server.close(r)) };
}

function sender(
  url: string,
  queue: ReportQueue,
  o: { token?: () => string; log?: pino.Logger; tokenCheckMs?: number } = {},
) {
  const metrics = createMetrics({
    queueDepth: () => 0,
    oldestPendingSeconds: () => 0,
    ownedObjects: () => ({}),
    members: () => 1,
  });
  const s = new Sender({
    controlPlaneUrl: url,
    token: o.token ?? (() => TOKEN),
    replica: 'r-0',
    queue,
    log: o.log ?? pino({ level: 'silent' }),
    ...(o.tokenCheckMs === undefined ? {} : { tokenCheckMs: o.tokenCheckMs }),
    metrics,
    heartbeatIntervalMs: 60_000,
    retryMaxMs: 200,
    heartbeat: () => ({ replica: 'r-0', ownedObjects: queue.size, queueDepth: queue.size, oldestPendingSeconds: 0 }),
    digestsDue: () => false,
    digests: () => ({ digests: [], commit: () => undefined }),
  });
  return { s, metrics };
}
const ok = (_b: EventBatch, _n: number, res: ServerResponse) =>
  res.writeHead(200, { 'content-type': 'application/json' }).end('{"applied":0,"stale":0,"removedByDigest":0}');
const counter = async (m: ReturnType<typeof createMetrics>, name: string) =>
  (await m.registry.getSingleMetric(name)!.get()).values.reduce((a, v) => a + v.value, 0);

void t.test('the queue is delivered in batches of at most 500 items with the token and a heartbeat', async (t) => {
  const cp = await controlPlane(ok);
  t.teardown(cp.close);
  const queue = new ReportQueue(2000);
  for (let i = 0; i < 1200; i++) queue.put(`k${i}`, item(`n${i}`, i + 1), 200);
  const { s, metrics } = sender(cp.url, queue);
  s.start();
  t.ok(await s.drain(10_000), 'the queue is empty within 10 s');
  t.ok(cp.batches.length >= 3, `${cp.batches.length} batches for 1200 items`);
  t.ok(
    cp.batches.every((b) => b.items.length <= MAX_BATCH_ITEMS),
    'no batch holds more than 500 items',
  );
  t.equal(
    cp.batches.reduce((a, b) => a + b.items.length, 0),
    1200,
    'every item was sent once',
  );
  t.ok(cp.batches[0]!.heartbeat, 'the first batch carries the heartbeat');
  t.ok(
    cp.auth.every((a) => a === `Bearer ${TOKEN}`),
    'every batch carries the runtime token',
  );
  t.equal(await counter(metrics, 'event_reporter_reports_sent_total'), 1200, 'reports sent counted');
});

void t.test('a 503 with Retry-After is retried after the delay, with the latest states', async (t) => {
  const cp = await controlPlane((b, n, res) => {
    if (n === 1) res.writeHead(503, { 'retry-after': '1' }).end('{"error":{"code":"DATABASE_UNAVAILABLE"}}');
    else ok(b, n, res);
  });
  t.teardown(cp.close);
  const queue = new ReportQueue(10);
  queue.put('a', item('a', 1), 100);
  const { s, metrics } = sender(cp.url, queue);
  s.start();
  // The refused batch is counted once the sender has read the 503 and waits out its Retry-After.
  await until(
    'the refused batch handled',
    10_000,
    async () => (await counter(metrics, 'event_reporter_batches_total')) >= 1,
  );
  queue.put('a', item('a', 2), 100);
  t.ok(await s.drain(10_000), 'delivered after the outage');
  t.equal(cp.batches.length, 2, 'one refused batch, one accepted');
  t.equal(cp.batches[1]!.items[0]!.resourceVersion, '2', 'the retry carried the newer state');
  t.equal(await counter(metrics, 'event_reporter_batches_total'), 2, 'both attempts counted');
});

void t.test('a 400 for one item: the batch is halved until that item is alone, then it alone is dropped', async (t) => {
  const cp = await controlPlane((b, n, res) => {
    if (b.items.some((i) => i.name === 'poison')) res.writeHead(400).end('{"error":{"code":"VALIDATION"}}');
    else ok(b, n, res);
  });
  t.teardown(cp.close);
  const queue = new ReportQueue(100);
  for (let i = 0; i < 40; i++) queue.put(`k${i}`, item(i === 17 ? 'poison' : `n${i}`, i + 1), 100);
  const { s, metrics } = sender(cp.url, queue);
  s.start();
  t.ok(await s.drain(10_000), 'the queue empties');
  const accepted = new Set(
    cp.batches.filter((b) => !b.items.some((i) => i.name === 'poison')).flatMap((b) => b.items.map((i) => i.name)),
  );
  t.equal(accepted.size, 39, 'the 39 good items were delivered');
  t.ok(
    cp.batches.some((b) => b.items.length === 1 && b.items[0]!.name === 'poison'),
    'the refused item was finally sent alone',
  );
  t.equal(await counter(metrics, 'event_reporter_reports_failed_total'), 1, 'one report counted as failed (dropped)');
});

void t.test(
  'a refused token: the batch is sent again as soon as the token file holds another one (a key exchanged at a warm pool claim)',
  async (t) => {
    const NEW = 'rt_' + 'n'.repeat(40);
    const cp = await controlPlane((b, n, res) => {
      // The old token is revoked: only the new one is accepted.
      if (cp.auth.at(-1) !== `Bearer ${NEW}`) res.writeHead(401).end('{"error":{"code":"UNAUTHENTICATED"}}');
      else ok(b, n, res);
    });
    t.teardown(cp.close);
    let current = TOKEN;
    const lines: string[] = [];
    const log = pino(
      { level: 'info' },
      {
        write: (line: string) => {
          lines.push((JSON.parse(line) as { msg: string }).msg);
        },
      },
    );
    const queue = new ReportQueue(10);
    queue.put('a', item('a', 1), 100);
    const { s } = sender(cp.url, queue, { token: () => current, log, tokenCheckMs: 20 });
    s.start();
    await until('the old token refused', 10_000, async () => cp.batches.length >= 1);
    // What the kubelet does to the mounted Secret's file once the new key was written into the Secret.
    current = NEW;
    t.ok(await s.drain(10_000), 'delivered with the new token');
    t.same(
      cp.auth,
      [`Bearer ${TOKEN}`, `Bearer ${NEW}`],
      'one refused try with the old token, then the new one (no slow retries in between)',
    );
    t.ok(
      lines.includes('the runtime token changed: sending again with the new one'),
      'sent again because the token changed, not after the slow retry delay',
    );
  },
);

void t.test('Retry-After in seconds or as a date', async (t) => {
  t.equal(retryAfterMs('3'), 3000, 'seconds');
  t.equal(retryAfterMs(new Date(10_000).toUTCString(), 4_000), 6000, 'an HTTP date, from now');
  t.equal(retryAfterMs(null), undefined, 'absent: the backoff decides');
  t.equal(retryAfterMs('soon'), undefined, 'unreadable: the backoff decides');
});
