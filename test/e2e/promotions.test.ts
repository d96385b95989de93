/**
 * Promotions with the GitOps Operator (docs/promotions.md), every part real: a kube-apiserver with
 * the controller-manager, scheduler and KWOK, the real Argo CRDs (the argo-workflows chart's for
 * Workflows) and the promotion CRDs (runtime/component/promotion-crds.ts); a real Argo CD
 * (application controller, repo-server, Redis) syncing a product's six Applications (web and api
 * in dev, staging, prod) from one configuration repository on a real Git server over HTTP with
 * credentials (git's own http-backend; the credentials in an Argo CD repository Secret, which the
 * operator pushes with); the operator as a process with its own ServiceAccount's token and Role;
 * a real Argo Workflows controller (harness/argo-workflows.ts) running the pre- and post-action
 * Workflows the operator creates from the customer's WorkflowTemplates.
 *
 * Pods do not run here: KWOK ends each Workflow pod (WORKFLOW_POD_STAGE) Succeeded, or Failed with
 * the exit code and message a template's pod annotations name, or leaves it Running (held): the
 * scenario sets those annotations on the WorkflowTemplates (`outcome`), and the controller turns
 * the pod into the Workflow's phase and message.
 *
 *  - A new release committed to dev starts a promotion: staging gets the operator's commit (its
 *    author, the release, the promotion's trailers), Argo CD syncs it, the post-action runs; prod's
 *    pre-action fails and the promotion stops there with the Workflow's message, prod untouched.
 *  - Retry after the gate is fixed reaches prod.
 *  - The operator killed (SIGKILL) again and again in the middle of a promotion, started again each
 *    time: exactly one commit per environment.
 *  - Abort while staging's post-action runs: staging's commit is reverted, prod never changed; Git
 *    is as it was at the last finished step.
 *  - The control plane sees it: the event reporter (a process, reporting to a provisioner replica
 *    on loopback with a runtime key; the cluster's admin kubeconfig here) reports the Product and the
 *    Promotions, listed at `GET /v1/tenants/:id/products` and `…/promotions`.
 *  - The control plane acts on it: retry, abort and promote are the CLI's (`provisioner promotions
 *    retry|abort`, `products promote`), through the tunnel, the request router and the real
 *    app-proxy acting as its own ServiceAccount with exactly its RBAC; each is audited with the
 *    caller, who is the promotion's `requestedBy`. A release the trigger environment does not hold
 *    is refused by the operator, naming what it holds, and Git is untouched.
 *  - A dry run (`products promote --dry-run --watch`: a PromotionPreview), previewed through a
 *    Source Server beside Argo CD's API server: each environment's release ConfigMap's fields,
 *    nothing pushed, no branch left; finished previews beyond the kept number deleted, oldest
 *    first; a Promotion with the former `spec.dryRun` refused by the CRD and, where an older CRD
 *    let it in, failed by the operator without a commit or a branch; a policy allowing only the
 *    template's changes refuses prod's step when prod's api ConfigMap drifted.
 */
import t from 'tap';
import { backgroundBuild } from './harness/background-build.ts';
import { execFile } from 'node:child_process';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { argoApiServerUnavailable, ARGO_GROUP, ARGO_VERSION, startArgoApiServer } from './harness/argo.ts';
import { argoCdUnavailable, selfSignedCertificate, startArgoCd } from './harness/argocd.ts';
import {
  argoWorkflowsCrds,
  argoWorkflowsUnavailable,
  startWorkflowController,
  WORKFLOW_EXIT_CODE,
  WORKFLOW_EXIT_MESSAGE,
  WORKFLOW_HOLD,
  WORKFLOW_POD_STAGE,
} from './harness/argo-workflows.ts';
import { kubectlRunner } from '../helpers/kubectl.ts';
import { serverPort, startProcess, until } from '../../sandbox/processes.ts';
import { startGitServer } from '../../sandbox/git-server.ts';
import { startProviderDouble } from '../helpers/pull-request-provider-double.ts';
import { createTestApi } from '../helpers/api.ts';
import http from 'node:http';
import { once } from 'node:events';
import { createKey } from '../../provisioner/store/keys.ts';
import { cliAgainst } from '../helpers/cli.ts';
import { AGENTS } from '../../runtime/component/agents.ts';
import { buildAppProxy } from '../../runtime/agents/app-proxy/app.ts';
import { argoObjects } from '../../runtime/agents/app-proxy/kube.ts';
import { loadLightTransport } from '../../runtime/kube/light-client.ts';
import { loadPublicKey } from '../../runtime/agents/app-proxy/request-token.ts';
import { staticRuntimeInfo } from '../../runtime/agents/app-proxy/runtime-info.ts';
import { createRouter } from '../../runtime/agents/request-router/router.ts';
import { connectRuntime } from '../helpers/runtime.ts';
import type { RuntimeObjectPage } from '../../provisioner/api/types.ts';
import { promotionCrds } from '../../runtime/component/promotion-crds.ts';
import {
  applier,
  argoCdRepositorySecret,
  gitopsOperator,
  installPromotionCrds,
  promotionObject,
} from './harness/promotions.ts';
import {
  PROMOTIONS_API_VERSION,
  PROMOTIONS_GROUP,
  PROMOTIONS_VERSION,
  MAX_FINISHED_PREVIEWS,
  type Product,
  type Promotion,
  type PromotionPreview,
} from '../../runtime/protocol/promotions.ts';

// In scripts/test.sh's late phase this build may still be compiling: wait for it.
await backgroundBuild(t, 'argo-workflows');
t.setTimeout(20 * 60_000);

const run = promisify(execFile);
const GIT_USER = 'platform';
const GIT_PASSWORD = 'git-pw-8d2c41';
const ENVS = ['dev', 'staging', 'prod'] as const;
const RUNTIME_NS = 'hosted-runtime';

const release = (version: string, image: string) =>
  `# The shop's release in this environment (the promotion template's fields).\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: shop-release\ndata:\n  version: "${version}"\n  image: ${image}\n`;
const apiConfig = (env: string) =>
  `apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: shop-api\ndata:\n  environment: ${env}\n`;

const unavailable = argoApiServerUnavailable() ?? argoCdUnavailable() ?? argoWorkflowsUnavailable();
if (unavailable) {
  if (process.env.CI === 'true') t.fail(`a real Argo CD and Argo Workflows controller cannot run: ${unavailable}`);
  else t.plan(0, unavailable);
} else {
  const bin = process.env.HRT_TOOLCHAIN_BIN!;
  const cluster = await startArgoApiServer(t, {
    name: 'promotions',
    // Workflows: the argo-workflows chart's CRDs, all of those the controller watches (below).
    crds: ['applications', 'appprojects', 'rollouts'],
    pods: { extraKwokStages: WORKFLOW_POD_STAGE },
  });
  const dir = join(cluster.dir, 'promotions');
  await mkdir(dir, { recursive: true });
  const kubectl = kubectlRunner(bin, cluster.kubeconfigFile);
  const workflowCrds = await argoWorkflowsCrds();
  await writeFile(join(dir, 'argo-workflows-crds.yaml'), workflowCrds.yaml);
  for (const args of [
    ['create', '-f', join(dir, 'argo-workflows-crds.yaml')],
    ['wait', '--for=condition=Established', '--timeout=120s', ...workflowCrds.names.map((n) => `crd/${n}`)],
  ]) {
    const r = await kubectl(args);
    if (r.code !== 0) throw new Error(`kubectl ${args.join(' ')}: ${r.output}`);
  }
  const apply = applier(kubectl, dir);
  await installPromotionCrds(kubectl, dir);

  // Argo CD's API server too: the Source Server asks it for manifests (the dry runs' previews).
  const argocd = await startArgoCd(t, {
    kubeconfigFile: cluster.kubeconfigFile,
    kc: cluster.kc,
    dir: join(dir, 'argocd'),
    server: { certificate: await selfSignedCertificate(join(dir, 'tls'), ['127.0.0.1']) },
  });
  const ns = argocd.namespace;
  const workflowController = await startWorkflowController(t, {
    kubeconfigFile: cluster.kubeconfigFile,
    namespace: ns,
    dir,
    kubectl,
  });
  // The Source Server's Argo CD account (read-only), as the runtime's Argo CD values declare it;
  // the Source Server sets its password up itself (ARGOCD_ACCOUNT_SETUP=argocd-secret).
  for (const [cm, data] of [
    ['argocd-cm', { 'accounts.source-server': 'login' }],
    ['argocd-rbac-cm', { 'policy.csv': 'g, source-server, role:readonly\n' }],
  ] as const) {
    const r = await kubectl(['patch', 'configmap', cm, '-n', ns, '--type', 'merge', '-p', JSON.stringify({ data })]);
    if (r.code !== 0) throw new Error(`${cm}: ${r.output}`);
  }
  const sourceServerPort = await serverPort();
  const sourceServer = startProcess(
    'source-server',
    process.execPath,
    [fileURLToPath(new URL('../../runtime/agents/source-server/main.ts', import.meta.url))],
    join(dir, 'source-server.log'),
    {
      env: {
        PATH: process.env.PATH ?? '',
        PORT: String(sourceServerPort),
        HOST: '127.0.0.1',
        KUBECONFIG: cluster.kubeconfigFile,
        ARGOCD_SERVER_URL: argocd.serverUrl!,
        ARGOCD_CA_SECRET: 'argocd-server-tls',
        ARGOCD_NAMESPACE: ns,
        ARGOCD_ACCOUNT_SETUP: 'argocd-secret',
        RUNTIME_TOKEN: 'e2e-promotions-runtime-token',
        GIT_CACHE_DIR: join(dir, 'source-server-git'),
      },
    },
  );
  t.teardown(() => sourceServer.stop());
  const git = await startGitServer(join(dir, 'git'), '127.0.0.1', {
    credentials: { username: GIT_USER, password: GIT_PASSWORD },
  });
  t.teardown(() => git.stop());
  const repo = await git.repository('config');
  const bare = join(dir, 'git', 'config.git');
  const files: Record<string, string> = {};
  for (const env of ENVS) {
    files[`shop/${env}/release.yaml`] = release('1.0.0', 'nginx:1.25.0');
    files[`shop/${env}/api/config.yaml`] = apiConfig(env);
  }
  await repo.commit(files, 'the shop in dev, staging and prod', {
    author: { name: 'Grace Hopper', email: 'grace@example.test' },
  });
  await argoCdRepositorySecret(kubectl, ns, {
    name: 'config-repo',
    url: repo.url,
    username: GIT_USER,
    password: GIT_PASSWORD,
  });

  const appName = (env: string, part: string) => `shop-${env}-${part}`;
  const applications = ENVS.flatMap((env) =>
    (['web', 'api'] as const).map((part) => ({
      apiVersion: `${ARGO_GROUP}/${ARGO_VERSION}`,
      kind: 'Application',
      metadata: { name: appName(env, part), namespace: ns },
      spec: {
        project: 'default',
        source: { repoURL: repo.url, path: part === 'web' ? `shop/${env}` : `shop/${env}/api`, targetRevision: 'main' },
        destination: { server: 'https://kubernetes.default.svc', namespace: `shop-${env}` },
        syncPolicy: { automated: {}, syncOptions: ['CreateNamespace=true'] },
      },
    })),
  );
  await apply('applications', applications);

  // The product, as the customer keeps it in Git (applied here directly).
  const res = promotionObject(ns);
  await apply('promotion-resources', [
    res('Environment', 'dev', { kind: 'NON_PROD' }),
    res('Environment', 'staging', { kind: 'NON_PROD' }),
    res('Environment', 'prod', { kind: 'PROD' }),
    res('PromotionTemplate', 'release', {
      version: { file: 'release.yaml', jsonPath: '$.data.version' },
      files: [{ path: 'release.yaml', jsonPaths: ['$.data.version', '$.data.image'] }],
    }),
    res('PromotionFlow', 'dev-to-prod', {
      triggerEnvironment: 'dev',
      steps: [{ environment: 'staging' }, { environment: 'prod', dependsOn: ['staging'] }],
      hooks: {
        onStart: { workflowTemplate: 'announce' },
        onSuccess: { workflowTemplate: 'announce' },
        onFail: { workflowTemplate: 'page-on-call' },
      },
    }),
    res('PromotionPolicy', 'prod-gate', {
      selector: { environments: ['prod'] },
      action: 'commit',
      preAction: { workflowTemplate: 'smoke-tests' },
    }),
    res('PromotionPolicy', 'staging-notify', {
      selector: { environments: ['staging'] },
      action: 'commit',
      postAction: { workflowTemplate: 'notify' },
    }),
    res('Product', 'shop', {
      repository: repo.url,
      branch: 'main',
      template: 'release',
      flow: 'dev-to-prod',
      environments: ENVS.map((env) => ({
        environment: env,
        path: `shop/${env}`,
        applications: [appName(env, 'web'), appName(env, 'api')],
      })),
    }),
  ]);

  /**
   * The customer's WorkflowTemplates the flow and the policies name: one container step each,
   * whose pod KWOK ends as `outcomes` says (default: exit code 0).
   */
  type Outcome = 'pass' | { exitCode: number; message: string } | 'hold';
  const outcomes: Record<string, Outcome> = {
    announce: 'pass',
    'page-on-call': 'pass',
    'smoke-tests': 'pass',
    notify: 'pass',
  };
  const workflowTemplate = (name: string, outcome: Outcome) => ({
    apiVersion: `${ARGO_GROUP}/${ARGO_VERSION}`,
    kind: 'WorkflowTemplate',
    metadata: { name, namespace: ns },
    spec: {
      entrypoint: 'main',
      arguments: {
        parameters: ['product', 'environment', 'release', 'promotion'].map((p) => ({ name: p, value: '' })),
      },
      templates: [
        {
          name: 'main',
          metadata: {
            annotations:
              outcome === 'pass'
                ? {}
                : outcome === 'hold'
                  ? { [WORKFLOW_HOLD]: 'true' }
                  : { [WORKFLOW_EXIT_CODE]: String(outcome.exitCode), [WORKFLOW_EXIT_MESSAGE]: outcome.message },
          },
          container: {
            image: `registry.example.test/${name}:1.0`,
            command: [name, '{{workflow.parameters.environment}}', '{{workflow.parameters.release}}'],
          },
        },
      ],
    },
  });
  /** The templates' outcomes from now on (a Workflow keeps the template it started with). */
  const outcome = async (set: Record<string, Outcome>) => {
    Object.assign(outcomes, set);
    await apply(
      'workflow-templates',
      Object.entries(outcomes).map(([name, o]) => workflowTemplate(name, o)),
    );
  };
  await outcome({});
  const workflowPhase = async (name: string) =>
    (
      (await cluster.objects.getNamespacedCustomObject({
        group: ARGO_GROUP,
        version: ARGO_VERSION,
        namespace: ns,
        plural: 'workflows',
        name,
      })) as { status?: { phase?: string } }
    ).status?.phase;

  // The operator, as its own ServiceAccount with its Role.
  const operator = await gitopsOperator(t, {
    kubectl,
    adminKubeconfig: cluster.kubeconfig,
    namespace: ns,
    runtimeNamespace: RUNTIME_NS,
    dir,
    env: { SOURCE_SERVER_URL: `http://127.0.0.1:${sourceServerPort}` },
  });
  const startOperator = () => operator.start();
  const operatorRounds = (n: number) => operator.rounds(n);

  const get = async <T>(plural: string, name: string) =>
    (await cluster.objects.getNamespacedCustomObject({
      group: PROMOTIONS_GROUP,
      version: PROMOTIONS_VERSION,
      namespace: ns,
      plural,
      name,
    })) as T;
  const promotions = async () =>
    (
      (await cluster.objects.listNamespacedCustomObject({
        group: PROMOTIONS_GROUP,
        version: PROMOTIONS_VERSION,
        namespace: ns,
        plural: 'promotions',
      })) as { items: Promotion[] }
    ).items;
  const promotionOf = (version: string) =>
    until(`the promotion of ${version}`, 120_000, async () =>
      (await promotions()).find((p) => p.spec.release === version),
    );
  t.teardown(async () => {
    if (!workflowController.running()) return;
    // What the controller made of the Workflows, for a failure's log.
    const r = await kubectl(['get', 'workflows.argoproj.io', '-n', ns, '-o', 'wide']).catch(() => undefined);
    if (r) await writeFile(join(dir, 'workflows.txt'), r.output);
  });

  /** The release the prod namespace runs (its ConfigMap, as Argo CD synced it), once it is `version`. */
  const prodRuns = (version: string) =>
    until(`prod runs ${version}`, 120_000, async () => {
      const r = await kubectl([
        'get',
        'configmap',
        'shop-release',
        '-n',
        'shop-prod',
        '-o',
        'jsonpath={.data.version}',
      ]);
      return r.stdout === version ? r.stdout : undefined;
    });

  /** The commits on main: sha, author, and the trailers of each. */
  const commits = async () => {
    const { stdout } = await run('git', ['--git-dir', bare, 'log', '--format=%H%x1f%an <%ae>%x1f%B%x1e', 'main']);
    return stdout
      .split('\x1e')
      .map((x) => x.trim())
      .filter(Boolean)
      .map((x) => {
        const [sha, author, body] = x.split('\x1f') as [string, string, string];
        return { sha, author, body };
      });
  };
  const fileAt = async (file: string) => (await run('git', ['--git-dir', bare, 'show', `main:${file}`])).stdout;
  const promotionCommits = async (p: Promotion, env: string) =>
    (await commits()).filter(
      (c) => c.body.includes(`Promotion-Id: ${p.metadata.uid}`) && c.body.includes(`Promotion-Environment: ${env}`),
    );
  const finalPhase = (p: Promotion, phases: string[], ms = 300_000) =>
    until(`promotion ${p.metadata.name} to be ${phases.join(' or ')}`, ms, async () => {
      const x = await get<Promotion>('promotions', p.metadata.name);
      return phases.includes(x.status?.phase ?? '') ? x : undefined;
    }).catch(async (err: Error) => {
      const x = await get<Promotion>('promotions', p.metadata.name);
      throw new Error(
        `${err.message}; it is ${JSON.stringify(x.status).slice(0, 1500)}; the operator: ${await operator.tail(15)}`,
        {
          cause: err,
        },
      );
    });

  await until('every Application Synced and Healthy at the first commit', 240_000, async () => {
    for (const a of applications) {
      const app = (await cluster.objects.getNamespacedCustomObject({
        group: ARGO_GROUP,
        version: ARGO_VERSION,
        namespace: ns,
        plural: 'applications',
        name: a.metadata.name,
      })) as { status?: { sync?: { status?: string }; health?: { status?: string } } };
      if (app.status?.sync?.status !== 'Synced' || app.status.health?.status !== 'Healthy') return false;
    }
    return true;
  });
  await startOperator();

  // The control plane and the event reporter that tells it.
  const api = await createTestApi();
  t.teardown(() => api.close());
  const cpPort = await serverPort();
  await api.app.listen({ port: cpPort, host: '127.0.0.1' });
  const tenant = await api.signup();
  const runtimeKey = (
    await createKey(api.db.pool, {
      role: 'runtime',
      tenantId: tenant.tenantId,
      name: 'event reporter',
      createdBy: 'test',
    })
  ).key;
  const reporterPort = await serverPort();
  const reporter = startProcess(
    'event-reporter',
    process.execPath,
    [fileURLToPath(new URL('../../runtime/agents/event-reporter/main.ts', import.meta.url))],
    join(dir, 'event-reporter.log'),
    {
      env: {
        PATH: process.env.PATH ?? '',
        CONTROL_PLANE_URL: `http://127.0.0.1:${cpPort}`,
        RUNTIME_TOKEN: runtimeKey,
        REPLICA_NAME: 'event-reporter-0',
        LEASE_NAMESPACE: RUNTIME_NS,
        KUBECONFIG: cluster.kubeconfigFile,
        PORT: String(reporterPort),
        HOST: '127.0.0.1',
      },
    },
  );
  t.teardown(() => reporter.stop());
  // The runtime's way in for the control plane's actions: the real app-proxy as its own
  // ServiceAccount with exactly the app-proxy's RBAC, behind the request router and the tunnel.
  const appProxy = AGENTS.find((a) => a.name === 'app-proxy')!;
  await apply('app-proxy-rbac', [
    { apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name: 'app-proxy', namespace: RUNTIME_NS } },
    {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'ClusterRole',
      metadata: { name: 'hosted-runtime-app-proxy' },
      rules: appProxy.clusterRules,
    },
    {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'ClusterRoleBinding',
      metadata: { name: 'hosted-runtime-app-proxy' },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'hosted-runtime-app-proxy' },
      subjects: [{ kind: 'ServiceAccount', name: 'app-proxy', namespace: RUNTIME_NS }],
    },
  ]);
  const proxyToken = await kubectl(['create', 'token', 'app-proxy', '-n', RUNTIME_NS, '--duration', '2h']);
  if (proxyToken.code !== 0) throw new Error(`no token: ${proxyToken.output}`);
  const proxyDoc = JSON.parse(cluster.kubeconfig) as { users: Array<{ user: Record<string, string> }> };
  proxyDoc.users[0]!.user = { token: proxyToken.stdout.trim() };
  const proxyKubeconfig = join(dir, 'app-proxy.kubeconfig');
  await writeFile(proxyKubeconfig, JSON.stringify(proxyDoc), { mode: 0o600 });
  const proxy = await buildAppProxy({
    tenantId: tenant.tenantId,
    publicKey: loadPublicKey(api.services.signer.publicKeyPem),
    runtimeInfo: staticRuntimeInfo({ runtimeVersion: '1.8.0', components: {} }),
    objects: argoObjects(loadLightTransport(proxyKubeconfig)),
  });
  const proxyUrl = await proxy.listen({ port: 0, host: '127.0.0.1' });
  const router = createRouter({ appProxyUrl: proxyUrl, eventSourceUrl: 'http://127.0.0.1:9' });
  const routerServer = http.createServer(router.handler).listen(0, '127.0.0.1');
  await once(routerServer, 'listening');
  const base = `http://127.0.0.1:${cpPort}`;
  const { client: tunnel } = await connectRuntime(api, base, tenant.tenantId, routerServer, 'hosted runtime');
  t.teardown(async () => {
    await tunnel.close();
    router.close();
    routerServer.close();
    await proxy.close();
  });
  /** The CLI as the tenant runs it. */
  const runCli = cliAgainst(base, tenant.apiKey);
  const cli = (...args: string[]) => runCli(args);
  const audited = async (action: string) => {
    const res = await api.request('GET', `/v1/audit?targetType=tenant&targetId=${tenant.tenantId}&limit=500`, {
      key: api.operatorKey,
    });
    return res
      .json<{ items: Array<{ action: string; actor: string; after: Record<string, unknown> }> }>()
      .items.filter((r) => r.action === action);
  };

  const reported = async (path: string) => {
    const res = await api.request('GET', `/v1/tenants/${tenant.tenantId}/${path}`);
    if (res.statusCode !== 200) throw new Error(`GET ${path}: ${res.statusCode} ${res.body}`);
    return res.json<RuntimeObjectPage>().items;
  };

  t.test('the product’s release in each environment, read from Git', async (t) => {
    const product = await until('the product observed', 60_000, async () => {
      const p = await get<Product>('products', 'shop');
      return p.status?.environments?.length === 3 ? p : undefined;
    });
    t.same(
      product.status?.environments?.map((e) => [e.environment, e.release]),
      [
        ['dev', '1.0.0'],
        ['staging', '1.0.0'],
        ['prod', '1.0.0'],
      ],
      '1.0.0 everywhere',
    );
    t.same(await promotions(), [], 'the release it found is not a change: no promotion');
  });

  let first!: Promotion;
  t.test('a release committed to dev reaches staging; prod’s failing gate stops it there', async (t) => {
    await outcome({ 'smoke-tests': { exitCode: 1, message: 'smoke tests failed: 2 of 14 checks' } });
    await repo.commit({ 'shop/dev/release.yaml': release('1.1.0', 'nginx:1.27.1') }, 'dev: shop 1.1.0', {
      author: { name: 'Ada Lovelace', email: 'ada@example.test' },
    });
    first = await promotionOf('1.1.0');
    t.equal(first.spec.requestedBy, 'trigger', 'started by the new release in dev');
    const failed = await finalPhase(first, ['Failed', 'Succeeded']);
    t.equal(failed.status?.phase, 'Failed', 'the promotion failed');
    t.match(
      failed.status?.message,
      // The Workflow's message, as the controller wrote it from the step's pod.
      /^prod: pre-action Workflow \S+ failed: main: Error \(exit code 1\): smoke tests failed: 2 of 14 checks$/,
      `with the gate’s message: ${failed.status?.message}`,
    );
    const [staging, prod] = failed.status!.steps!;
    t.equal(staging!.phase, 'Succeeded', 'staging succeeded');
    t.equal(
      staging!.postAction?.workflow && (await workflowPhase(staging!.postAction.workflow)),
      'Succeeded',
      'after its post-action ran: the controller ended its Workflow Succeeded',
    );
    t.equal(
      prod!.preAction?.workflow && (await workflowPhase(prod!.preAction.workflow)),
      'Failed',
      'prod’s pre-action Workflow: Failed, as its pod ended',
    );
    t.equal(prod!.phase, 'Failed', 'prod failed at its gate');
    t.notOk(prod!.commit, 'prod got no commit');
    const [commit] = await promotionCommits(first, 'staging');
    t.equal(commit?.sha, staging!.commit, 'staging’s commit is on main');
    t.equal(commit?.author, 'GitOps Operator <gitops-operator@hosted-runtimes.invalid>', 'by the operator');
    t.match(commit?.body, /^Promote shop 1\.1\.0 to staging/, 'its message says what it promotes');
    t.match(
      await fileAt('shop/staging/release.yaml'),
      /version: "1\.1\.0"\n {2}image: nginx:1\.27\.1/,
      'staging holds 1.1.0 and its image',
    );
    t.match(await fileAt('shop/staging/release.yaml'), /^# The shop's release/, 'with the file’s comment kept');
    t.match(await fileAt('shop/prod/release.yaml'), /version: "1\.0\.0"/, 'prod still holds 1.0.0');
    const app = (await cluster.objects.getNamespacedCustomObject({
      group: ARGO_GROUP,
      version: ARGO_VERSION,
      namespace: ns,
      plural: 'applications',
      name: 'shop-staging-web',
    })) as { status?: { sync?: { revision?: string; status?: string }; health?: { status?: string } } };
    t.equal(app.status?.sync?.status, 'Synced', 'Argo CD synced staging');
    const cm = await kubectl([
      'get',
      'configmap',
      'shop-release',
      '-n',
      'shop-staging',
      '-o',
      'jsonpath={.data.version}',
    ]);
    t.equal(cm.stdout, '1.1.0', 'and staging runs 1.1.0');
    const seen = await until('the control plane shows the failed promotion', 60_000, async () =>
      (await reported('promotions')).find((p) => p.name === first.metadata.name && p.phase === 'Failed'),
    ).catch(async (err: Error) => {
      throw new Error(`${err.message}; the reporter: ${await reporter.tail(10)}`, { cause: err });
    });
    t.match(
      seen.summary,
      {
        product: 'shop',
        release: '1.1.0',
        steps: [
          { environment: 'staging', phase: 'Succeeded', commit: staging!.commit },
          { environment: 'prod', phase: 'Failed' },
        ],
      },
      'reported with its release and each step (staging’s commit, prod’s failure)',
    );
    t.match(String(seen.summary.message), /smoke tests failed/, 'and why it stopped');
    t.same(
      failed.status?.hooks?.map((h) => h.hook),
      ['onStart', 'onFail'],
      "the flow's hooks: one when it started, one when it failed",
    );
    const onFail = await kubectl([
      'get',
      'workflow.argoproj.io',
      failed.status!.hooks![1]!.workflow,
      '-n',
      ns,
      '-o',
      'jsonpath={.spec.workflowTemplateRef.name} {.metadata.labels.promotions\\.hosted-runtimes\\.io/environment}',
    ]);
    t.equal(
      onFail.stdout,
      'page-on-call prod',
      "the onFail hook's Workflow, from its template, names the failed environment",
    );
  });

  t.test('retry after the gate is fixed reaches prod', async (t) => {
    await outcome({ 'smoke-tests': 'pass' });
    const retried = await cli('promotions', 'retry', tenant.tenantId, first.metadata.name);
    t.equal(retried.code, 0, `retry asked through the control plane: ${retried.err}`);
    t.match(retried.out, /retry 1 asked/, 'the CLI says so');
    t.equal(
      (await get<Promotion>('promotions', first.metadata.name)).spec.retry,
      1,
      'spec.retry raised by the app-proxy',
    );
    const again = await cli('promotions', 'retry', tenant.tenantId, first.metadata.name);
    if (again.code !== 0)
      t.match(
        again.err,
        /ACTION_REFUSED: .*(already asked to retry|is Running)/,
        'a second retry is refused, saying why',
      );
    const rows = await audited('runtime.promotion.retry');
    t.match(
      rows.find((r) => r.after.status === 200),
      { after: { kind: 'Promotion', name: first.metadata.name } },
      'the retry is audited',
    );
    t.equal(rows.length, 2, 'each request has its row, the refused one too');
    const done = await finalPhase(first, ['Succeeded'], 300_000);
    t.same(
      done.status?.steps?.map((s) => [s.environment, s.phase]),
      [
        ['staging', 'Succeeded'],
        ['prod', 'Succeeded'],
      ],
    );
    t.equal((await promotionCommits(first, 'staging')).length, 1, 'staging: still one commit');
    t.equal((await promotionCommits(first, 'prod')).length, 1, 'prod: one commit');
    t.same(
      done.status?.hooks?.map((h) => h.hook),
      ['onStart', 'onFail', 'onSuccess'],
      'the retry did not start again; its success ran onSuccess',
    );
    const cm = await prodRuns('1.1.0');
    t.equal(cm, '1.1.0', 'Argo CD synced prod to 1.1.0');
    const product = await until('the product shows 1.1.0 in prod', 60_000, async () => {
      const p = await get<Product>('products', 'shop');
      return p.status?.environments?.find((e) => e.environment === 'prod')?.release === '1.1.0' ? p : undefined;
    });
    t.ok(product, 'the product’s status shows the release in each environment');
    const listed = await until('the control plane shows 1.1.0 in prod', 60_000, async () =>
      (await reported('products')).find(
        (p) =>
          (p.summary.environments as Array<{ environment: string; release?: string }> | undefined)?.find(
            (e) => e.environment === 'prod',
          )?.release === '1.1.0',
      ),
    );
    t.same(
      (listed.summary.environments as Array<{ environment: string; release: string }>).map((e) => [
        e.environment,
        e.release,
      ]),
      [
        ['dev', '1.1.0'],
        ['staging', '1.1.0'],
        ['prod', '1.1.0'],
      ],
      'GET …/products: the release in each environment',
    );
  });

  t.test('killed in the middle again and again: exactly one commit per environment', async (t) => {
    await repo.commit({ 'shop/dev/release.yaml': release('1.2.0', 'nginx:1.27.2') }, 'dev: shop 1.2.0');
    const p = await promotionOf('1.2.0');
    let kills = 0;
    const killedAt = new Set<string>();
    for (let i = 0; i < 8; i++) {
      await new Promise((r) => setTimeout(r, 400 + 600 * i));
      const x = await get<Promotion>('promotions', p.metadata.name);
      if (x.status?.phase === 'Succeeded') break;
      const step = x.status?.steps?.find((s) => !['Succeeded', 'Skipped'].includes(s.phase));
      killedAt.add(step ? `${step.environment} ${step.phase}` : (x.status?.phase ?? 'not started'));
      await operator.process()!.kill();
      kills++;
      await startOperator();
    }
    const done = await finalPhase(p, ['Succeeded']);
    t.ok(kills >= 2, `the operator was killed ${kills} times during the promotion, at: ${[...killedAt].join('; ')}`);
    t.ok(killedAt.size >= 2, 'in more than one state of its steps');
    t.equal(done.status?.phase, 'Succeeded', 'the promotion finished');
    t.equal((await promotionCommits(p, 'staging')).length, 1, 'staging: exactly one commit');
    t.equal((await promotionCommits(p, 'prod')).length, 1, 'prod: exactly one commit');
    t.match(await fileAt('shop/prod/release.yaml'), /version: "1\.2\.0"/, 'prod holds 1.2.0');
  });

  t.test('abort during staging’s post-action: its commit reverted, prod untouched', async (t) => {
    await outcome({ notify: 'hold' });
    const before = await fileAt('shop/staging/release.yaml');
    await repo.commit({ 'shop/dev/release.yaml': release('1.3.0', 'nginx:1.27.3') }, 'dev: shop 1.3.0');
    const p = await promotionOf('1.3.0');
    await until('staging in its post-action', 240_000, async () => {
      const x = await get<Promotion>('promotions', p.metadata.name);
      return x.status?.steps?.[0]?.phase === 'PostAction';
    });
    t.match(
      await fileAt('shop/staging/release.yaml'),
      /version: "1\.3\.0"/,
      'staging got 1.3.0 (its step has not finished)',
    );
    await until('the control plane has the promotion', 60_000, async () =>
      (await reported('promotions')).some((x) => x.name === p.metadata.name),
    );
    const aborting = await cli('promotions', 'abort', tenant.tenantId, p.metadata.name);
    t.equal(aborting.code, 0, `abort asked through the control plane: ${aborting.err}`);
    const aborted = await finalPhase(p, ['Aborted']);
    const [staging, prod] = aborted.status!.steps!;
    t.equal(staging!.phase, 'Aborted', 'staging aborted');
    t.ok(staging!.revert, 'its commit reverted');
    t.equal(prod!.phase, 'Skipped', 'prod skipped');
    t.equal(await fileAt('shop/staging/release.yaml'), before, 'staging’s file is as it was at the last finished step');
    t.match(await fileAt('shop/prod/release.yaml'), /version: "1\.2\.0"/, 'prod still holds 1.2.0');
    const reverts = (await commits()).filter((c) => c.body.includes(`Promotion-Revert: ${p.metadata.uid}/staging`));
    t.equal(reverts.length, 1, 'one revert commit');
    const finished = await cli('promotions', 'abort', tenant.tenantId, p.metadata.name);
    t.equal(finished.code, 1, 'an aborted promotion cannot be aborted again');
    t.match(finished.err, /ACTION_REFUSED.*has finished \(Aborted\)/s, 'the refusal says why');
  });

  t.test('promote through the control plane: a release dev does not hold is refused, Git untouched', async (t) => {
    const before = (await commits()).length;
    const promoted = await cli('products', 'promote', tenant.tenantId, 'shop', '--release', '9.9.9');
    t.equal(promoted.code, 0, `a promotion started through the control plane: ${promoted.err}`);
    const name = /promotion \S+\/(\S+) of shop 9\.9\.9 started/.exec(promoted.out)?.[1];
    t.ok(name, `the CLI names it: ${promoted.out}`);
    const p = await get<Promotion>('promotions', name!);
    const [row] = await audited('runtime.product.promote');
    t.equal(p.spec.requestedBy, row?.actor, 'requestedBy is the audited caller (their key id)');
    const failed = await finalPhase(p, ['Failed', 'Succeeded', 'Running'], 60_000);
    t.equal(failed.status?.phase, 'Failed', 'the operator refuses it');
    t.match(
      failed.status?.message,
      /dev holds 1\.3\.0, not 9\.9\.9/,
      `naming what dev holds: ${failed.status?.message}`,
    );
    t.equal((await commits()).length, before, 'no commit');
    const shown = await until('the control plane shows why', 60_000, async () => {
      const r = await cli('promotions', 'get', tenant.tenantId, name!);
      return r.code === 0 && /Failed — dev holds 1\.3\.0/.test(r.out) ? r.out : undefined;
    });
    t.match(shown, /requested by:\s+\S+/, "the CLI's timeline names who asked");
  });

  t.test(
    'action pr (provider: a test double): staging’s pull request opened once (a restart between its create and its answer), merged by the provider; abort closes one',
    async (t) => {
      await outcome({ notify: 'pass' });
      // The provider's pull-request API: a TEST DOUBLE (Gitea's API v1 shapes, on loopback), for
      // what a real provider cannot be made to do (an answer lost while the operator dies); the
      // whole step against a real Gitea: gitea-promotions.test.ts (docs/testing.md "Pull requests").
      // Its token is the password of the repository Secret, as a real provider's would be.
      const provider = await startProviderDouble({ kind: 'gitea', owner: 'acme', repo: 'config', token: GIT_PASSWORD });
      t.teardown(() => provider.close());
      // The first create is made but never answered, and the operator is killed while it waits.
      provider.holdNextCreate();
      const policy = await kubectl([
        'patch',
        'promotionpolicy.' + PROMOTIONS_GROUP,
        'staging-notify',
        '-n',
        ns,
        '--type',
        'merge',
        '-p',
        JSON.stringify({
          spec: {
            action: 'pr',
            pullRequest: { provider: 'gitea', apiUrl: provider.apiUrl, repository: 'acme/config' },
          },
        }),
      ]);
      t.equal(policy.code, 0, `staging's policy asks for a pull request: ${policy.output}`);
      const stagingBefore = await fileAt('shop/staging/release.yaml');
      await repo.commit({ 'shop/dev/release.yaml': release('1.4.0', 'nginx:1.27.4') }, 'dev: shop 1.4.0');
      const p = await promotionOf('1.4.0');
      await until('the pull request created (its answer held)', 120_000, () => provider.pulls.length === 1);
      await operator.process()!.kill();
      await startOperator();
      const awaiting = await until('staging’s pull request recorded', 120_000, async () => {
        const x = await get<Promotion>('promotions', p.metadata.name);
        const s = x.status?.steps?.[0];
        return s?.phase === 'AwaitingMerge' && s.proposal?.pullRequest ? x : undefined;
      });
      const proposal = awaiting.status!.steps![0]!.proposal!;
      t.equal(proposal.branch, `promotions/${p.metadata.name}/staging`, 'on a branch of its own');
      t.equal(provider.pulls.length, 1, 'the restarted operator opened no second pull request');
      const pr = provider.pulls[0]!;
      t.match(
        pr,
        { number: 1, head: proposal.branch, base: 'main', title: 'Promote shop 1.4.0 to staging', state: 'open' },
        'from the branch into main, named after the promotion',
      );
      t.ok(
        pr.body.includes(
          `Promotion \`${p.metadata.name}\` of product \`shop\`: release \`1.4.0\` to environment \`staging\``,
        ),
        `its description says which promotion, release and environment: ${pr.body}`,
      );
      t.match(
        proposal.pullRequest,
        { provider: 'gitea', number: 1, url: /\/acme\/config\/pulls\/1$/ },
        'kept in the step',
      );
      t.match(
        awaiting.status!.steps![0]!.message,
        /^pull request #1 \(http:\/\/127\.0\.0\.1:\d+\/acme\/config\/pulls\/1\) waits to be merged into main$/,
      );
      const shownPr = await until('the CLI shows the pull request', 60_000, async () => {
        const r = await cli('promotions', 'get', tenant.tenantId, p.metadata.name);
        return r.code === 0 &&
          /staging: pull request #1 http:\/\/127\.0\.0\.1:\d+\/acme\/config\/pulls\/1 from promotions\//.test(r.out)
          ? r.out
          : undefined;
      });
      t.ok(shownPr, 'promotions get names the pull request');
      const onBranch = (await run('git', ['--git-dir', bare, 'show', `${proposal.branch}:shop/staging/release.yaml`]))
        .stdout;
      t.match(onBranch, /version: "1\.4\.0"\n {2}image: nginx:1\.27\.4/, 'the branch holds the change');
      await operatorRounds(2);
      t.equal(
        (await get<Promotion>('promotions', p.metadata.name)).status?.steps?.[0]?.phase,
        'AwaitingMerge',
        'unmerged, the step waits',
      );
      t.equal(await fileAt('shop/staging/release.yaml'), stagingBefore, 'and main is untouched');

      // The provider merges the pull request (a merge commit; the double does not hold the Git
      // repository, so the merge is pushed as a provider's would be).
      provider.merge(1);
      const work = join(dir, 'provider-merge');
      await run('git', ['clone', '-q', bare, work]);
      const env = {
        ...process.env,
        GIT_AUTHOR_NAME: 'Reviewer',
        GIT_AUTHOR_EMAIL: 'reviewer@example.test',
        GIT_COMMITTER_NAME: 'Reviewer',
        GIT_COMMITTER_EMAIL: 'reviewer@example.test',
      };
      await run(
        'git',
        ['-C', work, 'merge', '-q', '--no-ff', '-m', 'Merge pull request #7', `origin/${proposal.branch}`],
        { env },
      );
      await run('git', ['-C', work, 'push', '-q', 'origin', 'main'], { env });
      const done = await finalPhase(p, ['Succeeded', 'Failed']);
      t.equal(done.status?.phase, 'Succeeded', `merged, the promotion went on to the end: ${done.status?.message}`);
      const [staging, prod] = done.status!.steps!;
      t.equal(prod!.phase, 'Succeeded', 'prod succeeded after it');
      t.equal(staging!.commit, proposal.commit, 'staging’s commit is the proposed one, now on main');
      t.equal(staging!.proposal?.branch, proposal.branch, 'the step keeps the branch it was proposed on');
      t.ok(staging!.mergedAt, 'and when it was found merged');
      t.match(await fileAt('shop/staging/release.yaml'), /version: "1\.4\.0"/, 'staging holds 1.4.0');
      t.equal((await promotionCommits(p, 'prod')).length, 1, 'prod (action commit) got its commit');
      t.match(await fileAt('shop/prod/release.yaml'), /version: "1\.4\.0"/, 'prod holds 1.4.0');

      await repo.commit({ 'shop/dev/release.yaml': release('1.5.0', 'nginx:1.27.5') }, 'dev: shop 1.5.0');
      const next = await promotionOf('1.5.0');
      const proposed = await until('1.5.0 proposed for staging', 120_000, async () => {
        const x = await get<Promotion>('promotions', next.metadata.name);
        return x.status?.steps?.[0]?.phase === 'AwaitingMerge' ? x : undefined;
      });
      const branch = proposed.status!.steps![0]!.proposal!.branch;
      await until('1.5.0’s pull request opened', 60_000, async () =>
        (await get<Promotion>('promotions', next.metadata.name)).status?.steps?.[0]?.proposal?.pullRequest
          ? true
          : undefined,
      );
      await until('the control plane has it', 60_000, async () =>
        (await reported('promotions')).some((x) => x.name === next.metadata.name),
      );
      const aborting = await cli('promotions', 'abort', tenant.tenantId, next.metadata.name);
      t.equal(aborting.code, 0, `abort asked: ${aborting.err}`);
      const aborted = await finalPhase(next, ['Aborted']);
      t.match(
        aborted.status?.steps?.[0]?.message,
        /proposal withdrawn \(pull request #2 closed, branch promotions\/.+\/staging deleted\)/,
        'the proposal is withdrawn',
      );
      t.match(
        provider.pulls[1],
        { number: 2, head: branch, state: 'closed', merged: false },
        'its pull request closed',
      );
      t.equal(aborted.status?.steps?.[0]?.proposal?.pullRequest?.state, 'closed', 'and shown closed');
      const left = await run('git', ['--git-dir', bare, 'branch', '--list', branch]);
      t.equal(left.stdout.trim(), '', 'its branch deleted');
      t.match(await fileAt('shop/staging/release.yaml'), /version: "1\.4\.0"/, 'staging untouched');
    },
  );

  t.test('roll prod back to the release before, through the control plane; the trigger cannot be', async (t) => {
    t.match(await fileAt('shop/prod/release.yaml'), /version: "1\.4\.0"/, 'prod holds 1.4.0');
    const asked = await cli('products', 'rollback', tenant.tenantId, 'shop', 'prod');
    t.equal(asked.code, 0, `rollback asked: ${asked.err}`);
    const name = /rollback \S+\/(\S+) of shop in prod started/.exec(asked.out)?.[1];
    t.ok(name, `the CLI names it: ${asked.out}`);
    const p = await get<Promotion>('promotions', name!);
    const done = await finalPhase(p, ['Succeeded', 'Failed']);
    t.equal(done.status?.phase, 'Succeeded', `rolled back: ${done.status?.message}`);
    t.equal(done.status?.release, '1.2.0', 'to 1.2.0, what prod held before 1.4.0');
    t.equal(done.status?.rollbackFrom, '1.4.0', 'from 1.4.0');
    t.match(
      await fileAt('shop/prod/release.yaml'),
      /version: "1\.2\.0"\n {2}image: nginx:1\.27\.2/,
      'prod’s file holds 1.2.0 and its image again',
    );
    const [commit, ...more] = await promotionCommits(p, 'prod');
    t.equal(more.length, 0, 'one commit');
    t.match(commit?.body, /^Roll shop back to 1\.2\.0 in prod/, 'its message says it rolls back');
    t.same(
      done.status?.steps?.map((s) => s.environment),
      ['prod'],
      'one step: prod, with its gates',
    );
    const cm = await prodRuns('1.2.0');
    t.equal(cm, '1.2.0', 'prod runs 1.2.0');
    t.match(await fileAt('shop/staging/release.yaml'), /version: "1\.4\.0"/, 'staging untouched');

    const trigger = await cli('products', 'rollback', tenant.tenantId, 'shop', 'dev');
    const refused = await get<Promotion>('promotions', /rollback \S+\/(\S+) of/.exec(trigger.out)![1]!);
    const failed = await finalPhase(refused, ['Failed', 'Succeeded']);
    t.match(
      failed.status?.message,
      /dev is the flow's trigger environment/,
      'the trigger environment is not rolled back',
    );
  });

  /** The branches of the configuration repository. */
  const branches = async () =>
    (await run('git', ['--git-dir', bare, 'for-each-ref', '--format=%(refname:short)', 'refs/heads/'])).stdout
      .split('\n')
      .filter(Boolean);

  t.test('a dry run through the control plane: each environment’s change previewed, nothing pushed', async (t) => {
    await outcome({ announce: 'pass', 'page-on-call': 'pass', 'smoke-tests': 'pass', notify: 'pass' });
    t.match(await fileAt('shop/dev/release.yaml'), /version: "1\.5\.0"/, 'dev holds 1.5.0 (its promotion was aborted)');
    const before = { commits: (await commits()).length, branches: await branches() };
    const staging = await fileAt('shop/staging/release.yaml');
    const prod = await fileAt('shop/prod/release.yaml');
    const r = await cli('products', 'promote', tenant.tenantId, 'shop', '--dry-run', '--watch');
    t.equal(r.code, 0, `the dry run followed to its end: ${r.err}`);
    const name = /dry run \S+\/(\S+) of shop started/.exec(r.out)?.[1];
    t.ok(name, `the CLI names it: ${r.out.slice(0, 300)}`);
    const p = await get<PromotionPreview>('promotionpreviews', name!);
    t.equal(p.kind, 'PromotionPreview', 'a PromotionPreview, a kind an operator before previews never runs');
    t.notOk(
      (await promotions()).some((x) => x.metadata.name === name),
      'no Promotion was made for it',
    );
    const [row] = await audited('runtime.product.dry-run');
    t.equal(p.spec.requestedBy, row?.actor, 'audited as runtime.product.dry-run, the caller its requestedBy');
    t.equal(p.status?.phase, 'Succeeded', `it ended: ${p.status?.message}`);
    const steps = p.status?.steps ?? [];
    t.same(
      steps.map((s) => s.environment),
      ['staging', 'prod'],
      'every environment after the trigger, in the flow’s order',
    );
    const expected = { staging: ['1.4.0', 'nginx:1.27.4'], prod: ['1.2.0', 'nginx:1.27.2'] };
    for (const step of steps) {
      const d = step.dryRun!;
      t.ok(d?.commit, `${step.environment}: previewed at a scratch commit`);
      t.same(d.files, [`shop/${step.environment}/release.yaml`], `${step.environment}: the template's file`);
      const web = d.applications.find((a) => a.application === `shop-${step.environment}-web`);
      const api = d.applications.find((a) => a.application === `shop-${step.environment}-api`);
      t.same(
        web?.resources.map((x) => [x.kind, x.namespace, x.name, x.action, [...x.fields].sort(), x.notFromChange]),
        [
          [
            'ConfigMap',
            `shop-${step.environment}`,
            'shop-release',
            'modified',
            ['data.image', 'data.version'],
            undefined,
          ],
        ],
        `${step.environment}: web's release ConfigMap gets the release and its image (${expected[step.environment as 'staging' | 'prod'].join(', ')} → 1.5.0, nginx:1.27.5), all from the change`,
      );
      t.same(api?.resources, [], `${step.environment}: api is unchanged`);
      t.notOk(api?.error, `${step.environment}: api previewed`);
    }
    t.match(r.out, /staging: the change \(shop\/staging\/release\.yaml\) previewed/, 'the CLI prints each environment');
    t.match(
      r.out,
      /shop-prod-web\s+ConfigMap shop-prod\/shop-release\s+modified\s+data\.(version|image), data\.(image|version)/,
      'and each resource with its fields',
    );
    t.equal((await commits()).length, before.commits, 'no commit on main');
    t.equal(await fileAt('shop/staging/release.yaml'), staging, 'staging’s file untouched');
    t.equal(await fileAt('shop/prod/release.yaml'), prod, 'prod’s file untouched');
    t.same(await branches(), before.branches, 'no scratch branch left, no other branch moved');
    const shown = await cli('promotions', 'get', tenant.tenantId, name!);
    t.match(shown.out, /dry run: nothing is changed/, '`promotions get` says it is a dry run');
    t.match(shown.out, /shop-staging-web\s+ConfigMap shop-staging\/shop-release/, 'and shows the preview');
  });

  const previews = async () =>
    (
      (await cluster.objects.listNamespacedCustomObject({
        group: PROMOTIONS_GROUP,
        version: PROMOTIONS_VERSION,
        namespace: ns,
        plural: 'promotionpreviews',
      })) as { items: PromotionPreview[] }
    ).items;

  t.test('finished previews beyond the kept number are deleted, oldest first', async (t) => {
    const first = (await previews()).map((p) => p.metadata.name);
    t.equal(first.length, 1, 'the dry run above is kept');
    // Asked for and aborted at once: each ends without a preview (cheap), and counts as finished.
    const made: string[] = [];
    for (let i = 0; i < MAX_FINISHED_PREVIEWS + 2; i++) {
      const created = (await cluster.objects.createNamespacedCustomObject({
        group: PROMOTIONS_GROUP,
        version: PROMOTIONS_VERSION,
        namespace: ns,
        plural: 'promotionpreviews',
        body: {
          apiVersion: PROMOTIONS_API_VERSION,
          kind: 'PromotionPreview',
          metadata: { generateName: 'shop-keep-', namespace: ns },
          spec: { product: 'shop', requestedBy: 'e2e', abort: true },
        },
      })) as PromotionPreview;
      made.push(created.metadata.name);
    }
    const kept = await until(`${MAX_FINISHED_PREVIEWS} previews kept`, 60_000, async () => {
      const all = await previews();
      return all.length === MAX_FINISHED_PREVIEWS &&
        all.every((p) => ['Aborted', 'Superseded'].includes(p.status?.phase ?? ''))
        ? all
        : undefined;
    });
    t.equal(kept.length, MAX_FINISHED_PREVIEWS, `the product keeps ${MAX_FINISHED_PREVIEWS} finished previews`);
    t.notOk(
      kept.some((p) => first.includes(p.metadata.name)),
      'the oldest finished (the dry run above) is deleted first',
    );
    t.ok(
      kept.every((p) => made.includes(p.metadata.name)),
      'the newest are kept',
    );
  });

  t.test('a Promotion with spec.dryRun is refused and never pushes anything', async (t) => {
    const before = { commits: (await commits()).length, branches: await branches() };
    const dryRunPromotion = (name: string) => ({
      apiVersion: PROMOTIONS_API_VERSION,
      kind: 'Promotion',
      metadata: { name, namespace: ns },
      spec: { product: 'shop', requestedBy: 'an-old-client', dryRun: true },
    });
    await writeFile(join(dir, 'dry-run-promotion.json'), JSON.stringify(dryRunPromotion('shop-old-form')));
    const refused = await kubectl(['create', '-f', join(dir, 'dry-run-promotion.json')]);
    t.not(refused.code, 0, 'the CRD refuses it at create');
    t.match(refused.output, /spec\.dryRun.*create a PromotionPreview/s, 'naming the field and the kind to use');
    // A hybrid cluster where a runtime of an earlier build applied the CRDs last: its Promotion CRD
    // has no such rule, so an old client's dry run gets in. This operator must still never run it.
    const older = promotionCrds().map((crd) => {
      const c = structuredClone(crd) as {
        metadata: { name: string };
        spec: { versions: Array<{ schema: { openAPIV3Schema: { properties: { spec: Record<string, unknown> } } } }> };
      };
      if (c.metadata.name.startsWith('promotions.'))
        delete c.spec.versions[0]!.schema.openAPIV3Schema.properties.spec['x-kubernetes-validations'];
      return c;
    });
    await apply('crds-without-the-rule', older);
    const created = await until('the older CRD takes a dryRun Promotion', 30_000, async () => {
      const r = await kubectl(['create', '-f', join(dir, 'dry-run-promotion.json')]);
      return r.code === 0 || /AlreadyExists/.test(r.output) ? true : undefined;
    });
    t.ok(created, 'created under the older CRD');
    const failed = await until('the operator refuses it', 60_000, async () => {
      const p = await get<Promotion>('promotions', 'shop-old-form');
      return p.status?.phase ? p : undefined;
    });
    t.equal(failed.status?.phase, 'Failed', 'failed at once');
    t.match(
      failed.status?.message,
      /spec\.dryRun is not supported.*PromotionPreview.*was not run/,
      'naming the kind to use',
    );
    t.same(failed.status?.steps ?? [], [], 'no step ran');
    t.equal((await commits()).length, before.commits, 'no commit on main');
    t.same(await branches(), before.branches, 'no branch pushed');
    await kubectl(['delete', 'promotion.' + PROMOTIONS_GROUP, 'shop-old-form', '-n', ns]);
    await apply('crds', promotionCrds());
  });

  t.test('a policy allowing only the template’s changes refuses a step when prod drifted', async (t) => {
    await outcome({ announce: 'pass', 'page-on-call': 'pass', 'smoke-tests': 'pass', notify: 'pass' });
    const patch = async (policy: string, spec: unknown) => {
      const r = await kubectl([
        'patch',
        'promotionpolicy.' + PROMOTIONS_GROUP,
        policy,
        '-n',
        ns,
        '--type',
        'merge',
        '-p',
        JSON.stringify({ spec }),
      ]);
      t.equal(r.code, 0, `policy ${policy}: ${r.output}`);
    };
    await patch('staging-notify', { action: 'commit' });
    await patch('prod-gate', { dryRun: { onlyTemplateChanges: true } });
    // Someone changes prod's api ConfigMap by hand, and Argo CD does not sync it back: no automated
    // sync for that Application here (with one, the staging step's commit moves main's head and
    // Argo CD syncs prod's api again, which would undo the drift before prod's step).
    const manual = await kubectl([
      'patch',
      'application.' + ARGO_GROUP,
      appName('prod', 'api'),
      '-n',
      ns,
      '--type',
      'json',
      '-p',
      JSON.stringify([{ op: 'remove', path: '/spec/syncPolicy/automated' }]),
    ]);
    t.equal(manual.code, 0, `prod's api is synced by hand only: ${manual.output}`);
    const drift = await kubectl([
      'patch',
      'configmap',
      'shop-api',
      '-n',
      'shop-prod',
      '--type',
      'merge',
      '-p',
      JSON.stringify({ data: { environment: 'hand-edited' } }),
    ]);
    t.equal(drift.code, 0, `prod drifted: ${drift.output}`);
    const before = await branches();
    const prodFile = await fileAt('shop/prod/release.yaml');
    const promoted = await cli('products', 'promote', tenant.tenantId, 'shop');
    t.equal(promoted.code, 0, `promotion asked: ${promoted.err}`);
    const name = /promotion \S+\/(\S+) of shop/.exec(promoted.out)?.[1];
    const p = await get<Promotion>('promotions', name!);
    const done = await finalPhase(p, ['Succeeded', 'Failed']);
    t.equal(done.status?.phase, 'Failed', 'the promotion fails');
    const [staging, prodStep] = done.status!.steps!;
    t.equal(staging?.phase, 'Succeeded', 'staging (no such policy) was promoted');
    t.equal(prodStep?.phase, 'Failed', 'prod’s step refused');
    t.match(
      prodStep?.message,
      /only the template's changes.*shop-prod-api: ConfigMap shop-prod\/shop-api data\.environment/,
      `naming the resource and the field: ${prodStep?.message}`,
    );
    t.equal(prodStep?.preAction?.phase, 'Succeeded', 'after its pre-action');
    t.ok(prodStep?.dryRun, 'the dry run is recorded in the step');
    t.equal(await fileAt('shop/prod/release.yaml'), prodFile, 'prod’s file untouched');
    t.equal((await promotionCommits(p, 'prod')).length, 0, 'no commit for prod');
    t.same(await branches(), before, 'no scratch branch left');
  });
}
