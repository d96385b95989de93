/**
 * The local sandbox (`npm run sandbox`, scripts/sandbox.sh, which builds or reuses the toolchain
 * and the Kubernetes provider plugin first): a local root cluster with the provisioner and its
 * Pulumi engine (sandbox/stack.ts, what every end-to-end test file starts), an embedded
 * PostgreSQL, a demo tenant signed up and followed to Ready, then the console URL, an operator key
 * (minted with the admin key, which is printed apart and labelled as what it is) and commands to try,
 * among them a hybrid runtime's registration (PROVISIONER_PUBLIC_URL is set to the provisioner's
 * loopback URL for it). SIGINT, SIGTERM or SIGHUP stops everything it started and removes its folder.
 */
import { randomUUID } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { leaveShutdownToCaller, startEmbeddedPostgres } from '../provisioner/db/embedded.ts';
import { serverPort, until } from './processes.ts';
import { REPO_ROOT } from './provisioner-process.ts';
import { kubernetesProvider, startLocalStack, toolchainBin, type LocalStack } from './stack.ts';
import { realVclusterUnavailable, vclusterBuild } from './vcluster-pods.ts';
import { runtimePodsUnavailable } from './runtime-pods.ts';
import { startGitServer } from './git-server.ts';
import { startDemoProduct } from './demo-product.ts';
import { CoreV1Api, CustomObjectsApi, KubeConfig } from '@kubernetes/client-node';
import { existsSync } from 'node:fs';
import { catalog } from '../runtime/catalog.ts';

const ORGANIZATION = process.env.SANDBOX_ORGANIZATION || 'demo';
const READY_TIMEOUT_MS = 10 * 60_000;
/** Settings of idle sleep and the warm pool passed on to the sandbox's provisioner when set (docs/operations.md). */
const PASSED_THROUGH = [
  'PROVISIONER_SLEEP_IDLE_SECONDS',
  'PROVISIONER_SLEEP_AWAKE_WINDOWS',
  'PROVISIONER_WAKE_WAIT_SECONDS',
  'PROVISIONER_WARM_POOL',
  'PROVISIONER_WARM_POOL_PARALLELISM',
];
const started = Number(process.env.SANDBOX_STARTED_MS) || Date.now();
const elapsed = () => `${((Date.now() - started) / 1000).toFixed(1)} s`;
const say = (line: string) => process.stdout.write(`sandbox: ${line}\n`);

interface TenantAnswer {
  id: string;
  status: { phase: string; conditions: Array<{ type: string; status: string; reason: string; message: string }> };
}

const cleanups: Array<() => Promise<void>> = [];
let stopping: Promise<void> | undefined;

function stopAll(code: number): Promise<void> {
  stopping ??= (async () => {
    say('stopping everything it started …');
    for (const c of [...cleanups].reverse()) {
      try {
        await c();
      } catch (err) {
        say(`while stopping: ${err instanceof Error ? err.message : String(err)}`);
      }
    }
    say(`stopped (${elapsed()} after start)`);
    process.exit(code);
  })();
  return stopping;
}

// SIGHUP: the terminal it ran in was closed.
for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) process.on(signal, () => void stopAll(0));

async function main(): Promise<void> {
  const bin = toolchainBin();
  const provider = kubernetesProvider();
  if (!provider)
    throw new Error(
      'no Kubernetes provider plugin: start through scripts/sandbox.sh (it selects one, as the e2e tier)',
    );
  const dir = await mkdtemp(join(tmpdir(), 'hrt-sandbox-'));
  if (process.env.SANDBOX_KEEP === '1') say(`SANDBOX_KEEP=1: keeping ${dir}`);
  else cleanups.push(() => rm(dir, { recursive: true, force: true }));

  const t0 = Date.now();
  const pg = await startEmbeddedPostgres(join(dir, 'postgres'));
  // This process stops the server itself on SIGINT/SIGTERM, after the provisioner.
  leaveShutdownToCaller();
  cleanups.push(() => pg.stop());
  say(`✓ embedded PostgreSQL (${((Date.now() - t0) / 1000).toFixed(1)} s; ${elapsed()})`);

  // The provisioner's port is fixed before it starts: PROVISIONER_PUBLIC_URL names it, so that
  // hybrid runtimes can be registered here (their manifests point at this URL; loopback, so plain
  // http is accepted: config.ts).
  const port = process.env.SANDBOX_PORT ? Number(process.env.SANDBOX_PORT) : await serverPort();
  const runtime = await runtimeSetting();
  say(
    runtime.why
      ? `runtime pods: not run (${runtime.why}); the tenant's vcluster is emulated and its runtime does not execute`
      : "runtime pods: the tenant's real vcluster, its agents and Argo CD run as processes (sandbox/runtime-pods.ts)",
  );
  const stack = await startLocalStack({
    dir,
    toolchainBin: bin,
    provider,
    databaseUrl: pg.url,
    rootClusterName: 'local-root',
    keyPrefix: 'sandbox',
    port,
    extraEnv: {
      PROVISIONER_PUBLIC_URL: `http://127.0.0.1:${port}`,
      // The sleep and warm pool settings, when given to `npm run sandbox`, are its provisioner's.
      ...Object.fromEntries(PASSED_THROUGH.flatMap((name) => (process.env[name] ? [[name, process.env[name]]] : []))),
    },
    ...(runtime.vcluster && runtime.argocdBin
      ? {
          realVclusters: { bin: runtime.vcluster.bin, versions: runtime.vcluster.versions },
          runtimePods: { argocdBin: runtime.argocdBin },
        }
      : {}),
    log: () => {},
    progress: (step, seconds) => say(`✓ ${step} (${seconds.toFixed(1)} s; ${elapsed()})`),
    cleanups,
  });
  const url = stack.provisioner.url;
  const adminKey = stack.settings.adminToken;
  // The console and the CLI lines below use an operator key (every tenant, clusters, versions;
  // no key management); the admin key is printed apart, labelled as the admin key it is.
  const minted = await fetch(`${url}/v1/keys`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${adminKey}` },
    body: JSON.stringify({ role: 'operator', name: 'sandbox operator' }),
  });
  const operator = (await minted.json()) as { key?: string };
  if (minted.status !== 201 || !operator.key)
    throw new Error(
      `creating the sandbox's operator key answered ${minted.status}: ${JSON.stringify(operator).slice(0, 500)}`,
    );
  const key = operator.key;

  const signup = await fetch(`${url}/v1/signup`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'idempotency-key': `sandbox-${randomUUID()}` },
    // The newest runtime version (the `latest` channel, where the newest capabilities are: 1.7.0's
    // Source Server gives the demo Application its history); SANDBOX_RUNTIME_VERSION picks another.
    body: JSON.stringify({
      organization: ORGANIZATION,
      email: `ops@${ORGANIZATION}.example`,
      plan: 'team',
      runtimeVersion: process.env.SANDBOX_RUNTIME_VERSION || catalog.defaultVersion('latest'),
    }),
  });
  const answer = (await signup.json()) as { tenant?: TenantAnswer; apiKey?: string };
  if (signup.status !== 202 || !answer.tenant)
    throw new Error(`signup of ${ORGANIZATION} answered ${signup.status}: ${JSON.stringify(answer).slice(0, 500)}`);
  const id = answer.tenant.id;
  say(`✓ tenant ${ORGANIZATION} signed up: ${id} (${elapsed()})`);
  say(`console: ${url}/console   operator key: ${key}`);
  say(`provisioner log: ${stack.settings.logFile}`);

  let last = '';
  const ready = await until(
    `tenant ${id} to be Ready`,
    READY_TIMEOUT_MS,
    async () => {
      const res = await fetch(`${url}/v1/tenants/${id}`, { headers: { authorization: `Bearer ${key}` } });
      if (res.status !== 200) return false;
      const tenant = (await res.json()) as TenantAnswer;
      const waiting = tenant.status.conditions.find((c) => c.status !== 'True');
      const now = `${tenant.status.phase}${waiting ? ` (${waiting.type}: ${waiting.reason})` : ''}`;
      if (now !== last) say(`  tenant ${tenant.status.phase === 'Ready' ? 'is' : 'waits:'} ${now} (${elapsed()})`);
      last = now;
      if (tenant.status.phase === 'Failed') throw new Error(`tenant ${id} failed: ${JSON.stringify(tenant.status)}`);
      return tenant.status.phase === 'Ready' ? tenant : false;
    },
    1000,
  );
  const demo = stack.runtimePods ? await runDemo(stack, dir, url, key, id) : undefined;
  const cli = relative(process.cwd(), join(REPO_ROOT, 'bin', 'provisioner')) || 'bin/provisioner';
  const lines = [
    '',
    `Tenant ${ORGANIZATION} (${ready.id}) is Ready, ${elapsed()} after start.`,
    '',
    `  Console:       ${url}/console   (sign in with the operator key)`,
    `  Operator key:  ${key}`,
    `  Admin key:     ${adminKey}   (every role's rights and key management: provisioner keys create|revoke)`,
    `  Tenant key:    ${answer.apiKey ?? '(none)'}   (the tenant's own key, as signup returned it)`,
    '',
    'Try next (in another terminal):',
    `  export PROVISIONER_URL=${url} PROVISIONER_TOKEN=${key}`,
    `  ${cli} tenants get ${id}`,
    `  ${cli} tenants list`,
    `  ${cli} operations list ${id}`,
    `  ${cli} apps list ${id}`,
    ...(demo
      ? [
          `  ${cli} apps act ${id} application argocd demo sync   # the tenant's Argo CD syncs ${demo.repo} through the tunnel`,
          `  ${cli} apps history ${id} argocd/demo   # what changed demo, in which commit, by whom, and the sync's result`,
          `  ${cli} apps diff ${id} argocd/demo   # Git against the cluster, from the runtime's Source Server through the tunnel`,
          `  (console: Applications → demo shows the same timeline and a side-by-side diff)`,
          `  ${cli} products get ${id} shop   # the release in dev and prod, and the promotion of 1.1.0 the sandbox's commit to dev started`,
          `  ${cli} promotions list ${id}   # each promotion with its steps; promotions get ${id} <name> --watch follows one`,
          `  ${cli} products promote ${id} shop --dry-run --watch   # what each environment would get, per resource, previewed through the Source Server; nothing changes`,
          `  ${cli} products promote ${id} shop --watch   # a promotion through the control plane and the tunnel, followed to its end`,
          `  ${cli} products rollback ${id} shop prod --watch   # prod back to the release it held before (1.0.0), by a commit`,
          `  (console: Products → argocd/shop shows the environments side by side and each promotion's timeline; docs/promotions.md)`,
          `  ${cli} tenants sleep ${id}   # its vcluster and runtime to zero, data kept (idle free tenants sleep by themselves: docs/operations.md "Sleep")`,
          `  ${cli} tenants wake ${id}   # or any request to its runtime: 503 TENANT_WAKING with Retry-After until it is back`,
          `  ${cli} tenants webhook-url ${id}   # a public URL for a Git provider's webhooks, kept and delivered also while it sleeps`,
        ]
      : []),
    `  ${cli} tenants signup globex --email ops@globex.example --plan team   # another tenant, as a customer signs up (its key is shown once)`,
    `  ${cli} capacity   # per plan: tenants awake and asleep, what they reserve, the warm pool (PROVISIONER_WARM_POOL), signups warm and cold`,
    `  (PROVISIONER_WARM_POOL=team=1 npm run sandbox keeps a runtime provisioned ahead: the next team signup is Ready at once, "warm": true)`,
    `  ${cli} clusters list`,
    `  ${cli} doctor`,
    `  ${cli} runtimes register ${id} edge --access tunnel --argo new --out edge.yaml   # a hybrid runtime's install manifest (agents, Source Server)`,
    '',
    ...(demo
      ? [
          "What runs here: the root cluster's control plane (kube-apiserver, etcd, controller-manager,",
          "scheduler) with KWOK nodes; the tenant's real vcluster; and its runtime's pods as processes",
          '(sandbox/runtime-pods.ts): the tunnel client, request router, app-proxy, event reporter, Source Server',
          "and GitOps Operator, Argo CD's application controller, repo-server and API server, Redis. Its tunnel is",
          `connected, its reporter reports, its Argo CD compares Application demo with ${demo.repo} and`,
          "syncs product shop's dev and prod (Git servers this sandbox serves), and its GitOps Operator promotes",
          "shop by commits. Argo CD answers at the tenant's argoCdUrl (tenants get shows it). Pods of other images",
          '(Argo Workflows, Rollouts, Events, ApplicationSet and notifications controllers) are only marked',
          'Running by KWOK. docs/e2e.md, "The hosted runtime\'s own pods", lists what stays simulated.',
        ]
      : [
          `What is simulated here${runtime.why ? ` (${runtime.why})` : ''}: pods do not run (the root cluster is a real`,
          'kube-apiserver, etcd, controller-manager and scheduler, but its nodes are KWOK nodes that only mark',
          "pods Running); the tenant's vcluster API server is emulated by a separate kube-apiserver",
          '(sandbox/vcluster-emulator.ts) while the real vcluster and Argo charts are installed by the real',
          'Pulumi engine. So Argo CD does not sync anything and no agent connects or reports applications',
          '(the tenant shows "runtime not connected"). As root, `npm run sandbox` runs them (the default;',
          'SANDBOX_RUNTIME=0 turns it off).',
        ]),
    '',
    'Ctrl-C stops everything the sandbox started.',
  ];
  process.stdout.write(lines.join('\n') + '\n');
}

/**
 * Whether the sandbox runs its tenant's runtime: real vclusters and the runtime pods need root,
 * ip/unshare/setpriv and nft, and the builds test/e2e/prepare.sh made (HRT_VCLUSTER_BIN,
 * HRT_ARGOCD_BIN); SANDBOX_RUNTIME=0 turns it off. `why` says what is missing.
 */
async function runtimeSetting(): Promise<{
  why: string;
  vcluster?: { bin: string; versions: string[] };
  argocdBin?: string;
}> {
  if (process.env.SANDBOX_RUNTIME === '0') return { why: 'SANDBOX_RUNTIME=0' };
  const why = (await realVclusterUnavailable()) || (await runtimePodsUnavailable());
  if (why) return { why };
  const vcluster = vclusterBuild();
  if (!vcluster) return { why: 'no vcluster build (HRT_VCLUSTER_BIN; scripts/sandbox.sh builds it as root)' };
  const argocdBin = process.env.HRT_ARGOCD_BIN;
  if (!argocdBin || !existsSync(join(argocdBin, 'argocd')))
    return { why: 'no Argo CD build (HRT_ARGOCD_BIN; scripts/sandbox.sh builds it as root)' };
  return { why: '', vcluster, argocdBin };
}

/**
 * With the runtime running: waits for it to connect (tunnel and reporter), then serves a Git
 * repository with a demo ConfigMap and adds Application `demo` (manual sync) to the tenant's Argo
 * CD, as a customer's configuration repository would, and waits for it to be reported.
 */
async function runDemo(
  stack: LocalStack,
  dir: string,
  url: string,
  key: string,
  id: string,
): Promise<{ repo: string }> {
  const get = async <T>(path: string): Promise<T> => {
    const res = await fetch(`${url}${path}`, { headers: { authorization: `Bearer ${key}` } });
    if (res.status !== 200) throw new Error(`GET ${path} answered ${res.status}`);
    return (await res.json()) as T;
  };
  await until(
    "the tenant's runtime to connect (its tunnel, its event reporter's first heartbeat)",
    5 * 60_000,
    async () => {
      const t = await get<TenantAnswer>(`/v1/tenants/${id}`);
      return t.status.conditions.some((c) => c.type === 'RuntimeConnected' && c.status === 'True');
    },
    1000,
  );
  say(`✓ runtime connected: tunnel up, event reporter reporting (${elapsed()})`);
  const git = await startGitServer(join(dir, 'git'), stack.runtimePods!.gateway);
  cleanups.push(() => git.stop());
  const repo = await git.repository('demo');
  await repo.commit(
    {
      'demo/configmap.yaml':
        'apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: demo-config\ndata:\n  greeting: hello from the sandbox\n',
    },
    'demo: a ConfigMap',
  );
  const namespace = `tenant-${id}`;
  const secret = await stack.root.kc.makeApiClient(CoreV1Api).readNamespacedSecret({ name: 'vc-vcluster', namespace });
  const kc = new KubeConfig();
  kc.loadFromString(
    stack.vclusterPods!.reachable(namespace, Buffer.from(secret.data?.config ?? '', 'base64').toString('utf8')),
  );
  await kc.makeApiClient(CustomObjectsApi).createNamespacedCustomObject({
    group: 'argoproj.io',
    version: 'v1alpha1',
    namespace: 'argocd',
    plural: 'applications',
    body: {
      apiVersion: 'argoproj.io/v1alpha1',
      kind: 'Application',
      metadata: { name: 'demo', namespace: 'argocd' },
      spec: {
        project: 'default',
        source: { repoURL: repo.url, path: 'demo', targetRevision: 'main' },
        destination: { server: 'https://kubernetes.default.svc', namespace: 'demo' },
        syncPolicy: { syncOptions: ['CreateNamespace=true'] },
      },
    },
  });
  await until(
    'Application demo to be reported',
    3 * 60_000,
    async () => {
      const page = await get<{ items: Array<{ name: string; sync: string | null }> }>(`/v1/tenants/${id}/applications`);
      return page.items.some((i) => i.name === 'demo' && i.sync);
    },
    1000,
  );
  say(`✓ Application demo reported by the tenant's runtime, from ${repo.url} (${elapsed()})`);
  const product = await startDemoProduct({
    kc,
    dir,
    host: stack.runtimePods!.gateway,
    products: async () =>
      (await get<{ items: Array<{ name: string; summary: Record<string, unknown> }> }>(`/v1/tenants/${id}/products`))
        .items,
    say: (line) => say(`${line} (${elapsed()})`),
  });
  cleanups.push(() => product.stop());
  return { repo: repo.url };
}

main().catch(async (err: unknown) => {
  say(`failed: ${err instanceof Error ? err.message : String(err)}`);
  await stopAll(1);
});
