/**
 * Fairness benchmark: what one runtime's worst batches cost the other tenants. The control plane
 * (HTTP on loopback, real Postgres) serves tenant B's reads (`GET /v1/tenants/B/applications`) and
 * B's runtime tunnel, whose heartbeat (a WebSocket ping, answered by the control plane's event
 * loop) is timed; first alone (the baseline), then while tenant A's runtime, holding the default
 * object budget (20,000 Applications), sends the worst batches the limits let it (a digest with
 * MAX_DIGEST_MEMBERS members listing none of its objects, and MAX_BATCH_ITEMS updates of about
 * 1.7 KB each), two at a time, as fast as it is allowed (refusals with 429 included). Reported: p50
 * and p99 of B's reads and heartbeats in both phases and the ratios, the worst second of the
 * control plane's event loop, and A's batches stored and refused.
 *
 *   npm run bench -- fairness     (BENCH_SECONDS=20 per phase, BENCH_OBJECTS=20000)
 *
 * B's measurer and A's runtime run in child processes (their own event loops and CPU); A's bodies
 * are built before B's second phase starts.
 */
import { fork, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir, loadavg, cpus } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import WebSocket from 'ws';
import { loadConfig } from '../provisioner/config.ts';
import { buildApp } from '../provisioner/http/app.ts';
import { buildServices } from '../provisioner/services.ts';
import { createKey } from '../provisioner/store/keys.ts';
import { insertTenant } from '../provisioner/store/tenants.ts';
import { catalog } from '../runtime/catalog.ts';
import { encodeFrame, SUBPROTOCOL } from '../runtime/protocol/frames.ts';
import { EVENTS_PATH, MAX_BATCH_ITEMS, MAX_DIGEST_MEMBERS, type EventBatch } from '../runtime/protocol/events.ts';
import { createPool } from '../provisioner/db/database.ts';
import { startEmbeddedPostgres } from '../provisioner/db/embedded.ts';
import { migrate } from '../provisioner/db/migrate.ts';
import { application } from '../test/helpers/events.ts';
import { insertApplicationsBulk } from '../test/helpers/bulk.ts';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 20);
const OBJECTS = Number(process.env.BENCH_OBJECTS ?? 20_000);
const TIMEOUT_MS = Number(process.env.BENCH_TIMEOUT_SECONDS ?? 300) * 1000;

type Role = 'measure' | 'attack';
type ToChild = { url: string; tenantId: string; apiKey: string; runtimeKey: string; seconds: number };
type Measured = { reads: number[]; pings: number[] };
type Attacked = { stored: number; refused: number; bodies: number };

const q = (xs: number[], p: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(p * s.length))] ?? NaN;
};

/** B: its reads and its tunnel's heartbeats, one after the other, for `seconds`. */
async function measure(m: ToChild): Promise<Measured> {
  const ws = new WebSocket(m.url.replace('http', 'ws') + '/v1/tunnel', SUBPROTOCOL, {
    headers: { authorization: `Bearer ${m.runtimeKey}` },
    perMessageDeflate: false,
  });
  await once(ws, 'open');
  ws.send(
    encodeFrame({
      type: 'hello',
      streamId: 0,
      hello: { version: 1, window: 1024 * 1024, maxMessageBytes: 1024 * 1024, maxStreams: 16 },
    }),
  );
  ws.on('message', () => {});
  const out: Measured = { reads: [], pings: [] };
  const end = performance.now() + m.seconds * 1000;
  while (performance.now() < end) {
    let t0 = performance.now();
    const res = await fetch(`${m.url}/v1/tenants/${m.tenantId}/applications`, {
      headers: { authorization: `Bearer ${m.apiKey}` },
    });
    await res.arrayBuffer();
    if (res.status !== 200) throw new Error(`B's read answered ${res.status}`);
    out.reads.push(performance.now() - t0);
    t0 = performance.now();
    const pong = once(ws, 'pong');
    ws.ping();
    await pong;
    out.pings.push(performance.now() - t0);
  }
  ws.close();
  return out;
}

/** A: its worst batches, two at a time, for `seconds`. */
async function attack(m: ToChild): Promise<Attacked> {
  const members = ['reporter-0', ...Array.from({ length: MAX_DIGEST_MEMBERS - 1 }, (_, i) => `member-${i}`)];
  const bodies: string[] = [];
  let rv = 10_000_000;
  for (let n = 0; n < 100; n++) {
    rv += MAX_BATCH_ITEMS + 1;
    const batch: EventBatch = {
      replica: 'reporter-0',
      items: Array.from({ length: MAX_BATCH_ITEMS }, (_, i) =>
        application(`app-${(rv + i) % OBJECTS}`, rv + i, {
          namespace: `team-${((rv + i) % OBJECTS) % 20}`,
          padBytes: 1200,
        }),
      ),
      digests: [{ replica: 'reporter-0', members, kind: 'Application', listResourceVersion: String(rv), objects: [] }],
    };
    bodies.push(JSON.stringify(batch));
  }
  const out: Attacked = { stored: 0, refused: 0, bodies: 0 };
  process.send!('ready');
  const end = performance.now() + m.seconds * 1000;
  await Promise.all(
    [0, 1].map(async () => {
      while (performance.now() < end && bodies.length > 0) {
        const res = await fetch(m.url + EVENTS_PATH, {
          method: 'POST',
          headers: { authorization: `Bearer ${m.runtimeKey}`, 'content-type': 'application/json' },
          body: bodies.shift()!,
        });
        const text = await res.text();
        out.bodies++;
        if (res.status === 200) out.stored++;
        else if (res.status === 429) out.refused++;
        else throw new Error(`A's batch answered ${res.status} ${text.slice(0, 300)}`);
      }
    }),
  );
  return out;
}

if (process.argv[2] === 'measure' || process.argv[2] === 'attack') {
  const role: Role = process.argv[2];
  process.once('message', (m: ToChild) => {
    void (role === 'measure' ? measure(m) : attack(m))
      .then((r) => process.send!(r))
      .catch((err: unknown) => {
        console.error(err);
        process.exit(1);
      });
  });
} else {
  await main();
}

function child<T>(role: Role, message: ToChild): { child: ChildProcess; result: Promise<T>; ready: Promise<void> } {
  const c = fork(fileURLToPath(import.meta.url), [role], { stdio: 'inherit' });
  let ready: () => void = () => {};
  const isReady = new Promise<void>((resolve) => (ready = resolve));
  const result = new Promise<T>((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`${role} did not finish within BENCH_TIMEOUT_SECONDS`)),
      TIMEOUT_MS,
    );
    c.on('message', (r) => {
      if (r === 'ready') return ready();
      clearTimeout(timer);
      resolve(r as T);
    });
    c.once('exit', (code) => {
      clearTimeout(timer);
      if (code !== 0) reject(new Error(`${role} exited with ${code}`));
    });
  });
  c.send(message);
  return { child: c, result, ready: isReady };
}

/** The worst second of the event loop in the control plane, from its histogram: the smallest bucket holding all. */
async function worstSecond(url: string, since: { count: number; buckets: Map<string, number> }) {
  const now = await loopHistogram(url);
  const seconds = now.count - since.count;
  for (const [le, n] of now.buckets) if (n - (since.buckets.get(le) ?? 0) === seconds) return { seconds, le };
  return { seconds, le: '+Inf' };
}

async function loopHistogram(url: string): Promise<{ count: number; buckets: Map<string, number> }> {
  const text = await (await fetch(`${url}/metrics`)).text();
  const buckets = new Map<string, number>();
  let count = 0;
  for (const line of text.split('\n')) {
    const b = /^provisioner_event_loop_delay_seconds_bucket\{le="([^"]+)"\} (\d+)/.exec(line);
    if (b) buckets.set(b[1]!, Number(b[2]));
    const c = /^provisioner_event_loop_delay_seconds_count (\d+)/.exec(line);
    if (c) count = Number(c[1]);
  }
  return { count, buckets };
}

async function main(): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), 'hrt-bench-fairness-'));
  const server = await startEmbeddedPostgres(dir);
  const pool = createPool(server.url, 20);
  await migrate(pool);
  const db = { pool, url: server.url };
  const config = loadConfig({
    DATABASE_URL: db.url,
    PROVISIONER_ENGINE: 'none',
    LOG_LEVEL: 'warn',
    PROVISIONER_ENCRYPTION_KEY: randomBytes(32).toString('hex'),
    PROVISIONER_RUNTIME_OBJECTS_PER_TENANT: String(Math.max(OBJECTS, 20_000)),
  });
  const services = await buildServices(config, db);
  const app = await buildApp(services);
  await services.start();
  const url = await app.listen({ port: 0, host: '127.0.0.1' });
  try {
    const tenant = async (org: string) => {
      const tenantId = await insertTenant(pool, {
        organization: `${org}-${randomBytes(3).toString('hex')}`,
        email: 'owner@example.com',
        plan: 'starter',
        runtimeVersion: catalog.defaultVersion('stable'),
      });
      const apiKey = (await createKey(pool, { role: 'tenant', tenantId, name: 'bench', createdBy: 'bench' })).key;
      const runtimeKey = (await createKey(pool, { role: 'runtime', tenantId, name: 'bench', createdBy: 'bench' })).key;
      return { tenantId, apiKey, runtimeKey };
    };
    const a = await tenant('a');
    const b = await tenant('b');
    await insertApplicationsBulk(pool, a.tenantId, OBJECTS);
    const seedB = await fetch(url + EVENTS_PATH, {
      method: 'POST',
      headers: { authorization: `Bearer ${b.runtimeKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({
        replica: 'r',
        items: Array.from({ length: 100 }, (_, i) => application(`b-app-${i}`, 10 + i)),
      } satisfies EventBatch),
    });
    if (seedB.status !== 200) throw new Error(`B's seed batch answered ${seedB.status}`);

    const forB = { url, ...b, seconds: SECONDS };
    const baseline = await child<Measured>('measure', forB).result;
    const since = await loopHistogram(url);
    const attacker = child<Attacked>('attack', { url, ...a, seconds: SECONDS });
    // A's bodies are built before it starts sending: B measures from then on.
    await Promise.race([attacker.ready, attacker.result]);
    const loaded = await child<Measured>('measure', forB).result;
    const attacked = await attacker.result;
    const worst = await worstSecond(url, since);

    const row = (name: string, base: number[], load: number[]) => {
      const [b50, b99, l50, l99] = [q(base, 0.5), q(base, 0.99), q(load, 0.5), q(load, 0.99)];
      console.log(
        `${name.padEnd(22)} baseline p50 ${b50.toFixed(1)} ms p99 ${b99.toFixed(1)} ms (${base.length}) | ` +
          `under A's worst batches p50 ${l50.toFixed(1)} ms p99 ${l99.toFixed(1)} ms (${load.length}) | ` +
          `ratio p50 ${(l50 / b50).toFixed(2)} p99 ${(l99 / b99).toFixed(2)}`,
      );
    };
    console.log(
      `machine: ${cpus().length} CPUs, load average ${loadavg()
        .map((l) => l.toFixed(1))
        .join(' ')}; ${SECONDS} s per phase, A holds ${OBJECTS} objects, ${MAX_DIGEST_MEMBERS} digest members`,
    );
    row("B's reads", baseline.reads, loaded.reads);
    row("B's tunnel heartbeats", baseline.pings, loaded.pings);
    console.log(
      `A's worst batches: ${attacked.stored} stored, ${attacked.refused} refused with 429 (of ${attacked.bodies}); ` +
        `control plane's worst second of the run: event loop held <= ${worst.le} s (${worst.seconds} seconds observed)`,
    );
    if (attacked.stored === 0) throw new Error("none of A's batches was stored: not a result");
  } finally {
    await app.close();
    await services.stop();
    await pool.end();
    await server.stop();
    await rm(dir, { recursive: true, force: true });
  }
}
