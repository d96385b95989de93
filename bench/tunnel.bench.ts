/**
 * Tunnel benchmark: the same requests direct to the app-proxy and through
 * control plane → tunnel → request router → app-proxy, in one run, on loopback.
 *
 *   bash scripts/run-node.sh node bench/tunnel.bench.ts
 *
 * Every component runs in its own process, as in a deployment (where each is its own pod): the
 * control plane, the tunnel client, the request router and the app-proxy are child processes;
 * this process only generates load, so the load generator's own work is not charged to the
 * control plane (BENCH_RUNTIME=one puts the three runtime components in one process instead).
 * Direct and tunnel runs alternate (BENCH_ROUNDS rounds per body size; 1 KB latency requests
 * alternate one by one), so both see the same load on a shared machine. Every loop is bounded.
 * Prints a Markdown table (and JSON with --json).
 */
import { fork, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import { fileURLToPath } from 'node:url';
import { createRequestSigner } from '../provisioner/tunnel/request-token.ts';
import type { AddressInfo } from 'node:net';
import { startTunnelClient } from '../runtime/agents/tunnel-client/client.ts';
import {
  KEYS,
  startAppProxy,
  startControlPlane,
  startRequestRouter,
  startRuntime,
  StubCallers,
  StubRuntimeTokens,
} from '../test/integration/tunnel/harness.ts';

type Role = 'cp' | 'app' | 'router' | 'client' | 'runtime' | 'tcp';
/** Replies of the child processes; each answers the request of the same type. */
type Msg =
  | { type: 'started'; base: string; wsUrl?: string; runtimeToken?: string; adminToken?: string }
  | { type: 'rss'; rss: number }
  | { type: 'produced'; produced: number }
  | { type: 'connected'; connected: boolean }
  | { type: 'buffered'; bytes: number }
  | { type: 'cpu'; us: number };

function ask<T extends Msg['type']>(child: ChildProcess, type: T): Promise<Extract<Msg, { type: T }>> {
  return new Promise((resolve) => {
    const on = (m: Msg): void => {
      if (m.type !== type) return;
      child.off('message', on);
      resolve(m as Extract<Msg, { type: T }>);
    };
    child.on('message', on);
    child.send(type);
  });
}

/** Starts `role` in its own process and waits for its 'started' message. */
async function spawn(
  role: Role,
  args: string[],
): Promise<{ child: ChildProcess; started: Extract<Msg, { type: 'started' }> }> {
  const child = fork(fileURLToPath(import.meta.url), ['--role', role, ...args], {
    execArgv: [...process.execArgv, ...(process.env.BENCH_NODE_FLAGS ?? '').split(' ').filter(Boolean)],
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    env: { ...process.env, BENCH_PUBLIC_KEY: KEYS.publicKeyPem, BENCH_PRIVATE_KEY: KEYS.privateKeyPem },
  });
  const started = await new Promise<Extract<Msg, { type: 'started' }>>((resolve, reject) => {
    child.once('message', (m: Msg) =>
      m.type === 'started' ? resolve(m) : reject(new Error(`${role}: unexpected ${m.type}`)),
    );
    child.once('exit', (code) => reject(new Error(`${role} exited with ${String(code)}`)));
  });
  return { child, started };
}

/** BENCH_WINDOW / BENCH_CHUNK (bytes) override the stream window and frame size; defaults are the library's. */
function tuning(): { window: number; chunk: number } {
  return {
    window: Number(process.env.BENCH_WINDOW ?? 256 * 1024),
    chunk: Number(process.env.BENCH_CHUNK ?? 64 * 1024),
  };
}

/** BENCH_ROUNDS: alternating direct/tunnel rounds per body size (default 3). */
function rounds(): number {
  return Math.max(1, Number(process.env.BENCH_ROUNDS ?? 3));
}

/**
 * BENCH_RUNTIME=split (default): tunnel client, request router and app-proxy each in its own
 * process, as in a runtime; `one`: all three in one process (the layout of the first runs).
 */
function layout(): 'split' | 'one' {
  return process.env.BENCH_RUNTIME === 'one' ? 'one' : 'split';
}

const agent = new http.Agent({ keepAlive: true, maxSockets: 64 });

/** One GET; resolves with the body size and the time to the last byte, in ms. */
function get(url: string, headers: http.OutgoingHttpHeaders): Promise<{ bytes: number; ms: number; status: number }> {
  const started = process.hrtime.bigint();
  return new Promise((resolve, reject) => {
    const req = http.get(url, { headers, agent }, (res) => {
      let bytes = 0;
      res.on('data', (c: Buffer) => (bytes += c.length));
      res.on('end', () =>
        resolve({ bytes, status: res.statusCode ?? 0, ms: Number(process.hrtime.bigint() - started) / 1e6 }),
      );
      res.on('error', reject);
    });
    req.on('error', reject);
  });
}

interface Target {
  name: string;
  url: (path: string) => string;
  headers: (path: string) => http.OutgoingHttpHeaders;
}

/** `count` requests with `concurrency` in flight; returns MB/s and requests/s. */
/** The component processes by name, whose CPU time is measured around each throughput run. */
let components: Array<[string, ChildProcess]> = [];

/** CPU time (user + system) used so far, ms: [all component processes, this load generator, per component]. */
async function cpuMs(): Promise<[number, number, number[]]> {
  const each = (await Promise.all(components.map(([, c]) => ask(c, 'cpu')))).map((m) => m.us / 1000);
  const own = process.cpuUsage();
  return [each.reduce((n, x) => n + x, 0), (own.user + own.system) / 1000, each];
}

interface Run {
  mbps: number;
  rps: number;
  /** CPU ms per MiB moved: of the product's processes (control plane, runtime) and of the load generator. */
  cpuPerMiB: number;
  loadgenCpuPerMiB: number;
  /** CPU ms per MiB of each component process (names as in `components`). */
  componentCpuPerMiB: Record<string, number>;
}

async function throughput(target: Target, size: number, count: number, concurrency: number): Promise<Run> {
  const path = `/api/test/bytes?size=${size}`;
  let next = 0;
  let bytes = 0;
  const [cpu0, own0, each0] = await cpuMs();
  const started = process.hrtime.bigint();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < count) {
        next++;
        const r = await get(target.url(path), target.headers(path));
        if (r.status !== 200 || r.bytes !== size)
          throw new Error(`${target.name}: status ${r.status}, ${r.bytes} bytes`);
        bytes += r.bytes;
      }
    }),
  );
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  const [cpu1, own1, each1] = await cpuMs();
  const mib = bytes / 1048576;
  const componentCpuPerMiB = Object.fromEntries(
    components.map(([name], i) => [name, Number(((each1[i]! - each0[i]!) / mib).toFixed(2))]),
  );
  return {
    mbps: mib / seconds,
    rps: count / seconds,
    cpuPerMiB: (cpu1 - cpu0) / mib,
    loadgenCpuPerMiB: (own1 - own0) / mib,
    componentCpuPerMiB,
  };
}

/** `count` sequential 1 KB GETs to each target, alternating; sorted times per target. */
async function latencies(targets: Target[], count: number): Promise<number[][]> {
  const path = '/api/test/bytes?size=1024';
  const out: number[][] = targets.map(() => []);
  for (let i = 0; i < count; i++) {
    for (const [k, target] of targets.entries()) out[k]!.push((await get(target.url(path), target.headers(path))).ms);
  }
  return out.map((xs) => xs.sort((a, b) => a - b));
}

const pct = (sorted: number[], p: number): number =>
  sorted[Math.min(sorted.length - 1, Math.floor((sorted.length * p) / 100))]!;

async function main(): Promise<void> {
  const tenantId = randomUUID();
  const cp = await spawn('cp', [tenantId]);
  let app: Awaited<ReturnType<typeof spawn>>;
  let runtimeProcs: ChildProcess[];
  let names: string[];
  let routerBase: string | undefined;
  if (layout() === 'split') {
    app = await spawn('app', [tenantId]);
    const router = await spawn('router', [app.started.base]);
    routerBase = router.started.base;
    const client = await spawn('client', [cp.started.wsUrl!, cp.started.runtimeToken!, router.started.base]);
    runtimeProcs = [client.child, router.child, app.child];
    names = ['tunnel client', 'router', 'app-proxy'];
  } else {
    app = await spawn('runtime', [tenantId, cp.started.wsUrl!, cp.started.runtimeToken!]);
    runtimeProcs = [app.child];
    names = ['runtime'];
  }
  const children = [cp.child, ...runtimeProcs];
  components = children.map((c, i) => [i === 0 ? 'control plane' : names[i - 1]!, c]);
  for (let i = 0; i < 500 && !(await ask(cp.child, 'connected')).connected; i++)
    await new Promise((r) => setTimeout(r, 10));
  if (!(await ask(cp.child, 'connected')).connected) throw new Error('the tunnel did not come up');

  const signer = createRequestSigner({ privateKeyPem: KEYS.privateKeyPem });
  const direct: Target = {
    name: 'direct',
    url: (p) => `${app.started.base}${p}`,
    // The app-proxy accepts nothing unsigned: direct requests carry a fresh token too.
    headers: (p) => ({ 'x-hrt-request-token': signer.sign({ tenantId, method: 'GET', path: p }) }),
  };
  const tunnel: Target = {
    name: 'tunnel',
    url: (p) => `${cp.started.base}/v1/tenants/${tenantId}/runtime${p}`,
    headers: () => ({ authorization: `Bearer ${cp.started.adminToken!}` }),
  };
  // Split layout only: the floor. Three processes that only copy bytes between TCP sockets (no
  // HTTP, no tunnel) in front of the app-proxy: what any chain of three Node.js relays can reach
  // on this machine, measured in the same rounds.
  const floorRelays: ChildProcess[] = [];
  let floorBase: string | undefined;
  if (layout() === 'split') {
    let upstream = app.started.base;
    for (let i = 0; i < 3; i++) {
      const relay = await spawn('tcp', [upstream]);
      floorRelays.push(relay.child);
      upstream = relay.started.base;
    }
    floorBase = upstream;
  }
  const floor: Target | undefined =
    floorBase === undefined ? undefined : { name: 'floor', url: (p) => `${floorBase}${p}`, headers: direct.headers };
  // Split layout only: requests to the request router (→ app-proxy), to tell its hop from the rest.
  const viaRouter: Target | undefined =
    routerBase === undefined ? undefined : { name: 'router', url: (p) => `${routerBase}${p}`, headers: direct.headers };

  const rows: Array<{
    size: string;
    direct: Run;
    tunnel: Run;
    roundRatios: number[];
    cpu: { direct: number; tunnel: number };
    floorRatio?: number;
  }> = [];
  const plans: Array<[string, number, number, number]> = [
    ['1 KB', 1024, 4000, 16],
    ['1 MB', 1024 * 1024, 300, 4],
    ['10 MB', 10 * 1024 * 1024, 40, 2],
  ];
  // The machine is shared and its load swings within seconds: direct and tunnel alternate over
  // several rounds and each reports its median round, so both see the same conditions.
  const median = <T>(xs: T[], key: (x: T) => number): T =>
    [...xs].sort((a, b) => key(a) - key(b))[Math.floor(xs.length / 2)]!;
  for (const [label, size, count, conc] of plans) {
    await throughput(direct, size, Math.ceil(count / 10), conc); // warm-up
    await throughput(tunnel, size, Math.ceil(count / 10), conc);
    if (floor) await throughput(floor, size, Math.ceil(count / 10), conc);
    const ds: Run[] = [];
    const ts: Run[] = [];
    const ratios: number[] = [];
    const floorRatios: number[] = [];
    for (let r = 0; r < rounds(); r++) {
      const d = await throughput(direct, size, count, conc);
      const t = await throughput(tunnel, size, count, conc);
      if (floor) floorRatios.push((await throughput(floor, size, count, conc)).mbps / d.mbps);
      ds.push(d);
      ts.push(t);
      ratios.push(t.mbps / d.mbps);
    }
    rows.push({
      size: label,
      direct: median(ds, (x) => x.mbps),
      tunnel: median(ts, (x) => x.mbps),
      roundRatios: ratios.map((x) => Number(x.toFixed(2))),
      cpu: { direct: median(ds, (x) => x.cpuPerMiB).cpuPerMiB, tunnel: median(ts, (x) => x.cpuPerMiB).cpuPerMiB },
      ...(floor ? { floorRatio: Number(median(floorRatios, (x) => x).toFixed(2)) } : {}),
    });
  }

  // Latency: direct and tunnel requests (and router ones, split layout) alternate one by one.
  const latencyTargets = viaRouter ? [direct, tunnel, viaRouter] : [direct, tunnel];
  await latencies(latencyTargets, 200);
  const [ld, lt, lr] = (await latencies(latencyTargets, 2000)) as [number[], number[], number[] | undefined];

  // RSS while a 1 GiB response goes to a reader that stopped reading.
  const runtimeRss = async (): Promise<number> =>
    (await Promise.all(runtimeProcs.map((c) => ask(c, 'rss')))).reduce((n, m) => n + m.rss, 0);
  const rssBeforeCp = (await ask(cp.child, 'rss')).rss;
  const rssBeforeRt = await runtimeRss();
  const req = http.get(`${tunnel.url(`/api/test/producer?size=${1024 * 1024 * 1024}`)}`, {
    headers: tunnel.headers(''),
  });
  const res = await new Promise<http.IncomingMessage>((resolve) => req.once('response', resolve));
  res.pause();
  let last = -1;
  let stable = 0;
  for (let i = 0; i < 200 && stable < 5; i++) {
    await new Promise((r) => setTimeout(r, 100));
    const { produced } = await ask(app.child, 'produced');
    stable = produced === last ? stable + 1 : 0;
    last = produced;
  }
  const rssAfterCp = (await ask(cp.child, 'rss')).rss;
  const rssAfterRt = await runtimeRss();
  const buffered = (await ask(cp.child, 'buffered')).bytes;
  req.destroy();

  for (const c of [...children, ...floorRelays]) {
    c.send('stop');
    await new Promise((resolve) => c.once('exit', resolve));
  }
  agent.destroy();

  const mb = (n: number): string => (n / 1048576).toFixed(1);
  const ten = rows.find((r) => r.size === '10 MB')!;
  const addedP50 = pct(lt, 50) - pct(ld, 50);
  const result = {
    date: new Date().toISOString(),
    tuning: tuning(),
    rounds: rounds(),
    runtimeProcesses: layout(),
    loadAverage: os.loadavg().map((n) => Number(n.toFixed(2))),
    machine: `${os.cpus().length} × ${os.cpus()[0]?.model ?? 'cpu'}, ${mb(os.totalmem())} MiB RAM, Node ${process.version}, ${os.platform()} ${os.release()}`,
    throughput: rows,
    latency1k: {
      directP50: pct(ld, 50),
      directP99: pct(ld, 99),
      tunnelP50: pct(lt, 50),
      tunnelP99: pct(lt, 99),
      addedP50,
      addedP99: pct(lt, 99) - pct(ld, 99),
      ...(lr ? { routerP50: pct(lr, 50), routerP99: pct(lr, 99) } : {}),
    },
    stalledReader: {
      producedMiB: Number(mb(last)),
      controlPlaneRssGrowthMiB: Number(mb(rssAfterCp - rssBeforeCp)),
      runtimeRssGrowthMiB: Number(mb(rssAfterRt - rssBeforeRt)),
      controlPlaneBufferedBytes: buffered,
    },
    targets: {
      tenMbRatio: ten.tunnel.mbps / ten.direct.mbps,
      tenMbRatioOk: ten.tunnel.mbps / ten.direct.mbps >= 0.5,
      addedP50Ok: addedP50 <= 1,
      rssOk: rssAfterCp - rssBeforeCp < 64 * 1048576 && rssAfterRt - rssBeforeRt < 64 * 1048576,
    },
  };
  if (process.argv.includes('--json')) {
    console.log(JSON.stringify(result, null, 2));
    return;
  }
  console.log(
    `tunnel benchmark, ${result.date}\n${result.machine}\nruntime ${result.runtimeProcesses === 'split' ? 'in three processes' : 'in one process'}, window ${result.tuning.window} B, chunk ${result.tuning.chunk} B, load average at the end ${result.loadAverage.join(' / ')}\n`,
  );
  console.log(`medians of ${rounds()} alternating rounds\n`);
  console.log(
    '| body | direct MB/s | tunnel MB/s | ratio | ratio per round | floor ratio (3 TCP relays) | direct req/s | tunnel req/s | product CPU ms/MiB direct / tunnel |',
  );
  console.log('| --- | --- | --- | --- | --- | --- | --- | --- | --- |');
  for (const r of rows) {
    console.log(
      `| ${r.size} | ${r.direct.mbps.toFixed(1)} | ${r.tunnel.mbps.toFixed(1)} | ${(r.tunnel.mbps / r.direct.mbps).toFixed(2)} | ${r.roundRatios.join(', ')} | ${r.floorRatio ?? '—'} | ${r.direct.rps.toFixed(0)} | ${r.tunnel.rps.toFixed(0)} | ${r.cpu.direct.toFixed(2)} / ${r.cpu.tunnel.toFixed(2)} |`,
    );
  }
  console.log(
    `\n10 MB, CPU ms per MiB: load generator direct ${ten.direct.loadgenCpuPerMiB.toFixed(2)}, tunnel ${ten.tunnel.loadgenCpuPerMiB.toFixed(2)}; through the tunnel, by process: ${Object.entries(
      ten.tunnel.componentCpuPerMiB,
    )
      .map(([k, v]) => `${k} ${v}`)
      .join(', ')}`,
  );
  const one = rows.find((r) => r.size === '1 KB');
  if (one) {
    const perRequest = (run: Run): string =>
      Object.entries(run.componentCpuPerMiB)
        .map(([k, v]) => `${k} ${((v * 1000) / 1024).toFixed(0)}`)
        .join(', ');
    console.log(
      `1 KB, CPU µs per request by process: direct ${perRequest(one.direct)}; tunnel ${perRequest(one.tunnel)}`,
    );
  }
  const l = result.latency1k;
  console.log(
    `\n1 KB GET latency (sequential, 2000 each, alternating): direct p50 ${l.directP50.toFixed(3)} ms p99 ${l.directP99.toFixed(3)} ms; tunnel p50 ${l.tunnelP50.toFixed(3)} ms p99 ${l.tunnelP99.toFixed(3)} ms; added p50 ${l.addedP50.toFixed(3)} ms, p99 ${l.addedP99.toFixed(3)} ms`,
  );
  if (l.routerP50 !== undefined) {
    console.log(
      `  of the added p50: request router hop ${(l.routerP50 - l.directP50).toFixed(3)} ms (router p50 ${l.routerP50.toFixed(3)} ms); control plane, tunnel and tunnel client ${(l.tunnelP50 - l.routerP50).toFixed(3)} ms`,
    );
  }
  const s = result.stalledReader;
  console.log(
    `stalled reader of a 1 GiB response: runtime produced ${s.producedMiB} MiB then stopped; RSS growth control plane ${s.controlPlaneRssGrowthMiB} MiB, runtime ${s.runtimeRssGrowthMiB} MiB; control plane buffered ${s.controlPlaneBufferedBytes} bytes`,
  );
  console.log(
    `\ntargets: 10 MB ratio ${result.targets.tenMbRatio.toFixed(2)} (≥ 0.50: ${result.targets.tenMbRatioOk ? 'met' : 'MISSED'}), added p50 ≤ 1 ms: ${result.targets.addedP50Ok ? 'met' : 'MISSED'}, RSS growth < 64 MiB: ${result.targets.rssOk ? 'met' : 'MISSED'}`,
  );
}

// ---- children: one component each -------------------------------------------------------
async function child(role: Role, args: string[]): Promise<void> {
  const { window, chunk } = tuning();
  const publicKeyPem = process.env.BENCH_PUBLIC_KEY!;
  let close: () => Promise<unknown>;
  let started: Extract<Msg, { type: 'started' }>;
  let answer: (type: string) => Msg | undefined = () => undefined;
  if (role === 'cp') {
    const [tenantId] = args as [string];
    const tokens = new StubRuntimeTokens();
    const callers = new StubCallers();
    // Sign with the key pair the load generator and the app-proxy know (each process has its own KEYS).
    const signer = createRequestSigner({ privateKeyPem: process.env.BENCH_PRIVATE_KEY! });
    const cp = await startControlPlane({
      tokens,
      callers,
      limits: { streamWindow: window, maxChunkBytes: chunk, signer },
    });
    started = {
      type: 'started',
      base: cp.base,
      wsUrl: cp.wsUrl,
      runtimeToken: tokens.issue(tenantId).token,
      adminToken: callers.add('admin'),
    };
    answer = (type) =>
      type === 'connected'
        ? { type, connected: cp.tunnel.status(tenantId).connected }
        : type === 'buffered'
          ? { type, bytes: cp.tunnel.stats().bufferedBytes }
          : undefined;
    close = () => cp.close();
  } else if (role === 'app') {
    const [tenantId] = args as [string];
    const appProxy = await startAppProxy(tenantId, publicKeyPem);
    started = { type: 'started', base: appProxy.base };
    answer = (type) => (type === 'produced' ? { type, produced: appProxy.state.produced } : undefined);
    close = () => appProxy.close();
  } else if (role === 'router') {
    const [appProxyUrl] = args as [string];
    // No webhooks in this benchmark: the event source address is never dialled.
    const router = await startRequestRouter(appProxyUrl, 'http://127.0.0.1:9');
    started = { type: 'started', base: router.base };
    close = () => router.close();
  } else if (role === 'runtime') {
    const [tenantId, wsUrl, token] = args as [string, string, string];
    const runtime = await startRuntime(tenantId, { wsUrl }, token, { window, maxChunkBytes: chunk }, publicKeyPem);
    await new Promise<void>((resolve) =>
      runtime.client.connected ? resolve() : runtime.client.events.once('connected', () => resolve()),
    );
    started = { type: 'started', base: runtime.appProxyBase };
    answer = (type) => (type === 'produced' ? { type, produced: runtime.state.produced } : undefined);
    close = () => runtime.close();
  } else if (role === 'tcp') {
    const upstream = new URL(args[0]!);
    const server = net.createServer((down) => {
      const up = net.connect(Number(upstream.port), upstream.hostname);
      down.on('error', () => up.destroy());
      up.on('error', () => down.destroy());
      down.pipe(up);
      up.pipe(down);
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    started = { type: 'started', base: `http://127.0.0.1:${(server.address() as AddressInfo).port}` };
    close = async () => {
      await new Promise((r) => {
        server.close(r);
        server.unref();
        setTimeout(r, 100).unref();
      });
    };
  } else {
    const [wsUrl, token, routerBase] = args as [string, string, string];
    const client = startTunnelClient({
      url: wsUrl,
      token,
      upstream: routerBase,
      maxUpstreamSockets: 2048,
      window,
      maxChunkBytes: chunk,
    });
    await new Promise<void>((resolve) =>
      client.connected ? resolve() : client.events.once('connected', () => resolve()),
    );
    started = { type: 'started', base: '' };
    close = () => client.close();
  }
  process.send?.(started);
  process.once('disconnect', () => process.exit(0));
  process.on('message', (m: string) => {
    if (m === 'stop') {
      void close().then(() => process.exit(0));
      return;
    }
    const cpu = (): Msg => {
      const u = process.cpuUsage();
      return { type: 'cpu', us: u.user + u.system };
    };
    const reply =
      m === 'rss' ? ({ type: 'rss', rss: process.memoryUsage().rss } satisfies Msg) : m === 'cpu' ? cpu() : answer(m);
    if (reply) process.send?.(reply);
  });
}

const roleAt = process.argv.indexOf('--role');
if (roleAt !== -1) await child(process.argv[roleAt + 1] as Role, process.argv.slice(roleAt + 2));
else await main();
