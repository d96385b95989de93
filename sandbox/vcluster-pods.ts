/**
 * Real vclusters on a root cluster without kubelets. The vcluster chart's StatefulSet pod is
 * "run" by a KWOK node (scheduled, given a volume, marked Running), but nothing executes its
 * container; this runner does, the way a kubelet would, with the vcluster binary of the release's
 * chart version built from its Go module (scripts/vcluster.sh builds one per version the catalog
 * pins; a release of another version is an error naming it) and the Kubernetes binaries of the
 * toolchain as its k8s distro:
 *
 *  - for every Running pod labelled `app=vcluster` it starts `vcluster start` from
 *    sandbox/vcluster-pod.sh in a network namespace of its own (a veth pair on this runner's
 *    bridge, the pod's address) and a private mount namespace holding the pod's volumes at the
 *    paths the chart mounts them: the release's config Secret at /var/lib/vcluster, a
 *    service-account token for the pod's ServiceAccount (TokenRequest bound to the pod, as the
 *    kubelet projects it) with the root cluster's CA and the namespace, /data (kept across
 *    restarts, standing for the PersistentVolumeClaim), the Kubernetes binaries and kine at
 *    /binaries (what the chart's init container copies there from the distro image) and vcluster
 *    at /usr/local/bin; it runs as the chart's runAsUser with no capabilities;
 *  - the pod reaches the root cluster's API server as a pod does, through KUBERNETES_SERVICE_HOST
 *    and _PORT: a relay on the bridge address forwards to the root API server (whose serving
 *    certificate names that address); the env is the chart's (VCLUSTER_NAME, POD_NAME, POD_IP,
 *    NODE_NAME, NODE_IP) plus POD_NAMESPACE;
 *  - vcluster itself does the rest: the virtual control plane (kine, kube-apiserver,
 *    kube-controller-manager), syncing pods into the tenant namespace (where KWOK runs them and
 *    the root cluster's quota, limit ranges and Pod Security apply), the Pod Security labels, and
 *    the kubeconfig export to Secret `vc-<release>`;
 *  - the address the exported kubeconfig names (`exportKubeConfig.server`) is written with the
 *    pod's address into `hostsFile`, which the provisioner sees as /etc/hosts (its own mount
 *    namespace, sandbox/provisioner-process.ts), as cluster DNS or a load balancer would resolve it;
 *  - a pod that is deleted (suspension scales the StatefulSet to 0, deletion removes it) stops its
 *    vcluster; a recreated pod (an upgrade changes the template, a vcluster upgrade its image)
 *    starts the new one, of the chart version the release now has, on the same /data; a vcluster
 *    that exits is started again, as the kubelet restarts a container.
 *
 * Root only (network and mount namespaces): `available()` says why not.
 */
import { CoreV1Api, type KubeConfig, type V1Pod } from '@kubernetes/client-node';
import { execFile, spawn } from 'node:child_process';
import { randomInt } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { mkdir, readFile, rm, chown, writeFile } from 'node:fs/promises';
import { request as httpsRequest } from 'node:https';
import net from 'node:net';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { parse } from 'yaml';
import { isRunning, sleep, startProcess, type ManagedProcess } from './processes.ts';

const run = promisify(execFile);
const POD_SCRIPT = join(dirname(fileURLToPath(import.meta.url)), 'vcluster-pod.sh');
/** The chart's runAsUser/runAsGroup in the tenant program's values (tenants/vcluster-values.ts). */
const DEFAULT_UID = 12345;

/** vcluster's readiness endpoint at a pod address (its own serving certificate: not verified, as a kubelet's probe). */
function probeReady(ip: string): Promise<boolean> {
  return new Promise((resolve) => {
    const req = httpsRequest(
      { host: ip, port: 8443, path: '/readyz', method: 'GET', rejectUnauthorized: false, timeout: 3000 },
      (res) => {
        res.resume();
        resolve(res.statusCode === 200);
      },
    );
    req.once('timeout', () => req.destroy());
    req.once('error', () => resolve(false));
    req.end();
  });
}

/** Why real vclusters cannot run on this machine ('' when they can). */
export async function realVclusterUnavailable(): Promise<string> {
  if (process.getuid?.() !== 0)
    return 'real vclusters need root here (each runs in network and mount namespaces of its own)';
  for (const tool of ['ip', 'unshare', 'setpriv']) {
    try {
      await run('sh', ['-c', `command -v ${tool}`]);
    } catch {
      return `real vclusters need \`${tool}\` (iproute2 / util-linux)`;
    }
  }
  return '';
}

/**
 * Removes what a pod in network namespace `netns` left behind: the processes still in it (vcluster's
 * kine, kube-apiserver and controller manager outlive it when vcluster exits on an error), which keep
 * the namespace alive after `ip netns del`, then the namespace's name and, with `veth`, the host end
 * of its veth pair (deleting one end deletes both), so that the slot's next pod can make them again
 * instead of failing with "File exists".
 */
export async function clearNetns(netns: string, veth?: string): Promise<void> {
  const pids = await run('ip', ['netns', 'pids', netns]).then(
    (r) => r.stdout.split(/\s+/).filter(Boolean).map(Number),
    () => [] as number[],
  );
  for (const pid of pids) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // Gone meanwhile.
    }
  }
  for (let i = 0; i < 50 && pids.some(isRunning); i++) await sleep(100);
  await ip('netns', 'del', netns).catch(() => undefined);
  if (veth) await ip('link', 'del', veth).catch(() => undefined);
}

/**
 * The network namespace of the n-th pod of `network`: a veth pair whose host end is on the
 * bridge, the pod's address on its `eth0`, the bridge as its default route. Anything left by an
 * earlier pod of that slot is cleared first. Two `ip -batch` processes (the host's side, then the
 * namespace's), not one process per step. Returns the namespace's name.
 */
export async function createPodNetns(network: PodNetwork, n: number): Promise<string> {
  const netns = `hrt${network.id}-${n}`;
  const veth = `hv${network.id}${n}`;
  if (existsSync(`/run/netns/${netns}`) || existsSync(`/sys/class/net/${veth}`)) await clearNetns(netns, veth);
  await ipBatch(
    [],
    [
      `netns add ${netns}`,
      `link add ${veth} type veth peer name eth0 netns ${netns}`,
      `link set ${veth} master ${network.bridge} up`,
    ],
  );
  await ipBatch(
    ['-n', netns],
    [
      `addr add ${network.podIp(n)}/24 dev eth0`,
      'link set eth0 up',
      'link set lo up',
      `route add default via ${network.hostIp}`,
    ],
  );
  return netns;
}

/** `ip [options] -batch -` with `lines` as its commands (stopping at the first that fails). */
function ipBatch(options: string[], lines: string[]): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn('ip', [...options, '-batch', '-'], { stdio: ['pipe', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.once('error', reject);
    child.once('close', (code) =>
      code === 0
        ? resolve()
        : reject(new Error(`ip ${options.join(' ')} -batch (${lines.join('; ')}): ${stderr.trim() || `exit ${code}`}`)),
    );
    child.stdin.end(`${lines.join('\n')}\n`);
  });
}

async function ip(...args: string[]): Promise<void> {
  try {
    await run('ip', args);
  } catch (err) {
    const e = err as { stderr?: string; message: string };
    throw new Error(`ip ${args.join(' ')}: ${(e.stderr ?? e.message).trim()}`, { cause: err });
  }
}

/**
 * A bridge with a /24 of its own for the pods of one root cluster. Chosen before the root API
 * server starts: its serving certificate must name `hostIp`.
 */
export interface PodNetwork {
  id: string;
  bridge: string;
  /** The bridge's address: the pods' gateway, and where the relay to the root API server listens. */
  hostIp: string;
  /** The pods' /24, e.g. 10.203.17.0/24. */
  cidr: string;
  /** The address of the n-th pod (n from 2). */
  podIp(n: number): string;
  remove(): Promise<void>;
}

export async function createPodNetwork(): Promise<PodNetwork> {
  const taken = (await run('ip', ['-4', '-o', 'addr', 'show'])).stdout;
  for (let attempt = 0; attempt < 20; attempt++) {
    const a = randomInt(200, 250);
    const b = randomInt(0, 256);
    const prefix = `10.${a}.${b}`;
    if (taken.includes(` ${prefix}.`)) continue;
    const id = `${a.toString(16)}${b.toString(16).padStart(2, '0')}${randomInt(0, 4096).toString(16).padStart(3, '0')}`;
    const bridge = `hrtb${id}`;
    try {
      await ip('link', 'add', bridge, 'type', 'bridge');
    } catch {
      continue;
    }
    const hostIp = `${prefix}.1`;
    await ip('addr', 'add', `${hostIp}/24`, 'dev', bridge);
    await ip('link', 'set', bridge, 'up');
    return {
      id,
      bridge,
      hostIp,
      cidr: `${prefix}.0/24`,
      podIp: (n) => `${prefix}.${n}`,
      remove: () => ip('link', 'del', bridge).catch(() => undefined),
    };
  }
  throw new Error('no free 10.200-249.x.0/24 for the vcluster pods');
}

/**
 * A TCP relay listening at `listen` that pipes each connection to `target`; open client sockets are
 * kept in `sockets` (cut when a pod stops: its network namespace goes away without a FIN).
 */
export async function startTcpRelay(
  listen: { host: string; port: number },
  target: { host: string; port: number },
  sockets: Set<net.Socket>,
): Promise<net.Server> {
  const server = net.createServer((client) => {
    const upstream = net.connect(target.port, target.host);
    sockets.add(client);
    client.once('close', () => {
      sockets.delete(client);
      upstream.destroy();
    });
    upstream.once('close', () => client.destroy());
    client.pipe(upstream).pipe(client);
    client.on('error', () => upstream.destroy());
    upstream.on('error', () => client.destroy());
  });
  await new Promise<void>((ok, fail) => {
    server.once('error', fail);
    server.listen(listen.port, listen.host, () => ok());
  });
  return server;
}

/** The vcluster chart's pods, which the runner starts and reports on instead of KWOK. */
export const VCLUSTER_POD_LABEL = { label: 'app', value: 'vcluster' } as const;

/**
 * The KWOK stages a root cluster needs beside the toolchain's for the pods vcluster syncs, where
 * KWOK, which acts once per transition, differs from a kubelet, which reports a pod's status
 * again and again:
 *  - `pod-complete-vcluster-job`: a pod of a Job inside the vcluster reaches the root cluster
 *    without its owner reference (vcluster keeps it in an annotation) but with the Job's
 *    `job-name` label, so the toolchain's `pod-complete` stage (pods owned by a Job) does not see
 *    it; a kubelet would run it to completion, and so does this stage (the runtime's Helm hooks,
 *    such as Argo CD's redis-secret-init, are such Jobs);
 *  - `pod-ready-again-vcluster`: vcluster copies the virtual pod's conditions to the host pod
 *    when it first syncs the status, and when that lands just after KWOK marked the pod ready it
 *    drops the Ready condition; a kubelet would report Ready again at its next status sync, and
 *    so does this stage.
 */
export const SYNCED_JOB_POD_STAGE = `apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-complete-vcluster-job
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: 'DoesNotExist'
    - key: '.status.phase'
      operator: 'In'
      values:
      - 'Running'
    - key: '.metadata.labels["vcluster.loft.sh/managed-by"]'
      operator: 'Exists'
    - key: '.metadata.labels["job-name"]'
      operator: 'Exists'
  next:
    statusTemplate: |
      {{ $now := Now }}
      containerStatuses:
      {{ range $index, $item := .spec.containers }}
      - image: {{ $item.image | Quote }}
        name: {{ $item.name | Quote }}
        ready: false
        restartCount: 0
        started: false
        state:
          terminated:
            exitCode: 0
            finishedAt: {{ $now | Quote }}
            reason: Completed
            startedAt: {{ $now | Quote }}
      {{ end }}
      phase: Succeeded
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-ready-again-vcluster
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: 'DoesNotExist'
    - key: '.status.phase'
      operator: 'In'
      values:
      - 'Running'
    - key: '.metadata.labels["vcluster.loft.sh/managed-by"]'
      operator: 'Exists'
    - key: '.metadata.labels["job-name"]'
      operator: 'DoesNotExist'
    - key: '.status.conditions.[] | select( .type == "Ready" ) | .status'
      operator: 'NotIn'
      values:
      - 'True'
  next:
    statusTemplate: |
      {{ $now := Now }}
      conditions:
      - lastTransitionTime: {{ $now | Quote }}
        status: "True"
        type: Initialized
      - lastTransitionTime: {{ $now | Quote }}
        status: "True"
        type: Ready
      - lastTransitionTime: {{ $now | Quote }}
        status: "True"
        type: ContainersReady
      - lastTransitionTime: {{ $now | Quote }}
        status: "True"
        type: PodScheduled
      {{ range .spec.readinessGates }}
      - lastTransitionTime: {{ $now | Quote }}
        status: "True"
        type: {{ .conditionType | Quote }}
      {{ end }}
`;

export interface RealVcluster {
  namespace: string;
  release: string;
  podName: string;
  podUid: string;
  /** The vcluster version running (the release's chart version; the binary built from that module). */
  version: string;
  /** The pod's address in its network namespace (the syncer listens on :8443). */
  ip: string;
  /** `exportKubeConfig.server` of the release's config ('' when none). */
  exportServer: string;
  /** `policies.podSecurityStandard` of the release's config. */
  podSecurityStandard: string;
  process: ManagedProcess;
  netns: string;
  startedAt: number;
  /** How many times this namespace's vcluster was started (restarts included). */
  starts: number;
  /** Whether the pod is reported Ready (vcluster's /readyz answered 200 at the last probe). */
  ready: boolean;
}

export interface VclusterPodsOptions {
  root: KubeConfig;
  /** The root API server's loopback URL (https://127.0.0.1:<port>). */
  rootServer: string;
  rootCaPem: string;
  network: PodNetwork;
  /** Folder with `<version>/vcluster` for each version and `kine` (scripts/vcluster.sh). */
  vclusterBin: string;
  /** The vcluster versions built there (a release's chart version must be one of them). */
  vclusterVersions: readonly string[];
  /** Folder with kube-apiserver, kube-controller-manager and kube-scheduler. */
  kubernetesBin: string;
  /** One folder per tenant namespace (its /data survives restarts). */
  dir: string;
  /** Written with the base /etc/hosts and one line per running vcluster's export address. */
  hostsFile: string;
  pollMs?: number;
  log?: (msg: string) => void;
}

export class VclusterPods {
  readonly #o: VclusterPodsOptions;
  readonly #core: CoreV1Api;
  readonly #running = new Map<string, RealVcluster>();
  readonly #starts = new Map<string, number>();
  /** When a namespace's vcluster may start again after it exited (the kubelet's restart backoff). */
  readonly #notBefore = new Map<string, number>();
  readonly #nextIp = { n: 2 };
  /** Pod address slots by owner (a tenant namespace's vcluster pod, or a runtime pod), and freed slots. */
  readonly #ips = new Map<string, number>();
  readonly #freeIps: number[] = [];
  readonly errors: string[] = [];
  #relay: net.Server | undefined;
  /** The relay's connections: a pod's are cut when it stops (its network namespace goes away without a FIN). */
  readonly #relayed = new Set<net.Socket>();
  #stopped = false;
  #loop: Promise<void> | undefined;
  #baseHosts = '';

  constructor(o: VclusterPodsOptions) {
    this.#o = o;
    this.#core = o.root.makeApiClient(CoreV1Api);
  }

  async start(): Promise<void> {
    this.#baseHosts = await readFile('/etc/hosts', 'utf8').catch(() => '127.0.0.1 localhost\n');
    await this.#writeHosts();
    const root = new URL(this.#o.rootServer);
    this.#relay = await startTcpRelay(
      { host: this.#o.network.hostIp, port: 443 },
      { host: root.hostname, port: Number(root.port) },
      this.#relayed,
    );
    this.#loop = this.#run();
  }

  /**
   * The address slot (n of `network.podIp(n)`) of `owner`: the one it has, else a freed one, else
   * the next. A tenant namespace's vcluster keeps its slot while the namespace exists; the runtime
   * pods' runner (sandbox/runtime-pods.ts) takes slots from here too and releases them.
   */
  allocate(owner: string): number {
    let n = this.#ips.get(owner);
    if (n !== undefined) return n;
    n = this.#freeIps.shift() ?? this.#nextIp.n++;
    if (n > 254) throw new Error('more than 253 pods on one pod network');
    this.#ips.set(owner, n);
    return n;
  }

  release(owner: string): void {
    const n = this.#ips.get(owner);
    if (n === undefined) return;
    this.#ips.delete(owner);
    this.#freeIps.push(n);
  }

  get(namespace: string): RealVcluster | undefined {
    return this.#running.get(namespace);
  }

  namespaces(): string[] {
    return [...this.#running.keys()];
  }

  /**
   * A kubeconfig exported by a vcluster (its Secret), made usable from this process: the server
   * becomes the pod's address, and the TLS server name stays the exported host (which the
   * vcluster's certificate names).
   */
  reachable(namespace: string, kubeconfig: string): string {
    const vc = this.#running.get(namespace);
    if (!vc) throw new Error(`no vcluster runs in ${namespace}`);
    const config = parse(kubeconfig) as {
      clusters?: Array<{ cluster: { server: string; 'tls-server-name'?: string } }>;
    };
    for (const c of config.clusters ?? []) {
      const url = new URL(c.cluster.server);
      c.cluster['tls-server-name'] = url.hostname;
      url.hostname = vc.ip;
      c.cluster.server = url.toString().replace(/\/$/, '');
    }
    return JSON.stringify(config);
  }

  async #run(): Promise<void> {
    while (!this.#stopped) {
      try {
        await this.#tick();
      } catch (err) {
        this.#o.log?.(`vcluster pods: ${err instanceof Error ? err.message : String(err)}`);
      }
      await sleep(this.#o.pollMs ?? 500);
    }
  }

  async #tick(): Promise<void> {
    const pods = (await this.#core.listPodForAllNamespaces({ labelSelector: 'app=vcluster' })).items;
    const wanted = new Map<string, V1Pod>();
    for (const pod of pods) {
      const ns = pod.metadata?.namespace;
      // Scheduled (a node and, through it, a bound volume) and not being deleted: the kubelet's to run.
      if (!ns || pod.metadata?.deletionTimestamp || !pod.spec?.nodeName) continue;
      if (pod.status?.phase === 'Succeeded' || pod.status?.phase === 'Failed') continue;
      wanted.set(ns, pod);
    }
    for (const [ns, vc] of this.#running) {
      const pod = wanted.get(ns);
      if (pod?.metadata?.uid === vc.podUid && vc.process.running()) continue;
      if (!pod) this.#o.log?.(`vcluster ${ns}/${vc.release}: pod ${vc.podName} is gone; stopping vcluster`);
      else if (pod.metadata?.uid !== vc.podUid)
        this.#o.log?.(`vcluster ${ns}/${vc.release}: pod ${vc.podName} was replaced; restarting vcluster`);
      else {
        const msg = `vcluster ${ns}/${vc.release} exited (${JSON.stringify(await vc.process.exited)}): ${await vc.process.tail(15)}`;
        this.errors.push(msg);
        this.#o.log?.(msg);
        // Restarted after 1, 2, 4 … at most 30 s, as the kubelet backs off a crashing container.
        this.#notBefore.set(ns, Date.now() + Math.min(30_000, 1000 * 2 ** Math.min(5, vc.starts - 1)));
      }
      await this.#stopOne(vc);
    }
    // The readiness probe of the chart's container (GET /readyz on 8443), reported on the pod.
    await Promise.all(
      [...this.#running.values()].map(async (vc) => {
        const ready = await probeReady(vc.ip);
        if (ready !== vc.ready) await this.#report(vc, ready);
      }),
    );
    for (const [ns, pod] of wanted) {
      if (this.#running.has(ns) || this.#stopped || (this.#notBefore.get(ns) ?? 0) > Date.now()) continue;
      try {
        await this.#startOne(pod);
      } catch (err) {
        const msg = `starting the vcluster of ${ns} failed: ${err instanceof Error ? err.message : String(err)}`;
        this.errors.push(msg);
        this.#o.log?.(msg);
      }
    }
    // A namespace that is gone takes its volume with it.
    const namespaces = new Set((await this.#core.listNamespace()).items.map((n) => n.metadata?.name));
    for (const ns of [...this.#ips.keys()]) {
      // Runtime pods' slots (`<namespace>/<pod>`) are their runner's to release.
      if (ns.includes('/') || namespaces.has(ns) || this.#running.has(ns)) continue;
      this.release(ns);
      await rm(join(this.#o.dir, ns), { recursive: true, force: true });
    }
  }

  async #startOne(pod: V1Pod): Promise<void> {
    const ns = pod.metadata!.namespace!;
    const podName = pod.metadata!.name!;
    const release = pod.metadata?.labels?.release ?? podName.replace(/-\d+$/, '');
    const chart = (
      await this.#core.listNamespacedSecret({ namespace: ns, labelSelector: `release=${release}` })
    ).items.find((s) => s.metadata?.name === `vc-config-${release}`);
    if (!chart?.data?.['config.yaml'])
      throw new Error(`Secret ${ns}/vc-config-${release} (the vcluster config) is missing`);
    const configYaml = Buffer.from(chart.data['config.yaml'], 'base64').toString('utf8');
    const chartLabel = chart.metadata?.labels?.chart ?? '';
    const version = chartLabel.replace(/^vcluster-/, '');
    if (!this.#o.vclusterVersions.includes(version))
      throw new Error(
        `release ${ns}/${release} is vcluster chart ${version || `(no chart label on Secret vc-config-${release})`}, but this run built vcluster ${this.#o.vclusterVersions.join(', ')} only`,
      );
    const config = (parse(configYaml) ?? {}) as {
      exportKubeConfig?: { server?: string };
      policies?: { podSecurityStandard?: string };
    };
    const uid =
      pod.spec?.containers?.[0]?.securityContext?.runAsUser ?? pod.spec?.securityContext?.runAsUser ?? DEFAULT_UID;

    const n = this.allocate(ns);
    const podIp = this.#o.network.podIp(n);
    const dir = join(this.#o.dir, ns);
    const volumes = ['data', 'pki', 'tmp', 'config', 'serviceaccount'];
    // Every volume but the claim is new with each pod (emptyDir, the Secret, the projected token).
    for (const v of volumes.filter((v) => v !== 'data')) await rm(join(dir, v), { recursive: true, force: true });
    for (const v of volumes) {
      await mkdir(join(dir, v), { recursive: true });
      await chown(join(dir, v), uid, uid);
    }
    await writeFile(join(dir, 'config', 'config.yaml'), configYaml, { mode: 0o644 });
    const token = await this.#core.createNamespacedServiceAccountToken({
      name: pod.spec?.serviceAccountName ?? 'default',
      namespace: ns,
      body: {
        spec: {
          audiences: [],
          // The kubelet refreshes a projected token before it expires; a day outlasts any run here.
          expirationSeconds: 24 * 3600,
          boundObjectRef: { apiVersion: 'v1', kind: 'Pod', name: podName, uid: pod.metadata!.uid! },
        },
      },
    });
    const jwt = token.status?.token;
    if (!jwt)
      throw new Error(`the TokenRequest for ${ns}/${pod.spec?.serviceAccountName ?? 'default'} returned no token`);
    await writeFile(join(dir, 'serviceaccount', 'token'), jwt, { mode: 0o644 });
    await writeFile(join(dir, 'serviceaccount', 'ca.crt'), this.#o.rootCaPem, { mode: 0o644 });
    await writeFile(join(dir, 'serviceaccount', 'namespace'), ns, { mode: 0o644 });

    const netns = await createPodNetns(this.#o.network, n);

    const starts = (this.#starts.get(ns) ?? 0) + 1;
    this.#starts.set(ns, starts);
    const proc = startProcess(
      `vcluster-${ns}`,
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
        resolve(this.#o.vclusterBin, version),
        resolve(this.#o.kubernetesBin),
        resolve(this.#o.vclusterBin, 'kine'),
        String(uid),
      ],
      join(this.#o.dir, `${ns}.log`),
      {
        env: {
          PATH: process.env.PATH ?? '/usr/sbin:/usr/bin:/sbin:/bin',
          HOME: '/tmp',
          KUBERNETES_SERVICE_HOST: this.#o.network.hostIp,
          KUBERNETES_SERVICE_PORT: '443',
          VCLUSTER_NAME: release,
          POD_NAME: podName,
          POD_NAMESPACE: ns,
          POD_IP: podIp,
          NODE_NAME: pod.spec?.nodeName ?? '',
          NODE_IP: pod.status?.hostIP ?? '',
          LOFT_LOG_ENCODING: 'console',
        },
      },
    );
    const vc: RealVcluster = {
      namespace: ns,
      release,
      podName,
      podUid: pod.metadata!.uid!,
      version,
      ip: podIp,
      exportServer: config.exportKubeConfig?.server ?? '',
      podSecurityStandard: config.policies?.podSecurityStandard ?? '',
      process: proc,
      netns,
      startedAt: Date.now(),
      starts,
      ready: false,
    };
    this.#running.set(ns, vc);
    await this.#report(vc, false);
    await this.#writeHosts();
    this.#o.log?.(
      `vcluster ${version} (real) started for ${ns}/${release}: pod ${podName} at ${podIp}, export ${vc.exportServer || 'none'}${starts > 1 ? `, start ${starts}` : ''}`,
    );
  }

  /**
   * The pod's status as the kubelet reports it: Running at the pod's address, Ready only while
   * vcluster's /readyz answers (so the StatefulSet, and Helm's wait on it, see a vcluster that is
   * still starting as not ready, as on a real cluster).
   */
  async #report(vc: RealVcluster, ready: boolean): Promise<void> {
    try {
      const pod = await this.#core.readNamespacedPodStatus({ name: vc.podName, namespace: vc.namespace });
      if (pod.metadata?.uid !== vc.podUid) return;
      const now = new Date();
      const status = ready ? 'True' : 'False';
      const containers = pod.spec?.containers ?? [];
      pod.status = {
        ...pod.status,
        phase: 'Running',
        podIP: vc.ip,
        podIPs: [{ ip: vc.ip }],
        hostIP: pod.status?.hostIP ?? '127.0.0.1',
        startTime: pod.status?.startTime ?? now,
        conditions: [
          { type: 'PodScheduled', status: 'True', lastTransitionTime: now },
          { type: 'Initialized', status: 'True', lastTransitionTime: now },
          { type: 'ContainersReady', status, lastTransitionTime: now },
          { type: 'Ready', status, lastTransitionTime: now },
        ],
        initContainerStatuses: (pod.spec?.initContainers ?? []).map((c) => ({
          name: c.name,
          image: c.image ?? '',
          imageID: '',
          ready: true,
          restartCount: 0,
          state: { terminated: { exitCode: 0, reason: 'Completed', startedAt: now, finishedAt: now } },
        })),
        containerStatuses: containers.map((c) => ({
          name: c.name,
          image: c.image ?? '',
          imageID: '',
          ready,
          started: true,
          restartCount: vc.starts - 1,
          state: { running: { startedAt: new Date(vc.startedAt) } },
        })),
      };
      await this.#core.replaceNamespacedPodStatus({ name: vc.podName, namespace: vc.namespace, body: pod });
      vc.ready = ready;
      this.#o.log?.(
        `vcluster ${vc.namespace}/${vc.release}: pod ${vc.podName} ${ready ? 'Ready' : 'Running, not ready'}`,
      );
    } catch (err) {
      // Changed meanwhile (409) or gone: the next round reports again.
      if ((err as { code?: number }).code !== 409 && (err as { code?: number }).code !== 404) throw err;
    }
  }

  async #stopOne(vc: RealVcluster): Promise<void> {
    this.#running.delete(vc.namespace);
    await vc.process.stop(10_000);
    for (const socket of this.#relayed) if (socket.remoteAddress === vc.ip) socket.destroy();
    await clearNetns(vc.netns);
    await this.#writeHosts();
  }

  async #writeHosts(): Promise<void> {
    const lines = [...this.#running.values()]
      .filter((vc) => vc.exportServer)
      .map((vc) => `${vc.ip} ${new URL(vc.exportServer).hostname}`);
    // Written in place: the provisioner's /etc/hosts is a bind mount of this very file.
    await writeFile(this.#o.hostsFile, `${this.#baseHosts.trimEnd()}\n# vclusters\n${lines.join('\n')}\n`, {
      flag: 'w',
    });
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    await this.#loop;
    await Promise.allSettled([...this.#running.values()].map((vc) => this.#stopOne(vc)));
    for (const socket of this.#relayed) socket.destroy();
    await new Promise<void>((ok) => (this.#relay ? this.#relay.close(() => ok()) : ok()));
  }
}

/**
 * The vcluster build of HRT_VCLUSTER_BIN: its folder and the vcluster versions its versions.txt
 * names (`<version>/vcluster`, one per version the catalog pins).
 */
export function vclusterBuild(): { bin: string; versions: string[]; describe: string } | undefined {
  const bin = process.env.HRT_VCLUSTER_BIN;
  if (!bin) return undefined;
  let lines: string[];
  try {
    lines = readFileSync(join(bin, 'versions.txt'), 'utf8').split('\n');
  } catch {
    return undefined;
  }
  const vclusters = lines.filter((l) => /^[^\t]+\/vcluster\t/.test(l)).map((l) => l.split('\t')[1] ?? '');
  const kine = lines.find((l) => l.startsWith('kine\t'));
  const versions = vclusters.map((m) => m.split(' ')[1] ?? '').filter(Boolean);
  if (versions.length === 0) return undefined;
  return {
    bin,
    versions,
    describe: `vcluster: ${vclusters.join(', ')} (real, built from its Go module), kine: ${kine?.split('\t')[1] ?? 'missing'}, at ${bin}`,
  };
}
