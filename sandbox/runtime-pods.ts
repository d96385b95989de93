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
 * What stays simulated: pod status (KWOK's: Running and Ready when scheduled, whatever the process
 * does), resource limits, readOnlyRootFilesystem, init containers (Argo CD's copyutil), image file
 * systems (a container sees the machine's files beside its volumes), and DNS (the hosts file stands
 * for the cluster's DNS service).
 */
import { RUNTIME_AGENTS } from '../runtime/component/agents.ts';
import { CoreV1Api, type KubeConfig, type V1Container, type V1Pod, type V1Service } from '@kubernetes/client-node';
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { chmod, chown, mkdir, rm, writeFile } from 'node:fs/promises';
import net from 'node:net';
import { basename, dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
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
/** Pods started at once (a kubelet starts a node's pods in parallel). */
const START_PARALLELISM = 8;

export interface RuntimePodsOptions {
  root: KubeConfig;
  network: PodNetwork;
  /** The tenants' vclusters: which namespaces run one, their addresses, and the address slots. */
  vclusters: VclusterPods;
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
}

/** What runs for a container: a program, its arguments, and what the image would set. */
interface Program {
  kind: 'agent' | 'argocd' | 'redis' | 'job' | 'stand-in';
  command: string;
  args: string[];
  env: Record<string, string>;
  /** Set over the pod's environment: what the image has that this machine does not. */
  forcedEnv?: Record<string, string>;
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
  labels: Record<string, string>;
  /** Container ports by name (Services' named target ports). */
  ports: Map<string, number>;
  /** The pod as it was started (its hostAliases and names, for its hosts file). */
  pod: V1Pod;
  /** The pod's folder, and its hosts file as last written. */
  dir: string;
  hosts: string;
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

export class RuntimePods {
  readonly #o: RuntimePodsOptions;
  readonly #core: CoreV1Api;
  readonly #running = new Map<string, RunningPod>();
  readonly #starts = new Map<string, number>();
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
    this.#redis =
      o.redisServer ?? onPath('redis-server') ?? (o.argocdBin ? join(o.argocdBin, 'redis-standin') : 'redis-server');
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
      await sleep(this.#o.pollMs ?? 1000);
    }
  }

  readonly #standIns = new Map<string, Program>();

  /**
   * Runs the pods of `image` (its name, without registry, tag or digest) as `node <script>`: a
   * test's named stand-in for a component this runner has no process for (an Argo Events event
   * source: docs/e2e.md). Pods of other unknown images stay on KWOK.
   */
  runImageAs(image: string, script: string): void {
    this.#standIns.set(image, {
      kind: 'stand-in',
      command: process.execPath,
      args: [script],
      env: { NODE_ENV: 'production' },
      cwd: REPO_ROOT,
    });
    for (const [key, img] of this.#kwokOnly) if (imageName(img) === image) this.#kwokOnly.delete(key);
  }

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
          env: {
            ARGOCD_BINARY_NAME: first,
            HRT_POD_BIN: this.#o.argocdBin,
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
    for (const [key, rp] of this.#running) {
      const want = wanted.get(key);
      if (want?.pod.metadata?.uid === rp.uid && rp.process.running()) continue;
      if (want?.pod.metadata?.uid === rp.uid && !rp.process.running()) {
        const exit = await rp.process.exited;
        if (rp.kind === 'job' && exit.code === 0) {
          // A Job's pod that succeeded is done; one that failed is tried again (the Job's retries).
          this.#ran.add(rp.uid);
          this.#o.log?.(`runtime pod ${key}: job container completed`);
        } else {
          const msg = `runtime pod ${key} (${rp.container}) exited (${JSON.stringify(exit)}): ${await rp.process.tail(10)}`;
          this.errors.push(msg);
          this.#o.log?.(msg);
          this.#notBefore.set(key, Date.now() + Math.min(30_000, 1000 * 2 ** Math.min(5, rp.starts - 1)));
        }
      }
      await this.#stopOne(rp);
    }
    // Started side by side, as a kubelet starts a node's pods (a few at a time: each start runs a
    // dozen short processes); their Services are routed once all have started, below.
    const startable = [...wanted].filter(
      ([key, want]) =>
        !this.#running.has(key) &&
        !this.#stopped &&
        (this.#notBefore.get(key) ?? 0) <= Date.now() &&
        !this.#ran.has(want.pod.metadata!.uid!),
    );
    const next = startable.values();
    const worker = async (): Promise<void> => {
      for (const [key, want] of next) {
        if (this.#stopped) return;
        try {
          await this.#startOne(want.pod, want.container, want.program, services.get(want.pod.metadata!.namespace!)!);
        } catch (err) {
          const msg = err instanceof Error ? err.message : String(err);
          if (this.#waiting.get(key) !== msg) this.#o.log?.(`runtime pod ${key} waits: ${msg}`);
          this.#waiting.set(key, msg);
        }
      }
    };
    await Promise.all(Array.from({ length: Math.min(START_PARALLELISM, startable.length) }, worker));
    for (const key of [...this.#waiting.keys()])
      if (!wanted.has(key) || this.#running.has(key)) this.#waiting.delete(key);
    for (const ns of namespaces) await this.#route(ns, services.get(ns) ?? []);
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
          await this.#core.readNamespacedSecret({ name, namespace: ns }).then(
            (s) => Object.fromEntries(Object.keys(s.data ?? {}).map((k) => [k, decode(s.data, k)!])),
            () => undefined,
          ),
        );
      return secrets.get(name);
    };
    const configMap = async (name: string) => {
      if (!configMaps.has(name))
        configMaps.set(
          name,
          await this.#core.readNamespacedConfigMap({ name, namespace: ns }).then(
            (m) => ({ ...(m.data ?? {}) }),
            () => undefined,
          ),
        );
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
        const s = await this.#core
          .readNamespacedSecret({ name: v.secret.secretName!, namespace: ns })
          .catch(() => undefined);
        if (!s && !v.secret.optional) throw new Error(`Secret ${v.secret.secretName} (volume ${v.name}) is missing`);
        const data = Object.fromEntries(Object.keys(s?.data ?? {}).map((k) => [k, decode(s?.data, k)!]));
        await writeItems(target, data, v.secret.items, v.secret.defaultMode ?? mode);
      } else if (v.configMap) {
        const m = await this.#core
          .readNamespacedConfigMap({ name: v.configMap.name!, namespace: ns })
          .catch(() => undefined);
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
            const s = await this.#core
              .readNamespacedSecret({ name: src.secret.name!, namespace: ns })
              .catch(() => undefined);
            if (!s && !src.secret.optional) throw new Error(`Secret ${src.secret.name} (volume ${v.name}) is missing`);
            const data = Object.fromEntries(Object.keys(s?.data ?? {}).map((k) => [k, decode(s?.data, k)!]));
            await writeItems(target, data, src.secret.items, v.projected.defaultMode ?? mode);
          } else if (src.configMap) {
            const m = await this.#core
              .readNamespacedConfigMap({ name: src.configMap.name!, namespace: ns })
              .catch(() => undefined);
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
    try {
      const env = await this.#env(pod, c, ip);
      await mkdir(dir, { recursive: true });
      const volumes = await this.#volumes(pod, dir, uid, gid, ip);
      const mounts: string[] = [];
      for (const m of c.volumeMounts ?? []) {
        const src = volumes.get(m.name);
        // vcluster's own /etc/hosts (an init container writes it) is the runner's hosts file here.
        if (!src || m.mountPath === '/etc/hosts') continue;
        mounts.push(`${m.subPath ? join(src, m.subPath) : src}\t${m.mountPath}\t${m.readOnly ? 'ro' : 'rw'}`);
      }
      const home = join(dir, 'home');
      await mkdir(home, { recursive: true });
      await chown(home, uid, gid);
      // The image's working directory (Argo CD's /home/argocd, Redis's /data) is the pod's own.
      if (program.cwd !== REPO_ROOT) mounts.push(`home\t${program.cwd}\trw`);
      const hosts = this.#hosts(pod, ip, services);
      await writeFile(join(dir, 'hosts'), hosts);
      // No DNS server: names resolve through the hosts file; any other lookup fails at once.
      await writeFile(join(dir, 'resolv.conf'), 'nameserver 127.0.0.1\noptions ndots:1 attempts:1 timeout:1\n');
      await chmod(join(dir, 'hosts'), 0o644);
      await chmod(join(dir, 'resolv.conf'), 0o644);
      mounts.push('hosts\t/etc/hosts\tro', 'resolv.conf\t/etc/resolv.conf\tro');
      await writeFile(join(dir, 'mounts'), `${mounts.join('\n')}\n`);

      netns = await createPodNetns(this.#o.network, n);
      this.#rules.delete(netns);
      // Loopback addresses may be routed out of eth0 (the DNAT to the control plane's relay).
      await run('ip', ['netns', 'exec', netns, 'sysctl', '-q', '-w', 'net.ipv4.conf.all.route_localnet=1']);
      const starts = (this.#starts.get(key) ?? 0) + 1;
      this.#starts.set(key, starts);
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
            ...program.env,
            ...env,
            ...program.forcedEnv,
          },
        },
      );
      const ports = new Map<string, number>();
      for (const p of c.ports ?? []) if (p.name) ports.set(p.name, p.containerPort);
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
        startedAt: Date.now(),
        labels: { ...(pod.metadata?.labels ?? {}) },
        ports,
        pod,
        dir,
        hosts,
      });
      this.#o.log?.(
        `runtime pod ${key} (${pod.metadata?.annotations?.[NAMESPACE_ANNOTATION] ?? '?'}/${pod.metadata?.annotations?.[NAME_ANNOTATION] ?? '?'}): ${basename(program.command)}${program.env.ARGOCD_BINARY_NAME ? ` as ${program.env.ARGOCD_BINARY_NAME}` : ''} at ${ip}${starts > 1 ? `, start ${starts}` : ''}`,
      );
    } catch (err) {
      if (netns) await clearNetns(netns);
      this.#o.vclusters.release(key);
      throw err;
    }
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
    for (const p of pods) {
      const host = await this.#kubernetesIp(p);
      if (host) kubeIps.add(host);
    }
    if (vc) for (const kip of kubeIps) rules.push(`    ip daddr ${kip} tcp dport 443 dnat to ${vc.ip}:8443`);
    // The control plane's loopback ports, as a pod on the host network would reach them.
    for (const port of this.#o.hostPorts)
      rules.push(`    ip daddr 127.0.0.1 tcp dport ${port} dnat to ${this.#o.network.hostIp}:${port}`);
    // A Service port whose pods do not run yet is refused (a TCP reset), as kube-proxy's nftables
    // mode refuses a Service without endpoints: a client sees ECONNREFUSED at once instead of a
    // connection to nowhere that waits out its timeout (the request router's is 30 s).
    const table =
      `table ip hrt\ndelete table ip hrt\ntable ip hrt {\n  chain out {\n    type nat hook output priority -100; policy accept;\n${rules.join('\n')}\n  }\n` +
      `  chain refuse {\n    type filter hook output priority 0; policy accept;\n${rejects.join('\n')}\n  }\n` +
      `  chain post {\n    type nat hook postrouting priority 100; policy accept;\n    oifname "eth0" ip saddr 127.0.0.0/8 masquerade\n  }\n}\n`;
    // Each pod's table is its own network namespace's: written side by side.
    await Promise.all(
      pods.map(async (p) => {
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

  readonly #kubeIp = new Map<string, string>();
  async #kubernetesIp(p: RunningPod): Promise<string | undefined> {
    const key = `${p.namespace}/${p.name}/${p.uid}`;
    if (this.#kubeIp.has(key)) return this.#kubeIp.get(key);
    const pod = await this.#core.readNamespacedPod({ name: p.name, namespace: p.namespace }).catch(() => undefined);
    const c = pod?.spec?.containers?.find((x) => x.name === p.container);
    const host = c?.env?.find((e) => e.name === 'KUBERNETES_SERVICE_HOST')?.value;
    if (host) this.#kubeIp.set(key, host);
    return host;
  }

  async #stopOne(rp: RunningPod): Promise<void> {
    const key = `${rp.namespace}/${rp.name}`;
    this.#running.delete(key);
    await rp.process.stop(5000);
    await clearNetns(rp.netns);
    this.#rules.delete(rp.netns);
    this.#kubeIp.delete(`${key}/${rp.uid}`);
    this.#o.vclusters.release(key);
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    await this.#loop;
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
