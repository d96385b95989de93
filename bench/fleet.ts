/**
 * A fleet of tenants for the benchmarks that need one at rest (bench/rest.bench.ts,
 * bench/soak.bench.ts), and the provisioner child they measure (bench/provisioner-child.ts).
 * Not a benchmark of its own (scripts/bench.sh only runs bench/*.bench.ts).
 */
import { fork, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type pg from 'pg';
import type { SecretBox } from '../provisioner/crypto.ts';
import { ScriptedEngine } from '../test/helpers/scripted-engine.ts';
import { Reconciler } from '../provisioner/reconciler/reconciler.ts';
import type { ChildMessage, ChildStats } from './provisioner-child.ts';
import { insertRootClusterQuietly, insertTenantsBulk } from '../test/helpers/bulk.ts';
import { refreshStatistics } from '../test/helpers/postgres.ts';
import { countTenantRecords } from '../test/helpers/tenants.ts';

export const KUBECONFIG =
  'apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: "https://203.0.113.10:6443"}}]\nusers: [{name: u, user: {token: bench-token-0123456789}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n';
export const ADMIN_TOKEN = 'bench-admin-token-0123456789abcdef';
const CHILD = fileURLToPath(new URL('./provisioner-child.ts', import.meta.url));

export async function sleep(ms: number): Promise<void> {
  await new Promise((r) => setTimeout(r, ms));
}

export async function addClusters(pool: pg.Pool, box: SecretBox, count: number, capacityEach: number): Promise<void> {
  for (let i = 0; i < count; i++) {
    const n = `root-${i}`;
    await insertRootClusterQuietly(pool, {
      name: n,
      region: 'eu-1',
      capacity: capacityEach,
      kubeconfigEnc: box.encrypt(KUBECONFIG, `cluster/${n}`),
    });
  }
}

/**
 * `tenants` signed up (tenant row and create operation, as the API writes them) and reconciled by
 * a fast reconciler (16 workers, the engine TEST DOUBLE returning at once) until every one is
 * Ready (`until: 'ready'`) or waiting for capacity (`until: 'waiting'`, no cluster registered).
 * Returns the seconds it took; throws after `timeoutMs`.
 */
export async function seedTenants(
  pool: pg.Pool,
  box: SecretBox,
  o: { tenants: number; until: 'ready' | 'waiting'; timeoutMs: number; prefix?: string },
): Promise<number> {
  const prefix = o.prefix ?? 'bench';
  await insertTenantsBulk(pool, o.tenants, {
    prefix,
    email: 'bench@example.com',
    plan: 'free',
    runtimeVersion: '1.0.0',
    createOperations: true,
  });
  await refreshStatistics(pool);
  const r = new Reconciler({
    pool,
    engine: new ScriptedEngine(),
    box,
    owner: 'bench-seed',
    workers: 16,
    clusterParallelism: 8,
    pollMs: 200,
  });
  await r.start();
  const began = Date.now();
  try {
    for (;;) {
      const n = await countTenantRecords(
        pool,
        o.until === 'ready' ? { phase: 'Ready' } : { attemptPlanned: true, readyReason: 'NoCapacity' },
      );
      if (n >= o.tenants) break;
      if (Date.now() - began > o.timeoutMs) throw new Error(`seeding: only ${n} of ${o.tenants} ${o.until}`);
      await sleep(500);
    }
  } finally {
    await r.stop({ graceMs: 5000 });
  }
  return (Date.now() - began) / 1000;
}

/** Starts bench/provisioner-child.ts with these settings; resolves once it listens. */
export function startProvisioner(env: Record<string, string>): Promise<{ child: ChildProcess; url: string }> {
  const child = fork(CHILD, [], {
    env: { ...process.env, BENCH_ADMIN_TOKEN: ADMIN_TOKEN, ...env },
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('the provisioner did not start within 60 s')), 60_000);
    child.once('message', (m: ChildMessage) => {
      clearTimeout(timer);
      if (m.type === 'ready') resolve({ child, url: m.url });
      else reject(new Error('unexpected message'));
    });
    child.once('exit', (code) => reject(new Error(`the provisioner exited with ${String(code)}`)));
  });
}

/** The child's counters and memory (after a full GC when `gc`). */
export function childStats(child: ChildProcess, gc = false): Promise<ChildStats> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('no stats from the provisioner within 10 s')), 10_000);
    const on = (m: ChildMessage) => {
      if (m.type !== 'stats') return;
      clearTimeout(timer);
      child.off('message', on);
      resolve(m.stats);
    };
    child.on('message', on);
    child.send({ type: 'stats', gc });
  });
}

export async function stopProvisioner(child: ChildProcess): Promise<void> {
  const exited = new Promise<void>((r) => child.once('exit', () => r()));
  child.kill('SIGKILL');
  await exited;
}
