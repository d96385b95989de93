/**
 * Ingest benchmark: the control plane alone storing event reporter batches of 500 objects
 * (POST /v1/runtime/events over HTTP on loopback, real Postgres), against a baseline in the same
 * run: the same rows written by the same multi-row upsert statement through pg alone (no HTTP,
 * no JSON parsing, no validation, no transaction around it): the floor of what the database costs.
 * Target: >= 10,000 objects/s.
 *
 *   npm run bench -- ingest      (BENCH_OBJECTS=10000 distinct objects, BENCH_ROUNDS=5, BENCH_TENANTS=4)
 *
 * Each round reports every object once with a larger resourceVersion (the first round inserts, the
 * later ones update), as a runtime whose applications all change. Two measures:
 * - one runtime (one tenant, 2 concurrent requests: its batches serialize at the tenant's lock),
 * - BENCH_TENANTS runtimes at once (one request in flight each).
 * The load generator runs in a child process (its own event loop and CPU), bodies built before the
 * clock starts. Every loop is bounded by BENCH_TIMEOUT_SECONDS (300).
 */
import { fork } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { postgresCpuUs } from './proc-tree.ts';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadavg, cpus } from 'node:os';
import { fileURLToPath } from 'node:url';
import { loadConfig } from '../provisioner/config.ts';
import { buildApp } from '../provisioner/http/app.ts';
import { buildServices } from '../provisioner/services.ts';
import { createKey } from '../provisioner/store/keys.ts';
import { insertTenant } from '../provisioner/store/tenants.ts';
import { hostedRuntimeId, upsertObjects } from '../provisioner/store/runtime-objects.ts';
import { prepareBatch } from '../provisioner/runtime-objects/ingest.ts';
import { catalog } from '../runtime/catalog.ts';
import { EVENTS_PATH, MAX_BATCH_ITEMS, type EventBatch } from '../runtime/protocol/events.ts';
import { createPool } from '../provisioner/db/database.ts';
import { startEmbeddedPostgres } from '../provisioner/db/embedded.ts';
import { migrate } from '../provisioner/db/migrate.ts';
import { application } from '../test/helpers/events.ts';
import { storedObjectCount } from '../test/helpers/runtime-objects.ts';

const OBJECTS = Number(process.env.BENCH_OBJECTS ?? 10_000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5);
const TENANTS = Number(process.env.BENCH_TENANTS ?? 4);
const TIMEOUT_MS = Number(process.env.BENCH_TIMEOUT_SECONDS ?? 300) * 1000;
/** Bytes of padding per object: about 1.5 KB of JSON each, 750 KB per batch. */
const PAD = 900;

/** The batches of one runtime: every object once per round, each round with larger resourceVersions. */
function batches(rounds: number, rvBase: number): EventBatch[] {
  const out: EventBatch[] = [];
  for (let r = 0; r < rounds; r++)
    for (let start = 0; start < OBJECTS; start += MAX_BATCH_ITEMS) {
      const items = [];
      for (let i = start; i < Math.min(OBJECTS, start + MAX_BATCH_ITEMS); i++)
        items.push(
          application(`app-${i}`, rvBase + r * OBJECTS + i, {
            namespace: `team-${i % 20}`,
            health: i % 7 === 0 ? 'Degraded' : 'Healthy',
            padBytes: PAD,
          }),
        );
      out.push({ replica: 'reporter-0', items });
    }
  return out;
}

type ToChild = { url: string; runs: { key: string; rvBase: number }[]; concurrencyPerKey: number };
type FromChild = { objects: number; seconds: number; p50: number; p99: number; bytes: number };

if (process.argv[2] === 'load') {
  process.once('message', (m: ToChild) => {
    void (async () => {
      // Bodies first, the clock after.
      const work = m.runs.map((r) => batches(ROUNDS, r.rvBase).map((b) => JSON.stringify(b)));
      const bytes = work.flat().reduce((n, s) => n + s.length, 0);
      const latencies: number[] = [];
      const deadline = Date.now() + TIMEOUT_MS;
      const started = performance.now();
      let objects = 0;
      await Promise.all(
        m.runs.flatMap((r, i) =>
          Array.from({ length: m.concurrencyPerKey }, async () => {
            const queue = work[i]!;
            for (let body = queue.shift(); body !== undefined; body = queue.shift()) {
              if (Date.now() > deadline) throw new Error('load did not finish within BENCH_TIMEOUT_SECONDS');
              const t0 = performance.now();
              const res = await fetch(m.url + EVENTS_PATH, {
                method: 'POST',
                headers: { authorization: `Bearer ${r.key}`, 'content-type': 'application/json' },
                body,
              });
              const answer = (await res.json()) as { applied: number };
              if (res.status !== 200) throw new Error(`POST: ${res.status} ${JSON.stringify(answer)}`);
              latencies.push(performance.now() - t0);
              objects += answer.applied;
            }
          }),
        ),
      );
      const seconds = (performance.now() - started) / 1000;
      latencies.sort((a, b) => a - b);
      const q = (p: number) => latencies[Math.min(latencies.length - 1, Math.floor(p * latencies.length))]!;
      process.send!({ objects, seconds, p50: q(0.5), p99: q(0.99), bytes } satisfies FromChild);
    })().catch((err: unknown) => {
      console.error(err);
      process.exit(1);
    });
  });
} else {
  await main();
}

async function main(): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), 'hrt-bench-ingest-'));
  const server = await startEmbeddedPostgres(dir);
  const pool = createPool(server.url, 20);
  await migrate(pool);
  const db = { pool, url: server.url };
  const config = loadConfig({
    DATABASE_URL: db.url,
    PROVISIONER_ENGINE: 'none',
    LOG_LEVEL: 'info',
    PROVISIONER_ENCRYPTION_KEY: randomBytes(32).toString('hex'),
    // This measures how fast the control plane stores batches, not a runtime's budget: no rate
    // limit, and room for BENCH_OBJECTS objects (the fairness benchmark measures the budgets).
    PROVISIONER_RUNTIME_EVENT_BATCHES_PER_SECOND: '10000',
    PROVISIONER_RUNTIME_OBJECTS_PER_TENANT: String(Math.max(20_000, OBJECTS)),
    PROVISIONER_RUNTIME_OBJECT_BYTES_PER_TENANT: String(Math.max(64 * 1024 * 1024, OBJECTS * 4096)),
  });
  const services = await buildServices(config, db);
  const app = await buildApp(services);
  await services.start();
  const base = await app.listen({ port: 0, host: '127.0.0.1' });

  const runtime = async () => {
    const tenantId = await insertTenant(db.pool, {
      organization: `bench-${randomBytes(4).toString('hex')}`,
      email: 'b@bench.io',
      plan: 'free',
      runtimeVersion: catalog.defaultVersion('stable'),
    });
    const key = (await createKey(db.pool, { role: 'runtime', tenantId, name: 'bench', createdBy: 'bench' })).key;
    return { tenantId, key };
  };

  const load = (msg: ToChild): Promise<FromChild> =>
    new Promise((resolve, reject) => {
      const child = fork(fileURLToPath(import.meta.url), ['load'], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
      child.once('message', (m: FromChild) => {
        child.kill();
        resolve(m);
      });
      child.once('exit', (code) => code && reject(new Error(`load generator exited with ${code}`)));
      child.send(msg);
    });

  /** CPU time so far (µs) of this process (the control plane) and of Postgres. */
  const cpu = async () => {
    const u = process.cpuUsage();
    return { server: u.user + u.system, postgres: await postgresCpuUs(server.pid) };
  };
  const costs = (objects: number, a: { server: number; postgres: number }, b: { server: number; postgres: number }) =>
    `CPU per object: control plane ${((b.server - a.server) / objects).toFixed(0)} µs, Postgres ${((b.postgres - a.postgres) / objects).toFixed(0)} µs`;
  const report = (
    name: string,
    r: FromChild,
    a: { server: number; postgres: number },
    b: { server: number; postgres: number },
  ) =>
    console.log(
      `${name.padEnd(44)} ${Math.round(r.objects / r.seconds)
        .toString()
        .padStart(7)} objects/s  batch p50 ${r.p50.toFixed(0)} ms p99 ${r.p99.toFixed(0)} ms  ` +
        `${(r.bytes / r.seconds / 1e6).toFixed(1)} MB/s  ${costs(r.objects, a, b)}`,
    );

  console.log(
    `machine: ${cpus().length} × ${cpus()[0]?.model ?? '?'}, load average ${loadavg()
      .map((l) => l.toFixed(2))
      .join(' ')}`,
  );
  console.log(
    `${OBJECTS} objects per runtime, ${ROUNDS} rounds (1 insert + ${ROUNDS - 1} updates), batches of ${MAX_BATCH_ITEMS}, ~${PAD + 600} B per object`,
  );

  // Warm-up: connections, statement plans, JIT.
  const warm = await runtime();
  await load({ url: base, runs: [{ key: warm.key, rvBase: 1 }], concurrencyPerKey: 2 });

  // Baseline: the same statement through pg alone, one batch after the other.
  const baseTenant = await runtime();
  const prepared = batches(ROUNDS, 1).map((b) => prepareBatch(b, false).writes);
  let c0 = await cpu();
  let t0 = performance.now();
  let stored = 0;
  const baseRuntime = {
    tenantId: baseTenant.tenantId,
    runtimeId: (await hostedRuntimeId(db.pool, baseTenant.tenantId))!,
  };
  for (const writes of prepared) stored += await upsertObjects(db.pool, baseRuntime, 'reporter-0', writes);
  let seconds = (performance.now() - t0) / 1000;
  console.log(
    `${'baseline: the upsert through pg alone'.padEnd(44)} ${Math.round(stored / seconds)
      .toString()
      .padStart(7)} objects/s  ${costs(stored, c0, await cpu())}`,
  );
  const baseline = stored / seconds;

  const one = await runtime();
  c0 = await cpu();
  const single = await load({ url: base, runs: [{ key: one.key, rvBase: 1 }], concurrencyPerKey: 2 });
  report('HTTP, one runtime (2 requests in flight)', single, c0, await cpu());
  console.log(`  = ${((single.objects / single.seconds / baseline) * 100).toFixed(0)} % of the baseline`);

  const many = await Promise.all(Array.from({ length: TENANTS }, runtime));
  c0 = await cpu();
  const parallel = await load({ url: base, runs: many.map((r) => ({ key: r.key, rvBase: 1 })), concurrencyPerKey: 1 });
  report(`HTTP, ${TENANTS} runtimes at once (1 request each)`, parallel, c0, await cpu());
  console.log(`  = ${((parallel.objects / parallel.seconds / baseline) * 100).toFixed(0)} % of the baseline`);

  t0 = performance.now();
  const storedRows = await storedObjectCount(db.pool);
  seconds = (performance.now() - t0) / 1000;
  console.log(`rows stored: ${storedRows} (counted in ${(seconds * 1000).toFixed(0)} ms)`);
  console.log(
    `load average after: ${loadavg()
      .map((l) => l.toFixed(2))
      .join(' ')}`,
  );
  const target = Math.min(single.objects / single.seconds, parallel.objects / parallel.seconds);
  console.log(target >= 10_000 ? 'target met: >= 10,000 objects/s' : 'TARGET MISSED: < 10,000 objects/s');

  await app.close();
  await services.stop();
  await pool.end();
  await server.stop();
  await rm(dir, { recursive: true, force: true });
}
