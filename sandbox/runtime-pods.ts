/**
 * A hosted tenant's runtime, executing. vcluster syncs the pods of the tenant's virtual cluster
 * into its namespace on the root cluster, where KWOK's nodes mark them Running and nothing
 * executes them. This runner does, the way a kubelet would, for the pods whose image it knows:
 *
 *  - our agents (`<repository>/tunnel-client|request-router|app-proxy|event-reporter|source-server:<tag>`):
 *    the image's command, `node runtime/agents/<agent>/main.ts`, from this checkout (the Source
 *    Server's image has git: this machine's, on the PATH the runner passes, stands for it);
 *  - Argo CD (`…/argocd:<tag>`): the application controller, the repo-server and the API server
 *    (argocd-server), from the Argo CD build of scripts/argocd.sh (the container's command picks
 *    the server, as the image's multicall binary does), and the chart's redis-secret-init Job
 *    (`argocd admin redis-initial-password`, a stand-in in that build: tools/argocd/servers);
 *  - Redis (`…/redis:<tag>`): `redis-server` (Debian's package) with the chart's arguments, else the
 *    build's in-memory `redis-standin`.
 *
 * Pods of other images (Argo CD's ApplicationSet and notifications controllers, Argo Workflows,
 * Rollouts and Events, CoreDNS) keep running on KWOK only; `kwokOnly()` names them.
 *
 * Each pod gets what a kubelet gives it:
 *  - a network namespace of its own on the root cluster's pod network (sandbox/vcluster-pods.ts),
 *    so every pod has its address and its ports;
 *  - its environment: the container's `env` and `envFrom`, Secrets and ConfigMaps resolved in the
 *    tenant namespace as vcluster translated their names, field references (vcluster points
 *    `metadata.name` and the like at its annotations), `$(VAR)` references; vcluster has already
 *    written the service links and KUBERNETES_SERVICE_HOST (the vcluster's Service) into it;
 *  - its volumes at their mountPaths in a private mount namespace (sandbox/runtime-pod.sh):
 *    Secrets, ConfigMaps, downward API files, projected volumes — among them the service-account
 *    token vcluster issued in the virtual cluster and put in the pod's annotation — and emptyDirs;
 *  - Service names resolving as in the cluster: /etc/hosts of the pod lists every Service of the
 *    tenant by its virtual name (`name`, `name.namespace`, `name.namespace.svc`,
 *    `name.namespace.svc.cluster.local`) at its cluster IP, plus the pod's hostAliases; and
 *    Service traffic routed as kube-proxy's nftables mode routes it: a DNAT table in each pod's
 *    namespace from every cluster IP and port to the ready endpoints (the pods this runner runs
 *    that the Service selects, at the target port), a port with none refused with a TCP reset
 *    (as kube-proxy refuses a Service without endpoints), and from the `kubernetes` Service (port
 *    443) to the vcluster pod's API server (8443), whose certificate names that cluster IP;
 *  - the pod's runAsUser and runAsGroup, no capabilities; a container that exits is started again
 *    with the kubelet's back-off (a Job's pod runs once).
 *
 * Addresses outside the cluster: the control plane listens on this machine's loopback, and its
 * public URL says so (http://127.0.0.1:<port>, the default). In each pod's namespace, 127.0.0.1 at
 * each port of `hostPorts` is routed (DNAT and masquerade) to the pod network's gateway
 * (`network.hostIp`), where this runner relays to that port on the machine's 127.0.0.1: a pod
 * reaches the control plane as a pod on the host network would.
 *
 * Pod status is the processes', as a kubelet reports it (KWOK leaves these pods alone:
 * `runtimePodsKwokQuery`): Running with the container's start time once its process starts; Ready
 * only once its readiness probe (httpGet or tcpSocket, at the probe's initial delay, period,
 * timeout and thresholds) passes, or when started without one; not Ready when the process exits,
 * with its exit code and reason as the container's last state and the restart counted when it
 * starts again; a Job's pod Succeeded or Failed by its exit code. vcluster syncs that status into
 * the virtual cluster.
 *
 * What stays simulated: liveness and startup probes and exec/grpc readiness probes (not run: a
 * container with one of those only is Ready when started), Service routing (every running process
 * is an endpoint, Ready or not), resource limits, readOnlyRootFilesystem, init containers (Argo
 * CD's copyutil: reported completed), image file systems (a container sees the machine's files
 * beside its volumes), and DNS (the hosts file stands for the cluster's DNS service).
 */
import { RUNTIME_AGENTS } from '../runtime/component/agents.ts';
import {
  CoreV1Api,
  type KubeConfig,
  type V1ConfigMap,
  type V1Container,
  type V1ContainerState,
  type V1Pod,
  type V1PodCondition,
  type V1Probe,
  type V1Secret,
  type V1Service,
} from '@kubernetes/client-node';
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { constants as osConstants } from 'node:os';
import { chmod, chown, mkdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import net from 'node:net';
import { basename, dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import type { KwokPodQuery } from './control-plane.ts';
import { sleep, startProcess, type ManagedProcess } from './processes.ts';
import { clearNetns, createPodNetns, startTcpRelay, type PodNetwork, type VclusterPods } from './vcluster-pods.ts';

const run = promisify(execFile);
const POD_SCRIPT = join(dirname(fileURLToPath(import.meta.url)), 'runtime-pod.sh');
const REPO_ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const AGENTS = new Set<string>(RUNTIME_AGENTS.map((a) => a.name));
const ARGOCD_SERVERS = new Set(['argocd-application-controller', 'argocd-repo-server', 'argocd-server']);
const NAME_ANNOTATION = 'vcluster.loft.sh/object-name';
const NAMESPACE_ANNOTATION = 'vcluster.loft.sh/object-namespace';
const MANAGED_BY_LABEL = 'vcluster.loft.sh/managed-by';
/**
 * Pods started at once (a kubelet starts a node's pods in parallel): a runtime's pods all at once
 * now that a start is a few processes (eight before; the Argo CD server was in a wake's second
 * round).
 */
const START_PARALLELISM = 16;
/** How often the runner looks for pods to start (a start does not wait for the next look). */
const POLL_MS = 300;

/** What the runner needs of the vclusters (sandbox/vcluster-pods.ts `VclusterPods`). */
export type PodVclusters = Pick<VclusterPods, 'namespaces' | 'allocate' | 'release'> & {
  get(namespace: string): { ready: boolean; ip: string } | undefined;
};

export interface RuntimePodsOptions {
  root: KubeConfig;
  network: PodNetwork;
  /** The tenants' vclusters: which namespaces run one, their addresses, and the address slots. */
  vclusters: PodVclusters;
  /** Folder with `argocd` and `redis-standin` (scripts/argocd.sh); without it Argo CD stays on KWOK. */
  argocdBin?: string | undefined;
  /** `redis-server` to run for Redis pods; default: the one on PATH, else the build's redis-standin. */
  redisServer?: string | undefined;
  /** One folder per pod (its volumes, hosts file, log). */
  dir: string;
  /** Ports relayed from the pod network's gateway to 127.0.0.1 (the control plane's). */
  hostPorts: readonly number[];
  pollMs?: number;
  log?: (msg: string) => void;
  /**
   * Images (their names, without registry, tag or digest) whose pods run as `node <script>`: a
   * test's named stand-ins for components this runner has no process for (an Argo Events event
   * source: docs/e2e.md). Pods of other unknown images stay on KWOK.
   */
  standIns?: Readonly<Record<string, string>>;
}

/** The container's readiness as its probe found it (the kubelet's prober worker). */
interface Readiness {
  ready: boolean;
  successes: number;
  failures: number;
  timer?: NodeJS.Timeout;
}

/** A container's exit, as the kubelet reports it in `state`/`lastState.terminated`. */
interface Termination {
  exitCode: number;
  reason: string;
  signal?: string;
  startedAt: Date;
  finishedAt: Date;
}

/** What runs for a container: a program, its arguments, and what the image would set. */
interface Program {
  kind: 'agent' | 'argocd' | 'redis' | 'job' | 'stand-in';
  command: string;
  args: string[];
  env: Record<string, string>;
  /** Set over the pod's environment: what the image has that this machine does not. */
  forcedEnv?: Record<string, string>;
  /** A folder of programs the image has on its PATH, bound read-only at /run/hrt-pod/bin. */
  bin?: string;
  /**
   * Ports the program binds on the pod's loopback only where the image binds all addresses:
   * forwarded from the pod's address to 127.0.0.1 in its network namespace, so its probe and its
   * Service reach them as in the image.
   */
  loopbackPorts?: number[];
  cwd: string;
}

export interface RunningPod {
  namespace: string;
  name: string;
  uid: string;
  /** The pod's name and namespace inside the tenant's virtual cluster. */
  virtual: { name: string; namespace: string };
  container: string;
  kind: Program['kind'];
  ip: string;
  netns: string;
  process: ManagedProcess;
  starts: number;
  startedAt: number;
  /** Restarts of this pod's container (the pod's uid), and its last exit. */
  restartCount: number;
  lastTerminated?: Termination | undefined;
  readiness: Readiness;
  labels: Record<string, string>;
  /** Container ports by name (Services' named target ports). */
  ports: Map<string, number>;
  /** The pod as it was started (its hostAliases and names, for its hosts file). */
  pod: V1Pod;
  /** The pod's folder, and its hosts file as last written. */
  dir: string;
  hosts: string;
  /** The `kubernetes` Service's address in the pod's environment (vcluster writes it). */
  kubernetesIp?: string | undefined;
  /** Program.loopbackPorts. */
  loopbackPorts: number[];
  timings: StartTimings;
}

/** Where a pod's start went (ms): see `RuntimePods.startTimings`. */
export interface StartTimings {
  env: number;
  volumes: number;
  files: number;
  netns: number;
  /** From the spawn to the container's exec (mounts and routing in runtime-pod.sh). */
  exec: number | undefined;
  /** From the start's beginning to the spawn. */
  total: number;
}

/** The table forwarding `ports` from the pod's address to its loopback (Program.loopbackPorts); route_localnet is on. */
function loopbackTable(ports: number[]): string {
  if (ports.length === 0) return '';
  const rules = ports.map((p) => `    iifname "eth0" tcp dport ${p} dnat to 127.0.0.1:${p}`).join('\n');
  return `table ip hrtpod\ndelete table ip hrtpod\ntable ip hrtpod {\n  chain pre {\n    type nat hook prerouting priority -100; policy accept;\n${rules}\n  }\n}\n`;
}

/** A bind mount of a pod: its source on this machine, its target in the pod. */
interface Mount {
  source: string;
  target: string;
  ro: boolean;
  /** The machine's path of the target's mount point (inside an earlier mount's source, or the target). */
  within: string | undefined;
}

/** `path` for an fstab field (whitespace and backslashes in octal, as fstab(5) reads them). */
function fstabPath(path: string): string {
  return path.replace(/[\s\\]/g, (ch) => `\\${ch.charCodeAt(0).toString(8).padStart(3, '0')}`);
}

/**
 * The fstab of a pod's mounts, in order, after making each mount point (a folder, or an empty file
 * for a file) where it will be: inside the source of an earlier mount that covers the target (so
 * a volume mounted inside another finds its mount point there), else on the machine's own file
 * system, once. Sources under the pod's folder are named under /run/hrt-pod, where the first
 * mount puts the folder.
 */
async function fstab(mounts: Mount[], podDir: string): Promise<string> {
  const lines: string[] = [];
  for (const [i, m] of mounts.entries()) {
    let within = m.target;
    for (const earlier of mounts.slice(0, i))
      if (m.target.startsWith(`${earlier.target}/`) && (!m.within || earlier.target.length > m.within.length)) {
        m.within = earlier.target;
        within = join(earlier.source, m.target.slice(earlier.target.length));
      }
    const isDir = (await stat(m.source)).isDirectory();
    const there = await stat(within).catch(() => undefined);
    if (isDir) {
      if (there && !there.isDirectory())
        throw new Error(`${m.target} exists and is not a folder; cannot mount a volume there`);
      if (!there) await mkdir(within, { recursive: true });
    } else if (!there) {
      await mkdir(dirname(within), { recursive: true });
      await writeFile(within, '', { flag: 'a' });
    }
    const source =
      i > 0 && m.source.startsWith(`${podDir}/`) ? `/run/hrt-pod/${m.source.slice(podDir.length + 1)}` : m.source;
    lines.push(`${fstabPath(source)} ${fstabPath(m.target)} none ${m.ro ? 'bind,ro' : 'bind'} 0 0`);
  }
  return `${lines.join('\n')}\n`;
}

function imageName(image: string): string {
  const noDigest = image.split('@')[0]!;
  const last = noDigest.split('/').pop() ?? noDigest;
  return last.replace(/:[^:]*$/, '');
}

function onPath(command: string): string | undefined {
  for (const d of (process.env.PATH ?? '').split(':')) if (d && existsSync(join(d, command))) return join(d, command);
  return undefined;
}

/** `$(VAR)` references expanded from `env` as the kubelet does (`$$` escapes; unknown ones stay). */
function expand(value: string, env: Record<string, string>): string {
  return value.replace(/\$(\$|\(([A-Za-z_][A-Za-z0-9_.-]*)\))/g, (whole, dollar: string, name?: string) =>
    dollar === '$' ? '$' : name !== undefined && name in env ? env[name]! : whole,
  );
}

function decode(data: Record<string, string> | undefined, key: string): string | undefined {
  const v = data?.[key];
  return v === undefined ? undefined : Buffer.from(v, 'base64').toString('utf8');
}

/** The Redis the runner runs for Redis pods: `redisServer`, else `redis-server` on PATH, else the build's stand-in. */
function redisFor(o: Pick<RuntimePodsOptions, 'argocdBin' | 'redisServer'>): string {
  return o.redisServer ?? onPath('redis-server') ?? (o.argocdBin ? join(o.argocdBin, 'redis-standin') : 'redis-server');
}

/**
 * The KWOK query that selects the pods this runner runs (vcluster's synced pods whose container's
 * image and command are one of `#program`'s), so that KWOK leaves their status to it: a jq
 * expression over the pod, `true` for them (control-plane.ts `kwokLeavesPods`).
 */
export function runtimePodsKwokQuery(
  o: Pick<RuntimePodsOptions, 'argocdBin' | 'redisServer' | 'standIns'>,
): KwokPodQuery {
  const q = (v: string) => JSON.stringify(v);
  const anyOf = (v: string, values: Iterable<string>) =>
    `(${[...values].map((x) => `${v} == ${q(x)}`).join(' or ') || 'false'})`;
  const images = [...AGENTS, ...Object.keys(o.standIns ?? {})];
  const argocd = o.argocdBin
    ? `($img == "argocd" and (${anyOf('$first', ARGOCD_SERVERS)} or ($first == "argocd" and $argv[1] == "admin" and $argv[2] == "redis-initial-password")))`
    : 'false';
  const redis = o.argocdBin || basename(redisFor(o)) === 'redis-server' ? '$img == "redis"' : 'false';
  const key =
    `(.metadata.labels[${q(MANAGED_BY_LABEL)}] != null) and ([.spec.containers[]? | ` +
    `((.image // "") | split("@")[0] | split("/") | last | sub(":[^:]*$"; "")) as $img | ` +
    `((.command // []) + (.args // [])) as $argv | (($argv[0] // "") | split("/") | last) as $first | ` +
    `(${anyOf('$img', images)} or ${argocd} or (${redis}))] | any)`;
  return { key, values: ['true'] };
}

/** Whether a probe's answer counts as success (the kubelet's rules: HTTP 200–399, a TCP connection). */
function probeOnce(probe: V1Probe, ip: string, ports: Map<string, number>): Promise<boolean> {
  const timeoutMs = (probe.timeoutSeconds ?? 1) * 1000;
  const port = (p: number | string) => (typeof p === 'number' ? p : /^\d+$/.test(p) ? Number(p) : ports.get(p));
  return new Promise((resolve) => {
    if (probe.httpGet) {
      const g = probe.httpGet;
      const n = port(g.port);
      if (n === undefined) return resolve(false);
      const https = (g.scheme ?? 'HTTP').toUpperCase() === 'HTTPS';
      const req = (https ? httpsRequest : httpRequest)(
        {
          host: g.host || ip,
          port: n,
          path: g.path ?? '/',
          method: 'GET',
          headers: Object.fromEntries((g.httpHeaders ?? []).map((h) => [h.name, h.value])),
          timeout: timeoutMs,
          ...(https ? { rejectUnauthorized: false } : {}),
        },
        (res) => {
          res.resume();
          resolve((res.statusCode ?? 0) >= 200 && (res.statusCode ?? 0) < 400);
        },
      );
      req.once('timeout', () => req.destroy());
      req.once('error', () => resolve(false));
      req.end();
    } else if (probe.tcpSocket) {
      const n = port(probe.tcpSocket.port);
      if (n === undefined) return resolve(false);
      const socket = net.connect({ host: probe.tcpSocket.host || ip, port: n, timeout: timeoutMs });
      socket.once('connect', () => {
        socket.destroy();
        resolve(true);
      });
      socket.once('timeout', () => {
        socket.destroy();
        resolve(false);
      });
      socket.once('error', () => resolve(false));
    } else resolve(true);
  });
}

/** Whether the runner runs this readiness probe (httpGet, tcpSocket); others leave the container Ready when started. */
function runsProbe(probe: V1Probe | undefined): probe is V1Probe {
  return probe?.httpGet !== undefined || probe?.tcpSocket !== undefined;
}

function termination(exit: { code: number | null; signal: NodeJS.Signals | null }, startedAt: number): Termination {
  const exitCode = exit.code ?? 128 + (exit.signal ? (osConstants.signals[exit.signal] ?? 0) : 0);
  return {
    exitCode,
    reason: exitCode === 0 ? 'Completed' : 'Error',
    ...(exit.signal ? { signal: exit.signal } : {}),
    startedAt: new Date(startedAt),
    finishedAt: new Date(),
  };
}

function terminatedState(t: Termination): V1ContainerState {
  return {
    terminated: {
      exitCode: t.exitCode,
      reason: t.reason,
      ...(t.signal ? { message: `killed by ${t.signal}` } : {}),
      startedAt: t.startedAt,
      finishedAt: t.finishedAt,
    },
  };
}

export class RuntimePods {
  readonly #o: RuntimePodsOptions;
  readonly #core: CoreV1Api;
  readonly #running = new Map<string, RunningPod>();
  readonly #starts = new Map<string, number>();
  /** The Node.js compile cache folders made so far, one per user the Node.js pods run as. */
  readonly #compileCaches = new Set<string>();
  /** Pods whose container waits to restart (`namespace/pod` → uid): their address slot is kept. */
  readonly #restarting = new Map<string, string>();
  /** Starts under way (`namespace/pod`). */
  readonly #starting = new Map<string, Promise<void>>();
  /** Per pod uid: its container's restarts and last exit (kept across restarts, as a kubelet keeps them). */
  readonly #history = new Map<string, { restarts: number; last?: Termination }>();
  readonly #notBefore = new Map<string, number>();
  /** Pods of a Job that ran (by uid): a Job's pod runs once. */
  readonly #ran = new Set<string>();
  readonly #kwokOnly = new Map<string, string>();
  readonly #rules = new Map<string, string>();
  readonly #waiting = new Map<string, string>();
  readonly errors: string[] = [];
  readonly #relays: net.Server[] = [];
  readonly #relayed = new Set<net.Socket>();
  #stopped = false;
  #loop: Promise<void> | undefined;
  readonly #redis: string;

  constructor(o: RuntimePodsOptions) {
    this.#o = o;
    this.#core = o.root.makeApiClient(CoreV1Api);
    this.#redis = redisFor(o);
    for (const [image, script] of Object.entries(o.standIns ?? {}))
      this.#standIns.set(image, {
        kind: 'stand-in',
        command: process.execPath,
        args: [script],
        env: { NODE_ENV: 'production' },
        cwd: REPO_ROOT,
      });
  }

  /** The pod network's gateway: an address of this machine every pod reaches (a Git server may listen there). */
  get gateway(): string {
    return this.#o.network.hostIp;
  }

  /** Which Redis runs for Redis pods (`redis-server` is the real one). */
  get redis(): string {
    return basename(this.#redis);
  }

  async start(): Promise<void> {
    await mkdir(this.#o.dir, { recursive: true });
    for (const port of this.#o.hostPorts) {
      const server = await startTcpRelay(
        { host: this.#o.network.hostIp, port },
        { host: '127.0.0.1', port },
        this.#relayed,
      );
      this.#relays.push(server);
    }
    this.#loop = this.#run();
  }

  /** The pods running as processes now. */
  pods(namespace?: string): RunningPod[] {
    return [...this.#running.values()].filter((p) => !namespace || p.namespace === namespace);
  }

  /** Pods left to KWOK (no process), as `namespace/pod` → image. */
  kwokOnly(namespace?: string): Map<string, string> {
    return new Map([...this.#kwokOnly].filter(([k]) => !namespace || k.startsWith(`${namespace}/`)));
  }

  /** Why pods wait to start (`namespace/pod` → reason: a missing Secret, a vcluster not running). */
  waiting(): Map<string, string> {
    return new Map(this.#waiting);
  }

  async #run(): Promise<void> {
    while (!this.#stopped) {
      try {
        await this.#tick();
      } catch (err) {
        this.#o.log?.(`runtime pods: ${err instanceof Error ? err.message : String(err)}`);
      }
      await sleep(this.#o.pollMs ?? POLL_MS);
    }
  }

  readonly #standIns = new Map<string, Program>();

  #program(c: V1Container): Program | undefined {
    const name = imageName(c.image ?? '');
    const argv = [...(c.command ?? []), ...(c.args ?? [])];
    const standIn = this.#standIns.get(name);
    if (standIn) return standIn;
    if (AGENTS.has(name)) {
      // The image's command (runtime/agents/Dockerfile): node runs the agent's TypeScript.
      return {
        kind: 'agent',
        command: process.execPath,
        args: [join(REPO_ROOT, 'runtime', 'agents', name, 'main.ts')],
        env: { NODE_ENV: 'production', AGENT: name },
        cwd: REPO_ROOT,
      };
    }
    if (name === 'argocd' && this.#o.argocdBin) {
      const first = basename(argv[0] ?? '');
      if (ARGOCD_SERVERS.has(first))
        return {
          kind: 'argocd',
          command: join(this.#o.argocdBin, 'argocd'),
          args: argv.slice(1),
          // The image has the one binary on PATH as `argocd` too: the repo-server gives git
          // credentials through it (GIT_ASKPASS=argocd, run as argocd-git-ask-pass). runtime-pod.sh
          // binds the build at /run/hrt-pod/bin, where the pod's user can reach it.
          bin: this.#o.argocdBin,
          // The build binds the application controller's metrics server (its readiness probe's
          // /healthz) to 127.0.0.1, where the image binds 0.0.0.0 (scripts/argocd.sh).
          ...(first === 'argocd-application-controller'
            ? { loopbackPorts: [c.ports?.find((p) => p.name === 'metrics')?.containerPort ?? 8082] }
            : {}),
          env: {
            ARGOCD_BINARY_NAME: first,
            PATH: `/run/hrt-pod/bin:${process.env.PATH ?? '/usr/sbin:/usr/bin:/sbin:/bin'}`,
          },
          // The image's gpg-wrapper.sh is not on this machine: GnuPG commit verification is off.
          forcedEnv: { ARGOCD_GPG_ENABLED: 'false' },
          cwd: '/home/argocd',
        };
      if (first === 'argocd' && argv[1] === 'admin' && argv[2] === 'redis-initial-password')
        return {
          kind: 'job',
          command: join(this.#o.argocdBin, 'argocd'),
          args: argv.slice(1),
          env: { ARGOCD_BINARY_NAME: 'argocd' },
          cwd: '/home/argocd',
        };
      return undefined;
    }
    if (name === 'redis' && (this.#o.argocdBin || basename(this.#redis) === 'redis-server')) {
      // The image's entrypoint runs redis-server with the arguments; the stand-in takes a port only.
      const args = argv[0] === 'redis-server' ? argv.slice(1) : argv;
      return {
        kind: 'redis',
        command: this.#redis,
        args: basename(this.#redis) === 'redis-server' ? args : ['--port', '6379', '--bind', '0.0.0.0'],
        env: {},
        cwd: '/data',
      };
    }
    return undefined;
  }

  async #tick(): Promise<void> {
    this.#reads = new Map();
    const namespaces = this.#o.vclusters.namespaces();
    const wanted = new Map<string, { pod: V1Pod; container: V1Container; program: Program }>();
    const services = new Map<string, V1Service[]>();
    for (const ns of namespaces) {
      const [pods, svcs] = await Promise.all([
        this.#core.listNamespacedPod({ namespace: ns, labelSelector: MANAGED_BY_LABEL }),
        this.#core.listNamespacedService({ namespace: ns }),
      ]);
      services.set(ns, svcs.items);
      for (const pod of pods.items) {
        if (pod.metadata?.deletionTimestamp || !pod.spec?.nodeName) continue;
        const key = `${ns}/${pod.metadata!.name!}`;
        const isJob = pod.spec.restartPolicy === 'Never' || pod.spec.restartPolicy === 'OnFailure';
        if (isJob && this.#ran.has(pod.metadata!.uid!) && !this.#running.has(key)) continue;
        for (const container of pod.spec.containers ?? []) {
          const program = this.#program(container);
          if (!program) {
            if (!this.#kwokOnly.has(key)) {
              this.#kwokOnly.set(key, container.image ?? '');
              this.#o.log?.(`runtime pod ${key}: image ${container.image ?? '?'} stays on KWOK (no process)`);
            }
            continue;
          }
          // One container per pod runs (the charts' pods that run here have one).
          wanted.set(key, { pod, container, program });
          break;
        }
      }
    }
    for (const key of [...this.#kwokOnly.keys()]) {
      const ns = key.split('/')[0]!;
      if (!namespaces.includes(ns)) this.#kwokOnly.delete(key);
    }
    for (const [key, uid] of this.#restarting) {
      if (wanted.get(key)?.pod.metadata?.uid === uid) continue;
      // Deleted (or replaced) while its container waited to restart.
      this.#restarting.delete(key);
      this.#history.delete(uid);
      if (!this.#running.has(key)) this.#o.vclusters.release(key);
    }
    for (const [key, rp] of this.#running) {
      const want = wanted.get(key);
      if (want?.pod.metadata?.uid === rp.uid && rp.process.running()) {
        // The kubelet's status sync: what the pod says is what the process does (vcluster's first
        // status sync may have dropped a condition meanwhile).
        if (!this.#statusCurrent(want.pod, rp)) await this.#report(rp);
        continue;
      }
      if (want?.pod.metadata?.uid === rp.uid && !rp.process.running()) {
        const exit = await rp.process.exited;
        const ended = termination(exit, rp.startedAt);
        const history = this.#history.get(rp.uid) ?? { restarts: 0 };
        history.last = ended;
        this.#history.set(rp.uid, history);
        rp.lastTerminated = ended;
        const policy = want.pod.spec?.restartPolicy ?? 'Always';
        if (policy === 'Never' || (policy === 'OnFailure' && ended.exitCode === 0)) {
          // A pod that does not restart ends Succeeded or Failed; a failed Job's pod is replaced by
          // the Job controller (its backoffLimit), not restarted here.
          this.#ran.add(rp.uid);
          if (ended.exitCode === 0) this.#o.log?.(`runtime pod ${key}: container completed`);
          else {
            const msg = `runtime pod ${key} (${rp.container}) failed (exit code ${ended.exitCode}): ${await rp.process.tail(10)}`;
            this.errors.push(msg);
            this.#o.log?.(msg);
          }
          await this.#stopOne(rp);
          await this.#report(rp, ended);
          continue;
        }
        const msg = `runtime pod ${key} (${rp.container}) exited (${JSON.stringify(exit)}): ${await rp.process.tail(10)}`;
        this.errors.push(msg);
        this.#o.log?.(msg);
        this.#notBefore.set(key, Date.now() + Math.min(30_000, 1000 * 2 ** Math.min(5, rp.starts - 1)));
        // The container restarts in the same pod: its address and slot stay.
        await this.#stopOne(rp, { keepSlot: true });
        this.#restarting.set(key, rp.uid);
        await this.#report(rp, ended);
        continue;
      }
      await this.#stopOne(rp);
    }
    // Started side by side and as soon as they are seen, as a kubelet starts a node's pods: each
    // start goes on in the background (up to START_PARALLELISM at once) while the next rounds
    // look for more; each writes its own routing, and the others' follow in the round after.
    const startable = [...wanted].filter(
      ([key, want]) =>
        !this.#running.has(key) &&
        !this.#starting.has(key) &&
        !this.#stopped &&
        (this.#notBefore.get(key) ?? 0) <= Date.now() &&
        !this.#ran.has(want.pod.metadata!.uid!),
    );
    for (const [key, want] of startable) {
      if (this.#starting.size >= START_PARALLELISM) break;
      const start = this.#startOne(
        want.pod,
        want.container,
        want.program,
        services.get(want.pod.metadata!.namespace!)!,
      ).then(
        () => {
          this.#waiting.delete(key);
        },
        (err: unknown) => {
          const msg = err instanceof Error ? err.message : String(err);
          if (this.#waiting.get(key) !== msg) this.#o.log?.(`runtime pod ${key} waits: ${msg}`);
          this.#waiting.set(key, msg);
        },
      );
      this.#starting.set(
        key,
        start.finally(() => this.#starting.delete(key)),
      );
    }
    for (const key of [...this.#waiting.keys()])
      if (!wanted.has(key) || this.#running.has(key) || this.#starting.has(key)) this.#waiting.delete(key);
    for (const ns of namespaces) await this.#route(ns, services.get(ns) ?? []);
  }

  /**
   * Secrets and ConfigMaps read for the pods started in one round, shared by them (the pods of a
   * runtime mostly read the same few): one read each per round instead of one per pod.
   */
  #reads = new Map<string, Promise<V1Secret | V1ConfigMap | undefined>>();
  #secret(namespace: string, name: string): Promise<V1Secret | undefined> {
    const key = `secret/${namespace}/${name}`;
    if (!this.#reads.has(key))
      this.#reads.set(
        key,
        this.#core.readNamespacedSecret({ name, namespace }).catch(() => undefined),
      );
    return this.#reads.get(key) as Promise<V1Secret | undefined>;
  }
  #configMap(namespace: string, name: string): Promise<V1ConfigMap | undefined> {
    const key = `configmap/${namespace}/${name}`;
    if (!this.#reads.has(key))
      this.#reads.set(
        key,
        this.#core.readNamespacedConfigMap({ name, namespace }).catch(() => undefined),
      );
    return this.#reads.get(key) as Promise<V1ConfigMap | undefined>;
  }

  async #env(pod: V1Pod, c: V1Container, ip: string): Promise<Record<string, string>> {
    const ns = pod.metadata!.namespace!;
    const env: Record<string, string> = {};
    const secrets = new Map<string, Record<string, string> | undefined>();
    const configMaps = new Map<string, Record<string, string> | undefined>();
    const secret = async (name: string) => {
      if (!secrets.has(name))
        secrets.set(
          name,
          await this.#secret(ns, name).then((s) =>
            s ? Object.fromEntries(Object.keys(s.data ?? {}).map((k) => [k, decode(s.data, k)!])) : undefined,
          ),
        );
      return secrets.get(name);
    };
    const configMap = async (name: string) => {
      if (!configMaps.has(name))
        configMaps.set(name, await this.#configMap(ns, name).then((m) => (m ? { ...(m.data ?? {}) } : undefined)));
      return configMaps.get(name);
    };
    for (const from of c.envFrom ?? []) {
      const prefix = from.prefix ?? '';
      if (from.configMapRef) {
        const data = await configMap(from.configMapRef.name!);
        if (!data && !from.configMapRef.optional) throw new Error(`ConfigMap ${from.configMapRef.name} is missing`);
        for (const [k, v] of Object.entries(data ?? {})) env[prefix + k] = v;
      }
      if (from.secretRef) {
        const data = await secret(from.secretRef.name!);
        if (!data && !from.secretRef.optional) throw new Error(`Secret ${from.secretRef.name} is missing`);
        for (const [k, v] of Object.entries(data ?? {})) env[prefix + k] = v;
      }
    }
    for (const e of c.env ?? []) {
      if (e.value !== undefined) {
        env[e.name] = expand(e.value, env);
        continue;
      }
      const from = e.valueFrom;
      if (!from) {
        env[e.name] = '';
        continue;
      }
      if (from.secretKeyRef) {
        const v = (await secret(from.secretKeyRef.name!))?.[from.secretKeyRef.key];
        if (v === undefined) {
          if (from.secretKeyRef.optional) continue;
          throw new Error(`Secret ${from.secretKeyRef.name} (key ${from.secretKeyRef.key}) is missing`);
        }
        env[e.name] = v;
      } else if (from.configMapKeyRef) {
        const v = (await configMap(from.configMapKeyRef.name!))?.[from.configMapKeyRef.key];
        if (v === undefined) {
          if (from.configMapKeyRef.optional) continue;
          throw new Error(`ConfigMap ${from.configMapKeyRef.name} (key ${from.configMapKeyRef.key}) is missing`);
        }
        env[e.name] = v;
      } else if (from.fieldRef) {
        env[e.name] = this.#field(pod, from.fieldRef.fieldPath, ip);
      } else if (from.resourceFieldRef) {
        const r = from.resourceFieldRef.resource;
        const value = r.startsWith('limits.') ? c.resources?.limits?.[r.slice(7)] : c.resources?.requests?.[r.slice(9)];
        env[e.name] = String(value ?? '');
      }
    }
    return env;
  }

  #field(pod: V1Pod, path: string, ip: string): string {
    const m = /^metadata\.(labels|annotations)\['(.+)'\]$/.exec(path);
    if (m) return (m[1] === 'labels' ? pod.metadata?.labels : pod.metadata?.annotations)?.[m[2]!] ?? '';
    switch (path) {
      case 'metadata.name':
        return pod.metadata?.name ?? '';
      case 'metadata.namespace':
        return pod.metadata?.namespace ?? '';
      case 'metadata.uid':
        return pod.metadata?.uid ?? '';
      case 'spec.nodeName':
        return pod.spec?.nodeName ?? '';
      case 'spec.serviceAccountName':
        return pod.spec?.serviceAccountName ?? '';
      case 'status.podIP':
        return ip;
      case 'status.hostIP':
        return this.#o.network.hostIp;
      default:
        return '';
    }
  }

  /** Writes the pod's volumes under `dir`; returns the folder (or file) of each by name. */
  /**
   * Node.js's compile cache for the Node.js pods (our agents) that run as `uid`: one folder per
   * user in the runner's folder, shared by its pods, so that an agent's second start, on this
   * tenant or another, does not type-strip and compile its modules again (docs/benchmarks.md,
   * "Start-up"). A node's image would carry its own; here every pod runs the repository's files.
   */
  async #nodeCompileCache(uid: number, gid: number): Promise<string> {
    const dir = join(this.#o.dir, 'node-compile-cache', String(uid));
    if (!this.#compileCaches.has(dir)) {
      await mkdir(dir, { recursive: true });
      await chown(dir, uid, gid);
      this.#compileCaches.add(dir);
    }
    return dir;
  }

  async #volumes(pod: V1Pod, dir: string, uid: number, gid: number, ip: string): Promise<Map<string, string>> {
    const ns = pod.metadata!.namespace!;
    const out = new Map<string, string>();
    const writeItems = async (
      target: string,
      data: Record<string, string>,
      items: Array<{ key: string; path: string; mode?: number }> | undefined,
      mode: number,
    ) => {
      const list: Array<{ key: string; path: string; mode?: number }> =
        items ?? Object.keys(data).map((key) => ({ key, path: key }));
      for (const item of list) {
        const value = data[item.key];
        if (value === undefined) continue;
        const file = join(target, item.path);
        await mkdir(dirname(file), { recursive: true });
        await writeFile(file, value);
        await chmod(file, item.mode ?? mode);
      }
    };
    for (const v of pod.spec?.volumes ?? []) {
      const target = join(dir, 'volumes', v.name);
      await rm(target, { recursive: true, force: true });
      await mkdir(target, { recursive: true, mode: 0o755 });
      out.set(v.name, join('volumes', v.name));
      const mode = 0o644;
      if (v.secret) {
        const s = await this.#secret(ns, v.secret.secretName!);
        if (!s && !v.secret.optional) throw new Error(`Secret ${v.secret.secretName} (volume ${v.name}) is missing`);
        const data = Object.fromEntries(Object.keys(s?.data ?? {}).map((k) => [k, decode(s?.data, k)!]));
        await writeItems(target, data, v.secret.items, v.secret.defaultMode ?? mode);
      } else if (v.configMap) {
        const m = await this.#configMap(ns, v.configMap.name!);
        if (!m && !v.configMap.optional) throw new Error(`ConfigMap ${v.configMap.name} (volume ${v.name}) is missing`);
        await writeItems(target, m?.data ?? {}, v.configMap.items, v.configMap.defaultMode ?? mode);
      } else if (v.downwardAPI) {
        const data: Record<string, string> = {};
        const items = (v.downwardAPI.items ?? []).map((i) => {
          data[i.path] = i.fieldRef ? this.#field(pod, i.fieldRef.fieldPath, ip) : '';
          return { key: i.path, path: i.path, ...(i.mode !== undefined ? { mode: i.mode } : {}) };
        });
        await writeItems(target, data, items, v.downwardAPI.defaultMode ?? mode);
      } else if (v.projected) {
        for (const src of v.projected.sources ?? []) {
          if (src.secret) {
            const s = await this.#secret(ns, src.secret.name!);
            if (!s && !src.secret.optional) throw new Error(`Secret ${src.secret.name} (volume ${v.name}) is missing`);
            const data = Object.fromEntries(Object.keys(s?.data ?? {}).map((k) => [k, decode(s?.data, k)!]));
            await writeItems(target, data, src.secret.items, v.projected.defaultMode ?? mode);
          } else if (src.configMap) {
            const m = await this.#configMap(ns, src.configMap.name!);
            if (!m && !src.configMap.optional)
              throw new Error(`ConfigMap ${src.configMap.name} (volume ${v.name}) is missing`);
            await writeItems(target, m?.data ?? {}, src.configMap.items, v.projected.defaultMode ?? mode);
          } else if (src.downwardAPI) {
            const data: Record<string, string> = {};
            const items = (src.downwardAPI.items ?? []).map((i) => {
              data[i.path] = i.fieldRef ? this.#field(pod, i.fieldRef.fieldPath, ip) : '';
              return { key: i.path, path: i.path, ...(i.mode !== undefined ? { mode: i.mode } : {}) };
            });
            await writeItems(target, data, items, v.projected.defaultMode ?? mode);
          } else if (src.serviceAccountToken) {
            throw new Error(`volume ${v.name} asks for a service-account token vcluster did not translate`);
          }
        }
      } else {
        // emptyDir and what stands for storage here: a folder the pod's user owns.
        await chown(target, uid, gid);
        await chmod(target, 0o777);
      }
    }
    return out;
  }

  async #startOne(pod: V1Pod, c: V1Container, program: Program, services: V1Service[]): Promise<void> {
    const ns = pod.metadata!.namespace!;
    const name = pod.metadata!.name!;
    const key = `${ns}/${name}`;
    const vc = this.#o.vclusters.get(ns);
    if (!vc?.ready) throw new Error(`the vcluster of ${ns} is not ready`);
    const uid = c.securityContext?.runAsUser ?? pod.spec?.securityContext?.runAsUser ?? 65534;
    const gid = c.securityContext?.runAsGroup ?? pod.spec?.securityContext?.runAsGroup ?? uid;
    const n = this.#o.vclusters.allocate(key);
    const ip = this.#o.network.podIp(n);
    const dir = join(this.#o.dir, ns, name);
    let netns: string | undefined;
    const began = Date.now();
    let mark = began;
    const timings: StartTimings = { env: 0, volumes: 0, files: 0, netns: 0, exec: undefined, total: 0 };
    const lap = (phase: 'env' | 'volumes' | 'files' | 'netns') => {
      const now = Date.now();
      timings[phase] = now - mark;
      mark = now;
    };
    try {
      const env = await this.#env(pod, c, ip);
      lap('env');
      await mkdir(dir, { recursive: true });
      const volumes = await this.#volumes(pod, dir, uid, gid, ip);
      lap('volumes');
      const home = join(dir, 'home');
      await mkdir(home, { recursive: true });
      await chown(home, uid, gid);
      // The pod's folder at /run/hrt-pod, the image's programs, its volumes, its hosts and
      // resolv.conf, in mount order (runtime-pod.sh mounts them with one `mount --all`).
      const mounts: Mount[] = [{ source: dir, target: '/run/hrt-pod', ro: false, within: undefined }];
      if (program.bin) {
        await mkdir(join(dir, 'bin'), { recursive: true });
        mounts.push({ source: program.bin, target: '/run/hrt-pod/bin', ro: true, within: undefined });
      }
      for (const m of c.volumeMounts ?? []) {
        const src = volumes.get(m.name);
        // vcluster's own /etc/hosts (an init container writes it) is the runner's hosts file here.
        if (!src || m.mountPath === '/etc/hosts') continue;
        mounts.push({
          source: join(dir, m.subPath ? join(src, m.subPath) : src),
          target: m.mountPath,
          ro: !!m.readOnly,
          within: undefined,
        });
      }
      // The image's working directory (Argo CD's /home/argocd, Redis's /data) is the pod's own.
      if (program.cwd !== REPO_ROOT) mounts.push({ source: home, target: program.cwd, ro: false, within: undefined });
      const hosts = this.#hosts(pod, ip, services);
      await writeFile(join(dir, 'hosts'), hosts, { mode: 0o644 });
      // No DNS server: names resolve through the hosts file; any other lookup fails at once.
      await writeFile(join(dir, 'resolv.conf'), 'nameserver 127.0.0.1\noptions ndots:1 attempts:1 timeout:1\n', {
        mode: 0o644,
      });
      await chmod(join(dir, 'hosts'), 0o644);
      await chmod(join(dir, 'resolv.conf'), 0o644);
      mounts.push(
        { source: join(dir, 'hosts'), target: '/etc/hosts', ro: true, within: undefined },
        { source: join(dir, 'resolv.conf'), target: '/etc/resolv.conf', ro: true, within: undefined },
      );
      await writeFile(join(dir, 'fstab'), await fstab(mounts, dir));
      await rm(join(dir, 'exec-at'), { force: true });
      // The pod's Service routing, with itself among the endpoints, applied before its container
      // starts (runtime-pod.sh): its first connection is routed.
      const ports = new Map<string, number>();
      for (const p of c.ports ?? []) if (p.name) ports.set(p.name, p.containerPort);
      const kubernetesIp = c.env?.find((e) => e.name === 'KUBERNETES_SERVICE_HOST')?.value;
      const labels = { ...(pod.metadata?.labels ?? {}) };
      const loopbackPorts = program.loopbackPorts ?? [];
      const table =
        this.#table(ns, services, [
          ...this.pods(ns).filter((p) => p.process.running()),
          { ip, ports, labels, kubernetesIp },
        ]) + loopbackTable(loopbackPorts);
      await writeFile(join(dir, 'nft'), table);
      lap('files');

      netns = await createPodNetns(this.#o.network, n);
      this.#rules.set(netns, table);
      lap('netns');
      const starts = (this.#starts.get(key) ?? 0) + 1;
      this.#starts.set(key, starts);
      const history = this.#history.get(pod.metadata!.uid!);
      if (history?.last) history.restarts += 1;
      this.#restarting.delete(key);
      const args = program.args.map((a) => expand(a, env));
      const proc = startProcess(
        `runtime-pod-${name}`,
        'ip',
        [
          'netns',
          'exec',
          netns,
          'unshare',
          '--mount',
          '--propagation',
          'private',
          'bash',
          POD_SCRIPT,
          dir,
          String(uid),
          String(gid),
          c.workingDir ?? program.cwd,
          program.command,
          ...args,
        ],
        join(this.#o.dir, ns, `${name}.log`),
        {
          env: {
            PATH: process.env.PATH ?? '/usr/sbin:/usr/bin:/sbin:/bin',
            HOME: program.cwd === REPO_ROOT ? home : program.cwd,
            HOSTNAME: pod.spec?.hostname ?? name,
            ...(program.command === process.execPath
              ? { NODE_COMPILE_CACHE: await this.#nodeCompileCache(uid, gid) }
              : {}),
            ...program.env,
            ...env,
            ...program.forcedEnv,
          },
        },
      );
      const startedAt = Date.now();
      timings.total = startedAt - began;
      this.#running.set(key, {
        namespace: ns,
        name,
        uid: pod.metadata!.uid!,
        virtual: {
          name: pod.metadata?.annotations?.[NAME_ANNOTATION] ?? name,
          namespace: pod.metadata?.annotations?.[NAMESPACE_ANNOTATION] ?? ns,
        },
        container: c.name,
        kind: program.kind,
        ip,
        netns,
        process: proc,
        starts,
        startedAt,
        restartCount: history?.restarts ?? 0,
        lastTerminated: history?.last,
        readiness: { ready: !runsProbe(c.readinessProbe), successes: 0, failures: 0 },
        labels,
        ports,
        kubernetesIp,
        loopbackPorts,
        pod,
        dir,
        hosts,
        timings,
      });
      const rp = this.#running.get(key)!;
      this.#o.log?.(
        `runtime pod ${key} (${pod.metadata?.annotations?.[NAMESPACE_ANNOTATION] ?? '?'}/${pod.metadata?.annotations?.[NAME_ANNOTATION] ?? '?'}): ${basename(program.command)}${program.env.ARGOCD_BINARY_NAME ? ` as ${program.env.ARGOCD_BINARY_NAME}` : ''} at ${ip}${starts > 1 ? `, start ${starts}` : ''} (${timings.total} ms: env ${timings.env}, volumes ${timings.volumes}, files ${timings.files}, netns ${timings.netns})`,
      );
      await this.#report(rp);
      this.#probe(rp, c.readinessProbe);
    } catch (err) {
      if (netns) await clearNetns(netns);
      this.#o.vclusters.release(key);
      throw err;
    }
  }

  /**
   * Each running pod's start, by phase (ms): the environment's and the volumes' reads and files,
   * the pod's other files, its network namespace, and from the spawn to the container's exec
   * (runtime-pod.sh's mounts and routing; read from the pod's `exec-at`, undefined until then).
   */
  async startTimings(namespace?: string): Promise<Array<{ pod: RunningPod; timings: StartTimings }>> {
    const out: Array<{ pod: RunningPod; timings: StartTimings }> = [];
    for (const p of this.pods(namespace)) {
      if (p.timings.exec === undefined) {
        const at = await readFile(join(p.dir, 'exec-at'), 'utf8').catch(() => '');
        if (at.trim()) p.timings.exec = Math.round(Number(at.trim()) * 1000) - p.startedAt;
      }
      out.push({ pod: p, timings: { ...p.timings } });
    }
    return out;
  }

  /** The pod's /etc/hosts: itself, its hostAliases (the `kubernetes` Service), every Service by its virtual names. */
  #hosts(pod: V1Pod, ip: string, services: V1Service[]): string {
    const virtualNs = pod.metadata?.annotations?.[NAMESPACE_ANNOTATION] ?? '';
    const lines = ['127.0.0.1 localhost', `${ip} ${pod.spec?.hostname ?? pod.metadata?.name ?? ''}`];
    for (const alias of pod.spec?.hostAliases ?? []) lines.push(`${alias.ip} ${(alias.hostnames ?? []).join(' ')}`);
    for (const svc of services) {
      const vname = svc.metadata?.annotations?.[NAME_ANNOTATION];
      const vns = svc.metadata?.annotations?.[NAMESPACE_ANNOTATION];
      const clusterIp = svc.spec?.clusterIP;
      if (!vname || !vns || !clusterIp || clusterIp === 'None') continue;
      const names = [`${vname}.${vns}.svc.cluster.local`, `${vname}.${vns}.svc`, `${vname}.${vns}`];
      if (vns === virtualNs) names.push(vname);
      lines.push(`${clusterIp} ${names.join(' ')}`);
    }
    return `${lines.join('\n')}\n`;
  }

  /**
   * The DNAT table of every running pod of `ns`: each Service port to the endpoints this runner
   * runs (kube-proxy's job), and the `kubernetes` Service to the vcluster's API server. Rewritten
   * atomically (one `nft -f` transaction) when it changes.
   */
  async #route(ns: string, services: V1Service[]): Promise<void> {
    const pods = this.pods(ns).filter((p) => p.process.running());
    // Names follow the Services as cluster DNS does: a Service created after a pod started
    // resolves in it too. Written in place: the pod's /etc/hosts is a bind mount of this file.
    for (const p of pods) {
      const hosts = this.#hosts(p.pod, p.ip, services);
      if (hosts === p.hosts) continue;
      await writeFile(join(p.dir, 'hosts'), hosts, { flag: 'w' });
      p.hosts = hosts;
    }
    const shared = this.#table(ns, services, pods);
    // Each pod's table is its own network namespace's: written side by side.
    await Promise.all(
      pods.map(async (p) => {
        const table = shared + loopbackTable(p.loopbackPorts);
        if (this.#rules.get(p.netns) === table) return;
        const file = join(this.#o.dir, ns, `${p.name}.nft`);
        await writeFile(file, table);
        try {
          await run('ip', ['netns', 'exec', p.netns, 'nft', '-f', file]);
          this.#rules.set(p.netns, table);
        } catch (err) {
          const e = err as { stderr?: string; message: string };
          this.#o.log?.(`runtime pod ${ns}/${p.name}: nft: ${(e.stderr ?? e.message).trim()}`);
        }
      }),
    );
  }

  /** The nftables table of the pods of `ns` with `pods` as the running endpoints. */
  #table(
    ns: string,
    services: V1Service[],
    pods: Array<Pick<RunningPod, 'ip' | 'ports' | 'labels' | 'kubernetesIp'>>,
  ): string {
    const vc = this.#o.vclusters.get(ns);
    const rules: string[] = [];
    /** Service ports with no endpoint running: refused at once, as kube-proxy refuses them. */
    const rejects: string[] = [];
    const kubeIps = new Set<string>();
    for (const svc of services) {
      const clusterIp = svc.spec?.clusterIP;
      const selector = svc.spec?.selector;
      if (!clusterIp || clusterIp === 'None' || !selector) continue;
      const backends = pods.filter((p) => Object.entries(selector).every(([k, v]) => p.labels[k] === v));
      for (const port of svc.spec?.ports ?? []) {
        if ((port.protocol ?? 'TCP') !== 'TCP') continue;
        const targets = backends
          .map((p) => {
            const t = port.targetPort ?? port.port;
            const n = typeof t === 'number' ? t : /^\d+$/.test(t) ? Number(t) : p.ports.get(t);
            return n === undefined ? undefined : { ip: p.ip, port: n };
          })
          .filter((x): x is { ip: string; port: number } => x !== undefined);
        if (targets.length === 0) {
          rejects.push(`    ip daddr ${clusterIp} tcp dport ${port.port} reject with tcp reset`);
          continue;
        }
        const to =
          targets.length === 1
            ? `${targets[0]!.ip}:${targets[0]!.port}`
            : `numgen random mod ${targets.length} map { ${targets.map((x, i) => `${i} : ${x.ip}`).join(', ')} } : ${targets[0]!.port}`;
        rules.push(`    ip daddr ${clusterIp} tcp dport ${port.port} dnat to ${to}`);
      }
    }
    for (const p of pods) if (p.kubernetesIp) kubeIps.add(p.kubernetesIp);
    if (vc) for (const kip of kubeIps) rules.push(`    ip daddr ${kip} tcp dport 443 dnat to ${vc.ip}:8443`);
    // The control plane's loopback ports, as a pod on the host network would reach them.
    for (const port of this.#o.hostPorts)
      rules.push(`    ip daddr 127.0.0.1 tcp dport ${port} dnat to ${this.#o.network.hostIp}:${port}`);
    // A Service port whose pods do not run yet is refused (a TCP reset), as kube-proxy's nftables
    // mode refuses a Service without endpoints: a client sees ECONNREFUSED at once instead of a
    // connection to nowhere that waits out its timeout (the request router's is 30 s).
    return (
      `table ip hrt\ndelete table ip hrt\ntable ip hrt {\n  chain out {\n    type nat hook output priority -100; policy accept;\n${rules.join('\n')}\n  }\n` +
      `  chain refuse {\n    type filter hook output priority 0; policy accept;\n${rejects.join('\n')}\n  }\n` +
      `  chain post {\n    type nat hook postrouting priority 100; policy accept;\n    oifname "eth0" ip saddr 127.0.0.0/8 masquerade\n  }\n}\n`
    );
  }

  async #stopOne(rp: RunningPod, o: { keepSlot?: boolean } = {}): Promise<void> {
    const key = `${rp.namespace}/${rp.name}`;
    this.#running.delete(key);
    clearTimeout(rp.readiness.timer);
    rp.readiness.ready = false;
    await rp.process.stop(5000);
    await clearNetns(rp.netns);
    this.#rules.delete(rp.netns);
    if (!o.keepSlot) {
      this.#o.vclusters.release(key);
      this.#history.delete(rp.uid);
    }
  }

  /**
   * The readiness probe as the kubelet's prober runs it: after `initialDelaySeconds`, every
   * `periodSeconds` (10), each try bounded by `timeoutSeconds` (1); Ready after
   * `successThreshold` (1) successes in a row, not Ready after `failureThreshold` (3) failures in
   * a row. Each change is reported on the pod.
   */
  #probe(rp: RunningPod, probe: V1Probe | undefined): void {
    if (!runsProbe(probe)) {
      if (probe)
        this.#o.log?.(
          `runtime pod ${rp.namespace}/${rp.name}: readiness probe not run here (exec/grpc); Ready when started`,
        );
      return;
    }
    const r = rp.readiness;
    const periodMs = (probe.periodSeconds ?? 10) * 1000;
    const tick = async (): Promise<void> => {
      if (this.#running.get(`${rp.namespace}/${rp.name}`) !== rp || !rp.process.running()) return;
      const ok = await probeOnce(probe, rp.ip, rp.ports);
      if (this.#running.get(`${rp.namespace}/${rp.name}`) !== rp || !rp.process.running()) return;
      if (ok) {
        r.failures = 0;
        r.successes += 1;
      } else {
        r.successes = 0;
        r.failures += 1;
      }
      const ready = r.ready ? r.failures < (probe.failureThreshold ?? 3) : r.successes >= (probe.successThreshold ?? 1);
      if (ready !== r.ready) {
        r.ready = ready;
        this.#o.log?.(`runtime pod ${rp.namespace}/${rp.name}: ${ready ? 'Ready' : 'not Ready'} (readiness probe)`);
        await this.#report(rp).catch((err: unknown) =>
          this.#o.log?.(
            `runtime pod ${rp.namespace}/${rp.name}: status: ${err instanceof Error ? err.message : String(err)}`,
          ),
        );
      }
      r.timer = setTimeout(() => void tick(), periodMs);
    };
    r.timer = setTimeout(() => void tick(), (probe.initialDelaySeconds ?? 0) * 1000);
  }

  /** The Ready condition, phase and restarts the pod's status should show for `rp`. */
  #statusCurrent(pod: V1Pod, rp: RunningPod): boolean {
    const st = pod.status;
    const ready = st?.conditions?.find((c) => c.type === 'Ready')?.status === (rp.readiness.ready ? 'True' : 'False');
    const cs = st?.containerStatuses?.find((c) => c.name === rp.container);
    return (
      st?.phase === 'Running' &&
      ready &&
      cs?.restartCount === rp.restartCount &&
      cs.state?.running !== undefined &&
      st.podIP === rp.ip
    );
  }

  /**
   * Writes the pod's status as a kubelet reports it: Running at the pod's address with the
   * container's start time and readiness, or, with `ended`, the container's exit: not Ready,
   * waiting to restart with the exit as its last state, or (a pod that does not restart)
   * Succeeded/Failed with the exit as its state.
   */
  async #report(rp: RunningPod, ended?: Termination): Promise<void> {
    for (let attempt = 0; attempt < 3; attempt++) {
      const pod = await this.#core
        .readNamespacedPodStatus({ name: rp.name, namespace: rp.namespace })
        .catch(() => undefined);
      if (!pod || pod.metadata?.uid !== rp.uid || pod.metadata.deletionTimestamp) return;
      const finished = ended !== undefined && this.#ran.has(rp.uid);
      const ready = !ended && rp.readiness.ready;
      const now = new Date();
      const old = new Map((pod.status?.conditions ?? []).map((c) => [c.type, c]));
      const condition = (type: string, status: 'True' | 'False', reason?: string): V1PodCondition => {
        const before = old.get(type);
        return {
          type,
          status,
          lastTransitionTime: before?.status === status && before.lastTransitionTime ? before.lastTransitionTime : now,
          ...(reason ? { reason } : {}),
        };
      };
      const state: V1ContainerState = !ended
        ? { running: { startedAt: new Date(rp.startedAt) } }
        : finished
          ? terminatedState(ended)
          : {
              waiting: { reason: 'CrashLoopBackOff', message: `back-off restarting failed container ${rp.container}` },
            };
      const last = finished ? undefined : (ended ?? rp.lastTerminated);
      pod.status = {
        ...pod.status,
        phase: finished ? (ended.exitCode === 0 ? 'Succeeded' : 'Failed') : 'Running',
        podIP: rp.ip,
        podIPs: [{ ip: rp.ip }],
        hostIP: this.#o.network.hostIp,
        hostIPs: [{ ip: this.#o.network.hostIp }],
        startTime: pod.status?.startTime ?? new Date(rp.startedAt),
        conditions: [
          condition('PodScheduled', 'True'),
          condition('Initialized', 'True'),
          condition(
            'ContainersReady',
            ready ? 'True' : 'False',
            ready ? undefined : finished ? 'PodCompleted' : 'ContainersNotReady',
          ),
          condition(
            'Ready',
            ready ? 'True' : 'False',
            ready ? undefined : finished ? 'PodCompleted' : 'ContainersNotReady',
          ),
        ],
        // Init containers do not run here (docs/e2e.md): reported completed, as KWOK did.
        initContainerStatuses: (pod.spec?.initContainers ?? []).map((c) => ({
          name: c.name,
          image: c.image ?? '',
          imageID: '',
          ready: true,
          restartCount: 0,
          state: { terminated: { exitCode: 0, reason: 'Completed', startedAt: now, finishedAt: now } },
        })),
        containerStatuses: (pod.spec?.containers ?? []).map((c) =>
          c.name === rp.container
            ? {
                name: c.name,
                image: c.image ?? '',
                imageID: '',
                ready,
                started: !ended,
                restartCount: rp.restartCount,
                state,
                ...(last ? { lastState: terminatedState(last) } : {}),
              }
            : {
                // One container per pod runs here (the charts' pods that run have one).
                name: c.name,
                image: c.image ?? '',
                imageID: '',
                ready: false,
                started: false,
                restartCount: 0,
                state: { waiting: { reason: 'NotRun', message: 'the runtime pods runner runs one container per pod' } },
              },
        ),
      };
      try {
        await this.#core.replaceNamespacedPodStatus({ name: rp.name, namespace: rp.namespace, body: pod });
        return;
      } catch (err) {
        // Changed meanwhile (409): read again; gone (404): nothing to report.
        const code = (err as { code?: number }).code;
        if (code === 404) return;
        if (code !== 409) throw err;
      }
    }
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    await this.#loop;
    await Promise.all(this.#starting.values());
    await Promise.allSettled([...this.#running.values()].map((rp) => this.#stopOne(rp)));
    for (const socket of this.#relayed) socket.destroy();
    await Promise.all(this.#relays.map((s) => new Promise<void>((ok) => s.close(() => ok()))));
  }
}

/** Whether nftables' `nft` is installed (the runner routes Service traffic with it). */
export async function runtimePodsUnavailable(): Promise<string> {
  try {
    await run('sh', ['-c', 'command -v nft']);
    return '';
  } catch {
    return 'running the runtime pods needs `nft` (Debian package nftables) to route Service traffic';
  }
}
