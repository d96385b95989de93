/**
 * Reconnect storm: N simulated runtimes (real tunnel clients, default 10,000) connected to a
 * control plane on loopback; the control plane is SIGKILLed, stays down for a while, and starts
 * again on the same port. Reports the time until every runtime is connected again, the control
 * plane's CPU over that time, and its RSS with all tunnels open.
 *
 *   npm run bench -- reconnect          (BENCH_RUNTIMES=10000, BENCH_DOWN_SECONDS=10)
 *
 * The control plane (tunnel server + route, TEST DOUBLE token check: a token names its tenant,
 * no database) runs in a child process so that its CPU and memory are its own; the runtimes run
 * in this process. Every wait is bounded (BENCH_TIMEOUT_SECONDS, default 180).
 */
import { fork, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import os from 'node:os';
import { fileURLToPath } from 'node:url';
import { startTunnelClient, type TunnelClient } from '../runtime/agents/tunnel-client/client.ts';
import { startControlPlane, StubCallers, StubRuntimeTokens } from '../test/integration/tunnel/harness.ts';
import { until } from '../sandbox/until.ts';

const N = Number(process.env.BENCH_RUNTIMES ?? 10_000);
const DOWN_MS = Number(process.env.BENCH_DOWN_SECONDS ?? 10) * 1000;
const TIMEOUT_MS = Number(process.env.BENCH_TIMEOUT_SECONDS ?? 180) * 1000;
const self = fileURLToPath(import.meta.url);

type Msg = { type: 'started'; port: number } | { type: 'stats'; cpuUs: number; rss: number; tunnels: number };

if (process.argv[2] === 'cp') {
  // TEST DOUBLE of the runtime-token lookup: `hrt_runtime_<tenant id>` is that tenant's token.
  const tokens = new StubRuntimeTokens();
  tokens.authenticate = (token) => Promise.resolve({ tenantId: token.slice('hrt_runtime_'.length), keyId: token });
  const cp = await startControlPlane({ tokens, callers: new StubCallers(), port: Number(process.argv[3] ?? 0) });
  const started = process.cpuUsage();
  process.on('message', (m: { type: string }) => {
    if (m.type === 'stats') {
      const cpu = process.cpuUsage(started);
      process.send!({
        type: 'stats',
        cpuUs: cpu.user + cpu.system,
        rss: process.memoryUsage().rss,
        tunnels: cp.tunnel.connections().length,
      } satisfies Msg);
    }
  });
  process.send!({ type: 'started', port: cp.port } satisfies Msg);
} else {
  await main();
}

function startCp(port = 0): Promise<{ child: ChildProcess; port: number }> {
  const child = fork(self, ['cp', String(port)], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  return new Promise((resolve, reject) => {
    child.once('message', (m: Msg) =>
      m.type === 'started' ? resolve({ child, port: m.port }) : reject(new Error('unexpected message')),
    );
    child.once('exit', (code) => reject(new Error(`control plane exited with ${String(code)}`)));
  });
}

function stats(child: ChildProcess): Promise<Extract<Msg, { type: 'stats' }>> {
  return new Promise((resolve) => {
    const on = (m: Msg) => {
      if (m.type !== 'stats') return;
      child.off('message', on);
      resolve(m);
    };
    child.on('message', on);
    child.send({ type: 'stats' });
  });
}

/** Waits for `check` (sandbox/until.ts, polling every 50 ms) and returns how long it took, in ms. */
async function timed(what: string, check: () => boolean): Promise<number> {
  const began = Date.now();
  await until(what, TIMEOUT_MS, check, 50);
  return Date.now() - began;
}

async function main(): Promise<void> {
  const first = await startCp();
  const url = `ws://127.0.0.1:${first.port}/v1/tunnel`;
  const clients: TunnelClient[] = [];
  let connected = 0;
  for (let i = 0; i < N; i++) {
    const c = startTunnelClient({ url, token: `hrt_runtime_${randomUUID()}`, upstream: 'http://127.0.0.1:9/' });
    c.events.on('connected', () => connected++);
    c.events.on('disconnected', () => connected--);
    clients.push(c);
    if (i % 500 === 499) await new Promise((r) => setTimeout(r, 20)); // the first connect is not the storm measured
  }
  const initialMs = await timed('all connected at first', () => connected >= N);
  const atRest = await stats(first.child);
  console.log(
    `${N} runtimes connected in ${(initialMs / 1000).toFixed(1)} s; control plane RSS ${(atRest.rss / 2 ** 20).toFixed(0)} MiB with ${N} tunnels`,
  );

  first.child.kill('SIGKILL');
  await timed('all disconnected', () => connected <= 0);
  await new Promise((r) => setTimeout(r, DOWN_MS));
  const loadBefore = os.loadavg()[0]!;
  const second = await startCp(first.port);
  const began = Date.now();
  const allMs = await timed('all reconnected', () => connected >= N);
  const s = await stats(second.child);
  const wall = Date.now() - began;
  console.log(
    `| runtimes | down | all reconnected after | control plane CPU (of one core) over that time | RSS with all tunnels | load avg (1 min) before |`,
  );
  console.log(`| --- | --- | --- | --- | --- | --- |`);
  console.log(
    `| ${N} | ${DOWN_MS / 1000} s | ${(allMs / 1000).toFixed(2)} s | ${((s.cpuUs / 1000 / wall) * 100).toFixed(0)} % (${(s.cpuUs / 1e6).toFixed(2)} s) | ${(s.rss / 2 ** 20).toFixed(0)} MiB | ${loadBefore.toFixed(1)} |`,
  );
  await Promise.all(clients.map((c) => c.close()));
  second.child.kill('SIGTERM');
  process.exit(0);
}
