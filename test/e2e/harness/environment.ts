/**
 * One end-to-end environment per test file: a root control plane (etcd, API server, controllers,
 * scheduler, KWOK nodes) registered through the API, the real vclusters its tenants' releases
 * create (run for their pods by sandbox/vcluster-pods.ts), the real charts from the chart mirror, a
 * database for the provisioner (also its Pulumi state backend) and the provisioner child process.
 * Everything is torn down in t.teardown, also when a test failed: processes are killed with their
 * process groups and the temp folder is removed (E2E_KEEP=1 keeps it).
 *
 * Test files take a slot of the run lock first (acquireRunLock): at most HRT_E2E_SLOTS (default
 * 2) environments run at once. A provisioning file mostly waits (Helm waiting for pods KWOK makes
 * Ready, resync periods, timers), so two share a 2-core machine (measured in docs/toolchain.md).
 */
import { readFileSync } from 'node:fs';
import { randomUUID } from 'node:crypto';
import { mkdir, mkdtemp, open, readFile, rm, rmdir, unlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CoreV1Api } from '@kubernetes/client-node';
import type { Test } from 'tap';
import type { Catalog } from '../../../runtime/catalog.ts';
import { createTestDatabase, type TestDatabase } from '../../helpers/postgres.ts';
import { ApiClient, type SignupResponse } from './api-client.ts';
import type { DerivedChart } from '../../../sandbox/charts.ts';
import type { Etcd, KubeControlPlane, Toolchain } from '../../../sandbox/control-plane.ts';
import { backendUrlFor } from '../../../provisioner/engine/pulumi-plan.ts';
import { isRunning, run, StopWaiting, until } from '../../../sandbox/processes.ts';
import {
  provisionerEnv,
  type ProvisionerProcess,
  type ProvisionerSettings,
} from '../../../sandbox/provisioner-process.ts';
import { kubernetesProvider, startLocalStack, toolchainBin } from '../../../sandbox/stack.ts';
import { vclusterBuild, type VclusterPods } from '../../../sandbox/vcluster-pods.ts';
import type { RuntimePods } from '../../../sandbox/runtime-pods.ts';
import { argoCdBin, argoCdUnavailable } from './argocd.ts';
import { refuseInEarlyPhase } from './phase.ts';

export const ROOT_CLUSTER = 'e2e-root';

/**
 * What the environment needs of its caller: a tap Test, or a benchmark's stand-in
 * (bench/engine.bench.ts) that prints comments and runs the teardowns itself.
 */
export type E2EHost = Pick<Test, 'comment' | 'teardown' | 'passing'>;

export interface E2EOptions {
  /**
   * Run alone: take every slot of the run lock (acquireRunLock), for a file whose assertions
   * bound wall time tightly (drift-watch's 60 s).
   */
  exclusive?: boolean;
  /** PROVISIONER_RESYNC_SECONDS (0: off). */
  resyncSeconds?: number;
  /** Fake nodes in the root cluster. */
  rootNodes?: number;
  extraEnv?: Record<string, string>;
  /**
   * The catalog the provisioner child runs with and the test charts are written for (default
   * runtime/catalog.ts), with `nodeArgs` that make the child load it (test/e2e/fixtures/
   * test-catalog-hooks.ts) and the chart versions it derives from real ones (charts.ts,
   * `deriveChart`).
   */
  testCatalog?: {
    catalog: Catalog;
    nodeArgs: string[];
    derivedCharts?: readonly DerivedChart[];
  };
  /**
   * Run the tenants' runtime pods as processes (sandbox/runtime-pods.ts): the agents, Argo CD's
   * application controller, repo-server and Redis (HRT_ARGOCD_BIN), so a tenant's tunnel
   * connects, its reporter reports and its Argo CD syncs. `standIns`: images whose pods run as
   * `node <script>`, a test's named stand-ins (RuntimePodsOptions.standIns).
   */
  runtimePods?: boolean | { standIns: Readonly<Record<string, string>> };
}

export interface E2E {
  dir: string;
  toolchain: Toolchain;
  etcd: Etcd;
  root: KubeControlPlane;
  /** The runner of the tenants' real vclusters (sandbox/vcluster-pods.ts). */
  vclusters: VclusterPods;
  /** The runner of the tenants' runtime pods, with `runtimePods` (sandbox/runtime-pods.ts). */
  runtimePods: RuntimePods | undefined;
  db: TestDatabase;
  settings: ProvisionerSettings;
  provisioner: ProvisionerProcess;
  /** Admin API client of the running provisioner. */
  api: ApiClient;
  /** Starts the provisioner again (after a crash) on the same port, database and data dir. */
  restartProvisioner(): Promise<ProvisionerProcess>;
  signup(organization: string, runtimeVersion: string, plan?: string): Promise<SignupResponse>;
  /**
   * The admin kubeconfig of the tenant's vcluster as vcluster exported it into `vc-vcluster` on
   * the root, made reachable from the test process (the server is the vcluster pod's address, the
   * TLS server name the exported host; the provisioner resolves that host itself).
   */
  tenantKubeconfig(tenantId: string): Promise<string>;
  timing(name: string, seconds: number): void;
  /** Runs the toolchain's `pulumi` CLI against the provisioner's state backend (same env as the engine). */
  pulumi(args: string[]): Promise<{ stdout: string; stderr: string }>;
}

/**
 * The plugin's name and version for the files' TAP output, e.g. `kubernetes provider:
 * pulumi-resource-kubernetes 4.25.0 (real, …)`: read from the schema embedded in the binary (what
 * the plugin answers to GetSchema; the build sets its version from the same value as the plugin's
 * version label, which `go version -m` does not show for a -trimpath build).
 */
export function describeKubernetesProvider(binary: string): string {
  const marker = Buffer.from('{"name":"kubernetes","displayName":"Kubernetes","version":"');
  let data: Buffer;
  try {
    data = readFileSync(binary);
  } catch (err) {
    return `kubernetes provider: ${binary} (unreadable: ${err instanceof Error ? err.message : String(err)})`;
  }
  const at = data.indexOf(marker);
  const version =
    at < 0
      ? 'with no embedded schema version'
      : data.subarray(at + marker.length, data.indexOf(0x22, at + marker.length)).toString('utf8');
  return `kubernetes provider: pulumi-resource-kubernetes ${version} (real, built from github.com/pulumi/pulumi-kubernetes/provider/v4) at ${binary}`;
}

export function describeVcluster(v: { describe: string }): string {
  return `${v.describe}; the vcluster and Argo charts are the real upstream charts from the chart mirror`;
}

/** Why a file that provisions tenants cannot run here, or undefined when it can. */
export function provisioningUnavailable(): string | undefined {
  refuseInEarlyPhase('a provisioning environment (the provider plugin and vcluster)');
  if (!kubernetesProvider())
    return (
      'no Kubernetes provider plugin: run the tier through scripts/test.sh e2e (test/e2e/prepare.sh builds it with ' +
      'scripts/kubernetes-provider.sh and sets HRT_KUBERNETES_PROVIDER, docs/e2e.md)'
    );
  if (!vclusterBuild())
    return (
      'no vcluster build: run the tier through scripts/test.sh e2e (test/e2e/prepare.sh builds vcluster and kine ' +
      'with scripts/vcluster.sh and sets HRT_VCLUSTER_BIN, docs/e2e.md)'
    );
  return undefined;
}

export { vclusterBuild };

/**
 * The run lock is a semaphore: a folder `$TMPDIR/hosted-runtimes-e2e.lock` holding one file per
 * slot taken (`slot-<n>`, the owner's pid), at most `HRT_E2E_SLOTS` of them (default 2; 1: one
 * file at a time). The folder has the path the lock had when it was a single file holding a pid,
 * so the two never both believe they hold it: a file lock at that path makes `mkdir` fail (this
 * code waits until its owner is gone), and the older code's exclusive create fails on the folder
 * (it waits until the folder is removed, which the last slot's release does).
 */
const LOCK = join(tmpdir(), 'hosted-runtimes-e2e.lock');

/** How many test files may run their environments at once (HRT_E2E_SLOTS, default 2). */
export function e2eSlots(): number {
  const raw = process.env.HRT_E2E_SLOTS;
  if (raw === undefined || raw === '') return 2;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 1 || n > 8)
    throw new Error(`HRT_E2E_SLOTS must be a whole number from 1 to 8, not ${JSON.stringify(raw)}`);
  return n;
}

function code(err: unknown): string | undefined {
  return (err as { code?: string }).code;
}

/** Removes `file` when the pid it holds is not running (a file of a process that died). */
async function removeIfStale(file: string): Promise<void> {
  const owner = Number((await readFile(file, 'utf8').catch(() => '')).trim());
  if (owner && !isRunning(owner)) await unlink(file).catch(() => {});
}

/** One attempt at a slot of `from`..`to`: its file's path, or undefined when each is taken. */
async function takeSlot(from: number, to: number): Promise<string | undefined> {
  try {
    await mkdir(LOCK);
  } catch (err) {
    if (code(err) !== 'EEXIST') throw new StopWaiting(String(err));
  }
  for (let n = from; n <= to; n++) {
    const file = join(LOCK, `slot-${n}`);
    try {
      const fh = await open(file, 'wx');
      await fh.writeFile(String(process.pid));
      await fh.close();
      return file;
    } catch (err) {
      // ENOTDIR: the lock is a single file (older code holds it, or held it and died);
      // ENOENT: the folder was removed by the last release between mkdir and open.
      if (code(err) === 'ENOTDIR') await removeIfStale(LOCK);
      else if (code(err) === 'EEXIST') await removeIfStale(file);
      else if (code(err) !== 'ENOENT') throw new StopWaiting(String(err));
      if (code(err) !== 'EEXIST') return undefined;
    }
  }
  return undefined;
}

/**
 * A slot of the run lock (see LOCK), waited for up to `timeoutMs`; resolves to its release.
 * Slots of processes that died are taken over. `exclusive`: every slot, taken in order (so two
 * exclusive files cannot each hold a part), for a file whose assertions bound wall time tightly
 * enough that another environment beside it could break them.
 */
export async function acquireRunLock(
  timeoutMs: number,
  opts: { exclusive?: boolean } = {},
): Promise<() => Promise<void>> {
  const slots = e2eSlots();
  const deadline = Date.now() + timeoutMs;
  const what = `a slot of the end-to-end run lock (${LOCK}, ${slots} slots)`;
  const files: string[] = [];
  const release = async () => {
    for (const file of files) {
      const owner = Number((await readFile(file, 'utf8').catch(() => '')).trim());
      if (owner === process.pid) await unlink(file).catch(() => {});
    }
    // The last slot released removes the folder (ENOTEMPTY while other slots are held).
    await rmdir(LOCK).catch(() => {});
  };
  try {
    if (opts.exclusive) {
      for (let n = 0; n < slots; n++)
        files.push(
          await until(
            `slot ${n} of ${what}, for a file that runs alone`,
            Math.max(0, deadline - Date.now()),
            () => takeSlot(n, n),
            1000,
          ),
        );
    } else files.push(await until(what, timeoutMs, () => takeSlot(0, slots - 1), 1000));
  } catch (err) {
    await release();
    throw err;
  }
  return release;
}

/** Timings of this run, appended as JSON lines to E2E_TIMINGS_FILE when set. */
export async function recordTiming(t: E2EHost, name: string, seconds: number): Promise<void> {
  t.comment(`timing: ${name} = ${seconds.toFixed(1)} s`);
  const file = process.env.E2E_TIMINGS_FILE;
  if (file)
    await writeFile(
      file,
      JSON.stringify({ name, seconds: Number(seconds.toFixed(1)), at: new Date().toISOString() }) + '\n',
      { flag: 'a' },
    );
}

export async function startE2E(t: E2EHost, opts: E2EOptions = {}): Promise<E2E> {
  refuseInEarlyPhase('startE2E (a provisioning environment)');
  const bin = toolchainBin();
  const provider = kubernetesProvider();
  const vcluster = vclusterBuild();
  if (!provider || !vcluster) throw new Error(provisioningUnavailable());
  t.comment(describeKubernetesProvider(provider));
  t.comment(describeVcluster(vcluster));
  const release = await acquireRunLock(20 * 60_000, { exclusive: opts.exclusive ?? false });
  const dir = await mkdtemp(join(tmpdir(), 'hrt-e2e-'));
  const cleanups: Array<() => Promise<void>> = [release];
  let failed = false;
  t.teardown(async () => {
    failed = failed || !t.passing();
    for (const c of [...cleanups].reverse()) {
      try {
        await c();
      } catch (err) {
        console.error(`e2e teardown: ${err instanceof Error ? err.message : String(err)}`);
      }
    }
  });
  const log = (msg: string) => t.comment(msg);
  try {
    const db = await createTestDatabase();
    cleanups.push(() => db.drop());
    const stack = await startLocalStack({
      dir,
      toolchainBin: bin,
      provider,
      databaseUrl: db.url,
      rootClusterName: ROOT_CLUSTER,
      ...(opts.rootNodes !== undefined ? { rootNodes: opts.rootNodes } : {}),
      ...(opts.testCatalog
        ? {
            catalog: opts.testCatalog.catalog,
            derivedCharts: opts.testCatalog.derivedCharts ?? [],
            nodeArgs: opts.testCatalog.nodeArgs,
          }
        : {}),
      ...(opts.resyncSeconds !== undefined ? { resyncSeconds: opts.resyncSeconds } : {}),
      ...(opts.extraEnv ? { extraEnv: opts.extraEnv } : {}),
      realVclusters: { bin: vcluster.bin, versions: vcluster.versions },
      ...(opts.runtimePods
        ? {
            runtimePods: {
              argocdBin: runtimeArgoCd(),
              ...(typeof opts.runtimePods === 'object' ? { standIns: opts.runtimePods.standIns } : {}),
            },
          }
        : {}),
      log,
      cleanups,
    });
    const { toolchain, etcd, root, charts, settings } = stack;
    const vclusters = stack.vclusterPods!;
    await recordTiming(t, 'root control plane start (etcd excluded)', root.startSeconds);
    log(`real charts from the chart mirror ${charts.mirror}: ${charts.real.join(', ')}`);
    for (const d of charts.derived) log(`derived chart (built by the test): ${d}`);
    cleanups.push(async () => {
      if (failed || !t.passing()) {
        // Warnings, errors and the reconciler's own lines; request logs are noise here.
        const lines = (await stack.provisioner.process.tail(2000))
          .split('\n')
          .filter((l) => !l.startsWith('{') || /"level":[456]0|"component":"reconciler"/.test(l));
        console.error(`--- provisioner log (warnings, errors, reconciler; tail) ---\n${lines.slice(-40).join('\n')}`);
      }
    });
    const api = new ApiClient(stack.provisioner.url, settings.adminToken);

    if (process.env.E2E_KEEP !== '1') cleanups.unshift(() => rm(dir, { recursive: true, force: true }));
    else t.comment(`E2E_KEEP=1: keeping ${dir}`);

    const e2e: E2E = {
      dir,
      toolchain,
      etcd,
      root,
      vclusters,
      runtimePods: stack.runtimePods,
      db,
      settings,
      get provisioner() {
        return stack.provisioner;
      },
      api,
      restartProvisioner: () => stack.restartProvisioner(),
      async signup(organization, runtimeVersion, plan = 'team') {
        const res = await new ApiClient(stack.provisioner.url, '').request('POST /v1/signup', {
          body: { organization, email: `ops@${organization}.example`, plan, runtimeVersion },
          headers: { 'idempotency-key': `e2e-${organization}-${randomUUID()}` },
        });
        if (res.status !== 202 || !res.ok)
          throw new Error(`signup ${organization}: ${res.status} ${JSON.stringify(res.body)}`);
        return res.body;
      },
      async tenantKubeconfig(tenantId) {
        const secret = await root.kc
          .makeApiClient(CoreV1Api)
          .readNamespacedSecret({ name: 'vc-vcluster', namespace: `tenant-${tenantId}` });
        const data = secret.data?.config;
        if (!data) throw new Error(`Secret tenant-${tenantId}/vc-vcluster has no config`);
        return vclusters.reachable(`tenant-${tenantId}`, Buffer.from(data, 'base64').toString('utf8'));
      },
      timing(name, seconds) {
        void recordTiming(t, name, seconds);
      },
      async pulumi(args) {
        const env = {
          ...provisionerEnv(settings, stack.provisioner.port),
          PULUMI_HOME: settings.pulumiHome,
          PULUMI_BACKEND_URL: backendUrlFor(undefined, settings.databaseUrl),
          PULUMI_DIY_BACKEND_NO_LEGACY_WARNING: 'true',
        };
        await mkdir(join(dir, 'pulumi-cli'), { recursive: true });
        return run(join(bin, 'pulumi'), [...args, '--non-interactive'], {
          env,
          cwd: join(dir, 'pulumi-cli'),
          timeoutMs: 120_000,
        });
      },
    };
    return e2e;
  } catch (err) {
    failed = true;
    throw err;
  }
}

/** The Argo CD build the runtime pods run (HRT_ARGOCD_BIN); without it the file fails, naming why. */
function runtimeArgoCd(): string {
  const bin = argoCdBin();
  if (!bin) throw new Error(`the runtime pods' Argo CD: ${argoCdUnavailable() ?? 'no build'}`);
  return bin;
}
