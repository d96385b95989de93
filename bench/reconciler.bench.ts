/**
 * Reconciler benchmark (`bash scripts/run-node.sh node bench/reconciler.bench.ts`, `--json` for
 * machine-readable output). One embedded PostgreSQL (or DATABASE_URL / TEST_PG_URL), 10,000
 * tenants, an engine test double that returns at once. Measures, in one run:
 *  - baseline: a bare SKIP LOCKED queue (claim + complete one row per statement) at the same
 *    concurrency: the ceiling any Postgres-backed loop on this machine can reach;
 *  - throughput: 10,000 creates (placement, operation rows, runtime keys, logs, status) → Ready;
 *  - latency: spec change committed → engine start, one change at a time, with the default 2
 *    workers and a 2 s poll (so NOTIFY does the work), p50/p99 over 200 changes;
 *  - lease takeover: a child process holding 20 leases is SIGKILLed; time until a surviving
 *    reconciler has restarted all 20, relative to the lease TTL;
 *  - RSS of the benchmark process (reconciler + driver) during the throughput phase.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { cpus, loadavg } from 'node:os';
import { createInterface } from 'node:readline';
import { SecretBox } from '../provisioner/crypto.ts';
import { createPool } from '../provisioner/db/database.ts';
import { migrate } from '../provisioner/db/migrate.ts';
import { Notifications } from '../provisioner/db/notifications.ts';
import { withTx } from '../provisioner/db/tx.ts';
import { ScriptedEngine } from '../test/helpers/scripted-engine.ts';
import { Reconciler } from '../provisioner/reconciler/reconciler.ts';
import { createWritePool } from '../provisioner/reconciler/write-pool.ts';
import { changeSpec, getTenantRow } from '../provisioner/store/tenants.ts';
import { insertRootClusterQuietly, insertTenantsBulk } from '../test/helpers/bulk.ts';
import { bareJobQueue, createTestDatabase, refreshStatistics } from '../test/helpers/postgres.ts';
import { countTenantRecords, randomTenantIds } from '../test/helpers/tenants.ts';

const TENANTS = Number(process.env.BENCH_TENANTS ?? 10_000);
const CLUSTERS = 10;
const WORKERS = Number(process.env.BENCH_WORKERS ?? 16);
const LATENCY_CHANGES = 200;
const TAKEOVER_TENANTS = 20;
const TTL_MS = Number(process.env.BENCH_TTL_MS ?? 2000);
/** BENCH_DURABLE=1: attempt bookkeeping on the durable pool too (synchronous_commit on). */
const durable = process.env.BENCH_DURABLE === '1';
const KUBECONFIG =
  'apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: "https://203.0.113.10:6443"}}]\nusers: [{name: u, user: {token: bench-token-0123456789}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n';

function pct(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

async function child(url: string, keyHex: string): Promise<void> {
  const pool = createPool(url, 10);
  const engine = new ScriptedEngine({
    script: () => ({ gate: new Promise<void>(() => {}) }), // never finishes: the process is killed
    onStart: (c) => process.stdout.write(`started ${c.tenantId}\n`),
  });
  const notifications = new Notifications({ pool });
  const r = new Reconciler({
    pool,
    notifications,
    engine,
    box: new SecretBox(Buffer.from(keyHex, 'hex')),
    owner: 'doomed',
    workers: TAKEOVER_TENANTS,
    clusterParallelism: 100,
    leaseTtlMs: TTL_MS,
    pollMs: 100,
  });
  await r.start();
  await notifications.start();
  process.stdout.write('ready\n');
}

async function main(): Promise<void> {
  const json = process.argv.includes('--json');
  const say = (s: string) => {
    if (!json) console.log(s);
  };
  // A database of its own on DATABASE_URL's or TEST_PG_URL's server, or on an embedded one.
  const db = await createTestDatabase({ migrate: false, poolSize: 40 });
  const { url, pool } = db;
  const closers: Array<() => Promise<void>> = [];
  const results: Record<string, unknown> = {
    date: new Date().toISOString(),
    cpus: cpus().length,
    tenants: TENANTS,
    workers: WORKERS,
  };
  try {
    await migrate(pool);
    const writePool = durable ? pool : createWritePool(url, WORKERS + 2);
    closers.push(async () => {
      if (writePool !== pool) await writePool.end();
    });
    const key = randomBytes(32);
    const box = new SecretBox(key);
    // This process's LISTEN connection, shared by the reconcilers below (one at a time), as in the provisioner.
    const notifications = new Notifications({ pool });
    await notifications.start();
    closers.push(() => notifications.stop());
    for (let i = 0; i < CLUSTERS; i++) {
      const n = `root-${i}`;
      await insertRootClusterQuietly(pool, {
        name: n,
        region: 'eu-1',
        capacity: Math.ceil((TENANTS * 1.2) / CLUSTERS) + TAKEOVER_TENANTS,
        kubeconfigEnc: box.encrypt(KUBECONFIG, `cluster/${n}`),
      });
    }

    // Baseline: a bare SKIP LOCKED queue at the same concurrency.
    const queue = await bareJobQueue(pool, TENANTS);
    let t0 = performance.now();
    await Promise.all(
      Array.from({ length: WORKERS }, async () => {
        while (await queue.claimOne());
      }),
    );
    const baselinePerSec = TENANTS / ((performance.now() - t0) / 1000);
    results.baselineJobsPerSec = Math.round(baselinePerSec);
    say(`baseline: bare SKIP LOCKED queue, ${WORKERS} loops: ${baselinePerSec.toFixed(0)} jobs/s`);

    // Throughput: 10,000 creates.
    await insertTenantsBulk(pool, TENANTS, {
      prefix: 'bench',
      email: 'bench@example.com',
      plan: 'free',
      runtimeVersion: '1.0.0',
      createOperations: true,
    });
    await refreshStatistics(pool);
    const engine = new ScriptedEngine();
    let rssPeak = process.memoryUsage().rss;
    const sampler = setInterval(() => {
      rssPeak = Math.max(rssPeak, process.memoryUsage().rss);
    }, 100);
    const fast = new Reconciler({
      pool,
      writePool,
      notifications,
      engine,
      box,
      owner: 'bench-throughput',
      workers: WORKERS,
      clusterParallelism: Math.ceil(WORKERS / 2),
      pollMs: 200,
      leaseTtlMs: 30_000,
    });
    t0 = performance.now();
    await fast.start();
    for (;;) {
      if ((await countTenantRecords(pool, { phase: 'Ready' })) >= TENANTS) break;
      await new Promise((r) => setTimeout(r, 250));
    }
    const seconds = (performance.now() - t0) / 1000;
    await fast.stop();
    clearInterval(sampler);
    const perSec = TENANTS / seconds;
    results.reconcilesPerSec = Math.round(perSec);
    results.ratioToBaseline = Number((perSec / baselinePerSec).toFixed(3));
    results.rssPeakMB = Math.round(rssPeak / 1024 / 1024);
    results.violations = engine.violations.length;
    results.writePool = durable ? 'durable' : 'synchronous_commit=off';
    say(
      `throughput: ${TENANTS} creates → Ready in ${seconds.toFixed(1)} s = ${perSec.toFixed(0)} reconciles/s (${WORKERS} workers, 1 process, bookkeeping ${results.writePool as string}); ratio to baseline ${(perSec / baselinePerSec).toFixed(2)}`,
    );
    results.avgBatch = Number((fast.stats.claimed / Math.max(1, fast.stats.claims)).toFixed(1));
    results.avgClaimMs = Number((fast.stats.claimMs / Math.max(1, fast.stats.claims)).toFixed(1));
    say(
      `claims: ${fast.stats.claims}, ${results.avgBatch as number} tenants per claim, ${results.avgClaimMs as number} ms per claim transaction`,
    );
    say(
      `RSS peak of the benchmark process: ${results.rssPeakMB as number} MB; overlapping engine calls: ${engine.violations.length}`,
    );

    // Latency: spec change → engine start, default workers (2), poll 2 s.
    const started = new Map<string, number>();
    const latEngine = new ScriptedEngine({
      onStart: (c) => {
        if (!started.has(c.tenantId)) started.set(c.tenantId, performance.now());
      },
    });
    const idle = new Reconciler({
      pool,
      writePool,
      notifications,
      engine: latEngine,
      box,
      owner: 'bench-latency',
      pollMs: 2000,
    });
    await idle.start();
    const some = await randomTenantIds(pool, LATENCY_CHANGES);
    const changedAt = new Map<string, number>();
    // One change at a time: the time from its commit to its engine start, on an idle reconciler.
    for (const id of some) {
      await withTx(pool, async (tx) =>
        changeSpec(tx, (await getTenantRow(tx, id, true))!, { runtimeVersion: '1.1.0' }, 'upgrade', 'bench'),
      );
      changedAt.set(id, performance.now());
      const deadline = Date.now() + 10_000;
      while (!started.has(id) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 1));
      await new Promise((r) => setTimeout(r, 5));
    }
    await idle.stop();
    const lat = some.map((id) => (started.get(id) ?? Infinity) - changedAt.get(id)!).sort((a, b) => a - b);
    results.latencyP50Ms = Number(pct(lat, 50).toFixed(1));
    results.latencyP99Ms = Number(pct(lat, 99).toFixed(1));
    say(
      `latency spec change → engine start (2 workers, poll 2 s, NOTIFY): p50 ${pct(lat, 50).toFixed(1)} ms, p99 ${pct(lat, 99).toFixed(1)} ms, max ${lat.at(-1)!.toFixed(1)} ms`,
    );

    // Lease takeover after kill -9.
    await insertTenantsBulk(pool, TAKEOVER_TENANTS, {
      prefix: 'takeover',
      email: 'bench@example.com',
      plan: 'free',
      runtimeVersion: '1.0.0',
      createOperations: true,
    });
    const proc = spawn(process.execPath, [process.argv[1]!, '--child', url, key.toString('hex')], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    const childStarted = new Set<string>();
    const lines = createInterface({ input: proc.stdout });
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('the child did not start all operations')), 30_000);
      lines.on('line', (l) => {
        if (l.startsWith('started ')) childStarted.add(l.slice(8));
        if (childStarted.size >= TAKEOVER_TENANTS) {
          clearTimeout(timer);
          resolve();
        }
      });
    });
    const takeover = new Map<string, number>();
    const survivorEngine = new ScriptedEngine({
      onStart: (c) => {
        if (c.kind === 'up' && !takeover.has(c.tenantId)) takeover.set(c.tenantId, performance.now());
      },
    });
    const survivor = new Reconciler({
      pool,
      writePool,
      notifications,
      engine: survivorEngine,
      box,
      owner: 'survivor',
      workers: TAKEOVER_TENANTS,
      clusterParallelism: 100,
      leaseTtlMs: TTL_MS,
      pollMs: 200,
    });
    await survivor.start();
    const killedAt = performance.now();
    proc.kill('SIGKILL');
    const until = Date.now() + TTL_MS * 5 + 10_000;
    while (takeover.size < TAKEOVER_TENANTS && Date.now() < until) await new Promise((r) => setTimeout(r, 20));
    await survivor.stop();
    const times = [...childStarted].map((id) => (takeover.get(id) ?? Infinity) - killedAt).sort((a, b) => a - b);
    results.ttlMs = TTL_MS;
    results.takeoverMaxMs = Math.round(times.at(-1)!);
    results.takeoverOverTtlMs = Math.round(times.at(-1)! - TTL_MS);
    say(
      `lease takeover after SIGKILL (TTL ${TTL_MS} ms, ${TAKEOVER_TENANTS} tenants): first ${times[0]!.toFixed(0)} ms, last ${times.at(-1)!.toFixed(0)} ms = TTL + ${(times.at(-1)! - TTL_MS).toFixed(0)} ms (recovery ran: ${survivorEngine.calls.filter((c) => c.kind === 'cancel').length} stale-lock clears)`,
    );
    results.loadavg = loadavg().map((x) => Number(x.toFixed(1)));
    say(`load average at the end: ${(results.loadavg as number[]).join(' ')}`);
    if (json) console.log(JSON.stringify(results));
  } finally {
    for (const c of closers) await c();
    await db.drop();
  }
}

if (process.argv[2] === '--child') await child(process.argv[3]!, process.argv[4]!);
else await main();
