/**
 * A real kube-apiserver with the real Argo CustomResourceDefinitions installed, for tests of code
 * that watches and writes Argo objects (the event reporter, the app-proxy's actions, the control
 * plane's application routes).
 *
 *  - The CRDs are the ones the Argo projects ship, taken from their Go modules by
 *    scripts/argo-crds.sh (Argo CD v3.1.5 `Application` and `AppProject`, Argo Rollouts v1.8.3
 *    `Rollout`, Argo Workflows v3.7.2 `Workflow`: the application versions of the catalog's
 *    newest runtime release), cached outside the repository. test/e2e/prepare.sh exports the
 *    folder as HRT_ARGO_CRDS_DIR; without it this module runs the script itself.
 *  - The API server is the toolchain's (scripts/toolchain.sh; HRT_TOOLCHAIN_BIN, else the
 *    toolchain's cache folder for the current pins if it is complete — nothing is built here).
 *
 * `startArgoApiServer(t)` starts an etcd and a kube-apiserver alone (no controllers, scheduler or
 * nodes: a few seconds and about 300 MB; with `pods`, also the controller-manager, scheduler and
 * KWOK with one fake node), installs the CRDs, waits until every one is
 * Established and tears everything down in `t.teardown`. What the CRDs imply for writers:
 * an Application and a Workflow have NO status subresource (status is written with the object,
 * as Argo CD and the workflow controller do, and every status write bumps metadata.generation);
 * a Rollout has one (status only through `/status`; a status in a main-resource write is ignored,
 * and only spec changes bump the generation).
 *
 * `sampleApplication`, `sampleRollout`, `sampleWorkflow` and the `…Status` builders give
 * realistic objects (fields as the Argo controllers write them) that the real schemas accept.
 */
import { execFileSync } from 'node:child_process';
import { request } from 'node:https';
import { existsSync, readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  ApiextensionsV1Api,
  CustomObjectsApi,
  loadYaml,
  type KubeConfig,
  type V1CustomResourceDefinition,
} from '@kubernetes/client-node';
import { startEtcd, startKubeControlPlane, toolchainFrom } from '../../../sandbox/control-plane.ts';
import { until } from '../../../sandbox/processes.ts';

const REPO = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..', '..');

export const ARGO_GROUP = 'argoproj.io';
export const ARGO_VERSION = 'v1alpha1';

/** The CRDs scripts/argo-crds.sh provides, by plural. */
export const ARGO_CRD_PLURALS = ['applications', 'appprojects', 'rollouts', 'workflows'] as const;
export type ArgoPlural = (typeof ARGO_CRD_PLURALS)[number];

export interface ArgoCrd {
  plural: ArgoPlural;
  kind: string;
  /** `<plural>.argoproj.io` */
  name: string;
  /** Whether the served version has a status subresource (writes to status go to `/status`). */
  statusSubresource: boolean;
  /** module@version/path it came from (SOURCES.txt). */
  source: string;
  definition: V1CustomResourceDefinition;
}

function toolchainBinFor(): string | { unavailable: string } {
  const need = ['etcd', 'kube-apiserver'];
  const env = process.env.HRT_TOOLCHAIN_BIN;
  if (env) {
    const missing = need.filter((b) => !existsSync(join(env, b)));
    return missing.length ? { unavailable: `HRT_TOOLCHAIN_BIN=${env} lacks ${missing.join(', ')}` } : env;
  }
  let dir: string;
  try {
    dir = execFileSync('bash', [join(REPO, 'scripts', 'toolchain.sh'), '--print-dir'], {
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'pipe'],
    }).trim();
  } catch (err) {
    return { unavailable: `scripts/toolchain.sh --print-dir failed: ${(err as Error).message.slice(0, 300)}` };
  }
  const bin = join(dir, 'bin');
  const missing = need.filter((b) => !existsSync(join(bin, b)));
  return missing.length
    ? {
        unavailable: `the toolchain is not built (${bin} lacks ${missing.join(', ')}): run bash scripts/toolchain.sh, or the tier through scripts/test.sh e2e`,
      }
    : bin;
}

let crdsDirCache: string | { unavailable: string } | undefined;

function crdsDirFor(): string | { unavailable: string } {
  if (crdsDirCache) return crdsDirCache;
  const env = process.env.HRT_ARGO_CRDS_DIR;
  if (env) {
    crdsDirCache = existsSync(join(env, 'SOURCES.txt'))
      ? env
      : { unavailable: `HRT_ARGO_CRDS_DIR=${env} holds no SOURCES.txt (not made by scripts/argo-crds.sh)` };
    return crdsDirCache;
  }
  try {
    // Instant when cached; otherwise downloads three modules (about 45 MB) once.
    const out = execFileSync('bash', [join(REPO, 'scripts', 'argo-crds.sh')], {
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'pipe'],
      timeout: 10 * 60_000,
    });
    crdsDirCache = out.trim().split('\n').pop() ?? '';
  } catch (err) {
    const stderr = ((err as { stderr?: string }).stderr ?? '').trim();
    crdsDirCache = {
      unavailable: `scripts/argo-crds.sh could not fetch the Argo CRDs: ${(stderr || (err as Error).message).slice(-600)}`,
    };
  }
  return crdsDirCache;
}

/** Why startArgoApiServer cannot run here (no toolchain, CRDs not obtainable), or undefined. */
export function argoApiServerUnavailable(): string | undefined {
  const bin = toolchainBinFor();
  if (typeof bin !== 'string') return bin.unavailable;
  const crds = crdsDirFor();
  return typeof crds === 'string' ? undefined : crds.unavailable;
}

/** The folder of scripts/argo-crds.sh (throws with the reason when it cannot be had). */
export function argoCrdsDir(): string {
  const dir = crdsDirFor();
  if (typeof dir !== 'string') throw new Error(dir.unavailable);
  return dir;
}

/** The real Argo CRDs from scripts/argo-crds.sh's folder (throws with the reason when unavailable). */
export function readArgoCrds(): ArgoCrd[] {
  const dir = argoCrdsDir();
  const sources = new Map(
    readFileSync(join(dir, 'SOURCES.txt'), 'utf8')
      .trim()
      .split('\n')
      .map((line) => {
        const [name = '', mod, version, path] = line.split('\t');
        return [name, `${mod}@${version}/${path}`] as const;
      }),
  );
  return ARGO_CRD_PLURALS.map((plural) => {
    const name = `${plural}.${ARGO_GROUP}`;
    // loadYaml turns the YAML into client-node's model (x-kubernetes-int-or-string becomes
    // xKubernetesIntOrString, …); a plain YAML parse would lose those fields when the client
    // serialises the body, and the API server would refuse or alter the schema.
    const definition = loadYaml<V1CustomResourceDefinition>(readFileSync(join(dir, `${name}.yaml`), 'utf8'));
    const served = definition.spec.versions.find((v) => v.name === ARGO_VERSION);
    if (definition.metadata?.name !== name || !served)
      throw new Error(`${join(dir, `${name}.yaml`)} is not the CRD ${name} serving ${ARGO_VERSION}`);
    return {
      plural,
      kind: definition.spec.names.kind,
      name,
      statusSubresource: served.subresources?.status !== undefined,
      source: sources.get(name) ?? 'unknown',
      definition,
    };
  });
}

export interface ArgoApiServer {
  /** Temp folder of this API server (logs, certificates); removed by stop unless E2E_KEEP=1. */
  dir: string;
  /** https://127.0.0.1:<port> */
  server: string;
  /** Admin kubeconfig (contents, certificates inline; the client is in system:masters). */
  kubeconfig: string;
  kubeconfigFile: string;
  kc: KubeConfig;
  objects: CustomObjectsApi;
  crds: ArgoCrd[];
  /** Seconds from start to every CRD Established. */
  startSeconds: number;
  /** Stops the API server and etcd and removes the folder (also done by t.teardown; idempotent). */
  stop(): Promise<void>;
}

export interface ArgoApiServerOptions {
  /** Name of the control plane (logs, certificates); default `argo`. */
  name?: string;
  /** Which CRDs to install; default all of ARGO_CRD_PLURALS. */
  crds?: readonly ArgoPlural[];
  /** Wait bound for the API server and the CRDs; default 3 minutes (a loaded 2-core machine). */
  timeoutMs?: number;
  /**
   * Pods too: the controller-manager, scheduler and KWOK with one fake node, and these KWOK stages
   * besides the toolchain's (YAML `Stage` documents). Without it the API server runs alone.
   */
  pods?: { extraKwokStages?: string };
}

/**
 * Starts etcd + kube-apiserver on loopback with the real Argo CRDs Established. Stopped in
 * `t.teardown` (E2E_KEEP=1 keeps the folder with the logs).
 */
export async function startArgoApiServer(
  t: { teardown(fn: () => unknown): void },
  opts: ArgoApiServerOptions = {},
): Promise<ArgoApiServer> {
  const started = Date.now();
  const timeoutMs = opts.timeoutMs ?? 180_000;
  const bin = toolchainBinFor();
  if (typeof bin !== 'string') throw new Error(bin.unavailable);
  const wanted = new Set(opts.crds ?? ARGO_CRD_PLURALS);
  const crds = readArgoCrds().filter((c) => wanted.has(c.plural));
  const name = opts.name ?? 'argo';
  const dir = await mkdtemp(join(tmpdir(), `hrt-argo-${name}-`));
  const toolchain = toolchainFrom(bin);
  const stops: (() => Promise<void>)[] = [];
  let stopped: Promise<void> | undefined;
  const stop = () =>
    (stopped ??= (async () => {
      for (const s of stops.reverse()) await s().catch(() => {});
      if (process.env.E2E_KEEP !== '1') await rm(dir, { recursive: true, force: true });
    })());
  t.teardown(stop);
  const etcd = await startEtcd(toolchain, join(dir, 'etcd'));
  stops.push(() => etcd.stop());
  const plane = await startKubeControlPlane(toolchain, {
    name,
    dir: join(dir, name),
    etcd,
    etcdPrefix: `/${name}`,
    nodes: opts.pods ? 1 : 0,
    apiServerOnly: !opts.pods,
    ...(opts.pods?.extraKwokStages ? { extraKwokStages: opts.pods.extraKwokStages } : {}),
    timeoutMs,
  });
  stops.push(() => plane.stop());
  const ext = plane.kc.makeApiClient(ApiextensionsV1Api);
  for (const c of crds) await ext.createCustomResourceDefinition({ body: c.definition });
  for (const c of crds) {
    await until(`CRD ${c.name} Established`, timeoutMs, async () => {
      const got = await ext.readCustomResourceDefinition({ name: c.name });
      const ok = (type: string) => got.status?.conditions?.some((x) => x.type === type && x.status === 'True');
      return ok('Established') && ok('NamesAccepted');
    });
  }
  return {
    dir,
    server: plane.server,
    kubeconfig: plane.kubeconfig,
    kubeconfigFile: plane.kubeconfigFile,
    kc: plane.kc,
    objects: plane.kc.makeApiClient(CustomObjectsApi),
    crds,
    startSeconds: (Date.now() - started) / 1000,
    stop,
  };
}

/**
 * GET of an API path as plain JSON, past client-node's models (which drop fields they do not
 * know, such as the x-kubernetes-* keys of a schema when it is read back).
 */
export async function rawGet(kc: KubeConfig, path: string): Promise<unknown> {
  const server = kc.getCurrentCluster()?.server;
  if (!server) throw new Error('the kubeconfig has no current cluster');
  const opts: Parameters<typeof request>[1] = { method: 'GET', headers: { accept: 'application/json' } };
  await kc.applyToHTTPSOptions(opts);
  return new Promise((resolve, reject) => {
    const req = request(new URL(path, server), opts, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => (body += d));
      res.on('end', () => {
        if (res.statusCode !== 200) reject(new Error(`GET ${path}: ${res.statusCode} ${body.slice(0, 300)}`));
        else resolve(JSON.parse(body));
      });
    });
    req.setTimeout(30_000, () => req.destroy(new Error(`GET ${path} timed out`)));
    req.once('error', reject);
    req.end();
  });
}

// ---- realistic objects -----------------------------------------------------------------------

type Obj = Record<string, unknown>;

/** An Argo CD Application as a user writes it: plain YAML from a git repository, automated sync off. */
export function sampleApplication(
  namespace: string,
  name: string,
  opts: { repoURL?: string; path?: string } = {},
): Obj {
  return {
    apiVersion: `${ARGO_GROUP}/${ARGO_VERSION}`,
    kind: 'Application',
    metadata: { name, namespace, labels: { 'app.kubernetes.io/part-of': 'e2e' } },
    spec: {
      project: 'default',
      source: {
        repoURL: opts.repoURL ?? 'https://git.example.test/team/deploy.git',
        path: opts.path ?? `apps/${name}`,
        targetRevision: 'HEAD',
      },
      destination: { server: 'https://kubernetes.default.svc', namespace: name },
      syncPolicy: { syncOptions: ['CreateNamespace=true'] },
    },
  };
}

/** The status Argo CD's application controller writes after a sync (with the object: no subresource). */
export function applicationStatus(opts: {
  sync?: 'Synced' | 'OutOfSync' | 'Unknown';
  health?: 'Healthy' | 'Progressing' | 'Degraded' | 'Suspended' | 'Missing' | 'Unknown';
  revision?: string;
  phase?: 'Running' | 'Succeeded' | 'Failed' | 'Error' | 'Terminating';
  repoURL?: string;
  path?: string;
  at?: Date;
}): Obj {
  const at = (opts.at ?? new Date()).toISOString().replace(/\.\d+Z$/, 'Z');
  const revision = opts.revision ?? '4f2b1c0d9e8a7b6c5d4e3f2a1b0c9d8e7f6a5b4c';
  const source = {
    repoURL: opts.repoURL ?? 'https://git.example.test/team/deploy.git',
    path: opts.path ?? 'apps/guestbook',
    targetRevision: 'HEAD',
  };
  const phase = opts.phase ?? 'Succeeded';
  return {
    sync: {
      status: opts.sync ?? 'Synced',
      revision,
      comparedTo: { source, destination: { server: 'https://kubernetes.default.svc', namespace: 'guestbook' } },
    },
    health: { status: opts.health ?? 'Healthy', lastTransitionTime: at },
    operationState: {
      operation: { sync: { revision, syncStrategy: { hook: {} } }, initiatedBy: { username: 'admin' } },
      phase,
      message: phase === 'Succeeded' ? 'successfully synced (all tasks run)' : `sync ${phase.toLowerCase()}`,
      startedAt: at,
      finishedAt: phase === 'Running' ? undefined : at,
      syncResult: { revision, source },
    },
    conditions:
      opts.health === 'Degraded'
        ? [{ type: 'SyncError', message: 'one or more objects failed to apply', lastTransitionTime: at }]
        : [],
    resources: [
      {
        version: 'v1',
        kind: 'Service',
        namespace: 'guestbook',
        name: 'guestbook-ui',
        status: 'Synced',
        health: { status: 'Healthy' },
      },
      {
        group: 'apps',
        version: 'v1',
        kind: 'Deployment',
        namespace: 'guestbook',
        name: 'guestbook-ui',
        status: 'Synced',
        health: { status: opts.health ?? 'Healthy' },
      },
    ],
    history: [{ id: 0, revision, deployedAt: at, deployStartedAt: at, source }],
    reconciledAt: at,
    sourceType: 'Directory',
    summary: { images: ['registry.example.test/guestbook-ui:0.2'] },
    controllerNamespace: 'argocd',
  };
}

/** An Argo Rollouts Rollout with a canary strategy (two steps with a pause). */
export function sampleRollout(namespace: string, name: string): Obj {
  const labels = { app: name };
  return {
    apiVersion: `${ARGO_GROUP}/${ARGO_VERSION}`,
    kind: 'Rollout',
    metadata: { name, namespace },
    spec: {
      replicas: 3,
      revisionHistoryLimit: 2,
      selector: { matchLabels: labels },
      template: {
        metadata: { labels },
        spec: {
          containers: [
            {
              name,
              image: 'registry.example.test/rollouts-demo:blue',
              ports: [{ name: 'http', containerPort: 8080, protocol: 'TCP' }],
              resources: { requests: { cpu: '10m', memory: '32Mi' } },
            },
          ],
        },
      },
      strategy: {
        canary: { steps: [{ setWeight: 20 }, { pause: {} }, { setWeight: 60 }, { pause: { duration: '30s' } }] },
      },
    },
  };
}

/** The status the Rollouts controller writes (through the status subresource). */
export function rolloutStatus(opts: {
  phase?: 'Healthy' | 'Progressing' | 'Paused' | 'Degraded';
  currentStepIndex?: number;
  stableRS?: string;
  canaryRS?: string;
  observedGeneration?: number;
  message?: string;
  at?: Date;
}): Obj {
  const at = (opts.at ?? new Date()).toISOString().replace(/\.\d+Z$/, 'Z');
  const stable = opts.stableRS ?? '6d8f7c9b5';
  const current = opts.canaryRS ?? stable;
  const phase = opts.phase ?? 'Healthy';
  return {
    phase,
    message: opts.message ?? (phase === 'Paused' ? 'CanaryPauseStep' : ''),
    currentStepIndex: opts.currentStepIndex ?? 4,
    currentPodHash: current,
    stableRS: stable,
    currentStepHash: '5b7d9c6f4',
    observedGeneration: String(opts.observedGeneration ?? 1),
    replicas: 3,
    updatedReplicas: current === stable ? 3 : 1,
    readyReplicas: 3,
    availableReplicas: 3,
    HPAReplicas: 3,
    selector: 'app=rollouts-demo',
    canary: {},
    pauseConditions: phase === 'Paused' ? [{ reason: 'CanaryPauseStep', startTime: at }] : undefined,
    conditions: [
      {
        type: 'Available',
        status: 'True',
        reason: 'AvailableReason',
        message: 'Rollout has minimum availability',
        lastTransitionTime: at,
        lastUpdateTime: at,
      },
      {
        type: 'Progressing',
        status: 'True',
        reason: phase === 'Paused' ? 'RolloutPaused' : 'NewReplicaSetAvailable',
        message:
          phase === 'Paused'
            ? 'Rollout is paused'
            : `ReplicaSet "rollouts-demo-${current}" has successfully progressed.`,
        lastTransitionTime: at,
        lastUpdateTime: at,
      },
    ],
  };
}

/** An Argo Workflows Workflow (one container step). */
export function sampleWorkflow(namespace: string, name: string): Obj {
  return {
    apiVersion: `${ARGO_GROUP}/${ARGO_VERSION}`,
    kind: 'Workflow',
    metadata: { name, namespace, labels: { 'workflows.argoproj.io/archive-strategy': 'false' } },
    spec: {
      entrypoint: 'main',
      serviceAccountName: 'default',
      arguments: { parameters: [{ name: 'message', value: 'hello' }] },
      templates: [
        {
          name: 'main',
          inputs: { parameters: [{ name: 'message' }] },
          container: {
            image: 'registry.example.test/busybox:1.36',
            command: ['echo', '{{inputs.parameters.message}}'],
          },
        },
      ],
    },
  };
}

/** The status the workflow controller writes (with the object: no subresource). */
export function workflowStatus(opts: {
  phase?: 'Pending' | 'Running' | 'Succeeded' | 'Failed' | 'Error';
  progress?: string;
  message?: string;
  startedAt?: Date;
  finishedAt?: Date;
}): Obj {
  const iso = (d: Date) => d.toISOString().replace(/\.\d+Z$/, 'Z');
  const phase = opts.phase ?? 'Succeeded';
  const done = phase === 'Succeeded' || phase === 'Failed' || phase === 'Error';
  const startedAt = iso(opts.startedAt ?? new Date());
  return {
    phase,
    startedAt,
    finishedAt: done ? iso(opts.finishedAt ?? new Date()) : undefined,
    progress: opts.progress ?? (done ? '1/1' : '0/1'),
    message: opts.message,
    estimatedDuration: 12,
    resourcesDuration: { cpu: 1, memory: 1 },
    nodes: {},
    artifactRepositoryRef: { default: true, artifactRepository: {} },
    conditions: [{ type: 'PodRunning', status: done ? 'False' : 'True' }],
  };
}
