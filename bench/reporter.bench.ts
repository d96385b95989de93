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
 *
 * First, since the kube-apiserver with the real Application CRD takes only 45–85 writes/s on this
 * machine: a REPLAYED WATCH (BENCH_REPORTER_REPLAY=0 skips it). A loopback stand-in API server
 * (not a kube-apiserver: it serves the Application list and watch from a generated event log,
 * Leases from memory, 404 for the other kinds) streams BENCH_OBJECTS ADDED events at 500/s, then a
 * MODIFIED per object at 500/s, then a MODIFIED per object as fast as the socket takes them; a
 * second reporter process watches it and reports to the same control plane. What this measures is
 * the reporter's pipeline from a watch event to the stored row (queue, batches, HTTP, ingest) at
 * a rate the real API server cannot produce here, not the API server's own watch latency.
 * BENCH_REPORTER_APISERVER=0 skips the real API server part; BENCH_REPORTER_ENTRY runs another
 * checkout's runtime/agents/event-reporter/main.ts (a before/after comparison in one setting).
 */
import { readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { Agent, request as httpsRequest, type RequestOptions } from 'node:https';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { CoreV1Api } from '@kubernetes/client-node';
import { createServer, type ServerResponse } from 'node:http';
import { writeFile } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import { createKey } from '../provisioner/store/keys.ts';
import { createTestApi, startReplica } from '../test/helpers/api.ts';
import { applicationStatus, sampleApplication, startArgoApiServer } from '../test/e2e/harness/argo.ts';
import { freePort, startProcess, until } from '../sandbox/processes.ts';
import type { ApplicationChange } from '../runtime/protocol/sources.ts';
import { upsertItem } from '../runtime/agents/event-reporter/items.ts';
import { databaseNow } from '../test/helpers/postgres.ts';
import { countLiveAnnotated, historyEntryCount, storeLatency } from '../test/helpers/runtime-objects.ts';

const OBJECTS = Number(process.env.BENCH_OBJECTS ?? 10_000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 1);
const TIMEOUT_MS = Number(process.env.BENCH_TIMEOUT_SECONDS ?? 900) * 1000;
const ROOT = fileURLToPath(new URL('..', import.meta.url));
const NS = 'argocd';
const REPLAY = process.env.BENCH_REPORTER_REPLAY !== '0';
const APISERVER = process.env.BENCH_REPORTER_APISERVER !== '0';
const REPLAY_RATE = Number(process.env.BENCH_REPLAY_RATE ?? 500);
/** BENCH_REPORTER_SOURCE_SERVER=0 skips the replay with a Source Server stand-in. */
const SOURCE_SERVER = process.env.BENCH_REPORTER_SOURCE_SERVER !== '0';
/** The reporter to run: another checkout's main.ts compares two versions in the same conditions. */
const REPORTER_ENTRY = process.env.BENCH_REPORTER_ENTRY ?? join(ROOT, 'runtime/agents/event-reporter/main.ts');

type Obj = Record<string, unknown>;

/**
 * The stand-in API server of the replayed watch (loopback, plain HTTP): the Application list and
 * watch from an event log (a watch from resourceVersion N gets the events after N, then live
 * ones), Leases kept in memory, 404 for Rollouts and Workflows (their CRDs absent).
 */
async function startStandIn() {
  const log: { rv: number; line: string }[] = [];
  let rv = 1;
  const watchers = new Set<ServerResponse>();
  const leases = new Map<string, Obj>();
  const json = (res: ServerResponse, status: number, body: unknown) =>
    res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
  const server = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://x');
    const chunks: Buffer[] = [];
    req.on('error', () => {}); // the reporter ends a watch by closing the connection
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const leaseMatch = /^\/apis\/coordination\.k8s\.io\/v1\/namespaces\/([^/]+)\/leases(?:\/([^/]+))?$/.exec(
        url.pathname,
      );
      if (leaseMatch) {
        const name = leaseMatch[2] ? decodeURIComponent(leaseMatch[2]) : undefined;
        const body = chunks.length ? (JSON.parse(Buffer.concat(chunks).toString()) as Obj) : undefined;
        if (req.method === 'GET' && !name) return json(res, 200, { kind: 'LeaseList', items: [...leases.values()] });
        if (req.method === 'GET') return leases.has(name!) ? json(res, 200, leases.get(name!)) : json(res, 404, {});
        if (req.method === 'DELETE') return json(res, leases.delete(name!) ? 200 : 404, {});
        if (req.method === 'POST' || req.method === 'PUT') {
          const lease = { ...body, metadata: { ...(body?.metadata as Obj), resourceVersion: String(rv++) } };
          leases.set(String((lease.metadata as Obj).name), lease);
          return json(res, req.method === 'POST' ? 201 : 200, lease);
        }
      }
      if (url.pathname === '/apis/argoproj.io/v1alpha1/applications') {
        if (url.searchParams.get('watch') !== 'true')
          return json(res, 200, { kind: 'ApplicationList', metadata: { resourceVersion: String(rv) }, items: [] });
        const from = Number(url.searchParams.get('resourceVersion') ?? 0);
        res.writeHead(200, { 'content-type': 'application/json' });
        const missed = log.filter((e) => e.rv > from).map((e) => e.line);
        if (missed.length) res.write(missed.join(''));
        watchers.add(res);
        res.on('close', () => watchers.delete(res));
        return;
      }
      json(res, 404, { kind: 'Status', code: 404, reason: 'NotFound' });
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    /** Appends an event and writes it to every open watch. */
    emit(type: 'ADDED' | 'MODIFIED', object: Obj) {
      const r = rv++;
      const meta = object.metadata as Obj;
      meta.resourceVersion = String(r);
      const line = JSON.stringify({ type, object }) + '\n';
      log.push({ rv: r, line });
      for (const w of watchers) w.write(line);
    },
    close() {
      for (const w of watchers) w.destroy();
      server.closeAllConnections();
      server.close();
    },
  };
}

/**
 * A loopback stand-in for the runtime's Source Server (not the Source Server: that one asks Argo
 * CD and Git): answers `/change` at once with a change of the usual shape and size (the commit's
 * metadata, one Deployment's image moved), so that the reporter's own cost of looking changes up
 * and sending them is what the replay measures.
 */
async function startSourceServerStandIn() {
  let requests = 0;
  const changeOf = (name: string, revision: string): ApplicationChange => ({
    revision,
    changeRevision: revision,
    previousChangeRevision: 'p'.padEnd(40, '0'),
    commit: {
      revision,
      author: 'Ada Lovelace <ada@example.test>',
      date: '2026-11-28T12:00:00Z',
      message: `${name}: move web to the next release\n\nWith a body, as commit messages have one.`,
      tags: [],
    },
    resources: [
      {
        group: 'apps',
        kind: 'Deployment',
        namespace: 'default',
        name: 'web',
        action: 'modified',
        fields: ['spec.template.spec.containers[name=web].image'],
      },
    ],
    images: [
      {
        resource: 'Deployment/default/web',
        container: 'web',
        before: `registry.example.test/${name}:1.0.0`,
        after: `registry.example.test/${name}:1.1.0`,
      },
    ],
    truncated: false,
  });
  const server = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://x');
    const m = /^\/v1\/applications\/([^/]+)\/([^/]+)\/change$/.exec(url.pathname);
    if (!m) {
      res.writeHead(404).end();
      return;
    }
    requests++;
    const body = JSON.stringify(changeOf(decodeURIComponent(m[2]!), url.searchParams.get('revision') ?? 'head'));
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) }).end(body);
  });
  await new Promise<void>((ok) => server.listen(0, '127.0.0.1', ok));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    get requests() {
      return requests;
    },
    changeOf,
    close: () => new Promise<void>((ok) => server.close(() => ok())),
  };
}

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
  const dir = await mkdtemp(join(tmpdir(), 'hrt-bench-reporter-'));
  teardowns.push(() => rm(dir, { recursive: true, force: true }));
  const api = await createTestApi();
  teardowns.push(() => api.close());
  const cpPort = await freePort();
  const cp = await startReplica(api.config, api.db);
  await cp.app.listen({ port: cpPort, host: '127.0.0.1' });
  teardowns.push(() => cp.close());

  /** A tenant and its runtime key: each part of the bench reports into a tenant of its own. */
  const runtimeTenant = async () => {
    const tenant = await api.signup();
    const token = (
      await createKey(api.db.pool, { role: 'runtime', tenantId: tenant.tenantId, name: 'bench', createdBy: 'bench' })
    ).key;
    return { tenantId: tenant.tenantId, token };
  };

  /** Starts a reporter process (resolves when ready) with its own health port. */
  const startReporter = async (
    name: string,
    kubeconfig: string,
    token: string,
    extraEnv: Record<string, string> = {},
  ) => {
    const port = await freePort();
    const reporter = startProcess(
      `event-reporter-${name}`,
      process.execPath,
      [REPORTER_ENTRY],
      join(dir, `${name}.log`),
      {
        cwd: ROOT,
        env: {
          PATH: process.env.PATH,
          CONTROL_PLANE_URL: `http://127.0.0.1:${cpPort}`,
          RUNTIME_TOKEN: token,
          REPLICA_NAME: name,
          LEASE_NAMESPACE: 'hosted-runtime',
          KUBECONFIG: kubeconfig,
          PORT: String(port),
          HOST: '127.0.0.1',
          LOG_LEVEL: 'warn',
          // e.g. --max-old-space-size=128: a heap bounded as a container's memory limit bounds it.
          ...(process.env.BENCH_REPORTER_NODE_OPTIONS ? { NODE_OPTIONS: process.env.BENCH_REPORTER_NODE_OPTIONS } : {}),
          ...extraEnv,
        },
      },
    );
    teardowns.push(() => reporter.stop(5000));
    await until(`the reporter ${name} to be ready`, 60_000, async () => {
      if (!reporter.running()) throw new Error(await reporter.tail(20));
      return (await fetch(`http://127.0.0.1:${port}/readyz`)).status === 200;
    });
    return { reporter, port };
  };

  const storedAt = async (tenantId: string, round: number): Promise<number> => {
    return countLiveAnnotated(api.db.pool, tenantId, { name: 'bench/round', value: String(round), absentAs: '0' });
  };

  /**
   * One phase: `feed` produces OBJECTS states of round `round`; measured as the table's header says.
   * `label` names the phase; `feedRate` the rate the feed achieved is printed as the baseline.
   */
  const measurePhase = async (
    label: string,
    tenantId: string,
    pid: number,
    idleRate: number,
    round: number,
    feed: () => Promise<void>,
  ) => {
    const before = usage(pid);
    const storedBefore = await databaseNow(api.db.pool);
    const started = Date.now();
    await feed();
    const writeSecs = (Date.now() - started) / 1000;
    const storedWhileWriting = await storedAt(tenantId, round);
    await until(
      `${label}: every state stored`,
      TIMEOUT_MS,
      async () => (await storedAt(tenantId, round)) === OBJECTS,
      100,
    );
    const lastAfter = (Date.now() - started) / 1000 - writeSecs;
    const after = usage(pid);
    const latency = await storeLatency(api.db.pool, tenantId, storedBefore);
    const phaseSecs = (Date.now() - started) / 1000;
    const cpuPerEvent = Math.max(0, after.cpu - before.cpu - idleRate * phaseSecs) / OBJECTS;
    const totalSecs = writeSecs + lastAfter;
    console.log(
      `| ${label} | ${OBJECTS} | ${Math.round(OBJECTS / writeSecs)} | ${Math.round(storedWhileWriting / writeSecs)} (${Math.round(OBJECTS / totalSecs)} until the last) | ${lastAfter.toFixed(1)} s | ${latency ? `${(latency.p50 * 1000).toFixed(0)} / ${(latency.p99 * 1000).toFixed(0)} ms` : 'none stored'} | ${(cpuPerEvent * 1e6).toFixed(0)} µs | ${cpuPerEvent > 0 ? Math.round(1 / cpuPerEvent) : '∞'} | ${after.rssMiB.toFixed(0)} MiB | ${load()} |`,
    );
  };

  /** The reporter's own idle cost (Lease renewals, heartbeats, timers, GC), subtracted from each phase. */
  const idleOf = async (name: string, pid: number) => {
    const idle0 = usage(pid);
    const idleStarted = Date.now();
    await new Promise((r) => setTimeout(r, 10_000));
    const idleRate = (usage(pid).cpu - idle0.cpu) / ((Date.now() - idleStarted) / 1000);
    console.log(
      `${name}: idle ${(idleRate * 1000).toFixed(1)} ms CPU per second, RSS ${usage(pid).rssMiB.toFixed(0)} MiB before any object`,
    );
    return idleRate;
  };
  const header = (feedName: string) => {
    console.log(
      `| phase | events | ${feedName} | stored/s while feeding (until the last) | last state stored after the feed ended | watch→stored p50 / p99 | reporter CPU per event (idle subtracted) | events/s per core | reporter RSS | load |`,
    );
    console.log('| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |');
  };
  /** Objects the reporter owns, and its V8 heap (used of total, MiB) from its metrics. */
  const ownedBy = async (port: number) => {
    const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
    const mib = (name: string) => (Number(new RegExp(`^${name} (\\S+)`, 'm').exec(text)?.[1]) / 2 ** 20).toFixed(0);
    return `${/^event_reporter_owned_objects\{kind="Application"\} (\d+)/m.exec(text)?.[1]} (V8 heap ${mib('event_reporter_nodejs_heap_size_used_bytes')} MiB used of ${mib('event_reporter_nodejs_heap_size_total_bytes')} MiB)`;
  };

  console.log(`machine: ${cpus().length} × ${cpus()[0]?.model ?? '?'}, load average ${load()} at start`);

  if (REPLAY) {
    const standIn = await startStandIn();
    teardowns.push(() => standIn.close());
    const kubeconfig = join(dir, 'stand-in.kubeconfig');
    await writeFile(
      kubeconfig,
      [
        'apiVersion: v1',
        'kind: Config',
        'clusters: [{name: stand-in, cluster: {server: "' + standIn.url + '"}}]',
        'users: [{name: bench, user: {token: bench}}]',
        'contexts: [{name: stand-in, context: {cluster: stand-in, user: bench}}]',
        'current-context: stand-in',
        '',
      ].join('\n'),
    );
    const rt = await runtimeTenant();
    const { reporter, port } = await startReporter('replay', kubeconfig, rt.token);
    console.log('\nREPLAYED WATCH: a loopback stand-in API server streams the events (not a kube-apiserver)');
    const idleRate = await idleOf('reporter (replayed watch)', reporter.pid);
    header('events/s fed');
    const uid = (i: number) => `00000000-0000-4000-8000-${String(i).padStart(12, '0')}`;
    const state = (i: number, round: number): Obj => ({
      ...sampleApplication(NS, `app-${i}`),
      metadata: {
        name: `app-${i}`,
        namespace: NS,
        uid: uid(i),
        generation: 1,
        creationTimestamp: '2026-11-23T00:00:00Z',
        annotations: { 'bench/round': String(round) },
      },
      status: applicationStatus({ revision: `r${round}`.padEnd(40, '0') }),
    });
    /** Emits OBJECTS events at `rate` per second (Infinity: as fast as the socket takes them). */
    const replay = async (round: number, rate: number) => {
      const started = performance.now();
      for (let i = 0; i < OBJECTS;) {
        const due =
          rate === Infinity
            ? OBJECTS
            : Math.min(OBJECTS, Math.floor(((performance.now() - started) / 1000) * rate) + 1);
        for (; i < due; i++) standIn.emit(round === 0 ? 'ADDED' : 'MODIFIED', state(i, round));
        if (i < OBJECTS) await new Promise((r) => setTimeout(r, 5));
      }
    };
    await measurePhase(`create at ${REPLAY_RATE}/s (replayed)`, rt.tenantId, reporter.pid, idleRate, 0, () =>
      replay(0, REPLAY_RATE),
    );
    await measurePhase(`update at ${REPLAY_RATE}/s (replayed)`, rt.tenantId, reporter.pid, idleRate, 1, () =>
      replay(1, REPLAY_RATE),
    );
    await measurePhase('update unthrottled (replayed)', rt.tenantId, reporter.pid, idleRate, 2, () =>
      replay(2, Infinity),
    );
    console.log(
      `the replay reporter owns ${await ownedBy(port)} Applications; RSS ${usage(reporter.pid).rssMiB.toFixed(0)} MiB (target < 150 MiB)`,
    );
    await reporter.stop(5000);

    if (SOURCE_SERVER) {
      // The same replay with a Source Server: every state has a new revision, so every event is an
      // application change the reporter looks up (the worst case: each event a new commit).
      const sources = await startSourceServerStandIn();
      teardowns.push(() => sources.close());
      const rt2 = await runtimeTenant();
      const withSources = await startReporter('replay-sources', kubeconfig, rt2.token, {
        SOURCE_SERVER_URL: sources.url,
      });
      console.log(
        '\nREPLAYED WATCH WITH A SOURCE SERVER (a loopback stand-in answering /change, not the Source Server): ' +
          'every event a new revision, so a change lookup each',
      );
      const idle2 = await idleOf('reporter (replayed watch, Source Server)', withSources.reporter.pid);
      header('events/s fed');
      await measurePhase(
        `create at ${REPLAY_RATE}/s, with changes`,
        rt2.tenantId,
        withSources.reporter.pid,
        idle2,
        0,
        () => replay(0, REPLAY_RATE),
      );
      await measurePhase(
        `update at ${REPLAY_RATE}/s, with changes`,
        rt2.tenantId,
        withSources.reporter.pid,
        idle2,
        1,
        () => replay(1, REPLAY_RATE),
      );
      const historyEntries = await historyEntryCount(api.db.pool, rt2.tenantId);
      // What the reporter sends of one Application (a listed object carries its resourceVersion).
      const listed = { ...state(1, 1), metadata: { ...(state(1, 1).metadata as Obj), resourceVersion: '1' } };
      const plain = JSON.stringify(upsertItem('Application', listed));
      const changed = JSON.stringify({
        ...upsertItem('Application', listed),
        change: sources.changeOf('app-1', 'r1'.padEnd(40, '0')),
      });
      console.log(
        `Source Server lookups answered: ${sources.requests}; history entries stored: ${historyEntries}; ` +
          `report size per application item: ${plain.length} B without a change, ${changed.length} B with (${(changed.length / plain.length).toFixed(2)}×)`,
      );
      await withSources.reporter.stop(5000);
    }
  }

  if (APISERVER) {
    const argo = await startArgoApiServer(t, { name: 'bench-reporter', crds: ['applications'] });
    const core = argo.kc.makeApiClient(CoreV1Api);
    for (const ns of ['hosted-runtime', NS]) await core.createNamespace({ body: { metadata: { name: ns } } });
    const rt = await runtimeTenant();
    const { reporter, port } = await startReporter('bench', argo.kubeconfigFile, rt.token);

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

    console.log('\nREAL kube-apiserver with the Argo Application CRD, written by 64 requests in flight');
    const idleRate = await idleOf('reporter (kube-apiserver)', reporter.pid);
    header('API server writes/s (baseline)');
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
      await measurePhase(round === 0 ? 'create' : `update ${round}`, rt.tenantId, reporter.pid, idleRate, round, () =>
        pool(tasks, 64),
      );
    }
    console.log(
      `the reporter owns ${await ownedBy(port)} Applications; RSS ${usage(reporter.pid).rssMiB.toFixed(0)} MiB (target < 150 MiB)`,
    );
  }
} finally {
  for (const fn of teardowns.reverse()) await Promise.resolve(fn()).catch(() => undefined);
}
