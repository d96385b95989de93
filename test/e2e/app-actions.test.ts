/**
 * The app-proxy's actions end to end on loopback: a tenant's request to the control plane
 * (`POST /v1/tenants/:id/runtime/api/<resource>/<ns>/<name>/<action>`) goes through the real
 * tunnel, request router and app-proxy, which acts against a real kube-apiserver as its own
 * service account with exactly the RBAC the runtime component grants it (runtime/component/agents.ts).
 *
 * Checked: each action changes the object as the Argo controller expects it; 404 for a missing
 * object, 409 for a state that refuses the action, 400 for a bad body, 501 for Workflow retry;
 * one audit row per action with actor, tenant, target and the runtime's status; another tenant's
 * key cannot act; the app-proxy's service account may do nothing else (no delete); an API server
 * outage answers 503 with Retry-After.
 *
 * The CRDs are the real ones (test/e2e/harness/argo.ts): Rollouts have a status subresource,
 * Applications and Workflows none; their schemas prune what they do not know, so a field the
 * actions wrote under a wrong name would not be read back.
 */
import t from 'tap';
import http from 'node:http';
import { once } from 'node:events';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  CoreV1Api,
  CustomObjectsApi,
  KubeConfig,
  PatchStrategy,
  RbacAuthorizationV1Api,
  setHeaderOptions,
} from '@kubernetes/client-node';
import { AGENTS, RUNTIME_NAMESPACE } from '../../runtime/component/agents.ts';
import { promotionCrds } from '../../runtime/component/promotion-crds.ts';
import { PROMOTIONS_API_VERSION, PROMOTIONS_GROUP, PROMOTIONS_VERSION } from '../../runtime/protocol/promotions.ts';
import { buildAppProxy } from '../../runtime/agents/app-proxy/app.ts';
import { argoObjects } from '../../runtime/agents/app-proxy/kube.ts';
import { loadLightTransport } from '../../runtime/kube/light-client.ts';
import { loadPublicKey } from '../../runtime/agents/app-proxy/request-token.ts';
import { staticRuntimeInfo } from '../../runtime/agents/app-proxy/runtime-info.ts';
import { createRouter } from '../../runtime/agents/request-router/router.ts';
import { createTestApi } from '../helpers/api.ts';
import { connectRuntime } from '../helpers/runtime.ts';
import {
  applicationStatus,
  argoApiServerUnavailable,
  rolloutStatus,
  sampleApplication,
  sampleRollout,
  sampleWorkflow,
  startArgoApiServer,
  workflowStatus,
} from './harness/argo.ts';
import { statusOf } from './harness/kube.ts';
import { until } from '../../sandbox/processes.ts';
import { kubectlRunner } from '../helpers/kubectl.ts';

t.setTimeout(5 * 60_000);

const unavailable = argoApiServerUnavailable();
if (unavailable) {
  if (process.env.CI === 'true') t.fail(`the Argo API server cannot start: ${unavailable}`);
  else t.plan(0, unavailable);
} else {
  await suite();
}

async function suite(): Promise<void> {
  const argo = await startArgoApiServer(t, { name: 'actions', crds: ['applications', 'rollouts', 'workflows'] });
  t.comment(`kube-apiserver with the Argo CRDs ready in ${argo.startSeconds.toFixed(1)} s`);
  const dir = await mkdtemp(join(tmpdir(), 'hrt-e2e-actions-'));
  const api = await createTestApi();
  t.teardown(async () => {
    await api.close();
    await rm(dir, { recursive: true, force: true });
  });

  const GROUP = 'argoproj.io';
  const VERSION = 'v1alpha1';
  const NS = 'team-a';
  const admin = argo.kc;
  const custom = argo.objects;
  const core = admin.makeApiClient(CoreV1Api);
  const merge = setHeaderOptions('Content-Type', PatchStrategy.MergePatch);

  // ---- the namespaces, and the app-proxy's service account with its RBAC ----

  for (const name of [NS, RUNTIME_NAMESPACE]) await core.createNamespace({ body: { metadata: { name } } });
  // The GitOps Operator's CRDs (runtime 1.8.0): products are promoted, promotions retried and
  // aborted. Applied as JSON (kubectl): client-node's typed serializer would drop the schema's
  // x-kubernetes-* keys, pruning every status.
  const crdFile = join(dir, 'promotion-crds.json');
  await writeFile(crdFile, JSON.stringify({ apiVersion: 'v1', kind: 'List', items: promotionCrds() }));
  const applied = await kubectlRunner(process.env.HRT_TOOLCHAIN_BIN!, argo.kubeconfigFile)(['apply', '-f', crdFile]);
  if (applied.code !== 0) throw new Error(`the promotion CRDs: ${applied.output}`);

  const appProxy = AGENTS.find((a) => a.name === 'app-proxy')!;
  const rbac = admin.makeApiClient(RbacAuthorizationV1Api);
  await core.createNamespacedServiceAccount({
    namespace: RUNTIME_NAMESPACE,
    body: { metadata: { name: 'app-proxy' } },
  });
  await rbac.createClusterRole({
    body: {
      metadata: { name: 'app-proxy' },
      rules: appProxy.clusterRules.map((r) => ({
        apiGroups: r.apiGroups as string[],
        resources: r.resources as string[],
        verbs: r.verbs as string[],
      })),
    },
  });
  await rbac.createClusterRoleBinding({
    body: {
      metadata: { name: 'app-proxy' },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'app-proxy' },
      subjects: [{ kind: 'ServiceAccount', name: 'app-proxy', namespace: RUNTIME_NAMESPACE }],
    },
  });
  const token = await core.createNamespacedServiceAccountToken({
    name: 'app-proxy',
    namespace: RUNTIME_NAMESPACE,
    body: { spec: { audiences: [], expirationSeconds: 3600 } },
  });
  const kubeconfigFile = join(dir, 'app-proxy.kubeconfig');
  await writeFile(
    kubeconfigFile,
    JSON.stringify({
      apiVersion: 'v1',
      kind: 'Config',
      clusters: [
        {
          name: 'vcluster',
          cluster: {
            server: argo.server,
            'certificate-authority-data': admin.getCurrentCluster()?.caData,
          },
        },
      ],
      users: [{ name: 'app-proxy', user: { token: token.status?.token } }],
      contexts: [{ name: 'app-proxy', context: { cluster: 'vcluster', user: 'app-proxy' } }],
      'current-context': 'app-proxy',
    }),
    { mode: 0o600 },
  );
  /** The app-proxy's credentials, for the checks of what its account may do. */
  const proxyKc = new KubeConfig();
  proxyKc.loadFromFile(kubeconfigFile);

  // ---- the control plane, two tenants, and tenant a's runtime: tunnel client, router, app-proxy ----

  const base = await api.app.listen({ port: 0, host: '127.0.0.1' });
  const a = await api.signup();
  const b = await api.signup();
  const proxy = await buildAppProxy({
    tenantId: a.tenantId,
    publicKey: loadPublicKey(api.services.signer.publicKeyPem),
    runtimeInfo: staticRuntimeInfo({ runtimeVersion: '1.4.0', components: {} }),
    objects: argoObjects(loadLightTransport(kubeconfigFile), { timeoutMs: 3000 }),
  });
  const proxyUrl = await proxy.listen({ port: 0, host: '127.0.0.1' });
  const router = createRouter({ appProxyUrl: proxyUrl, eventSourceUrl: 'http://127.0.0.1:9' });
  const routerServer = http.createServer(router.handler).listen(0, '127.0.0.1');
  await once(routerServer, 'listening');
  const { client } = await connectRuntime(api, base, a.tenantId, routerServer, 'runtime a');
  t.teardown(async () => {
    await client.close();
    router.close();
    routerServer.close();
    await proxy.close();
  });

  type Obj = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

  interface Answer {
    status: number;
    retryAfter: string | null;
    body: Obj;
  }

  /** POST an action through the control plane as `key` (tenant a's own key unless given). */
  async function act(path: string, body?: unknown, key = a.apiKey, tenantId = a.tenantId): Promise<Answer> {
    const res = await fetch(`${base}/v1/tenants/${tenantId}/runtime/api/${path}`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${key}`,
        ...(body === undefined ? {} : { 'content-type': 'application/json' }),
      },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    return { status: res.status, retryAfter: res.headers.get('retry-after'), body: (await res.json()) as Obj };
  }

  /** Creates an object as its controller would leave it (status written through /status where the CRD has it). */
  async function create(plural: string, object: Obj, status?: Obj): Promise<void> {
    const name = object.metadata.name as string;
    await custom.createNamespacedCustomObject({
      group: GROUP,
      version: VERSION,
      namespace: NS,
      plural,
      body: { ...object, ...(status && plural !== 'rollouts' ? { status } : {}) },
    });
    if (status && plural === 'rollouts')
      await custom.patchNamespacedCustomObjectStatus(
        { group: GROUP, version: VERSION, namespace: NS, plural, name, body: { status } },
        merge,
      );
  }

  async function read(plural: string, name: string): Promise<Obj> {
    return (await custom.getNamespacedCustomObject({
      group: GROUP,
      version: VERSION,
      namespace: NS,
      plural,
      name,
    })) as Obj;
  }

  /** How many action requests were sent for tenant a (each must have exactly one audit row). */
  let actionsSent = 0;
  async function actA(path: string, body?: unknown): Promise<Answer> {
    actionsSent++;
    return act(path, body);
  }

  t.test('Application: hard refresh, then sync as Argo CD writes it; a second sync is refused', async (t) => {
    const application = sampleApplication(NS, 'guestbook') as Obj;
    await create('applications', application);

    const refreshed = await actA(`applications/${NS}/guestbook/refresh`);
    t.equal(refreshed.status, 200, 'refresh answers 200');
    t.equal(
      refreshed.body.metadata.annotations['argocd.argoproj.io/refresh'],
      'hard',
      'the answer is the object with the hard-refresh annotation',
    );
    t.equal(
      (await read('applications', 'guestbook')).metadata.annotations['argocd.argoproj.io/refresh'],
      'hard',
      'the annotation Argo CD acts on is stored',
    );

    const synced = await actA(`applications/${NS}/guestbook/sync`);
    t.equal(synced.status, 200, 'sync answers 200');
    const op = (await read('applications', 'guestbook')).operation;
    t.same(
      op.sync,
      {
        source: application.spec.source,
        revision: application.spec.source.targetRevision,
        syncOptions: ['CreateNamespace=true'],
      },
      "the stored operation syncs the source's targetRevision with the Application's sync options and no prune",
    );
    t.match(op.initiatedBy.username, /\S/, 'initiatedBy names the caller');
    t.same(synced.body.operation, op, 'the answer is the object after the change');

    const again = await actA(`applications/${NS}/guestbook/sync`, { prune: true });
    t.equal(again.status, 409, 'a sync while an operation is set is refused with 409');
    t.equal(again.body.error.reason, 'OperationInProgress', 'the reason says an operation is in progress');

    // The controller finishes the operation: it removes `operation` and writes operationState.
    await custom.patchNamespacedCustomObject(
      {
        group: GROUP,
        version: VERSION,
        namespace: NS,
        plural: 'applications',
        name: 'guestbook',
        body: { operation: null, status: { operationState: applicationStatus({ phase: 'Succeeded' }).operationState } },
      },
      merge,
    );
    const pruned = await actA(`applications/${NS}/guestbook/sync`, { revision: 'v2.0.1', prune: true });
    t.equal(pruned.status, 200, 'a sync after the operation finished is accepted');
    t.match(pruned.body.operation.sync, { revision: 'v2.0.1', prune: true }, 'with the revision and prune asked for');
    t.notOk(pruned.body.status?.operationState, "the previous operation's state is cleared, as Argo CD's API does");

    const bad = await actA(`applications/${NS}/guestbook/sync`, { prune: 'yes' });
    t.equal(bad.status, 400, 'a bad body is 400');
    t.equal(bad.body.error.field, 'prune', 'naming the field');

    const missing = await actA(`applications/${NS}/nope/sync`);
    t.equal(missing.status, 404, 'sync of an Application that does not exist is 404');
    t.equal(missing.body.error.code, 'OBJECT_NOT_FOUND', 'with the code OBJECT_NOT_FOUND');
    const missingRefresh = await actA(`applications/${NS}/nope/refresh`);
    t.equal(missingRefresh.status, 404, 'refresh of an Application that does not exist is 404');
  });

  t.test('Rollout: promote, abort and retry patch what the kubectl plugin patches', async (t) => {
    // Paused at the canary's pause step (the second of four), by the controller and by a user.
    const rollout = sampleRollout(NS, 'web') as Obj;
    await create(
      'rollouts',
      { ...rollout, spec: { ...rollout.spec, paused: true } },
      rolloutStatus({ phase: 'Paused', currentStepIndex: 1, stableRS: '6d8f7c9b5', canaryRS: '7f9c8d6a4' }),
    );
    const promoted = await actA(`rollouts/${NS}/web/promote`);
    t.equal(promoted.status, 200, 'promote answers 200');
    const ro = await read('rollouts', 'web');
    t.equal(ro.spec.paused, false, 'spec.paused is false');
    t.notOk(ro.status.pauseConditions, 'the pause conditions are cleared (through the status subresource)');
    t.equal(ro.status.currentStepIndex, 1, 'the step index is left to the controller');

    // The controller goes through the remaining steps: past the last one, nothing is paused.
    await custom.patchNamespacedCustomObjectStatus(
      {
        group: GROUP,
        version: VERSION,
        namespace: NS,
        plural: 'rollouts',
        name: 'web',
        body: { status: { currentStepIndex: 4 } },
      },
      merge,
    );
    const notPaused = await actA(`rollouts/${NS}/web/promote`);
    t.equal(notPaused.status, 409, 'promote of a Rollout that is not paused and has no step left is 409');
    t.equal(notPaused.body.error.reason, 'NotPaused', 'with the reason NotPaused');

    const full = await actA(`rollouts/${NS}/web/promote`, { full: true });
    t.equal(full.status, 200, 'a full promotion is accepted while the desired version is not stable');
    t.equal((await read('rollouts', 'web')).status.promoteFull, true, 'status.promoteFull is set');

    const aborted = await actA(`rollouts/${NS}/web/abort`);
    t.equal(aborted.status, 200, 'abort answers 200');
    t.equal((await read('rollouts', 'web')).status.abort, true, 'status.abort is true');
    const abortAgain = await actA(`rollouts/${NS}/web/abort`);
    t.equal(abortAgain.status, 409, 'aborting an aborted Rollout is 409');

    const retried = await actA(`rollouts/${NS}/web/retry`);
    t.equal(retried.status, 200, 'retry answers 200');
    t.equal((await read('rollouts', 'web')).status.abort, false, 'status.abort is false again');
    const retryAgain = await actA(`rollouts/${NS}/web/retry`);
    t.equal(retryAgain.status, 409, 'retrying a Rollout that is not aborted is 409');
    t.equal(retryAgain.body.error.reason, 'NotAborted', 'with the reason NotAborted');

    const missing = await actA(`rollouts/${NS}/nope/promote`);
    t.equal(missing.status, 404, 'promote of a Rollout that does not exist is 404');
  });

  t.test('Workflow: terminate and stop set spec.shutdown; finished ones and retry are refused', async (t) => {
    await create('workflows', sampleWorkflow(NS, 'build'), workflowStatus({ phase: 'Running' }));
    await create('workflows', sampleWorkflow(NS, 'deploy'), workflowStatus({ phase: 'Running' }));
    await create('workflows', sampleWorkflow(NS, 'done'), workflowStatus({ phase: 'Succeeded' }));
    await create('workflows', sampleWorkflow(NS, 'broken'), workflowStatus({ phase: 'Failed', message: 'exit 1' }));

    const terminated = await actA(`workflows/${NS}/build/terminate`);
    t.equal(terminated.status, 200, 'terminate answers 200');
    t.equal((await read('workflows', 'build')).spec.shutdown, 'Terminate', 'spec.shutdown is Terminate');
    const stopped = await actA(`workflows/${NS}/deploy/stop`);
    t.equal(stopped.status, 200, 'stop answers 200');
    t.equal(stopped.body.spec.shutdown, 'Stop', 'spec.shutdown is Stop in the answer');

    const finished = await actA(`workflows/${NS}/done/terminate`);
    t.equal(finished.status, 409, 'terminating a finished Workflow is 409');
    t.equal(finished.body.error.reason, 'Finished', 'with the reason Finished');
    t.notOk((await read('workflows', 'done')).spec.shutdown, 'and leaves it untouched');

    const retryFailed = await actA(`workflows/${NS}/broken/retry`);
    t.equal(retryFailed.status, 501, 'retrying a failed Workflow is 501 NOT_IMPLEMENTED, said clearly');
    t.match(retryFailed.body.error.message, /argo retry/, 'the message says what to use instead');
    const retryRunning = await actA(`workflows/${NS}/deploy/retry`);
    t.equal(retryRunning.status, 409, 'retrying a Workflow that has not failed is 409');

    const missing = await actA(`workflows/${NS}/nope/stop`);
    t.equal(missing.status, 404, 'stop of a Workflow that does not exist is 404');
  });

  t.test(
    'Product promote creates a Promotion for the operator; Promotion retry and abort as their state allows',
    async (t) => {
      const promo = (plural: string) => ({
        group: PROMOTIONS_GROUP,
        version: PROMOTIONS_VERSION,
        namespace: NS,
        plural,
      });
      await until('the promotion CRDs served', 30_000, async () =>
        custom.listNamespacedCustomObject(promo('promotions')).then(
          () => true,
          () => false,
        ),
      );
      await custom.createNamespacedCustomObject({
        ...promo('products'),
        body: {
          apiVersion: PROMOTIONS_API_VERSION,
          kind: 'Product',
          metadata: { name: 'shop', namespace: NS },
          spec: {
            repository: 'https://git.example.test/config.git',
            branch: 'main',
            template: 'release',
            flow: 'dev-to-prod',
            environments: [{ environment: 'dev', path: 'shop/dev', applications: ['shop-dev'] }],
          },
        },
      });
      const promoted = await actA(`products/${NS}/shop/promote`, { release: '2.0.0' });
      t.equal(promoted.status, 201, 'promote answers 201 with the Promotion it created');
      t.match(
        promoted.body,
        {
          kind: 'Promotion',
          metadata: { name: /^shop-/, labels: { [`${PROMOTIONS_GROUP}/product`]: 'shop' } },
          spec: { product: 'shop', release: '2.0.0', requestedBy: /\S/ },
        },
        'a Promotion of the release asked for, naming who asked',
      );
      const name = promoted.body.metadata.name as string;
      const stored = (await custom.getNamespacedCustomObject({ ...promo('promotions'), name })) as Obj;
      t.same(stored.spec, promoted.body.spec, 'stored as answered');
      const second = await actA(`products/${NS}/shop/promote`);
      t.equal(second.status, 201, 'a second promote is a promotion of its own (the operator serializes them)');
      t.notOk('release' in second.body.spec, 'without a release: the operator takes the trigger environment’s');
      t.not(second.body.metadata.name, name, 'under another name');

      const bad = await actA(`products/${NS}/shop/promote`, { release: 'one two' });
      t.equal(bad.status, 400, 'a release with a space is 400');
      t.equal(bad.body.error.field, 'release', 'naming the field');
      const missing = await actA(`products/${NS}/nope/promote`);
      t.equal(missing.status, 404, 'promote of a product that does not exist is 404');

      const aborted = await actA(`promotions/${NS}/${name}/abort`);
      t.equal(aborted.status, 200, 'abort of a promotion not yet finished answers 200');
      t.equal(aborted.body.spec.abort, true, 'spec.abort is set');
      const abortAgain = await actA(`promotions/${NS}/${name}/abort`);
      t.equal(abortAgain.status, 409, 'a second abort is 409');
      t.equal(abortAgain.body.error.reason, 'AlreadyAborting', 'with the reason AlreadyAborting');

      // The operator has failed the second one at a step (through the status subresource, as it writes).
      const other = second.body.metadata.name as string;
      const retryRunning = await actA(`promotions/${NS}/${other}/retry`);
      t.equal(retryRunning.status, 409, 'retry of a promotion that has not failed is 409');
      t.equal(retryRunning.body.error.reason, 'NotFailed', 'with the reason NotFailed');
      await custom.patchNamespacedCustomObjectStatus(
        {
          ...promo('promotions'),
          name: other,
          body: { status: { phase: 'Failed', message: 'prod: the pre-action failed', observedRetry: 0 } },
        },
        merge,
      );
      const retried = await actA(`promotions/${NS}/${other}/retry`);
      t.equal(retried.status, 200, 'retry of a Failed promotion answers 200', { error: retried.body.error });
      t.equal(retried.body.spec.retry, 1, 'spec.retry is raised by one');
      const retryAgain = await actA(`promotions/${NS}/${other}/retry`);
      t.equal(retryAgain.status, 409, 'a retry the operator has not taken yet is not asked twice');
      t.equal(retryAgain.body.error.reason, 'RetryPending', 'with the reason RetryPending');
      const abortFailed = await actA(`promotions/${NS}/${other}/abort`);
      t.equal(abortFailed.status, 409, 'a finished promotion cannot be aborted');
      t.equal(abortFailed.body.error.reason, 'Finished', 'with the reason Finished');

      // A dry run is a PromotionPreview, a kind of its own; its abort is its own action.
      const previewed = await actA(`products/${NS}/shop/dry-run`, { release: '2.0.0' });
      t.equal(previewed.status, 201, 'dry-run answers 201 with the PromotionPreview it created');
      t.match(
        previewed.body,
        { kind: 'PromotionPreview', spec: { product: 'shop', release: '2.0.0', requestedBy: /\S/ } },
        'a PromotionPreview of the release asked for, naming who asked',
      );
      t.notOk('dryRun' in previewed.body.spec, 'no Promotion with dryRun');
      const preview = previewed.body.metadata.name as string;
      const previewAborted = await actA(`promotionpreviews/${NS}/${preview}/abort`);
      t.equal(previewAborted.status, 200, 'abort of a preview answers 200');
      t.equal(previewAborted.body.spec.abort, true, 'its spec.abort is set');
      const previewAbortAgain = await actA(`promotionpreviews/${NS}/${preview}/abort`);
      t.equal(previewAbortAgain.body.error?.reason, 'AlreadyAborting', 'a second abort is refused');
      // A client that still asks for a dry run the former way is refused by the CRD, naming the kind.
      const oldForm = await custom
        .createNamespacedCustomObject({
          ...promo('promotions'),
          body: {
            apiVersion: PROMOTIONS_API_VERSION,
            kind: 'Promotion',
            metadata: { name: 'shop-old-dry-run', namespace: NS },
            spec: { product: 'shop', dryRun: true },
          },
        })
        .then(
          () => 'created',
          (err: { code?: number; body?: unknown }) => `${err.code ?? '?'} ${String(err.body)}`,
        );
      t.match(
        oldForm,
        /^422 .*spec\.dryRun.*create a PromotionPreview/s,
        'a Promotion with spec.dryRun is refused at create (422)',
      );
    },
  );

  t.test("another tenant's key cannot act on the runtime, and leaves no audit row", async (t) => {
    await create('workflows', sampleWorkflow(NS, 'other'), workflowStatus({ phase: 'Running' }));
    const cross = await act(`workflows/${NS}/other/terminate`, undefined, b.apiKey, a.tenantId);
    t.equal(cross.status, 404, "tenant b's key gets 404 for tenant a's runtime");
    t.equal(cross.body.error.code, 'TENANT_NOT_FOUND', 'as for a tenant that does not exist');
    t.notOk((await read('workflows', 'other')).spec.shutdown, 'the Workflow is untouched');
  });

  t.test('one audit row per action with actor, tenant, target and the runtime status', async (t) => {
    const res = await api.request('GET', `/v1/audit?targetType=tenant&targetId=${a.tenantId}&limit=500`, {
      key: api.operatorKey,
    });
    const rows = res.json<{ items: Obj[] }>().items.filter((r) => String(r.action).startsWith('runtime.'));
    t.equal(rows.length, actionsSent, `exactly one row per action request (${actionsSent})`);
    const sync = rows.filter((r) => r.action === 'runtime.application.sync');
    t.same(
      sync.map((r) => r.after.status).sort(),
      [200, 200, 400, 404, 409],
      'each sync row records the status the runtime answered',
    );
    const first = rows.find((r) => r.action === 'runtime.workflow.terminate' && r.after.name === 'build')!;
    t.match(
      first,
      {
        actorRole: 'tenant',
        targetType: 'tenant',
        targetId: a.tenantId,
        after: { kind: 'Workflow', namespace: NS, name: 'build', status: 200 },
      },
      'the row names the actor role, the tenant and the target',
    );
    const synced = await read('applications', 'guestbook');
    t.equal(
      synced.operation.initiatedBy.username,
      rows.find((r) => r.action === 'runtime.application.sync' && r.after.status === 200)!.actor,
      "the sync's initiatedBy is the audited actor's key id",
    );
    t.notOk(
      rows.some((r) => r.after.name === 'other'),
      "the other tenant's refused request left no row on tenant a",
    );
  });

  t.test("the app-proxy's service account may not do anything the actions do not need", async (t) => {
    const asProxy = proxyKc.makeApiClient(CustomObjectsApi);
    for (const [what, call] of [
      [
        'delete a Workflow',
        () =>
          asProxy.deleteNamespacedCustomObject({
            group: GROUP,
            version: VERSION,
            namespace: NS,
            plural: 'workflows',
            name: 'build',
          }),
      ],
      [
        'list Applications',
        () =>
          asProxy.listNamespacedCustomObject({ group: GROUP, version: VERSION, namespace: NS, plural: 'applications' }),
      ],
      ['read a Secret', () => proxyKc.makeApiClient(CoreV1Api).readNamespacedSecret({ name: 'x', namespace: NS })],
      [
        'delete a PromotionPreview',
        () =>
          asProxy.deleteNamespacedCustomObject({
            group: PROMOTIONS_GROUP,
            version: PROMOTIONS_VERSION,
            namespace: NS,
            plural: 'promotionpreviews',
            name: 'x',
          }),
      ],
      [
        'delete a Promotion',
        () =>
          asProxy.deleteNamespacedCustomObject({
            group: PROMOTIONS_GROUP,
            version: PROMOTIONS_VERSION,
            namespace: NS,
            plural: 'promotions',
            name: 'x',
          }),
      ],
      [
        'change a Product',
        () =>
          asProxy.patchNamespacedCustomObject(
            {
              group: PROMOTIONS_GROUP,
              version: PROMOTIONS_VERSION,
              namespace: NS,
              plural: 'products',
              name: 'shop',
              body: { spec: { branch: 'evil' } },
            },
            merge,
          ),
      ],
    ] as const) {
      const status = await call().then(
        () => 200,
        (err: unknown) => statusOf(err),
      );
      t.equal(status, 403, `it may not ${what}`);
    }
  });

  t.test('an API server outage is 503 with Retry-After, and audited', async (t) => {
    await argo.stop();
    const res = await actA(`rollouts/${NS}/web/abort`);
    t.equal(res.status, 503, 'the action answers 503');
    t.equal(res.body.error.code, 'KUBE_API_UNAVAILABLE', 'with the code KUBE_API_UNAVAILABLE');
    t.ok(Number(res.retryAfter) > 0, 'with Retry-After');
    const rows = (
      await api.request('GET', `/v1/audit?targetType=tenant&targetId=${a.tenantId}&limit=1`, { key: api.operatorKey })
    ).json<{ items: Obj[] }>();
    t.match(
      rows.items[0],
      { action: 'runtime.rollout.abort', after: { status: 503 } },
      'the failed attempt is audited',
    );
  });
}
