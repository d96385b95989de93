/**
 * What one engine run costs, per operation kind, on the real engine: the end-to-end environment
 * (test/e2e/harness: a real kube-apiserver root cluster with KWOK nodes, the real vcluster of each
 * tenant, the real charts, the real Pulumi CLI and the real Kubernetes provider plugin that
 * HRT_KUBERNETES_PROVIDER names, built by scripts/kubernetes-provider.sh) and the real
 * provisioner process. For create, upgrade, suspend, resume, sleep, wake, delete, a resync with nothing to
 * change and a resync that corrects drift (a quota deleted by hand first): the engine's wall time
 * (operation started → finished), the CPU of the engine's process tree (the CLI and the provider
 * plugins, the provisioner's descendants) and of the provisioner process itself (which hosts the
 * inline program), and the peak RSS of the tree (bench/proc-tree.ts says how, and its error).
 *
 * Then the candidates for a cheaper resync with nothing to change, on one Ready tenant's stack,
 * run by an engine child of the bench (bench/engine-child.ts) while the provisioner is idle, as
 * ratios to today's `refresh + up` in the same run; and what each candidate reports for a quota
 * deleted by hand (whether it sees the drift).
 *
 *   HRT_TOOLCHAIN_BIN=… HRT_KUBERNETES_PROVIDER=$(bash scripts/kubernetes-provider.sh | tail -1)/pulumi-resource-kubernetes npm run bench -- engine
 *
 * BENCH_ENGINE_ROUNDS (default 2): tenants taken through the whole life cycle one after the
 * other; BENCH_ENGINE_OPTION_RUNS (default 3): runs of each resync candidate (0: none).
 */
import { spawn } from 'node:child_process';
import { cpus, loadavg, totalmem } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { catalog } from '../runtime/catalog.ts';
import {
  describeKubernetesProvider,
  provisioningUnavailable,
  startE2E,
  type E2E,
  type E2EHost,
} from '../test/e2e/harness/environment.ts';
import { kube } from '../test/e2e/harness/kube.ts';
import { StopWaiting, until } from '../sandbox/processes.ts';
import { provisionerEnv, REPO_ROOT, withHostsFile } from '../sandbox/provisioner-process.ts';
import { backendUrlFor } from '../provisioner/engine/pulumi-plan.ts';
import { quiescent, TreeSampler, type TreeUsage } from './proc-tree.ts';
import { markLastReconciled } from '../test/helpers/tenants.ts';
import { tenantOperations } from '../test/helpers/operations.ts';
import { databaseNow } from '../test/helpers/postgres.ts';
import { notifyTenantDue } from '../provisioner/store/leases.ts';
import type { OperationKind } from '../provisioner/store/states.ts';

const FROM = '1.4.1';
const TO = '1.5.0';
const ROUNDS = Number(process.env.BENCH_ENGINE_ROUNDS ?? 2);
const OPTION_RUNS = Number(process.env.BENCH_ENGINE_OPTION_RUNS ?? 3);
const SAMPLE_MS = 50;
const OP_TIMEOUT = 5 * 60_000;

const RESYNC_MODES = {
  'refresh + up': 'today: refresh, then up (two CLI runs, two program evaluations)',
  'up --refresh': 'one CLI run, the refresh inside the update',
  up: 'up without refresh: drift is not seen (only when a watch saw no change)',
  'preview --refresh': 'refresh inside a preview, no update, state not written',
  preview: 'preview without refresh, stop when it shows no changes',
  refresh: 'refresh only, up skipped when it reads no drift',
} as const;
type Mode = keyof typeof RESYNC_MODES;

const unavailable = provisioningUnavailable();
if (unavailable) {
  console.log(`engine bench skipped: ${unavailable}`);
  process.exit(0);
}

// The environment's host: comments printed, teardowns run at the end (in reverse).
const teardowns: Array<() => unknown> = [];
const host: E2EHost = {
  comment: (...args: unknown[]) => console.log(`# ${args.map(String).join(' ')}`),
  teardown: (fn: () => unknown) => void teardowns.push(fn),
  passing: () => true,
};
async function tearDown(): Promise<void> {
  for (const fn of teardowns.reverse()) await fn();
}

interface Measured extends TreeUsage {
  kind: string;
  /** operation started_at → finished_at, ms (the engine's run as the reconciler timed it). */
  engineMs: number;
  changes?: Record<string, number>;
}

const results: Measured[] = [];

async function waitOperation(e2e: E2E, tenantId: string, kind: OperationKind, after: Date): Promise<number> {
  return until(
    `${kind} of ${tenantId} to finish`,
    OP_TIMEOUT,
    async () => {
      const op = (await tenantOperations(e2e.db.pool, tenantId, { kind }))
        .filter((o) => Date.parse(o.createdAt) >= after.getTime())
        .at(-1);
      if (op?.state === 'failed') throw new StopWaiting(`${kind} failed: ${JSON.stringify(op.error)}`);
      return op?.state === 'succeeded' ? Date.parse(op.finishedAt!) - Date.parse(op.startedAt!) : undefined;
    },
    100,
  );
}

/** Measures one operation: samples the provisioner's tree from the trigger until the run's processes are gone. */
async function measure(e2e: E2E, kind: OperationKind, trigger: () => Promise<string>): Promise<Measured> {
  const pid = e2e.provisioner.process.pid;
  if (!(await quiescent(pid, 30_000))) throw new Error(`the provisioner still runs engine processes before ${kind}`);
  const after = await databaseNow(e2e.db.pool);
  const sampler = new TreeSampler(pid, SAMPLE_MS);
  sampler.start();
  const tenantId = await trigger();
  const engineMs = await waitOperation(e2e, tenantId, kind, after);
  await quiescent(pid, 10_000);
  const m: Measured = { kind, engineMs, ...sampler.stop() };
  results.push(m);
  console.log(`${kind}: ${line(m)}`);
  return m;
}

function line(m: Measured | (TreeUsage & { engineMs: number })): string {
  return (
    `engine ${(m.engineMs / 1000).toFixed(1)} s, tree CPU ${(m.treeCpuMs / 1000).toFixed(2)} s (sampled ${(m.sampledCpuMs / 1000).toFixed(2)} s), ` +
    `host CPU ${(m.rootCpuMs / 1000).toFixed(2)} s, peak tree RSS ${m.peakTreeRssMb.toFixed(0)} MiB (ΣHWM ${m.sumHwmMb.toFixed(0)}), ` +
    `host RSS +${m.rootRssGrowthMb.toFixed(0)} MiB, processes ${JSON.stringify(m.processes)} (largest peak RSS of one, MiB: ${JSON.stringify(m.peakByCommandMb)}), ${m.samples} samples at ${m.sampleMs.toFixed(1)} ms`
  );
}

async function resync(e2e: E2E, tenantId: string): Promise<string> {
  // Today's resync timer (PROVISIONER_RESYNC_SECONDS=3600) made due now: as if the hour had passed.
  await markLastReconciled(e2e.db.pool, tenantId, 2 * 3600);
  await notifyTenantDue(e2e.db.pool, tenantId);
  return tenantId;
}

async function deleteQuota(e2e: E2E, tenantId: string): Promise<void> {
  const root = kube(e2e.root.kc);
  const ns = `tenant-${tenantId}`;
  const quotas = await root.core.listNamespacedResourceQuota({ namespace: ns });
  const name = quotas.items[0]?.metadata?.name;
  if (!name) throw new Error(`tenant ${tenantId} has no quota`);
  await root.core.deleteNamespacedResourceQuota({ name, namespace: ns });
}

async function lifecycle(e2e: E2E, round: number, options: boolean): Promise<void> {
  let tenantId = '';
  await measure(e2e, 'create', async () => {
    tenantId = (await e2e.signup(`bench${round}`, FROM)).tenant.id;
    return tenantId;
  });
  const api = (action: 'suspend' | 'resume' | 'sleep' | 'wake') =>
    e2e.api.expectStatus(`POST /v1/tenants/:id/${action}`, { params: { id: tenantId } }, 202);
  await measure(e2e, 'resync', () => resync(e2e, tenantId)).then((m) => (m.kind = 'resync (no change)'));
  await deleteQuota(e2e, tenantId);
  await measure(e2e, 'resync', () => resync(e2e, tenantId)).then((m) => (m.kind = 'resync (drift corrected)'));
  await measure(e2e, 'upgrade', async () => {
    await e2e.api.expectStatus(
      'POST /v1/tenants/:id/upgrade',
      { params: { id: tenantId }, body: { version: TO } },
      202,
    );
    return tenantId;
  });
  await measure(e2e, 'suspend', async () => {
    await api('suspend');
    return tenantId;
  });
  await measure(e2e, 'resume', async () => {
    await api('resume');
    return tenantId;
  });
  await measure(e2e, 'resync', () => resync(e2e, tenantId)).then((m) => (m.kind = 'resync (no change)'));
  // Idle sleep and wake (issue 54): suspend's engine path plus the vcluster's synced pods deleted,
  // and resume's; measured apart so that a plan's sleep schedule can be costed on its own.
  await measure(e2e, 'sleep', async () => {
    await api('sleep');
    return tenantId;
  });
  await measure(e2e, 'wake', async () => {
    await api('wake');
    return tenantId;
  });
  if (options && OPTION_RUNS > 0) await resyncOptions(e2e, tenantId);
  await measure(e2e, 'delete', async () => {
    await e2e.api.expectStatus('DELETE /v1/tenants/:id', { params: { id: tenantId } }, 202);
    return tenantId;
  });
}

interface OptionResult extends TreeUsage {
  mode: Mode;
  engineMs: number;
  selfCpuMs: number;
  changes: Record<string, number>;
}

/** The resync candidates, run by an engine child on the tenant's stack (the provisioner idle). */
async function resyncOptions(e2e: E2E, tenantId: string): Promise<void> {
  const env = {
    ...provisionerEnv(e2e.settings, e2e.provisioner.port),
    PULUMI_HOME: e2e.settings.pulumiHome,
    PULUMI_BACKEND_URL: backendUrlFor(undefined, e2e.settings.databaseUrl),
    PULUMI_DIY_BACKEND_NO_LEGACY_WARNING: 'true',
  };
  const args = {
    workDir: join(e2e.settings.dataDir, 'engine', tenantId),
    stackName: `tenant-${tenantId}`,
    cliDir: e2e.settings.toolchainBin,
    pulumiHome: e2e.settings.pulumiHome,
    envVars: {
      PULUMI_BACKEND_URL: env.PULUMI_BACKEND_URL,
      PULUMI_HOME: env.PULUMI_HOME,
      PULUMI_SKIP_UPDATE_CHECK: 'true',
      PULUMI_DIY_BACKEND_NO_LEGACY_WARNING: 'true',
      PULUMI_CONFIG_PASSPHRASE: e2e.settings.passphrase,
    },
  };
  // In the provisioner's view of the names real vclusters export (its hosts file), so that the
  // candidates reach the tenant's vcluster as the provisioner's own runs do. unshare and sh exec
  // the command, so the child's pid is the engine child's.
  const command = [process.execPath, join(REPO_ROOT, 'bench', 'engine-child.ts'), JSON.stringify(args)];
  const wrapped = withHostsFile(e2e.settings.hostsFile, command);
  const child = spawn(wrapped[0]!, wrapped.slice(1), {
    env,
    cwd: args.workDir,
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  const lines = createInterface({ input: child.stdout })[Symbol.asyncIterator]();
  const next = async (): Promise<string> => {
    const r = await lines.next();
    if (r.done) throw new Error('the engine child exited');
    return r.value;
  };
  try {
    if ((await next()) !== 'ready') throw new Error('the engine child did not start');
    const run = async (mode: Mode): Promise<OptionResult> => {
      await quiescent(child.pid!, 10_000);
      const sampler = new TreeSampler(child.pid!, SAMPLE_MS);
      const began = performance.now();
      sampler.start();
      child.stdin.write(`${mode}\n`);
      const answer = JSON.parse(await next()) as {
        changes?: Record<string, number>;
        selfCpuMs?: number;
        error?: string;
      };
      const engineMs = performance.now() - began;
      await quiescent(child.pid!, 10_000);
      const usage = sampler.stop();
      if (answer.error) throw new Error(`${mode}: ${answer.error}`);
      return { mode, engineMs, selfCpuMs: answer.selfCpuMs!, changes: answer.changes!, ...usage };
    };
    await run('preview'); // warm-up of the child (module loading, first evaluation): not counted
    const modes = Object.keys(RESYNC_MODES) as Mode[];
    const byMode = new Map<Mode, OptionResult[]>();
    for (let i = 0; i < OPTION_RUNS; i++) {
      for (const mode of modes) {
        const r = await run(mode);
        byMode.set(mode, [...(byMode.get(mode) ?? []), r]);
        console.log(
          `option ${mode} #${i + 1}: ${line(r)}, self CPU ${(r.selfCpuMs / 1000).toFixed(2)} s, changes ${JSON.stringify(r.changes)}`,
        );
      }
    }
    // What each candidate reports for a quota deleted by hand (restored after each by refresh + up).
    const seen = new Map<Mode, Record<string, number>>();
    for (const mode of modes) {
      await deleteQuota(e2e, tenantId);
      seen.set(mode, (await run(mode)).changes);
      await run('refresh + up');
    }
    optionTable(byMode, seen);
  } finally {
    child.stdin.end();
    await new Promise((r) => child.once('exit', r));
  }
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};
const s1 = (ms: number) => (ms / 1000).toFixed(1);
const s2 = (ms: number) => (ms / 1000).toFixed(2);
const mb = (x: number) => x.toFixed(0);

function optionTable(byMode: Map<Mode, OptionResult[]>, seen: Map<Mode, Record<string, number>>): void {
  const base = byMode.get('refresh + up')!;
  const baseCpu = median(base.map((r) => r.treeCpuMs + r.selfCpuMs));
  const baseWall = median(base.map((r) => r.engineMs));
  console.log(
    `\nresync candidates, nothing to change (median of ${OPTION_RUNS}; ratios to today's refresh + up in this run)`,
  );
  console.log(
    '| mode | wall s | tree CPU s | program host CPU s | total CPU s | CPU ratio | wall ratio | peak tree RSS MiB | a hand-deleted quota reported as |',
  );
  console.log('| --- | --- | --- | --- | --- | --- | --- | --- | --- |');
  for (const [mode, rs] of byMode) {
    const cpu = median(rs.map((r) => r.treeCpuMs + r.selfCpuMs));
    const wall = median(rs.map((r) => r.engineMs));
    const drift = seen.get(mode) ?? {};
    console.log(
      `| ${mode} | ${s1(wall)} | ${s2(median(rs.map((r) => r.treeCpuMs)))} | ${s2(median(rs.map((r) => r.selfCpuMs)))} | ${s2(cpu)} | ` +
        `${(cpu / baseCpu).toFixed(2)} | ${(wall / baseWall).toFixed(2)} | ${mb(Math.max(...rs.map((r) => r.peakTreeRssMb)))} | ` +
        `${Object.keys(drift).length ? JSON.stringify(drift) : 'nothing (not seen)'} |`,
    );
  }
}

function kindTable(): void {
  const kinds = [
    'create',
    'upgrade',
    'suspend',
    'resume',
    'sleep',
    'wake',
    'delete',
    'resync (no change)',
    'resync (drift corrected)',
  ];
  console.log(`\nper operation kind (median of the runs; max for RSS), sampling every ${SAMPLE_MS} ms`);
  console.log(
    '| kind | runs | engine wall s | tree CPU s | sampled CPU s (error) | provisioner CPU s | CPU total s | peak tree RSS MiB | ΣHWM MiB | provisioner RSS growth MiB |',
  );
  console.log('| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |');
  for (const kind of kinds) {
    const rs = results.filter((r) => r.kind === kind);
    if (rs.length === 0) continue;
    const tree = median(rs.map((r) => r.treeCpuMs));
    const sampled = median(rs.map((r) => r.sampledCpuMs));
    const err = median(rs.map((r) => (r.treeCpuMs - r.sampledCpuMs) / Math.max(1, r.treeCpuMs)));
    console.log(
      `| ${kind} | ${rs.length} | ${s1(median(rs.map((r) => r.engineMs)))} | ${s2(tree)} | ${s2(sampled)} (${(err * 100).toFixed(0)} %) | ` +
        `${s2(median(rs.map((r) => r.rootCpuMs)))} | ${s2(median(rs.map((r) => r.treeCpuMs + r.rootCpuMs)))} | ` +
        `${mb(Math.max(...rs.map((r) => r.peakTreeRssMb)))} | ${mb(Math.max(...rs.map((r) => r.sumHwmMb)))} | ` +
        `${mb(Math.max(...rs.map((r) => r.rootRssGrowthMb)))} |`,
    );
  }
  fleet();
}

/** Cores and memory for a fleet, from the medians above (Little's law for the concurrent runs). */
function fleet(): void {
  const of = (kind: string) => results.filter((r) => r.kind === kind);
  const cpuS = (kind: string) => median(of(kind).map((r) => r.treeCpuMs + r.rootCpuMs)) / 1000;
  const wallS = (kind: string) => median(of(kind).map((r) => r.engineMs)) / 1000;
  const rssMb = (kind: string) => Math.max(...of(kind).map((r) => r.peakTreeRssMb + r.rootRssGrowthMb));
  if (of('resync (no change)').length === 0 || of('upgrade').length === 0) return;
  console.log('\nfleet arithmetic (engine only; the control plane itself is in docs/benchmarks.md "Cost at rest")');
  console.log('| tenants | resyncs/tenant/day | cores (mean) | concurrent runs (mean) | memory (mean) |');
  console.log('| --- | --- | --- | --- | --- |');
  for (const n of [1000, 10_000]) {
    for (const perDay of [24, 1]) {
      const runsPerS = (n * perDay) / 86_400;
      const conc = runsPerS * wallS('resync (no change)');
      console.log(
        `| ${n} | ${perDay} | ${(runsPerS * cpuS('resync (no change)')).toFixed(2)} | ${conc.toFixed(2)} | ${mb(conc * rssMb('resync (no change)'))} MiB |`,
      );
    }
  }
  const up = { cpu: cpuS('upgrade'), wall: wallS('upgrade'), rss: rssMb('upgrade') };
  console.log(
    `fleet upgrade: ${up.cpu.toFixed(2)} CPU s and ${up.wall.toFixed(1)} s per tenant, ${mb(up.rss)} MiB per run: ` +
      `1,000 tenants = ${((1000 * up.cpu) / 3600).toFixed(2)} core-hours; 10,000 = ${((10_000 * up.cpu) / 3600).toFixed(1)} core-hours; ` +
      `per concurrent run ${(up.cpu / up.wall).toFixed(2)} cores and ${mb(up.rss)} MiB`,
  );
}

const started = new Date();
console.log(
  `machine: ${cpus().length} cores (${cpus()[0]?.model ?? 'unknown'}), ${(totalmem() / 2 ** 30).toFixed(0)} GiB, node ${process.version}, ` +
    `${started.toISOString()}, load ${loadavg()
      .map((l) => l.toFixed(1))
      .join(
        ' ',
      )}, ${process.env.HRT_KUBERNETES_PROVIDER ? describeKubernetesProvider(process.env.HRT_KUBERNETES_PROVIDER) : 'no kubernetes provider'}, catalog ${catalog.versions.length} versions`,
);
try {
  // The root-cluster watch is off: the quotas this bench deletes by hand would otherwise queue the
  // provisioner's own resync, which then holds the stack's lock while the bench's engine child
  // runs the resync candidates (and would be measured inside the "drift corrected" resync).
  const e2e = await startE2E(host, { resyncSeconds: 3600, extraEnv: { PROVISIONER_DRIFT_WATCH: 'false' } });
  for (let round = 1; round <= ROUNDS; round++) await lifecycle(e2e, round, round === ROUNDS);
  kindTable();
} catch (err) {
  console.error(err);
  process.exitCode = 1;
} finally {
  console.log(
    `load at the end ${loadavg()
      .map((l) => l.toFixed(1))
      .join(' ')}`,
  );
  await tearDown();
}
