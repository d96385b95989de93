/**
 * Cost at rest: 10,000 tenants that need nothing (all Ready; all waiting for capacity; all
 * waiting for the engine) and what Postgres and the provisioner spend on them over a window:
 * CPU (fraction of one core, from /proc: the provisioner process, and Postgres' postmaster with
 * its backends) and commits per second (pg_stat_database.xact_commit of the provisioner's
 * database). Target (issue 24): both together under 2 % of one core and under 5 commits/s.
 *
 *   npm run bench -- rest     (BENCH_TENANTS=10000, BENCH_WINDOW_SECONDS=60, BENCH_SETTLE_SECONDS=20,
 *                              BENCH_FLOOR_SECONDS=30,
 *                              BENCH_SCENARIOS=ready-resync,ready-unreachable,ready,no-capacity,engine)
 *
 * Baseline in the same run, per scenario: the floor, i.e. the same database with the same data
 * and no provisioner (Postgres' own background work: checkpointer, autovacuum launcher, stats).
 *
 * The provisioner runs in a child process as `provisioner serve` builds it (bench/provisioner-child.ts:
 * services, API, the reconciler with the default settings; a /metrics scrape every 15 s as
 * Prometheus would), except for the engine: the ScriptedEngine TEST DOUBLE, which returns at
 * once, so what is measured is the control plane's own work. The embedded Postgres runs in this
 * process's tree of processes, its data under a temporary directory.
 *
 * Steady state is seeded, not waited for: the Ready tenants' last resync is spread over the
 * last resync interval (so resyncs come due evenly, as in a fleet that has run for a while);
 * waiting tenants have waited longer than the wait cap and retry at random times within it.
 * Every wait is bounded (BENCH_TIMEOUT_SECONDS, default 600).
 */
import { randomBytes } from 'node:crypto';
import { createServer, type Server } from 'node:https';
import type { AddressInfo } from 'node:net';
import { chmod, mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { SecretBox } from '../provisioner/crypto.ts';
import { createPool } from '../provisioner/db/database.ts';
import { startEmbeddedPostgres } from '../provisioner/db/embedded.ts';
import { migrate } from '../provisioner/db/migrate.ts';
import { DEFAULT_RECONCILER_SETTINGS } from '../provisioner/reconciler/settings.ts';
import {
  countClusterLoad,
  RESYNC_JITTER,
  selectResyncDue,
  selectRetryDue,
  selectSpecChanged,
} from '../provisioner/store/leases.ts';
import { listClusters } from '../provisioner/store/clusters.ts';
import {
  ADMIN_TOKEN,
  addClusters,
  KUBECONFIG,
  childStats,
  seedTenants,
  sleep,
  startProvisioner,
  stopProvisioner,
} from './fleet.ts';
import type { ChildStats } from './provisioner-child.ts';
import { createCa, createServingCert } from '../sandbox/pki.ts';
import { replaceClusterKubeconfig } from '../test/helpers/clusters.ts';
import { releaseLease } from '../test/helpers/tenants.ts';
import { markAllWaitingLong, scatterLastReconciledJittered } from '../test/helpers/bulk.ts';
import {
  checkpoint,
  createDatabase,
  databaseTransactions,
  explainedPlans,
  refreshStatistics,
  tableScans,
} from '../test/helpers/postgres.ts';

const TENANTS = Number(process.env.BENCH_TENANTS ?? 10_000);
const WINDOW_S = Number(process.env.BENCH_WINDOW_SECONDS ?? 60);
const SETTLE_S = Number(process.env.BENCH_SETTLE_SECONDS ?? 20);
const FLOOR_S = Number(process.env.BENCH_FLOOR_SECONDS ?? 30);
const TIMEOUT_MS = Number(process.env.BENCH_TIMEOUT_SECONDS ?? 600) * 1000;
const SCENARIOS = (process.env.BENCH_SCENARIOS ?? 'ready-resync,ready-unreachable,ready,no-capacity,engine').split(',');
const CLUSTERS = 10;
const SCRAPE_MS = 15_000;
const CLK_TCK = 100; // USER_HZ on Linux

/** CPU ticks so far of the embedded Postgres (postmaster, its children, reaped children) and of one process. */
async function cpuTicks(pgDir: string, pid: number | undefined): Promise<{ postgres: number; provisioner: number }> {
  const stats: { pid: string; ppid: string; own: number; children: number; postmaster: boolean }[] = [];
  for (const p of await readdir('/proc').catch(() => [] as string[])) {
    if (!/^\d+$/.test(p)) continue;
    try {
      const cmdline = await readFile(`/proc/${p}/cmdline`, 'utf8');
      const f = (await readFile(`/proc/${p}/stat`, 'utf8')).split(') ')[1]!.split(' ');
      stats.push({
        pid: p,
        ppid: f[1]!,
        own: Number(f[11]) + Number(f[12]),
        children: Number(f[13]) + Number(f[14]),
        postmaster: cmdline.includes(pgDir),
      });
    } catch {
      // the process ended meanwhile
    }
  }
  let postgres = 0;
  for (const pm of stats.filter((s) => s.postmaster)) {
    postgres += pm.own + pm.children;
    for (const s of stats) if (s.ppid === pm.pid) postgres += s.own;
  }
  const prov = pid === undefined ? undefined : stats.find((s) => s.pid === String(pid));
  return { postgres, provisioner: prov ? prov.own : 0 };
}

interface DbCounters {
  commits: number;
  rollbacks: number;
  seqScans: number;
  seqTupRead: number;
  idxScans: number;
}

async function counters(admin: pg.Client, db: string): Promise<DbCounters> {
  // The statistics are read from `postgres`, so reading them commits nothing in `db`.
  const { commits, rollbacks } = await databaseTransactions(admin, db);
  return { commits, rollbacks, seqScans: 0, seqTupRead: 0, idxScans: 0 };
}

/** Sequential and index scans of `tenants` so far (read in the database itself). */
async function tenantScans(pool: pg.Pool): Promise<Pick<DbCounters, 'seqScans' | 'seqTupRead' | 'idxScans'>> {
  return tableScans(pool, 'tenants');
}

interface Measure {
  seconds: number;
  postgresCore: number;
  provisionerCore: number;
  commitsPerSec: number;
  tenantSeqScans: number;
  tenantSeqTupRead: number;
}

async function measure(
  admin: pg.Client,
  pool: pg.Pool,
  db: string,
  pgDir: string,
  seconds: number,
  child?: { pid: number; url: string },
): Promise<Measure> {
  await sleep(1100); // let the backends flush their statistics (at most once a second)
  const c0 = await counters(admin, db);
  const s0 = await tenantScans(pool);
  const t0 = await cpuTicks(pgDir, child?.pid);
  const began = performance.now();
  let nextScrape = child ? 0 : Infinity;
  while (performance.now() - began < seconds * 1000) {
    if (child && performance.now() - began >= nextScrape) {
      const res = await fetch(`${child.url}/metrics`, {
        headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
      });
      await res.arrayBuffer();
      if (res.status !== 200) throw new Error(`GET /metrics answered ${res.status}`);
      nextScrape += SCRAPE_MS;
    }
    await sleep(Math.min(1000, seconds * 1000 - (performance.now() - began)));
  }
  const wall = (performance.now() - began) / 1000;
  const t1 = await cpuTicks(pgDir, child?.pid);
  await sleep(1100);
  const c1 = await counters(admin, db);
  const s1 = await tenantScans(pool);
  // The first tenantScans() read is this benchmark's own commit in `db` within the window: not counted.
  return {
    seconds: wall,
    postgresCore: (t1.postgres - t0.postgres) / CLK_TCK / wall,
    provisionerCore: (t1.provisioner - t0.provisioner) / CLK_TCK / wall,
    commitsPerSec: (c1.commits - c0.commits - 1) / wall,
    tenantSeqScans: s1.seqScans - s0.seqScans,
    tenantSeqTupRead: s1.seqTupRead - s0.seqTupRead,
  };
}

/**
 * Plans of the claim's statements and of the per-cluster counts, as lease.ts sends them (its own
 * functions, with EXPLAIN put in front of each statement): any sequential scan of `tenants`?
 */
async function explainClaims(pool: pg.Pool): Promise<string[]> {
  return explainedPlans(pool, async (explaining, label, read) => {
    const ids = (await listClusters(read)).map((c) => c.id);
    label('spec changed');
    await selectSpecChanged(explaining, 6);
    label('retry due');
    await selectRetryDue(explaining, 6);
    label('resync due');
    await selectResyncDue(explaining, 6, DEFAULT_RECONCILER_SETTINGS.resyncMs);
    label('cluster leases, cluster tenants');
    await countClusterLoad(explaining, ids);
  });
}

interface Scenario {
  name: string;
  title: string;
  seed: 'ready' | 'waiting';
  env: Record<string, string>;
  /** Prepares the seeded database for this scenario (conditions, clusters). */
  prepare?: (pool: pg.Pool) => Promise<void>;
  /** Where the registered root clusters' API servers are: the loopback stand-in (default) or unreachable. */
  clusters?: 'stand-in' | 'unreachable';
}

/**
 * A STAND-IN for the root clusters' API servers (not a Kubernetes API server): it answers every
 * list with no items and holds every watch open as kube-apiserver does (a bookmark a minute, closed
 * after the watch's timeoutSeconds), so the provisioner's root-cluster watches sit idle on open
 * connections, as against healthy clusters. Its own CPU is not counted (it is the clusters' cost).
 */
async function standInApiServer(
  dir: string,
): Promise<{ server: Server; url: string; caPem: string; requests: () => number }> {
  const ca = await createCa(join(dir, 'pki'), 'bench-clusters');
  const cert = await createServingCert(ca, 'stand-in');
  let requests = 0;
  const tls = { cert: await readFile(cert.certFile), key: await readFile(cert.keyFile) };
  const server = createServer(tls, (req, res) => {
    requests += 1;
    const u = new URL(req.url ?? '/', 'http://stand-in');
    res.setHeader('content-type', 'application/json');
    if (u.searchParams.get('watch') !== 'true') {
      res.end(JSON.stringify({ kind: 'List', apiVersion: 'v1', metadata: { resourceVersion: '1' }, items: [] }));
      return;
    }
    res.writeHead(200);
    const bookmark = setInterval(
      () => res.write(JSON.stringify({ type: 'BOOKMARK', object: { metadata: { resourceVersion: '1' } } }) + '\n'),
      60_000,
    );
    const end = setTimeout(() => res.end(), Number(u.searchParams.get('timeoutSeconds') ?? 300) * 1000);
    res.on('close', () => {
      clearInterval(bookmark);
      clearTimeout(end);
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    server,
    url: `https://127.0.0.1:${(server.address() as AddressInfo).port}`,
    caPem: ca.certPem,
    requests: () => requests,
  };
}

/** Points every registered root cluster at `server` (a kubeconfig as an operator registers it). */
async function clustersAt(pool: pg.Pool, box: SecretBox, server: string, caPem?: string): Promise<void> {
  const kubeconfig = KUBECONFIG.replace(
    '{server: "https://203.0.113.10:6443"}',
    `{server: "${server}"${caPem ? `, certificate-authority-data: ${Buffer.from(caPem).toString('base64')}` : ''}}`,
  );
  for (const { name } of await listClusters(pool))
    await replaceClusterKubeconfig(pool, name, box.encrypt(kubeconfig, `cluster/${name}`));
}

async function main(): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), 'hrt-bench-rest-'));
  await chmod(dir, 0o755); // PostgreSQL may run as another user (when the benchmark runs as root)
  const pgDir = join(dir, 'pg');
  const server = await startEmbeddedPostgres(pgDir);
  const admin = new pg.Client({ connectionString: server.url });
  await admin.connect();
  const key = randomBytes(32);
  const box = new SecretBox(key);
  const rows: string[] = [];
  const seeded = new Map<string, string>();
  const apiServer = await standInApiServer(dir);
  const dbUrl = (name: string) => {
    const u = new URL(server.url);
    u.pathname = `/${name}`;
    return u.toString();
  };

  /** A database with TENANTS tenants reconciled by a fast reconciler: all Ready, or all waiting (no cluster). */
  async function seed(kind: 'ready' | 'waiting'): Promise<string> {
    const name = `bench_rest_${kind}`;
    const pool = createPool(await createDatabase(server.url, name), 20);
    try {
      await migrate(pool);
      if (kind === 'ready') await addClusters(pool, box, CLUSTERS, Math.ceil((TENANTS * 1.2) / CLUSTERS));
      const seconds = await seedTenants(pool, box, { tenants: TENANTS, until: kind, timeoutMs: TIMEOUT_MS });
      console.log(`seeded ${TENANTS} tenants ${kind} in ${seconds.toFixed(0)} s`);
    } finally {
      await pool.end();
    }
    return name;
  }

  const resyncMs = DEFAULT_RECONCILER_SETTINGS.resyncMs;
  const cap = DEFAULT_RECONCILER_SETTINGS.waitCapMs;
  const scenarios: Scenario[] = [
    {
      name: 'ready-resync',
      title: `all Ready, resync every ${resyncMs / 3_600_000} h (default)`,
      seed: 'ready',
      env: {},
      prepare: async (pool) => {
        // Steady state: each tenant resyncs when its last one is as old as its own (jittered)
        // period (lease.ts selectResyncDue), so its age is spread evenly below that period.
        await scatterLastReconciledJittered(pool, resyncMs, RESYNC_JITTER);
      },
    },
    {
      name: 'ready-unreachable',
      title: `all Ready, resync every ${resyncMs / 3_600_000} h, the 10 root clusters' API servers unreachable`,
      seed: 'ready',
      env: {},
      clusters: 'unreachable',
    },
    {
      name: 'ready',
      title: 'all Ready, resync off (PROVISIONER_RESYNC_SECONDS=0)',
      seed: 'ready',
      env: { BENCH_RESYNC_SECONDS: '0' },
    },
    {
      name: 'no-capacity',
      title: `all waiting: NoCapacity (no root cluster), waited beyond the ${cap / 3_600_000} h cap`,
      seed: 'waiting',
      env: {},
      prepare: async (pool) => {
        await waitedLong(pool, 'NoCapacity', cap);
      },
    },
    {
      name: 'engine',
      title: `all waiting: EngineUnavailable (10 clusters, no engine), waited beyond the ${cap / 3_600_000} h cap`,
      seed: 'waiting',
      env: { BENCH_ENGINE: 'unavailable' },
      prepare: async (pool) => {
        if ((await listClusters(pool)).length === 0)
          await addClusters(pool, box, CLUSTERS, Math.ceil((TENANTS * 1.2) / CLUSTERS));
        await waitedLong(pool, 'EngineUnavailable', cap);
      },
    },
  ];

  console.log(
    `cost at rest, ${TENANTS} tenants; window ${WINDOW_S} s after ${SETTLE_S} s of settling; floor ${FLOOR_S} s; ` +
      `${cpus().length} CPUs; load average ${loadavg()
        .map((l) => l.toFixed(1))
        .join(' ')}`,
  );
  try {
    for (const s of scenarios.filter((x) => SCENARIOS.includes(x.name))) {
      let name = seeded.get(s.seed);
      if (!name) {
        name = await seed(s.seed);
        seeded.set(s.seed, name);
      }
      // Preparation on connections of its own, closed before measuring: a backend reports its
      // statistics (VACUUM's many transactions) when it ends, not into the floor's window.
      const prep = createPool(dbUrl(name), 2);
      try {
        await s.prepare?.(prep);
        if (s.clusters === 'unreachable') await clustersAt(prep, box, 'https://203.0.113.10:6443');
        else await clustersAt(prep, box, apiServer.url, apiServer.caPem);
        await refreshStatistics(prep, { vacuum: true });
        await checkpoint(prep);
        if (s.name === 'ready-resync' || s.name === 'no-capacity')
          for (const line of await explainClaims(prep)) console.log(`  plan, ${line}`);
      } finally {
        await prep.end();
      }
      const pool = createPool(dbUrl(name), 1);
      try {
        const floor = await measure(admin, pool, name, pgDir, FLOOR_S);
        const { child, url } = await startProvisioner({
          BENCH_DATABASE_URL: dbUrl(name),
          BENCH_KEY: key.toString('hex'),
          BENCH_LOOPBACK_CLUSTERS: '1',
          ...s.env,
        });
        try {
          await sleep(SETTLE_S * 1000);
          const before = await childStats(child);
          const r0 = apiServer.requests();
          const m = await measure(admin, pool, name, pgDir, WINDOW_S, { pid: child.pid!, url });
          const after = await childStats(child);
          if (s.clusters !== 'unreachable')
            console.log(
              `  root clusters' API server stand-in: ${apiServer.requests() - r0} requests in the window, ` +
                `${apiServer.requests()} since it started (lists and watches held open)`,
            );
          const d = (k: keyof ChildStats) => (after[k] - before[k]) / m.seconds;
          const total = m.postgresCore + m.provisionerCore;
          const extra = total - floor.postgresCore;
          const line =
            `| ${s.title} | ${pct(floor.postgresCore)} | ${pct(m.postgresCore)} | ${pct(m.provisionerCore)} | ` +
            `**${pct(total)}** (${pct(extra)} above the floor) | ${floor.commitsPerSec.toFixed(2)} | **${m.commitsPerSec.toFixed(2)}** | ` +
            `${m.tenantSeqScans} (${m.tenantSeqTupRead} rows) | ${d('polls').toFixed(2)} / ${d('claims').toFixed(2)} / ${d('claimed').toFixed(2)} | ` +
            `${d('succeeded').toFixed(2)} / ${d('waiting').toFixed(2)} | ${(after.rss / 2 ** 20).toFixed(0)} MiB |`;
          console.log(line);
          rows.push(line);
        } finally {
          await stopProvisioner(child);
        }
        // A killed provisioner leaves leases behind: release them for the next scenario.
        await releaseLease(pool);
      } finally {
        await pool.end();
      }
    }
    console.log('');
    console.log(
      '| tenants at rest | Postgres, floor | Postgres | provisioner | together (of one core) | commits/s, floor | commits/s | seq scans of tenants in the window | polls / claims / claimed per s | succeeded / waiting per s | provisioner RSS |',
    );
    console.log('| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |');
    for (const r of rows) console.log(r);
    console.log(
      `load average at the end: ${loadavg()
        .map((l) => l.toFixed(1))
        .join(' ')}`,
    );
  } finally {
    await admin.end();
    apiServer.server.closeAllConnections();
    await new Promise((r) => apiServer.server.close(r));
    await server.stop();
    await rm(dir, { recursive: true, force: true });
  }
}

/** Waiting for `reason` since long before the cap: the next try at a random time within the cap. */
async function waitedLong(pool: pg.Pool, reason: 'NoCapacity' | 'EngineUnavailable', capMs: number): Promise<void> {
  await markAllWaitingLong(pool, reason, capMs);
}

function pct(core: number): string {
  return `${(core * 100).toFixed(2)} %`;
}

await main();
