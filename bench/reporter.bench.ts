/**
 * Event reporter benchmark: one reporter process (runtime/agents/event-reporter) watching a real
 * kube-apiserver with the real Argo CRDs (test/e2e/harness/argo.ts, needs the e2e toolchain) and
 * reporting to the real control plane (a provisioner replica on loopback, Postgres).
 *
 *   npm run bench -- reporter     (BENCH_OBJECTS=10000 Applications, BENCH_ROUNDS=1 update rounds,
 *                                  BENCH_REPORTER_NODE_OPTIONS=--max-old-space-size=128 for the reporter)
 *
 * A writer creates BENCH_OBJECTS Applications (64 requests in flight, kept-alive connections),
 * then updates each BENCH_ROUNDS times. Baseline in the same run: the API server's own write rate
 * (what the reporter can be fed on this machine). Measured: objects stored per second while the
 * writes run and how long after the last write the last state is stored; watch-to-stored latency
 * per object (the row's updated_at minus the reporter's observedAt: both from this machine's
 * clock); the reporter's CPU per event (/proc, user + system) and so events per second per core;
 * its RSS with every object owned. Targets (issue 14): ≥ 2,000 updates/s per replica, p99
 * watch-to-stored < 1 s at 500/s, RSS < 150 MiB with 10,000 owned objects.
 */
import { readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { Agent, request as httpsRequest, type RequestOptions } from 'node:https';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { CoreV1Api } from '@kubernetes/client-node';
import { createKey } from '../provisioner/store/keys.ts';
import { createTestApi, startReplica } from '../test/helpers/api.ts';
import { applicationStatus, sampleApplication, startArgoApiServer } from '../test/e2e/harness/argo.ts';
import { freePort, startProcess, until } from '../test/e2e/harness/processes.ts';

const OBJECTS = Number(process.env.BENCH_OBJECTS ?? 10_000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 1);
const TIMEOUT_MS = Number(process.env.BENCH_TIMEOUT_SECONDS ?? 900) * 1000;
const ROOT = fileURLToPath(new URL('..', import.meta.url));
const NS = 'argocd';

const teardowns: (() => unknown)[] = [];
const t = { teardown: (fn: () => unknown) => void teardowns.push(fn) };
const load = () =>
  loadavg()
    .map((l) => l.toFixed(1))
    .join(' ');

/** The reporter's CPU seconds (user + system) and RSS in MiB, from /proc. */
function usage(pid: number): { cpu: number; rssMiB: number } {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const ticks = 100; // USER_HZ on Linux
  const cpu = (Number(f[11]) + Number(f[12])) / ticks;
  const rss = Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? 0) / 1024;
  return { cpu, rssMiB: rss };
}

try {
  const argo = await startArgoApiServer(t, { name: 'bench-reporter', crds: ['applications'] });
  const dir = await mkdtemp(join(tmpdir(), 'hrt-bench-reporter-'));
  teardowns.push(() => rm(dir, { recursive: true, force: true }));
  const api = await createTestApi();
  teardowns.push(() => api.close());
  const tenant = await api.signup();
  const token = (
    await createKey(api.db.pool, { role: 'runtime', tenantId: tenant.tenantId, name: 'bench', createdBy: 'bench' })
  ).key;
  const cpPort = await freePort();
  const cp = await startReplica(api.config, api.db);
  await cp.app.listen({ port: cpPort, host: '127.0.0.1' });
  teardowns.push(() => cp.close());
  const core = argo.kc.makeApiClient(CoreV1Api);
  for (const ns of ['hosted-runtime', NS]) await core.createNamespace({ body: { metadata: { name: ns } } });

  const port = await freePort();
  const reporter = startProcess(
    'event-reporter-bench',
    process.execPath,
    [join(ROOT, 'runtime/agents/event-reporter/main.ts')],
    join(dir, 'reporter.log'),
    {
      cwd: ROOT,
      env: {
        PATH: process.env.PATH,
        CONTROL_PLANE_URL: `http://127.0.0.1:${cpPort}`,
        RUNTIME_TOKEN: token,
        REPLICA_NAME: 'bench',
        LEASE_NAMESPACE: 'hosted-runtime',
        KUBECONFIG: argo.kubeconfigFile,
        PORT: String(port),
        HOST: '127.0.0.1',
        LOG_LEVEL: 'warn',
        // e.g. --max-old-space-size=128: a heap bounded as a container's memory limit bounds it.
        ...(process.env.BENCH_REPORTER_NODE_OPTIONS ? { NODE_OPTIONS: process.env.BENCH_REPORTER_NODE_OPTIONS } : {}),
      },
    },
  );
  teardowns.push(() => reporter.stop(5000));
  await until('the reporter to be ready', 60_000, async () => {
    if (!reporter.running()) throw new Error(await reporter.tail(20));
    return (await fetch(`http://127.0.0.1:${port}/readyz`)).status === 200;
  });

  const tls: RequestOptions = {};
  await argo.kc.applyToHTTPSOptions(tls);
  const agent = new Agent({ keepAlive: true, maxSockets: 64, ca: tls.ca, cert: tls.cert, key: tls.key });
  teardowns.push(() => agent.destroy());
  const write = (method: string, path: string, payload: unknown, contentType = 'application/json') =>
    new Promise<void>((resolve, reject) => {
      const data = JSON.stringify(payload);
      const req = httpsRequest(
        new URL(path, argo.server),
        { method, agent, headers: { 'content-type': contentType, 'content-length': Buffer.byteLength(data) } },
        (res) => {
          res.resume();
          res.on('end', () =>
            (res.statusCode ?? 0) < 300 ? resolve() : reject(new Error(`${method} ${path}: ${res.statusCode}`)),
          );
        },
      );
      req.once('error', reject);
      req.end(data);
    });
  const base = `/apis/argoproj.io/v1alpha1/namespaces/${NS}/applications`;
  const pool = async (tasks: (() => Promise<unknown>)[], n: number) => {
    let next = 0;
    await Promise.all(
      Array.from({ length: n }, async () => {
        while (next < tasks.length) await tasks[next++]!();
      }),
    );
  };
  const storedAt = async (round: number): Promise<number> => {
    const { rows } = await api.db.pool.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM runtime_objects
        WHERE tenant_id = $1 AND NOT deleted AND coalesce(object->'metadata'->'annotations'->>'bench/round', '0') = $2`,
      [tenant.tenantId, String(round)],
    );
    return rows[0]!.n;
  };

  console.log(`machine: ${cpus().length} × ${cpus()[0]?.model ?? '?'}, load average ${load()} at start`);
  // The reporter's own idle cost (Lease renewals, heartbeats, timers, GC), subtracted from each
  // phase so that the CPU per event is the cost of the events.
  const idle0 = usage(reporter.pid);
  const idleStarted = Date.now();
  await new Promise((r) => setTimeout(r, 10_000));
  const idleRate = (usage(reporter.pid).cpu - idle0.cpu) / ((Date.now() - idleStarted) / 1000);
  console.log(
    `reporter idle: ${(idleRate * 1000).toFixed(1)} ms CPU per second, RSS ${usage(reporter.pid).rssMiB.toFixed(0)} MiB before any object`,
  );
  console.log(
    '| phase | writes | API server writes/s (baseline) | stored/s while writing | last state stored after the last write | watch→stored p50 / p99 | reporter CPU per event (idle subtracted) | events/s per core | reporter RSS | load |',
  );
  console.log('| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |');
  for (let round = 0; round <= ROUNDS; round++) {
    const names = Array.from({ length: OBJECTS }, (_, i) => `app-${i}`);
    const tasks =
      round === 0
        ? names.map(
            (n) => () =>
              write('POST', base, {
                ...sampleApplication(NS, n),
                metadata: { name: n, namespace: NS, annotations: { 'bench/round': '0' } },
                status: applicationStatus({}),
              }),
          )
        : names.map(
            (n) => () =>
              write(
                'PATCH',
                `${base}/${n}`,
                {
                  metadata: { annotations: { 'bench/round': String(round) } },
                  status: { sync: { revision: `r${round}` } },
                },
                'application/merge-patch+json',
              ),
          );
    const before = usage(reporter.pid);
    const storedBefore = await api.db.pool.query<{ now: Date }>('SELECT now()');
    const started = Date.now();
    await pool(tasks, 64);
    const writeSecs = (Date.now() - started) / 1000;
    const storedWhileWriting = await storedAt(round);
    await until(`round ${round}: every state stored`, TIMEOUT_MS, async () => (await storedAt(round)) === OBJECTS, 100);
    const lastAfter = (Date.now() - started) / 1000 - writeSecs;
    const after = usage(reporter.pid);
    const { rows } = await api.db.pool.query<{ p50: number; p99: number }>(
      `SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM updated_at - observed_at)) AS p50,
              percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM updated_at - observed_at)) AS p99
         FROM runtime_objects WHERE tenant_id = $1 AND updated_at >= $2`,
      [tenant.tenantId, storedBefore.rows[0]!.now],
    );
    const phaseSecs = (Date.now() - started) / 1000;
    const cpuPerEvent = Math.max(0, after.cpu - before.cpu - idleRate * phaseSecs) / OBJECTS;
    console.log(
      `| ${round === 0 ? 'create' : `update ${round}`} | ${OBJECTS} | ${Math.round(OBJECTS / writeSecs)} | ${Math.round(storedWhileWriting / writeSecs)} | ${lastAfter.toFixed(1)} s | ${(rows[0]!.p50 * 1000).toFixed(0)} / ${(rows[0]!.p99 * 1000).toFixed(0)} ms | ${(cpuPerEvent * 1e6).toFixed(0)} µs | ${cpuPerEvent > 0 ? Math.round(1 / cpuPerEvent) : '∞'} | ${after.rssMiB.toFixed(0)} MiB | ${load()} |`,
    );
  }
  const owned = /^event_reporter_owned_objects\{kind="Application"\} (\d+)/m.exec(
    await (await fetch(`http://127.0.0.1:${port}/metrics`)).text(),
  )?.[1];
  console.log(
    `the reporter owns ${owned} Applications; RSS ${usage(reporter.pid).rssMiB.toFixed(0)} MiB (target < 150 MiB)`,
  );
} finally {
  for (const fn of teardowns.reverse()) await Promise.resolve(fn()).catch(() => undefined);
}
