/**
 * API benchmark: with 10,000 tenants in the database, a tenant reading itself with its own API key
 * (authorized GET /v1/tenants/:id) against a bare fastify route returning a constant JSON object
 * (the baseline, same process, same load generator, same settings), at 50 and at 10 connections,
 * and signups at 50 connections. Targets: GET >= 35% of the baseline's throughput with p99 < 25 ms;
 * signup >= 300/s.
 *
 * The load generator (autocannon) runs in a child process (bench/load.ts), so it does not share
 * the server's event loop. The API runs as `provisioner serve` builds it, with its logger at info
 * level writing to /dev/null. BENCH_SECONDS sets the length of each measure (10 s).
 *
 * A third GET measure spreads the reads over 1,000 tenants, each with its own key, taken in turn:
 * what many runtimes and CLIs polling their own tenants look like (key lookups every time a key's
 * cache entry expires, a different row per read).
 *
 * At 50 connections the latency is mostly queueing (Little's law: 50 in flight / throughput); the
 * 10-connection rows show the per-request cost with less of it.
 *
 * Besides throughput and latency it reports the CPU time per request of the server process and
 * of Postgres (from /proc; embedded Postgres only): a measure of per-request cost that depends
 * less on what else the machine runs. BENCH_POOL_SIZE sets the API's pool size (20, the default
 * of provisioner serve).
 *
 * BENCH_CPU_PROFILE=<file>: writes a V8 CPU profile of this process (the servers; not the load
 * generator) taken during the 50-connection GET measure, for Chrome DevTools or speedscope.
 */
import { fork } from 'node:child_process';
import { Session } from 'node:inspector/promises';
import { randomBytes } from 'node:crypto';
import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import Fastify from 'fastify';
import { loadConfig } from '../provisioner/config.ts';
import { createPool } from '../provisioner/db/database.ts';
import { startEmbeddedPostgres } from '../provisioner/db/embedded.ts';
import { migrate } from '../provisioner/db/migrate.ts';
import { buildApp } from '../provisioner/http/app.ts';
import { createLogger } from '../provisioner/logger.ts';
import { buildServices } from '../provisioner/services.ts';
import { createKey } from '../provisioner/store/keys.ts';
import { catalog } from '../runtime/catalog.ts';
import type { LoadRequest, LoadResult } from './load.ts';
import { insertTenantsBulk } from '../test/helpers/bulk.ts';
import { emptyPublicSchema, refreshStatistics } from '../test/helpers/postgres.ts';
import { randomTenantIds } from '../test/helpers/tenants.ts';

const TENANTS = 10_000;
const DURATION = Number(process.env.BENCH_SECONDS ?? 10);
const LOAD_SCRIPT = fileURLToPath(new URL('./load.ts', import.meta.url));

const dir = await mkdtemp(join(tmpdir(), 'hrt-bench-'));
const pg = process.env.DATABASE_URL ? undefined : await startEmbeddedPostgres(dir);
const url = process.env.DATABASE_URL ?? pg!.url;
const pool = createPool(url, Number(process.env.BENCH_POOL_SIZE ?? 20));
await emptyPublicSchema(pool);
await migrate(pool);
await insertTenantsBulk(pool, TENANTS, {
  prefix: 'bench',
  email: 'b@bench.io',
  plan: 'free',
  runtimeVersion: catalog.defaultVersion('stable'),
});
await refreshStatistics(pool);
const [tenantId] = (await randomTenantIds(pool, 1)) as [string];
const tenantKey = (await createKey(pool, { role: 'tenant', tenantId, name: 'bench', createdBy: 'bench' })).key;
const POLLERS = 1000;
const pollers: { path: string; authorization: string }[] = [];
for (const id of await randomTenantIds(pool, POLLERS)) {
  const key = (await createKey(pool, { role: 'tenant', tenantId: id, name: 'bench', createdBy: 'bench' })).key;
  pollers.push({ path: `/v1/tenants/${id}`, authorization: `Bearer ${key}` });
}

const config = loadConfig({
  DATABASE_URL: url,
  PROVISIONER_SIGNUP_RATE_LIMIT: '1000000000',
  LOG_LEVEL: 'info',
  PROVISIONER_ENGINE: 'none',
  PROVISIONER_ENCRYPTION_KEY: randomBytes(32).toString('hex'),
  ...(process.env.BENCH_KEY_CACHE_MS ? { PROVISIONER_KEY_CACHE_MS: process.env.BENCH_KEY_CACHE_MS } : {}),
});
const logger = createLogger(config.logLevel, '/dev/null');
const readConcurrency = process.env.BENCH_READ_CONCURRENCY ? Number(process.env.BENCH_READ_CONCURRENCY) : undefined;
// The services and the app as `provisioner serve` builds them (without a reconciler).
const services = await buildServices(
  config,
  { pool, url },
  { logger, ...(readConcurrency ? { hotReads: { concurrency: readConcurrency } } : {}) },
);
const app = await buildApp(services);
await services.start();
const apiUrl = await app.listen({ port: 0, host: '127.0.0.1' });

const bare = Fastify({ logger: false });
bare.get('/constant', async () => ({ id: tenantId, organization: 'bench', phase: 'Ready' }));
const bareUrl = await bare.listen({ port: 0, host: '127.0.0.1' });

/** CPU time (µs) of this process (the servers) and of the embedded Postgres (postmaster, backends, ended backends), so far. */
async function cpuNow(): Promise<{ server: number; serverSystem: number; postgres: number }> {
  const u = process.cpuUsage();
  let ticks = 0;
  if (pg) {
    const stats: { pid: string; ppid: string; own: number; children: number; postmaster: boolean }[] = [];
    for (const pid of await readdir('/proc').catch(() => [] as string[])) {
      if (!/^\d+$/.test(pid)) continue;
      try {
        const cmdline = await readFile(`/proc/${pid}/cmdline`, 'utf8');
        const f = (await readFile(`/proc/${pid}/stat`, 'utf8')).split(') ')[1]!.split(' ');
        // stat fields 4 (ppid), 14-17 (utime, stime, cutime, cstime), counted from `state`.
        stats.push({
          pid,
          ppid: f[1]!,
          own: Number(f[11]) + Number(f[12]),
          children: Number(f[13]) + Number(f[14]),
          postmaster: cmdline.includes(dir),
        });
      } catch {
        // the process ended meanwhile
      }
    }
    for (const pm of stats.filter((s) => s.postmaster)) {
      ticks += pm.own + pm.children;
      for (const s of stats) if (s.ppid === pm.pid) ticks += s.own;
    }
  }
  return { server: u.user + u.system, serverSystem: u.system, postgres: ticks * (1e6 / 100) }; // USER_HZ is 100 on Linux
}

/** Runs one measure in a fresh child process. */
function runLoad(req: LoadRequest): Promise<LoadResult> {
  return new Promise((resolve, reject) => {
    // No inherited execArgv: a --cpu-prof given to this process profiles the server only.
    const child = fork(LOAD_SCRIPT, [], { execArgv: [], stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    let result: LoadResult | undefined;
    child.once('message', (m: LoadResult) => (result = m));
    child.once('error', reject);
    child.once('exit', (code) => (result ? resolve(result) : reject(new Error(`load generator exited with ${code}`))));
    child.send(req);
  });
}

type Measured = LoadResult & { serverUs: number; serverSystemUs: number; postgresUs: number };

/** One measure; also the CPU time per request of the server process and of Postgres (µs). */
async function load(title: string, req: Omit<LoadRequest, 'duration'> & { duration?: number }): Promise<Measured> {
  const before = await cpuNow();
  const readsBefore = services.reads.stats();
  const r = await runLoad({ duration: DURATION, ...req });
  const after = await cpuNow();
  const reads = services.reads.stats();
  /** Reads per statement of one kind during this measure, when there were any. */
  const perStatement = (kind: 'tenants' | 'keys', what: string): string => {
    const batches = reads[kind].batches - readsBefore[kind].batches;
    return batches
      ? `, ${((reads[kind].reads - readsBefore[kind].reads) / batches).toFixed(1)} ${what} per statement (${batches} statements)`
      : '';
  };
  const m = {
    ...r,
    serverUs: (after.server - before.server) / r.total,
    serverSystemUs: (after.serverSystem - before.serverSystem) / r.total,
    postgresUs: (after.postgres - before.postgres) / r.total,
  };
  console.log(
    `${title}: ${Math.round(r.rps)} req/s, p50 ${r.p50} ms, p90 ${r.p90} ms, p99 ${r.p99} ms, max ${r.max} ms, ` +
      `CPU per request: server ${m.serverUs.toFixed(0)} µs (${m.serverSystemUs.toFixed(0)} in the kernel), Postgres ${m.postgresUs.toFixed(0)} µs` +
      perStatement('tenants', 'tenant reads') +
      perStatement('keys', 'key lookups') +
      (r.failed ? `, ${r.failed} failed` : ''),
  );
  return m;
}

const getReq = { url: `${apiUrl}/v1/tenants/${tenantId}`, headers: { authorization: `Bearer ${tenantKey}` } };
const baseReq = { url: `${bareUrl}/constant` };
console.log(
  `load average before: ${loadavg()
    .map((l) => l.toFixed(1))
    .join(' ')}`,
);
await load('warm-up (API)', { ...getReq, connections: 50, duration: 3 });
await load('warm-up (baseline)', { ...baseReq, connections: 50, duration: 2 });
const base50 = await load('baseline, 50 conn.', { ...baseReq, connections: 50 });
const profile = process.env.BENCH_CPU_PROFILE;
const inspector = profile ? new Session() : undefined;
if (inspector) {
  inspector.connect();
  await inspector.post('Profiler.enable');
  await inspector.post('Profiler.start');
}
const rows50 = { base: base50, get: await load('GET, 50 conn.', { ...getReq, connections: 50 }) };
if (inspector) {
  const { profile: p } = await inspector.post('Profiler.stop');
  await writeFile(profile!, JSON.stringify(p));
  inspector.disconnect();
}
const many = await load(`GET, 50 conn., ${POLLERS} tenants`, { ...getReq, connections: 50, rotate: pollers });
const rows10 = {
  base: await load('baseline, 10 conn.', { ...baseReq, connections: 10 }),
  get: await load('GET, 10 conn.', { ...getReq, connections: 10 }),
};
const signup = await load('POST /v1/signup, 50 conn.', {
  url: `${apiUrl}/v1/signup`,
  method: 'POST',
  headers: { 'content-type': 'application/json' },
  connections: 50,
  signupPrefix: `s-${process.pid}`,
});
const load1 = loadavg()[0]!.toFixed(1);

const pct = (r: { base: Measured; get: Measured }): string => `${((r.get.rps / r.base.rps) * 100).toFixed(0)}%`;
const lat = (r: LoadResult): string => `p50 ${r.p50} / p99 ${r.p99} ms`;
console.log('');
console.log(`load average (1 min) at the end: ${load1}`);
const cpu = (r: Measured): string => `${r.serverUs.toFixed(0)} + ${r.postgresUs.toFixed(0)} µs`;
console.log(
  '| connections | baseline | authorized GET | ratio | GET latency | CPU/request: server + Postgres (baseline; GET) | target |',
);
console.log('| --- | --- | --- | --- | --- | --- | --- |');
for (const [c, r] of [
  [50, rows50],
  [10, rows10],
] as const) {
  console.log(
    `| ${c} | ${Math.round(r.base.rps)} req/s, ${lat(r.base)} | ${Math.round(r.get.rps)} req/s | ${pct(r)} | ${lat(r.get)} | ` +
      `${r.base.serverUs.toFixed(0)} µs; ${cpu(r.get)} | ≥ 35%, p99 < 25 ms |`,
  );
}
console.log(
  `| 50, ${POLLERS} tenants, own keys | (50 row) | ${Math.round(many.rps)} req/s | ${pct({ base: base50, get: many })} | ${lat(many)} | ${cpu(many)} | — |`,
);
console.log(`| signup, 50 | — | ${Math.round(signup.rps)} /s | — | ${lat(signup)} | ${cpu(signup)} | ≥ 300/s |`);
const failed =
  rows50.get.failed + many.failed + rows10.get.failed + signup.failed + rows50.base.failed + rows10.base.failed;

await app.close();
await services.stop();
await bare.close();
await pool.end();
await pg?.stop();
await rm(dir, { recursive: true, force: true });
// A run in which requests failed measured something else than the product's answers: it is not a
// result, and the exit status says so.
if (failed > 0) {
  console.error(`FAILED: ${failed} requests failed (non-2xx, errors, timeouts); the figures above are not a result`);
  process.exitCode = 1;
}
