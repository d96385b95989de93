/**
 * A Rollout's canary analysis decides a promotion's step, every part real: a kube-apiserver with the
 * controller-manager, scheduler and KWOK; the CRDs of the real argo-rollouts chart and a real Argo
 * Rollouts controller (harness/argo-rollouts.ts: `rollouts-controller` v1.8.3 built from its Go
 * module); a real Argo CD (application controller, repo-server, Redis) syncing the product's three
 * Applications (dev, staging, prod) from a real Git server; the GitOps Operator as a process with
 * its own ServiceAccount's token and Role, promoting through Git.
 *
 * Each environment runs the shop's `web` as a Rollout with a canary strategy (50 %, then an
 * analysis) and an AnalysisTemplate whose one metric uses the `web` provider against an HTTP
 * server on loopback that this test controls: it answers each environment's success rate. Pods do
 * not run here: the controller-manager makes the ReplicaSets' pods and KWOK makes them Running and
 * Ready, in place of a kubelet (the only stand-in; the analysis, the abort and Argo CD's built-in
 * Rollout health are the real controllers').
 *
 *  - prod's success rate below the template's condition: the analysis fails, the controller aborts
 *    the Rollout (Degraded, the stable pods back at full scale), Argo CD reports the Application
 *    Degraded at the promoted commit, and the operator fails prod's step naming the Rollout;
 *    staging, promoted before it, keeps the new release, Synced and Healthy.
 *  - with prod's success rate good again, the next release's analysis passes: every step succeeds
 *    and prod's Rollout is Healthy at it.
 */
import t from 'tap';
import { backgroundBuild } from './harness/background-build.ts';
import http from 'node:http';
import { once } from 'node:events';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { AddressInfo } from 'node:net';
import { argoApiServerUnavailable, ARGO_GROUP, ARGO_VERSION, startArgoApiServer } from './harness/argo.ts';
import { argoCdUnavailable, startArgoCd } from './harness/argocd.ts';
import {
  ARGO_ROLLOUTS_VERSION,
  argoRolloutsCrds,
  argoRolloutsUnavailable,
  startRolloutsController,
} from './harness/argo-rollouts.ts';
import { kubectlRunner } from '../helpers/kubectl.ts';
import { serverPort, startProcess, until, type ManagedProcess } from '../../sandbox/processes.ts';
import { startGitServer } from '../../sandbox/git-server.ts';
import { gitopsOperatorRbac } from '../../runtime/component/promotion-crds.ts';
import { applier, installPromotionCrds, promotionObject } from './harness/promotions.ts';
import { PROMOTIONS_GROUP, PROMOTIONS_VERSION, type Promotion } from '../../runtime/protocol/promotions.ts';

// In scripts/test.sh's late phase this build may still be compiling: wait for it.
await backgroundBuild(t, 'argo-rollouts');
t.setTimeout(20 * 60_000);

const GIT_USER = 'platform';
const GIT_PASSWORD = 'git-pw-5e81a0';
const ENVS = ['dev', 'staging', 'prod'] as const;
const RUNTIME_NS = 'hosted-runtime';

/** The shop's web tier: a canary of 50 %, then the success-rate analysis, then all of it. */
const rollout = (
  release: string,
  image: string,
) => `# The shop's web tier (the promotion template's fields: release and image).
apiVersion: argoproj.io/v1alpha1
kind: Rollout
metadata:
  name: web
spec:
  replicas: 2
  revisionHistoryLimit: 3
  selector:
    matchLabels:
      app: web
  template:
    metadata:
      labels:
        app: web
      annotations:
        release: "${release}"
    spec:
      containers:
        - name: web
          image: ${image}
  strategy:
    canary:
      steps:
        - setWeight: 50
        - analysis:
            templates:
              - templateName: success-rate
`;
const analysis = (url: string) => `apiVersion: argoproj.io/v1alpha1
kind: AnalysisTemplate
metadata:
  name: success-rate
spec:
  metrics:
    - name: success-rate
      count: 1
      failureLimit: 0
      successCondition: result >= 0.95
      provider:
        web:
          url: ${url}
          jsonPath: "{$.successRate}"
          timeoutSeconds: 5
`;

const unavailable = argoApiServerUnavailable() ?? argoCdUnavailable() ?? argoRolloutsUnavailable();
if (unavailable) {
  if (process.env.CI === 'true') t.fail(`a real Argo CD and Argo Rollouts controller cannot run: ${unavailable}`);
  else t.plan(0, unavailable);
} else {
  const bin = process.env.HRT_TOOLCHAIN_BIN!;
  const cluster = await startArgoApiServer(t, { name: 'rollouts', crds: ['applications', 'appprojects'], pods: {} });
  const dir = join(cluster.dir, 'rollouts');
  await mkdir(dir, { recursive: true });
  const kubectl = kubectlRunner(bin, cluster.kubeconfigFile);
  const crds = await argoRolloutsCrds();
  await writeFile(join(dir, 'argo-rollouts-crds.yaml'), crds.yaml);
  for (const args of [
    ['create', '-f', join(dir, 'argo-rollouts-crds.yaml')],
    ['wait', '--for=condition=Established', '--timeout=120s', ...crds.names.map((n) => `crd/${n}`)],
  ]) {
    const r = await kubectl(args);
    if (r.code !== 0) throw new Error(`kubectl ${args.join(' ')}: ${r.output}`);
  }
  t.comment(`argo-rollouts chart CRDs from ${crds.chart}: ${crds.names.join(', ')}`);
  const apply = applier(kubectl, dir);
  await installPromotionCrds(kubectl, dir);
  const controller = await startRolloutsController(t, { kubeconfigFile: cluster.kubeconfigFile, dir });
  const argocd = await startArgoCd(t, {
    kubeconfigFile: cluster.kubeconfigFile,
    kc: cluster.kc,
    dir: join(dir, 'argocd'),
  });
  const ns = argocd.namespace;

  // The metric's source: each environment's success rate, as the test sets it.
  const successRate: Record<string, number> = { dev: 0.99, staging: 0.99, prod: 0.99 };
  const asked: string[] = [];
  const metrics = http.createServer((req, res) => {
    const env = new URL(req.url ?? '/', 'http://x').searchParams.get('environment') ?? '';
    asked.push(env);
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ successRate: successRate[env] ?? 0 }));
  });
  metrics.listen(0, '127.0.0.1');
  await once(metrics, 'listening');
  t.teardown(() => metrics.close());
  const metricsUrl = (env: string) =>
    `http://127.0.0.1:${(metrics.address() as AddressInfo).port}/success-rate?environment=${env}`;

  const git = await startGitServer(join(dir, 'git'), '127.0.0.1', {
    credentials: { username: GIT_USER, password: GIT_PASSWORD },
  });
  t.teardown(() => git.stop());
  const repo = await git.repository('config');
  const files: Record<string, string> = {};
  for (const env of ENVS) {
    files[`shop/${env}/rollout.yaml`] = rollout('1.0.0', 'nginx:1.25.0');
    files[`shop/${env}/analysis.yaml`] = analysis(metricsUrl(env));
  }
  await repo.commit(files, 'the shop in dev, staging and prod', {
    author: { name: 'Grace Hopper', email: 'grace@example.test' },
  });
  const secret = await kubectl([
    'create',
    'secret',
    'generic',
    'config-repo',
    '-n',
    ns,
    '--from-literal=type=git',
    `--from-literal=url=${repo.url}`,
    `--from-literal=username=${GIT_USER}`,
    `--from-literal=password=${GIT_PASSWORD}`,
  ]);
  if (secret.code !== 0) throw new Error(`the repository Secret: ${secret.output}`);
  await kubectl(['label', 'secret', 'config-repo', '-n', ns, 'argocd.argoproj.io/secret-type=repository']);

  const appName = (env: string) => `shop-${env}`;
  await apply(
    'applications',
    ENVS.map((env) => ({
      apiVersion: `${ARGO_GROUP}/${ARGO_VERSION}`,
      kind: 'Application',
      metadata: { name: appName(env), namespace: ns },
      spec: {
        project: 'default',
        source: { repoURL: repo.url, path: `shop/${env}`, targetRevision: 'main' },
        destination: { server: 'https://kubernetes.default.svc', namespace: `shop-${env}` },
        syncPolicy: { automated: {}, syncOptions: ['CreateNamespace=true'] },
      },
    })),
  );
  const res = promotionObject(ns);
  const releaseField = '$.spec.template.metadata.annotations.release';
  await apply('promotion-resources', [
    res('Environment', 'dev', { kind: 'NON_PROD' }),
    res('Environment', 'staging', { kind: 'NON_PROD' }),
    res('Environment', 'prod', { kind: 'PROD' }),
    res('PromotionTemplate', 'release', {
      version: { file: 'rollout.yaml', jsonPath: releaseField },
      files: [{ path: 'rollout.yaml', jsonPaths: [releaseField, '$.spec.template.spec.containers[0].image'] }],
    }),
    res('PromotionFlow', 'dev-to-prod', {
      triggerEnvironment: 'dev',
      steps: [{ environment: 'staging' }, { environment: 'prod', dependsOn: ['staging'] }],
    }),
    res('Product', 'shop', {
      repository: repo.url,
      branch: 'main',
      template: 'release',
      flow: 'dev-to-prod',
      environments: ENVS.map((env) => ({ environment: env, path: `shop/${env}`, applications: [appName(env)] })),
    }),
  ]);

  type App = {
    status?: { sync?: { status?: string; revision?: string }; health?: { status?: string } };
  };
  type Rollout = {
    spec?: { template?: { metadata?: { annotations?: Record<string, string> } } };
    status?: {
      phase?: string;
      message?: string;
      abort?: boolean;
      stableRS?: string;
      currentPodHash?: string;
      availableReplicas?: number;
    };
  };
  const application = async (env: string) =>
    (await cluster.objects.getNamespacedCustomObject({
      group: ARGO_GROUP,
      version: ARGO_VERSION,
      namespace: ns,
      plural: 'applications',
      name: appName(env),
    })) as App;
  const rolloutOf = async (env: string) =>
    (await cluster.objects.getNamespacedCustomObject({
      group: ARGO_GROUP,
      version: ARGO_VERSION,
      namespace: `shop-${env}`,
      plural: 'rollouts',
      name: 'web',
    })) as Rollout;
  /** The release annotation of the running pods of a Rollout's stable ReplicaSet. */
  const stablePods = async (env: string) => {
    const r = await rolloutOf(env);
    const out = await kubectl([
      'get',
      'pods',
      '-n',
      `shop-${env}`,
      '-l',
      `rollouts-pod-template-hash=${r.status?.stableRS ?? 'none'}`,
      '-o',
      'jsonpath={range .items[*]}{.metadata.annotations.release}={.status.phase}{"\\n"}{end}',
    ]);
    return out.stdout.trim().split('\n').filter(Boolean).sort();
  };
  const analysisRuns = async (env: string) => {
    const list = (await cluster.objects.listNamespacedCustomObject({
      group: ARGO_GROUP,
      version: ARGO_VERSION,
      namespace: `shop-${env}`,
      plural: 'analysisruns',
    })) as {
      items: Array<{
        metadata: { name: string; labels?: Record<string, string> };
        status?: { phase?: string; message?: string };
      }>;
    };
    return list.items;
  };

  await until('every Application Synced and Healthy at the first commit', 300_000, async () => {
    if (!controller.running()) throw new Error(`the Rollouts controller exited: ${await controller.tail(20)}`);
    for (const env of ENVS) {
      const app = await application(env);
      if (app.status?.sync?.status !== 'Synced' || app.status.health?.status !== 'Healthy') return false;
    }
    return true;
  });

  // The operator's account and rights; a kubeconfig with its token.
  await kubectl(['create', 'namespace', RUNTIME_NS]);
  await apply('operator-rbac', gitopsOperatorRbac(ns, RUNTIME_NS));
  const token = await kubectl(['create', 'token', 'gitops-operator', '-n', RUNTIME_NS, '--duration', '2h']);
  if (token.code !== 0) throw new Error(`no token: ${token.output}`);
  const doc = JSON.parse(cluster.kubeconfig) as { users: Array<{ user: Record<string, string> }> };
  doc.users[0]!.user = { token: token.stdout.trim() };
  const operatorKubeconfig = join(dir, 'gitops-operator.kubeconfig');
  await writeFile(operatorKubeconfig, JSON.stringify(doc), { mode: 0o600 });
  const port = await serverPort();
  const operator: ManagedProcess = startProcess(
    'gitops-operator',
    process.execPath,
    [fileURLToPath(new URL('../../runtime/agents/gitops-operator/main.ts', import.meta.url))],
    join(dir, 'operator.log'),
    {
      env: {
        PATH: process.env.PATH ?? '',
        KUBECONFIG: operatorKubeconfig,
        PROMOTIONS_NAMESPACE: ns,
        POD_NAME: 'gitops-operator-0',
        PORT: String(port),
        HOST: '127.0.0.1',
        GIT_WORK_DIR: join(dir, 'operator-git'),
        POLL_MS: '500',
        SYNC_TIMEOUT_SECONDS: '300',
      },
    },
  );
  t.teardown(() => operator.stop());
  await until('the operator’s /healthz', 60_000, async () => {
    if (!operator.running()) throw new Error(`the operator exited: ${await operator.tail(20)}`);
    return (await fetch(`http://127.0.0.1:${port}/healthz`).catch(() => undefined))?.ok ?? false;
  });

  const promotionOf = (release: string) =>
    until(`the promotion of ${release}`, 120_000, async () =>
      (
        (await cluster.objects.listNamespacedCustomObject({
          group: PROMOTIONS_GROUP,
          version: PROMOTIONS_VERSION,
          namespace: ns,
          plural: 'promotions',
        })) as { items: Promotion[] }
      ).items.find((p) => p.spec.release === release),
    );
  const finished = (p: Promotion) =>
    until(`promotion ${p.metadata.name} finished`, 600_000, async () => {
      if (!controller.running()) throw new Error(`the Rollouts controller exited: ${await controller.tail(20)}`);
      const x = (await cluster.objects.getNamespacedCustomObject({
        group: PROMOTIONS_GROUP,
        version: PROMOTIONS_VERSION,
        namespace: ns,
        plural: 'promotions',
        name: p.metadata.name,
      })) as Promotion;
      return ['Failed', 'Succeeded'].includes(x.status?.phase ?? '') ? x : undefined;
    }).catch(async (err: Error) => {
      throw new Error(`${err.message}; the operator: ${await operator.tail(15)}`, { cause: err });
    });
  const commitRelease = (release: string, image: string) =>
    repo.commit({ 'shop/dev/rollout.yaml': rollout(release, image) }, `dev: shop ${release}`, {
      author: { name: 'Ada Lovelace', email: 'ada@example.test' },
    });

  await t.test('a failed canary analysis in prod fails prod’s step, naming the Rollout', async (t) => {
    successRate.prod = 0.42;
    const t0 = Date.now();
    await commitRelease('1.1.0', 'nginx:1.27.1');
    const p = await finished(await promotionOf('1.1.0'));
    t.comment(`timing: committed to dev → promotion ${p.status?.phase} in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
    t.equal(p.status?.phase, 'Failed', 'the promotion failed');
    const [staging, prod] = p.status!.steps!;
    t.equal(staging?.phase, 'Succeeded', 'staging’s step succeeded: its analysis passed');
    t.equal(prod?.phase, 'Failed', 'prod’s step failed');
    t.match(
      prod?.message,
      /^shop-prod is Degraded at the promoted revision.*Rollout shop-prod\/web/,
      `its message names the Rollout: ${prod?.message}`,
    );
    t.match(p.status?.message, /^prod: shop-prod is Degraded/, 'the promotion’s message is prod’s');
    t.ok(prod?.commit, 'prod got its commit (Argo CD synced it)');
    t.equal((await application('prod')).status?.sync?.revision, prod?.commit, 'Argo CD synced prod to it');
    t.equal((await application('prod')).status?.health?.status, 'Degraded', 'Argo CD’s Rollout health: Degraded');
    const r = await rolloutOf('prod');
    t.equal(r.status?.phase, 'Degraded', 'the controller degraded the Rollout');
    t.equal(r.status?.abort, true, 'it aborted the update');
    t.match(r.status?.message, /RolloutAborted.*Metric "success-rate" assessed Failed/, `${r.status?.message}`);
    const runs = await analysisRuns('prod');
    t.ok(
      runs.some((x) => x.status?.phase === 'Failed'),
      `prod’s AnalysisRun Failed: ${runs.map((x) => `${x.metadata.name}=${x.status?.phase}`).join(', ')}`,
    );
    t.ok(asked.includes('prod'), 'the analysis asked the test’s metric server about prod');
    await until('prod’s stable pods back at full scale', 120_000, async () => (await stablePods('prod')).length === 2);
    t.same(await stablePods('prod'), ['1.0.0=Running', '1.0.0=Running'], 'prod runs 1.0.0 on its stable pods');
    t.same(await stablePods('staging'), ['1.1.0=Running', '1.1.0=Running'], 'staging runs 1.1.0, untouched');
    const stagingApp = await application('staging');
    t.equal(stagingApp.status?.sync?.revision, staging?.commit, 'staging stays at its promoted commit');
    t.equal(stagingApp.status?.health?.status, 'Healthy', 'and Healthy');
  });

  await t.test('with the analysis passing, the next release reaches prod', async (t) => {
    successRate.prod = 0.99;
    const t0 = Date.now();
    await commitRelease('1.2.0', 'nginx:1.27.2');
    const p = await finished(await promotionOf('1.2.0'));
    t.comment(`timing: committed to dev → promotion ${p.status?.phase} in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
    t.equal(p.status?.phase, 'Succeeded', `the promotion succeeded: ${p.status?.message ?? ''}`);
    t.same(
      p.status?.steps?.map((s) => [s.environment, s.phase]),
      [
        ['staging', 'Succeeded'],
        ['prod', 'Succeeded'],
      ],
      'both steps succeeded',
    );
    const r = await rolloutOf('prod');
    t.equal(r.status?.phase, 'Healthy', 'prod’s Rollout is Healthy');
    t.equal(r.spec?.template?.metadata?.annotations?.release, '1.2.0', 'at 1.2.0');
    t.ok(
      (await analysisRuns('prod')).some((x) => x.status?.phase === 'Successful'),
      'with a Successful AnalysisRun',
    );
    await until('prod’s stable pods at 1.2.0', 120_000, async () =>
      (await stablePods('prod')).every((x) => x.startsWith('1.2.0=')),
    );
    t.same(await stablePods('prod'), ['1.2.0=Running', '1.2.0=Running'], 'prod runs 1.2.0');
  });

  t.comment(`rollouts controller ${ARGO_ROLLOUTS_VERSION}: ${controller.logFile}`);
}
