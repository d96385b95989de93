/**
 * A local root cluster with the provisioner on it, as the local sandbox (`npm run sandbox`,
 * sandbox/main.ts) and every end-to-end test file (test/e2e/harness/environment.ts) start it:
 * one etcd, a real root control plane (kube-apiserver, kube-controller-manager, kube-scheduler,
 * KWOK nodes), what infra/ would install on a root cluster (the tenant PriorityClass) and what a
 * cloud would provide (a default StorageClass), the vcluster emulator, the chart directory from
 * the chart mirror, and the provisioner child process with the Pulumi engine, the root cluster
 * registered through its API. Built from the toolchain of scripts/toolchain.sh and the Kubernetes
 * provider plugin test/e2e/prepare.sh selects.
 *
 * Every process and folder it starts is registered in `cleanups` as it is started (in order), so
 * the caller stops them in reverse order, also when a later step failed.
 */
import { existsSync } from 'node:fs';
import { mkdir, readFile, symlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { CoreV1Api, SchedulingV1Api, StorageV1Api, type KubeConfig } from '@kubernetes/client-node';
import { catalog as shippedCatalog, type Catalog } from '../runtime/catalog.ts';
import { prepareTenantCharts, type DerivedChart, type TenantCharts } from './charts.ts';
import {
  kwokLabelQuery,
  startEtcd,
  startKubeControlPlane,
  toolchainFrom,
  type Etcd,
  type KubeControlPlane,
  type Toolchain,
} from './control-plane.ts';
import { serverPort, StopWaiting, until } from './processes.ts';
import { RuntimePods, runtimePodsKwokQuery } from './runtime-pods.ts';
import {
  newSecrets,
  preparePulumiHome,
  startProvisioner,
  type ProvisionerProcess,
  type ProvisionerSettings,
} from './provisioner-process.ts';
import { VclusterEmulator } from './vcluster-emulator.ts';
import {
  createPodNetwork,
  SYNCED_JOB_POD_STAGE,
  VCLUSTER_POD_LABEL,
  VclusterPods,
  type PodNetwork,
} from './vcluster-pods.ts';

/** Where the exported kubeconfig of a real vcluster points (resolved by the provisioner's hosts file). */
export const VCLUSTER_SERVER_TEMPLATE = 'https://{release}.{namespace}.vcluster.local-root:8443';

/** The binaries a local root cluster and the engine need from the toolchain's bin folder. */
export const TOOLCHAIN_BINARIES = [
  'etcd',
  'kube-apiserver',
  'kube-controller-manager',
  'kube-scheduler',
  'kwok',
  'pulumi',
] as const;

/** The toolchain bin folder from HRT_TOOLCHAIN_BIN (exported by test/e2e/prepare.sh). */
export function toolchainBin(): string {
  const bin = process.env.HRT_TOOLCHAIN_BIN;
  if (!bin)
    throw new Error(
      'HRT_TOOLCHAIN_BIN is not set: start through scripts/sandbox.sh or scripts/test.sh e2e (both source test/e2e/prepare.sh)',
    );
  for (const b of TOOLCHAIN_BINARIES) {
    if (!existsSync(join(bin, b)))
      throw new Error(
        `${join(bin, b)} is missing: scripts/toolchain.sh did not build it (see ${join(bin, '..', 'FAILED')})`,
      );
  }
  return bin;
}

/**
 * The Kubernetes provider plugin binary (HRT_KUBERNETES_PROVIDER: the real
 * pulumi-resource-kubernetes that test/e2e/prepare.sh builds with scripts/kubernetes-provider.sh),
 * or undefined when none is available.
 */
export function kubernetesProvider(): string | undefined {
  const p = process.env.HRT_KUBERNETES_PROVIDER;
  return p && existsSync(p) ? p : undefined;
}

async function createPriorityClass(kc: KubeConfig): Promise<void> {
  // What infra/ installs on every root cluster; the vcluster control plane runs with it.
  await kc.makeApiClient(SchedulingV1Api).createPriorityClass({
    body: {
      apiVersion: 'scheduling.k8s.io/v1',
      kind: 'PriorityClass',
      metadata: { name: 'tenant-control-plane' },
      value: 1_000_000,
      globalDefault: false,
    },
  });
}

/**
 * Persistent volumes for the vcluster StatefulSets' claims (the real chart asks for one per tenant;
 * a cloud would provision it): a pool of pre-created hostPath volumes of the default StorageClass
 * `e2e-volume-pool`, which binds a claim when its pod is scheduled (`WaitForFirstConsumer`, no
 * provisioner: the local-volume pattern, and what most clouds' default classes do). The scheduler
 * binds a volume as it places the pod, so a pod never waits as unschedulable for a claim the
 * volume binder has not bound yet (with immediate binding such a pod could stay unscheduled for
 * kube-scheduler's 5-minute unschedulable-pod flush). A stand-in for the cloud's storage
 * provisioner; with no kubelet nothing touches the paths.
 */
const VOLUME_POOL_CLASS = 'e2e-volume-pool';

export async function createVolumePool(kc: KubeConfig, count = 24): Promise<void> {
  const core = kc.makeApiClient(CoreV1Api);
  await kc.makeApiClient(StorageV1Api).createStorageClass({
    body: {
      apiVersion: 'storage.k8s.io/v1',
      kind: 'StorageClass',
      metadata: { name: VOLUME_POOL_CLASS, annotations: { 'storageclass.kubernetes.io/is-default-class': 'true' } },
      provisioner: 'kubernetes.io/no-provisioner',
      volumeBindingMode: 'WaitForFirstConsumer',
      reclaimPolicy: 'Retain',
    },
  });
  for (let i = 0; i < count; i++)
    await core.createPersistentVolume({
      body: {
        apiVersion: 'v1',
        kind: 'PersistentVolume',
        metadata: { name: `e2e-volume-${i}`, labels: { 'e2e.hosted-runtimes/volume-pool': 'true' } },
        spec: {
          capacity: { storage: '100Gi' },
          accessModes: ['ReadWriteOnce'],
          persistentVolumeReclaimPolicy: 'Retain',
          storageClassName: VOLUME_POOL_CLASS,
          hostPath: { path: `/var/lib/e2e-volume-pool/${i}` },
        },
      },
    });
}

export interface LocalStackOptions {
  /** Folder for every process's data and logs (the caller creates and removes it). */
  dir: string;
  toolchainBin: string;
  /** The Kubernetes provider plugin binary. */
  provider: string;
  /** A migrated (or empty) PostgreSQL database for the provisioner and its Pulumi state. */
  databaseUrl: string;
  /** The name the root cluster is registered under. */
  rootClusterName: string;
  /** Fake nodes in the root cluster (default 3). */
  rootNodes?: number;
  /** The catalog the charts are prepared for (default runtime/catalog.ts). */
  catalog?: Catalog;
  derivedCharts?: readonly DerivedChart[];
  /** PROVISIONER_RESYNC_SECONDS (0: off). */
  resyncSeconds?: number;
  extraEnv?: Record<string, string>;
  nodeArgs?: string[];
  /** Prefix of the generated admin key (default `e2e`). */
  keyPrefix?: string;
  /** Fixed provisioner port (default: a free one). */
  port?: number;
  /**
   * Real vclusters (sandbox/vcluster-pods.ts) from this build of vcluster and kine, in place of
   * the emulator: each tenant's vcluster pod runs `vcluster start` (root only).
   */
  realVclusters?: { bin: string; versions: readonly string[] };
  /**
   * With real vclusters: run the tenants' runtime pods as processes (sandbox/runtime-pods.ts): the
   * agents, and Argo CD from `argocdBin` (scripts/argocd.sh) when given; the pods reach the
   * provisioner at its loopback port, as pods on the host network would.
   */
  runtimePods?: { argocdBin?: string | undefined; standIns?: Readonly<Record<string, string>> };
  /** Lines about what was started (the emulator's, the charts'). */
  log: (msg: string) => void;
  /** Called as each step completes, with its duration. */
  progress?: (step: string, seconds: number) => void;
  /** Where stop functions are registered as things start; the caller runs them in reverse. */
  cleanups: Array<() => Promise<void>>;
}

export interface LocalStack {
  toolchain: Toolchain;
  etcd: Etcd;
  root: KubeControlPlane;
  /** The vcluster emulator, when real vclusters were not asked for. */
  emulator: VclusterEmulator | undefined;
  /** The real vclusters' runner, when asked for. */
  vclusterPods: VclusterPods | undefined;
  /** The runtime pods' runner, when asked for. */
  runtimePods: RuntimePods | undefined;
  charts: TenantCharts;
  settings: ProvisionerSettings;
  readonly provisioner: ProvisionerProcess;
  /** Starts the provisioner again (after a crash) on the same port, database and data dir. */
  restartProvisioner(): Promise<ProvisionerProcess>;
}

export async function startLocalStack(o: LocalStackOptions): Promise<LocalStack> {
  const timed = async <T>(step: string, fn: () => Promise<T>): Promise<T> => {
    const started = Date.now();
    const value = await fn();
    o.progress?.(step, (Date.now() - started) / 1000);
    return value;
  };
  const toolchain = toolchainFrom(o.toolchainBin);
  // Two chains start side by side: the root cluster (etcd, control plane, emulator) and the
  // provisioner (charts, engine); neither needs the other until the cluster is registered. Stops
  // are registered first, in an order that stops the provisioner before the clusters.
  let etcd: Etcd | undefined;
  let root: KubeControlPlane | undefined;
  let emulator: VclusterEmulator | undefined;
  let vclusterPods: VclusterPods | undefined;
  let runtimePods: RuntimePods | undefined;
  let network: PodNetwork | undefined;
  // Chosen now: the runtime pods' runner routes the pods' loopback at this port to the provisioner.
  const port = o.port ?? (await serverPort());
  let provisioner: ProvisionerProcess | undefined;
  const hostsFile = o.realVclusters ? join(o.dir, 'hosts') : undefined;
  if (o.realVclusters) {
    network = await createPodNetwork();
    o.cleanups.push(async () => {
      await network?.remove();
    });
    // The provisioner starts beside the cluster; until the runner writes it, the machine's own.
    await writeFile(hostsFile!, await readFile('/etc/hosts', 'utf8').catch(() => '127.0.0.1 localhost\n'));
  }
  o.cleanups.push(async () => {
    await etcd?.stop();
  });
  o.cleanups.push(async () => {
    await root?.stop();
  });
  o.cleanups.push(async () => {
    await emulator?.stop();
    await runtimePods?.stop();
    await vclusterPods?.stop();
  });
  o.cleanups.push(async () => {
    await provisioner?.process.stop(10_000);
  });
  const cluster = async () => {
    const e = await timed('etcd', () => startEtcd(toolchain, join(o.dir, 'etcd')));
    etcd = e;
    const r = await timed('root cluster: kube-apiserver, kube-controller-manager, kube-scheduler, KWOK nodes', () =>
      startKubeControlPlane(toolchain, {
        name: 'root',
        dir: join(o.dir, 'root'),
        etcd: e,
        etcdPrefix: '/root',
        nodes: o.rootNodes ?? 3,
        ...(network
          ? {
              servingIps: [network.hostIp],
              extraKwokStages: SYNCED_JOB_POD_STAGE,
              // The vcluster pods and the runtime pods that run as processes report their own status.
              kwokLeavesPods: [
                kwokLabelQuery(VCLUSTER_POD_LABEL.label, VCLUSTER_POD_LABEL.value),
                ...(o.runtimePods ? [runtimePodsKwokQuery(o.runtimePods)] : []),
              ],
            }
          : {}),
      }),
    );
    root = r;
    await createPriorityClass(r.kc);
    await createVolumePool(r.kc);
    if (o.realVclusters && network && hostsFile) {
      vclusterPods = new VclusterPods({
        root: r.kc,
        rootServer: r.server,
        rootCaPem: r.ca.certPem,
        network,
        vclusterBin: o.realVclusters.bin,
        vclusterVersions: o.realVclusters.versions,
        kubernetesBin: o.toolchainBin,
        dir: join(o.dir, 'vclusters'),
        hostsFile,
        log: o.log,
      });
      await mkdir(join(o.dir, 'vclusters'), { recursive: true });
      await vclusterPods.start();
      if (o.runtimePods) {
        runtimePods = new RuntimePods({
          root: r.kc,
          network,
          vclusters: vclusterPods,
          argocdBin: o.runtimePods.argocdBin,
          ...(o.runtimePods.standIns ? { standIns: o.runtimePods.standIns } : {}),
          dir: join(o.dir, 'runtime-pods'),
          hostPorts: [port],
          log: o.log,
        });
        await runtimePods.start();
      }
      return;
    }
    emulator = new VclusterEmulator({
      toolchain,
      root: r.kc,
      etcd: e,
      dir: join(o.dir, 'vclusters'),
      log: o.log,
    });
    emulator.start();
  };
  let charts: TenantCharts | undefined;
  let settings: ProvisionerSettings | undefined;
  const control = async () => {
    const c = await timed('charts from the chart mirror', () =>
      prepareTenantCharts(join(o.dir, 'charts'), o.catalog ?? shippedCatalog, o.derivedCharts ?? []),
    );
    charts = c;
    // The provider plugin goes on the provisioner's PATH (the CLI takes an ambient plugin first)
    // and into its PULUMI_HOME under the SDK's version (the engine's start-up install finds it).
    const pluginBin = join(o.dir, 'plugin-bin');
    await mkdir(pluginBin, { recursive: true });
    await symlink(o.provider, join(pluginBin, 'pulumi-resource-kubernetes'));
    const pulumiHome = join(o.dir, 'pulumi-home');
    await preparePulumiHome(pulumiHome, o.provider);
    // The Pulumi CLI's Postgres backend (lib/pq) requires TLS unless told otherwise, and the
    // local server has none: say so in the URL (node-postgres reads sslmode=disable the same way).
    const databaseUrl = new URL(o.databaseUrl);
    databaseUrl.searchParams.set('sslmode', 'disable');
    const s: ProvisionerSettings = {
      toolchainBin: o.toolchainBin,
      pluginBin,
      databaseUrl: databaseUrl.toString(),
      dataDir: join(o.dir, 'provisioner-data'),
      pulumiHome,
      chartDir: c.dir,
      ...newSecrets(o.keyPrefix),
      logFile: join(o.dir, 'provisioner.log'),
      ...(o.resyncSeconds !== undefined ? { resyncSeconds: o.resyncSeconds } : {}),
      ...(o.extraEnv ? { env: o.extraEnv } : {}),
      ...(o.nodeArgs ? { nodeArgs: o.nodeArgs } : {}),
      ...(hostsFile ? { hostsFile } : {}),
    };
    if (network) {
      // The exported kubeconfigs name each vcluster by release and namespace; the hosts file
      // resolves those names to the pods' addresses, which the cluster policy must then allow.
      s.env = {
        PROVISIONER_VCLUSTER_SERVER_TEMPLATE: VCLUSTER_SERVER_TEMPLATE,
        PROVISIONER_CLUSTER_ALLOWED_CIDRS: `127.0.0.0/8,${network.cidr}`,
        ...s.env,
      };
    }
    settings = s;
    await mkdir(s.dataDir, { recursive: true });
    await timed('provisioner with the Pulumi engine', async () => {
      provisioner = await startProvisioner(s, port);
      await waitForEngine(s.logFile, 0);
    });
  };
  // Both chains settle before a failure is reported, so every stop is in place when the caller
  // runs them.
  const failed = (await Promise.allSettled([cluster(), control()])).find((r) => r.status === 'rejected');
  if (failed) throw failed.reason;
  await timed(`root cluster registered as ${o.rootClusterName}`, async () => {
    const res = await fetch(`${provisioner!.url}/v1/clusters`, {
      method: 'POST',
      headers: { authorization: `Bearer ${settings!.adminToken}`, 'content-type': 'application/json' },
      body: JSON.stringify({ name: o.rootClusterName, region: 'local', capacity: 50, kubeconfig: root!.kubeconfig }),
    });
    if (res.status !== 201)
      throw new Error(`registering the root cluster answered ${res.status}: ${(await res.text()).slice(0, 500)}`);
  });
  const started = {
    etcd: etcd!,
    root: root!,
    emulator,
    vclusterPods,
    runtimePods,
    charts: charts!,
    settings: settings!,
  };
  return {
    toolchain,
    ...started,
    get provisioner() {
      return provisioner!;
    },
    async restartProvisioner() {
      const before = (await readFile(started.settings.logFile, 'utf8').catch(() => '')).length;
      provisioner = await startProvisioner(started.settings, provisioner!.port);
      await waitForEngine(started.settings.logFile, before);
      return provisioner;
    },
  };
}

/** Waits for the engine's start-up verdict in the provisioner log written after `offset`. */
export async function waitForEngine(logFile: string, offset: number): Promise<void> {
  await until(
    'the Pulumi engine to start in the provisioner',
    120_000,
    async () => {
      const text = (await readFile(logFile, 'utf8')).slice(offset);
      if (text.includes('engine unavailable')) {
        const line = text.split('\n').find((l) => l.includes('engine unavailable'));
        throw new StopWaiting(`the provisioner's Pulumi engine is unavailable: ${line ?? ''}`);
      }
      return text.includes('reconciler started');
    },
    500,
  );
}
