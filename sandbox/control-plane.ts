/**
 * Real Kubernetes control planes on loopback, from the toolchain's binaries (scripts/toolchain.sh,
 * procedure as in tools/smoke.sh): one etcd, and per control plane a kube-apiserver with its own
 * CA and `--etcd-prefix`, a kube-controller-manager, a kube-scheduler and KWOK with a few fake
 * nodes, so that Deployments and StatefulSets become Available without a kubelet.
 */
import { request as httpsRequest } from 'node:https';
import { request as httpRequest } from 'node:http';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CoreV1Api, KubeConfig, type V1Node } from '@kubernetes/client-node';
import { parseAllDocuments, stringify } from 'yaml';
import {
  createCa,
  createClientCert,
  createEtcdCertificates,
  createServiceAccountKeys,
  createServingCert,
  kubeconfigFor,
  type CertificateAuthority,
  type ClientCertificate,
} from './pki.ts';
import { serverPort, startProcess, StopWaiting, until, type ManagedProcess } from './processes.ts';

export interface Toolchain {
  /** The toolchain's bin folder. */
  bin: string;
  /** KWOK stages (`<toolchain>/share/kwok-stages.yaml`). */
  kwokStages: string;
}

export function toolchainFrom(bin: string): Toolchain {
  return { bin, kwokStages: join(bin, '..', 'share', 'kwok-stages.yaml') };
}

/** How an API server reaches etcd: its https URL and the client certificate etcd requires. */
export interface EtcdEndpoint {
  url: string;
  caFile: string;
  certFile: string;
  keyFile: string;
}

/** etcd on loopback: TLS only, clients and peers authenticated by certificates of its own CA. */
export interface Etcd extends EtcdEndpoint {
  process: ManagedProcess;
  stop(): Promise<void>;
}

function httpGet(
  url: string,
  tls?: { ca: string; cert: string; key: string } | { rejectUnauthorized: false },
): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const u = new URL(url);
    const req = (u.protocol === 'https:' ? httpsRequest : httpRequest)(
      u,
      { method: 'GET', timeout: 5000, ...(tls ?? {}) },
      (res) => {
        let body = '';
        res
          .setEncoding('utf8')
          .on('data', (d: string) => {
            body += d;
          })
          .on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      },
    );
    req.once('timeout', () => req.destroy(new Error(`GET ${url} timed out`)));
    req.once('error', reject);
    req.end();
  });
}

export async function startEtcd(tc: Toolchain, dir: string): Promise<Etcd> {
  await mkdir(dir, { recursive: true });
  // A port another process bound first ends etcd at once ("address already in use"): start it
  // again on other ports (a fresh data folder, as that one may hold the first try's member).
  for (let attempt = 1; ; attempt++) {
    try {
      return await startEtcdOnce(tc, dir, join(dir, attempt === 1 ? 'data' : `data-${attempt}`));
    } catch (err) {
      if (attempt >= 3 || !(err instanceof EtcdPortTaken)) throw err;
    }
  }
}

class EtcdPortTaken extends StopWaiting {}

async function startEtcdOnce(tc: Toolchain, dir: string, dataDir: string): Promise<Etcd> {
  const certs = await createEtcdCertificates(join(dir, 'pki'));
  const client = await serverPort();
  const peer = await serverPort();
  const url = `https://127.0.0.1:${client}`;
  const peerUrl = `https://127.0.0.1:${peer}`;
  const proc = startProcess(
    'etcd',
    join(tc.bin, 'etcd'),
    [
      '--name',
      'e2e',
      '--data-dir',
      dataDir,
      '--listen-client-urls',
      url,
      '--advertise-client-urls',
      url,
      '--listen-peer-urls',
      peerUrl,
      '--initial-advertise-peer-urls',
      peerUrl,
      '--initial-cluster',
      `e2e=${peerUrl}`,
      // Any process on the machine can connect to a loopback port: clients and peers must present
      // a certificate of etcd's own CA (the API servers get one), or they are refused.
      '--cert-file',
      certs.member.certFile,
      '--key-file',
      certs.member.keyFile,
      '--trusted-ca-file',
      certs.caFile,
      '--client-cert-auth',
      '--peer-cert-file',
      certs.member.certFile,
      '--peer-key-file',
      certs.member.keyFile,
      '--peer-trusted-ca-file',
      certs.caFile,
      '--peer-client-cert-auth',
      '--log-level',
      'warn',
      // Test data: no fsync per write (the machine is shared and slow).
      '--unsafe-no-fsync',
      '--quota-backend-bytes',
      String(4 * 1024 ** 3),
    ],
    join(dir, 'etcd.log'),
  );
  await until('etcd /health', 30_000, async () => {
    if (!proc.running()) {
      const tail = await proc.tail(10);
      if (tail.includes('address already in use')) throw new EtcdPortTaken(`etcd: a port was taken: ${tail}`);
      throw new Error(`etcd exited: ${tail}`);
    }
    const tls = { ca: certs.caPem, cert: certs.client.certPem, key: certs.client.keyPem };
    return (await httpGet(`${url}/health`, tls)).status === 200;
  });
  return {
    url,
    caFile: certs.caFile,
    certFile: certs.client.certFile,
    keyFile: certs.client.keyFile,
    process: proc,
    stop: () => proc.stop(),
  };
}

export interface KubeControlPlane {
  name: string;
  /** https://127.0.0.1:<port> */
  server: string;
  /** Admin kubeconfig (contents, certificates inline). */
  kubeconfig: string;
  kubeconfigFile: string;
  kc: KubeConfig;
  ca: CertificateAuthority;
  admin: ClientCertificate;
  processes: ManagedProcess[];
  /** Seconds from the first process start to all components ready. */
  startSeconds: number;
  stop(): Promise<void>;
  /** Stops the kube-apiserver alone (the cluster "goes away"; etcd keeps its state). */
  stopApiServer(): Promise<void>;
  /** Starts the kube-apiserver again on the same port with the same certificates and keys; resolves once it is ready. */
  startApiServer(): Promise<void>;
  /** stopApiServer, `downMs` later startApiServer (same port, certificates and etcd). */
  restartApiServer(downMs?: number): Promise<void>;
}

export interface ControlPlaneOptions {
  name: string;
  dir: string;
  etcd: EtcdEndpoint;
  /** etcd key prefix of this API server (separates control planes sharing the etcd). */
  etcdPrefix: string;
  /** Fake KWOK nodes to create (0 with `apiServerOnly`). */
  nodes: number;
  /**
   * Only the kube-apiserver: no controller-manager, scheduler or KWOK (enough for clients that
   * list, watch and write objects; nothing garbage-collects, schedules or deletes namespaces).
   */
  apiServerOnly?: boolean;
  /** Generous wait bound for readiness. */
  timeoutMs?: number;
  /**
   * A Pod Security level the PodSecurity admission plugin enforces (and warns) by default, in
   * every namespace that does not label another (an AdmissionConfiguration passed with
   * `--admission-control-config-file`). Without it, only namespaces' own labels apply.
   */
  podSecurityDefault?: 'privileged' | 'baseline' | 'restricted';
  /** More addresses the serving certificate names (where a relay exposes the API server to a pod network). */
  servingIps?: readonly string[];
  /** KWOK stages added to the toolchain's (YAML, one or more `Stage` documents). */
  extraKwokStages?: string;
  /**
   * Pods KWOK leaves to something else that runs them and reports their status, as a kubelet
   * would: a pod for which any of these KWOK queries (a label, or a jq expression over the pod)
   * yields one of its values gets none of KWOK's pod stages (the toolchain's and
   * `extraKwokStages`) but its deletion (`pod-delete`). It stays Pending until its runner reports.
   */
  kwokLeavesPods?: readonly KwokPodQuery[];
}

/** A KWOK selector query over a pod (a label, or a jq expression) and the values that select it. */
export interface KwokPodQuery {
  key: string;
  values: readonly string[];
}

/** The pods with label `label=value`, as a KWOK query. */
export function kwokLabelQuery(label: string, value: string): KwokPodQuery {
  return { key: `.metadata.labels["${label}"]`, values: [value] };
}

interface KwokStage {
  metadata?: { name?: string };
  spec: {
    resourceRef?: { kind?: string };
    selector: { matchExpressions: Array<{ key: string; operator: string; values?: string[] }> };
  };
}

/** `yaml` (KWOK Stage documents) with every pod stage but `pod-delete` skipping the pods of `leave`. */
function leavePods(yaml: string, leave: readonly KwokPodQuery[]): string {
  const docs = parseAllDocuments(yaml)
    .map((d) => d.toJS() as KwokStage | null)
    .filter((d): d is KwokStage => d !== null);
  for (const d of docs) {
    if (d.spec.resourceRef?.kind !== 'Pod' || d.metadata?.name === 'pod-delete') continue;
    for (const q of leave)
      d.spec.selector.matchExpressions.push({ key: q.key, operator: 'NotIn', values: [...q.values] });
  }
  return docs.map((d) => stringify(d)).join('---\n');
}

/** The AdmissionConfiguration of `podSecurityDefault`: enforce and warn `level` at `latest`, no exemptions. */
export function podSecurityAdmissionConfig(level: string): string {
  return `apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
  - name: PodSecurity
    configuration:
      apiVersion: pod-security.admission.config.k8s.io/v1
      kind: PodSecurityConfiguration
      defaults:
        enforce: ${level}
        enforce-version: latest
        warn: ${level}
        warn-version: latest
        audit: privileged
        audit-version: latest
      exemptions:
        usernames: []
        runtimeClasses: []
        namespaces: []
`;
}

/**
 * Starts an API server with controllers, scheduler and KWOK, and waits until pods can run (or,
 * with `apiServerOnly`, the API server alone, until it is ready).
 */
export async function startKubeControlPlane(tc: Toolchain, o: ControlPlaneOptions): Promise<KubeControlPlane> {
  const started = Date.now();
  const timeoutMs = o.timeoutMs ?? 180_000;
  await mkdir(o.dir, { recursive: true });
  const ca = await createCa(join(o.dir, 'pki'), `${o.name}-ca`);
  const [serving, admin, sa] = await Promise.all([
    createServingCert(ca, 'apiserver', o.servingIps),
    createClientCert(ca, 'admin', `${o.name}-admin`, 'system:masters'),
    createServiceAccountKeys(ca, 'sa'),
  ]);
  const [apiPort, kcmPort, schedPort, kwokPort] = await Promise.all([
    serverPort(),
    serverPort(),
    serverPort(),
    serverPort(),
  ]);
  const server = `https://127.0.0.1:${apiPort}`;
  const kubeconfig = kubeconfigFor({ name: o.name, server, ca, client: admin });
  const kubeconfigFile = join(o.dir, 'admin.kubeconfig');
  await writeFile(kubeconfigFile, kubeconfig, { mode: 0o600 });
  const apiArgs = [
    '--etcd-servers',
    o.etcd.url,
    '--etcd-cafile',
    o.etcd.caFile,
    '--etcd-certfile',
    o.etcd.certFile,
    '--etcd-keyfile',
    o.etcd.keyFile,
    '--etcd-prefix',
    o.etcdPrefix,
    '--bind-address',
    '127.0.0.1',
    '--advertise-address',
    '127.0.0.1',
    '--secure-port',
    String(apiPort),
    '--cert-dir',
    join(o.dir, 'apiserver'),
    '--tls-cert-file',
    serving.certFile,
    '--tls-private-key-file',
    serving.keyFile,
    '--client-ca-file',
    ca.certFile,
    // Service-account tokens: the issuer and signing keys make TokenRequest work (bound, expiring tokens).
    '--service-account-issuer',
    'https://kubernetes.default.svc.cluster.local',
    '--service-account-key-file',
    sa.publicKeyFile,
    '--service-account-signing-key-file',
    sa.privateKeyFile,
    '--service-cluster-ip-range',
    '10.96.0.0/16',
    '--authorization-mode',
    'Node,RBAC',
    '--allow-privileged=true',
    '--enable-priority-and-fairness=false',
    '--profiling=false',
  ];
  if (o.podSecurityDefault) {
    const file = join(o.dir, 'admission-config.yaml');
    await writeFile(file, podSecurityAdmissionConfig(o.podSecurityDefault));
    apiArgs.push('--admission-control-config-file', file);
  }
  const processes: ManagedProcess[] = [];
  const stop = async () => {
    for (const p of [...processes].reverse()) await p.stop(3000);
  };
  try {
    let api: ManagedProcess | undefined;
    const startApiServer = async (): Promise<void> => {
      if (api?.running()) return;
      const proc = startProcess(
        `${o.name}-kube-apiserver`,
        join(tc.bin, 'kube-apiserver'),
        apiArgs,
        join(o.dir, 'kube-apiserver.log'),
      );
      if (api) processes.splice(processes.indexOf(api), 1, proc);
      else processes.unshift(proc);
      api = proc;
      const tls = { ca: ca.certPem, cert: admin.certPem, key: admin.keyPem };
      await until(`${o.name} kube-apiserver /readyz`, timeoutMs, async () => {
        if (!proc.running()) throw new Error(`kube-apiserver exited: ${await proc.tail(15)}`);
        return (await httpGet(`${server}/readyz`, tls).catch(() => ({ status: 0 }))).status === 200;
      });
    };
    const stopApiServer = async (): Promise<void> => {
      await api?.stop(3000);
    };
    const restartApiServer = async (downMs = 0): Promise<void> => {
      await stopApiServer();
      if (downMs > 0) await new Promise((resolve) => setTimeout(resolve, downMs));
      await startApiServer();
    };
    await startApiServer();
    if (o.apiServerOnly) {
      if (o.nodes > 0) throw new Error(`${o.name}: fake nodes need KWOK, which apiServerOnly does not start`);
      const kc = new KubeConfig();
      kc.loadFromString(kubeconfig);
      return {
        name: o.name,
        server,
        kubeconfig,
        kubeconfigFile,
        kc,
        ca,
        admin,
        processes,
        startSeconds: (Date.now() - started) / 1000,
        stop,
        stopApiServer,
        startApiServer,
        restartApiServer,
      };
    }
    const common = [
      '--kubeconfig',
      kubeconfigFile,
      '--authentication-kubeconfig',
      kubeconfigFile,
      '--authorization-kubeconfig',
      kubeconfigFile,
      '--bind-address',
      '127.0.0.1',
      '--leader-elect=false',
      '--profiling=false',
    ];
    const kcm = startProcess(
      `${o.name}-kube-controller-manager`,
      join(tc.bin, 'kube-controller-manager'),
      [
        ...common,
        '--secure-port',
        String(kcmPort),
        '--service-account-private-key-file',
        sa.privateKeyFile,
        '--root-ca-file',
        ca.certFile,
        '--use-service-account-credentials=true',
        '--service-cluster-ip-range',
        '10.96.0.0/16',
        '--concurrent-deployment-syncs',
        '10',
        '--concurrent-statefulset-syncs',
        '10',
        '--concurrent-namespace-syncs',
        '10',
      ],
      join(o.dir, 'kube-controller-manager.log'),
    );
    processes.push(kcm);
    const sched = startProcess(
      `${o.name}-kube-scheduler`,
      join(tc.bin, 'kube-scheduler'),
      [...common, '--secure-port', String(schedPort)],
      join(o.dir, 'kube-scheduler.log'),
    );
    processes.push(sched);
    let stages = tc.kwokStages;
    const leave = o.kwokLeavesPods ?? [];
    if (leave.length > 0) {
      const yaml = await readFile(tc.kwokStages, 'utf8');
      if (!/name: pod-ready\b/.test(yaml))
        throw new Error(`${tc.kwokStages} has no pod-ready stage to leave pods out of`);
      stages = join(o.dir, 'kwok-stages.yaml');
      await writeFile(stages, leavePods(yaml, leave));
    }
    const stageConfigs = ['--config', stages];
    if (o.extraKwokStages) {
      const file = join(o.dir, 'kwok-extra-stages.yaml');
      await writeFile(file, leave.length > 0 ? leavePods(o.extraKwokStages, leave) : o.extraKwokStages);
      stageConfigs.push('--config', file);
    }
    const kwok = startProcess(
      `${o.name}-kwok`,
      join(tc.bin, 'kwok'),
      [
        '--kubeconfig',
        kubeconfigFile,
        ...stageConfigs,
        '--manage-all-nodes=true',
        '--server-address',
        `127.0.0.1:${kwokPort}`,
        '--cidr',
        '10.244.0.0/16',
        '--node-ip',
        '127.0.0.1',
      ],
      join(o.dir, 'kwok.log'),
    );
    processes.push(kwok);

    const kc = new KubeConfig();
    kc.loadFromString(kubeconfig);
    const core = kc.makeApiClient(CoreV1Api);
    for (let i = 0; i < o.nodes; i++) await core.createNode({ body: fakeNode(`kwok-node-${i}`) });
    await until(`${o.name} controllers, scheduler and ${o.nodes} Ready KWOK nodes`, timeoutMs, async () => {
      for (const p of [kcm, sched, kwok]) if (!p.running()) throw new Error(`${p.name} exited: ${await p.tail(15)}`);
      const [kcmOk, schedOk] = await Promise.all([
        // Self-signed serving certificates; /healthz is open to anonymous callers.
        httpGet(`https://127.0.0.1:${kcmPort}/healthz`, { rejectUnauthorized: false }).catch(() => ({ status: 0 })),
        httpGet(`https://127.0.0.1:${schedPort}/healthz`, { rejectUnauthorized: false }).catch(() => ({ status: 0 })),
      ]);
      if (kcmOk.status !== 200 || schedOk.status !== 200) return false;
      await core.readNamespacedServiceAccount({ name: 'default', namespace: 'default' });
      const nodes = await core.listNode();
      return (
        nodes.items.filter((n) => n.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True'))
          .length >= o.nodes
      );
    });
    return {
      name: o.name,
      server,
      kubeconfig,
      kubeconfigFile,
      kc,
      ca,
      admin,
      processes,
      startSeconds: (Date.now() - started) / 1000,
      stop,
      stopApiServer,
      startApiServer,
      restartApiServer,
    };
  } catch (err) {
    await stop();
    throw err;
  }
}

function fakeNode(name: string): V1Node {
  const capacity = { cpu: '32', memory: '256Gi', pods: '110', 'ephemeral-storage': '1Ti' };
  return {
    apiVersion: 'v1',
    kind: 'Node',
    metadata: {
      name,
      annotations: { 'node.alpha.kubernetes.io/ttl': '0', 'kwok.x-k8s.io/node': 'fake' },
      labels: {
        type: 'kwok',
        'kubernetes.io/hostname': name,
        'kubernetes.io/os': 'linux',
        'kubernetes.io/arch': 'amd64',
      },
    },
    status: { allocatable: capacity, capacity },
  };
}

export interface ApiServers<N extends string> {
  /** The temp folder holding etcd's and every API server's data. */
  dir: string;
  etcd: Etcd;
  /** One kube-apiserver per name (etcd prefix `/<name>`), without controllers, scheduler or nodes. */
  servers: Record<N, KubeControlPlane>;
  /** Stops every API server, then etcd, and removes the folder. */
  stop(): Promise<void>;
}

/**
 * Bare kube-apiservers for the files that only talk to API servers (managed clusters: a tenant's
 * own cluster, a root cluster, another tenant's): the toolchain from HRT_TOOLCHAIN_BIN, one etcd
 * in a new temp folder (`prefix` names it), and an API server per name, started together.
 */
export async function startApiServers<N extends string>(prefix: string, names: readonly N[]): Promise<ApiServers<N>> {
  const bin = process.env.HRT_TOOLCHAIN_BIN;
  if (!bin) throw new Error('HRT_TOOLCHAIN_BIN is not set: run the tier through scripts/test.sh e2e');
  const toolchain = toolchainFrom(bin);
  const dir = await mkdtemp(join(tmpdir(), prefix));
  const etcd = await startEtcd(toolchain, join(dir, 'etcd'));
  const started = await Promise.allSettled(
    names.map((name) =>
      startKubeControlPlane(toolchain, {
        name,
        dir: join(dir, name),
        etcd,
        etcdPrefix: `/${name}`,
        nodes: 0,
        apiServerOnly: true,
      }),
    ),
  );
  const up = started.flatMap((s) => (s.status === 'fulfilled' ? [s.value] : []));
  const stop = async (): Promise<void> => {
    await Promise.all(up.map((s) => s.stop()));
    await etcd.stop();
    await rm(dir, { recursive: true, force: true });
  };
  const failed = started.find((s) => s.status === 'rejected');
  if (failed) {
    await stop();
    throw failed.reason;
  }
  return {
    dir,
    etcd,
    servers: Object.fromEntries(names.map((n, i) => [n, up[i]!])) as Record<N, KubeControlPlane>,
    stop,
  };
}
