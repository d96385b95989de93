/**
 * The app-proxy's action decisions: which requests the control plane audits as actions, what each
 * action writes for a given object state, and which states refuse it. The writes against a real
 * API server are in test/e2e/app-actions.test.ts.
 */
import t from 'tap';
import { runtimeActionOf } from '../../runtime/protocol/actions.ts';
import {
  abortPatch,
  ActionRefused,
  InvalidInput,
  promotePatches,
  refuseSync,
  refuseWorkflowRetry,
  retryRolloutPatch,
  runAction,
  NotImplemented,
  promotionAbortPatch,
  promotionRequest,
  promotionRetryPatch,
  shutdownPatch,
  syncOperation,
} from '../../runtime/agents/app-proxy/actions.ts';
import { type ArgoObjects, groupOf, KubeError } from '../../runtime/agents/app-proxy/kube.ts';
import type { ActionResource } from '../../runtime/protocol/actions.ts';

const meta = { namespace: 'ns', name: 'x', resourceVersion: '7' };

/** The `reason` of the ActionRefused that `fn` throws (undefined when it does not refuse). */
function reasonOf(fn: () => unknown): string | undefined {
  try {
    fn();
    return undefined;
  } catch (err) {
    return err instanceof ActionRefused ? err.reason : `not a refusal: ${String(err)}`;
  }
}

/** The field named by the InvalidInput `p` rejects with. */
async function fieldOf(p: Promise<unknown>): Promise<string | undefined> {
  try {
    await p;
    return undefined;
  } catch (err) {
    return err instanceof InvalidInput ? err.field : `not invalid input: ${String(err)}`;
  }
}

void t.test('the control plane recognises every spelling of an action path, and nothing else', async (t) => {
  t.match(runtimeActionOf('POST', '/api/rollouts/team-a/web/promote'), {
    kind: 'Rollout',
    namespace: 'team-a',
    name: 'web',
    action: 'promote',
    auditAction: 'runtime.rollout.promote',
  });
  t.match(
    runtimeActionOf('post', '/api/%61pplications/argocd/gu%65stbook/sync?x=1'),
    { kind: 'Application', namespace: 'argocd', name: 'guestbook', auditAction: 'runtime.application.sync' },
    'percent-encoded segments are decoded as the router decodes them; the query is ignored',
  );
  t.equal(runtimeActionOf('GET', '/api/rollouts/a/b/promote'), undefined, 'only POST is an action');
  t.equal(runtimeActionOf('POST', '/api/runtime'), undefined, 'other app-proxy routes are not actions');
  t.equal(runtimeActionOf('POST', '/api/rollouts/a/b/delete'), undefined, 'an unknown action is not one');
  t.equal(runtimeActionOf('POST', '/api/constructor/a/b/sync'), undefined, 'no prototype keys');
  t.equal(runtimeActionOf('POST', '/api/rollouts/a/b/promote/x'), undefined, 'exact segment count');
  t.equal(runtimeActionOf('POST', '/api/rollouts/%E0%A4%A/b/promote'), undefined, 'undecodable segment');
});

void t.test(
  'Rollout promote writes what kubectl-argo-rollouts writes, and refuses with nothing to promote',
  async (t) => {
    t.same(
      promotePatches({ metadata: meta, spec: { paused: true }, status: {} }, false),
      {
        spec: { spec: { paused: false } },
        unified: { spec: { paused: false }, status: { pauseConditions: null } },
      },
      'spec.paused: unpause the spec',
    );
    t.same(
      promotePatches({ metadata: meta, spec: {}, status: { pauseConditions: [{ reason: 'CanaryPauseStep' }] } }, false)
        .status,
      { status: { pauseConditions: null } },
      'a pause condition: cleared through the status',
    );
    const canary = { strategy: { canary: { steps: [{ setWeight: 20 }, { analysis: {} }, { setWeight: 100 }] } } };
    t.same(
      promotePatches({ metadata: meta, spec: canary, status: { currentStepIndex: 1 } }, false).status,
      { status: { pauseConditions: null, currentStepIndex: 2 } },
      'not paused mid-canary (an analysis running): on to the next step',
    );
    t.equal(
      reasonOf(() => promotePatches({ metadata: meta, spec: canary, status: { currentStepIndex: 3 } }, false)),
      'NotPaused',
      'a canary at its last step, not paused, has nothing to promote',
    );
    t.equal(
      reasonOf(() => promotePatches({ metadata: meta, spec: { strategy: { blueGreen: {} } }, status: {} }, false)),
      'NotPaused',
      'a blue-green Rollout that is not paused has nothing to promote',
    );
    t.same(
      promotePatches({ metadata: meta, spec: {}, status: { currentPodHash: 'b', stableRS: 'a' } }, true).status,
      { status: { promoteFull: true } },
      'full: status.promoteFull',
    );
    t.equal(
      reasonOf(() =>
        promotePatches({ metadata: meta, spec: {}, status: { currentPodHash: 'a', stableRS: 'a' } }, true),
      ),
      'AlreadyPromoted',
      'full promotion of a Rollout whose desired version is already stable is refused',
    );
  },
);

void t.test('Rollout abort and retry toggle status.abort and refuse the states where it changes nothing', async (t) => {
  t.same(
    abortPatch({ metadata: meta, status: { currentPodHash: 'b', stableRS: 'a' } }),
    { status: { abort: true } },
    'abort during an update sets status.abort',
  );
  t.equal(
    reasonOf(() => abortPatch({ metadata: meta, status: { abort: true } })),
    'AlreadyAborted',
    'an aborted Rollout cannot be aborted again',
  );
  t.equal(
    reasonOf(() => abortPatch({ metadata: meta, status: { currentPodHash: 'a', stableRS: 'a' } })),
    'NothingInProgress',
    'a Rollout running its stable version has no update to abort',
  );
  t.same(
    retryRolloutPatch({ metadata: meta, status: { abort: true } }),
    { status: { abort: false } },
    'retry of an aborted Rollout clears status.abort',
  );
  t.equal(
    reasonOf(() => retryRolloutPatch({ metadata: meta, status: {} })),
    'NotAborted',
    'a Rollout that is not aborted cannot be retried',
  );
});

void t.test('Workflow terminate and stop set spec.shutdown; finished Workflows and retry are refused', async (t) => {
  t.same(
    shutdownPatch({ metadata: meta, status: { phase: 'Running' } }, 'Terminate'),
    { spec: { shutdown: 'Terminate' } },
    'terminate: spec.shutdown Terminate',
  );
  t.same(
    shutdownPatch({ metadata: meta, status: {} }, 'Stop'),
    { spec: { shutdown: 'Stop' } },
    'stop: spec.shutdown Stop',
  );
  for (const phase of ['Succeeded', 'Failed', 'Error'])
    t.equal(
      reasonOf(() => shutdownPatch({ metadata: meta, status: { phase } }, 'Stop')),
      'Finished',
      `a ${phase} Workflow cannot be stopped`,
    );
  t.equal(
    reasonOf(() => refuseWorkflowRetry({ metadata: meta, status: { phase: 'Running' } })),
    'NotFailed',
    'a running Workflow cannot be retried',
  );
  t.throws(
    () => refuseWorkflowRetry({ metadata: meta, status: { phase: 'Failed' } }),
    NotImplemented,
    'retrying a failed Workflow is answered 501, not half done',
  );
});

void t.test("Application sync builds Argo CD's operation; an operation in progress refuses it", async (t) => {
  const app = {
    metadata: meta,
    spec: {
      source: { repoURL: 'https://git.example/r', path: 'p', targetRevision: 'main' },
      syncPolicy: { syncOptions: ['CreateNamespace=true'], retry: { limit: 2 } },
    },
  };
  t.same(
    syncOperation(app, {}, 'key-1'),
    {
      sync: { source: app.spec.source, revision: 'main', syncOptions: ['CreateNamespace=true'] },
      initiatedBy: { username: 'key-1' },
      retry: { limit: 2 },
    },
    "by default: the source's targetRevision, the Application's sync options and retry, no prune",
  );
  t.match(
    syncOperation(app, { revision: 'v2', prune: true }, 'k'),
    { sync: { revision: 'v2', prune: true } },
    'the revision and prune asked for',
  );
  const multi = {
    metadata: meta,
    spec: { sources: [{ repoURL: 'a', targetRevision: 'v1' }, { repoURL: 'b' }] },
  };
  t.match(
    syncOperation(multi, {}, 'k'),
    { sync: { sources: multi.spec.sources, revisions: ['v1', ''] } },
    'several sources: each at its targetRevision',
  );
  t.equal(
    await fieldOf(Promise.resolve().then(() => syncOperation(multi, { revision: 'x' }, 'k'))),
    'revision',
    'a single revision for several sources is refused',
  );
  t.equal(
    reasonOf(() => refuseSync({ ...app, operation: { sync: {} } })),
    'OperationInProgress',
    'an Application with an operation set cannot be synced',
  );
  t.equal(
    reasonOf(() => refuseSync({ ...app, metadata: { ...meta, deletionTimestamp: '2026-01-01T00:00:00Z' } })),
    'Deleting',
    'an Application being deleted cannot be synced',
  );
  t.equal(
    reasonOf(() => refuseSync(app)),
    undefined,
    'an Application with no operation can be synced',
  );
});

void t.test('bad bodies and names are refused before the API server is asked', async (t) => {
  // A double that fails the test when called: validation must come first.
  const untouched: ArgoObjects = {
    get: () => Promise.reject(new Error('API server called')),
    mergePatch: () => Promise.reject(new Error('API server called')),
    create: () => Promise.reject(new Error('API server called')),
  };
  const run = (resource: ActionResource, action: string, body: unknown, name = 'x') =>
    runAction(untouched, { resource, namespace: 'ns', name, action, body, subject: 'k' });
  t.equal(await fieldOf(run('applications', 'sync', { prune: 'yes' })), 'prune', 'prune must be a boolean');
  t.equal(await fieldOf(run('applications', 'sync', { revision: 'a b' })), 'revision', 'a revision has no spaces');
  t.equal(await fieldOf(run('applications', 'sync', { force: true })), 'force', 'an unknown field is named');
  t.equal(await fieldOf(run('applications', 'refresh', { type: 'soft' })), 'type', 'refresh is hard or normal');
  t.equal(await fieldOf(run('applications', 'sync', [1])), 'body', 'the body is an object');
  t.equal(await fieldOf(run('rollouts', 'abort', { now: true })), 'now', 'abort takes no body');
  t.equal(await fieldOf(run('workflows', 'stop', {}, 'Bad_Name')), 'name', 'the name is a DNS subdomain');
  t.equal(await fieldOf(run('products', 'promote', { release: '1.0 rc' })), 'release', 'a release has no spaces');
  t.equal(await fieldOf(run('products', 'promote', { release: 3 })), 'release', 'a release is a string');
  t.equal(
    await fieldOf(run('products', 'promote', { environment: 'prod' })),
    'environment',
    'promote takes release only',
  );
  t.equal(await fieldOf(run('promotions', 'retry', { step: 'prod' })), 'step', 'retry takes no body');
  t.equal(await fieldOf(run('products', 'rollback', {})), 'environment', 'rollback needs the environment');
  t.equal(await fieldOf(run('products', 'rollback', { environment: 'Prod!' })), 'environment', 'a DNS label');
});

/** An ArgoObjects double: one stored object, recorded writes, scripted failures (the real API server is in the e2e tier). */
function recordingObjects(object: Record<string, unknown>, fail: (call: string) => KubeError | undefined) {
  const calls: string[] = [];
  const patches: unknown[] = [];
  const objects: ArgoObjects = {
    get: async (plural, _ns, name) => {
      calls.push(`get ${plural}/${name}`);
      return structuredClone(object);
    },
    mergePatch: async (plural, _ns, name, patch, subresource) => {
      const call = `patch ${plural}${subresource ? `/${subresource}` : ''}/${name}`;
      calls.push(call);
      const err = fail(call);
      if (err) throw err;
      patches.push(patch);
      return structuredClone(object);
    },
    create: async (plural, _ns, body) => {
      calls.push(`create ${plural}`);
      patches.push(body);
      return { ...structuredClone(body), metadata: { ...body.metadata, name: 'created-1' } };
    },
  };
  return { objects, calls, patches };
}

void t.test('sync writes with the read resourceVersion and reads again on a conflict, at most 5 times', async (t) => {
  const app = { metadata: meta, spec: { source: { repoURL: 'r', targetRevision: 'main' } } };
  let conflicts = 2;
  const flaky = recordingObjects(app, () =>
    conflicts-- > 0 ? new KubeError({ kind: 'conflict' }, 'the object has been modified') : undefined,
  );
  await runAction(flaky.objects, {
    resource: 'applications',
    namespace: 'ns',
    name: 'x',
    action: 'sync',
    body: {},
    subject: 'k',
  });
  t.same(
    flaky.calls,
    [
      'get applications/x',
      'patch applications/x',
      'get applications/x',
      'patch applications/x',
      'get applications/x',
      'patch applications/x',
    ],
    'each conflict is followed by a fresh read and a new write',
  );
  t.match(
    flaky.patches[0],
    { metadata: { resourceVersion: '7' }, status: { operationState: null } },
    'the write is guarded by the resourceVersion read and clears the previous operation state',
  );
  const stuck = recordingObjects(app, () => new KubeError({ kind: 'conflict' }, 'the object has been modified'));
  const err = await runAction(stuck.objects, {
    resource: 'applications',
    namespace: 'ns',
    name: 'x',
    action: 'sync',
    body: {},
    subject: 'k',
  }).catch((e: unknown) => e);
  t.ok(
    err instanceof KubeError && err.failure.kind === 'conflict',
    'a conflict that persists is answered as a conflict',
  );
  t.equal(stuck.calls.filter((c) => c.startsWith('patch')).length, 5, 'after 5 attempts');
});

void t.test(
  'a Rollout CRD without a status subresource gets the whole patch on the object, as the plugin does',
  async (t) => {
    const ro = { metadata: meta, spec: { paused: true }, status: { pauseConditions: [{ reason: 'CanaryPauseStep' }] } };
    const noStatus = recordingObjects(ro, (call) =>
      call === 'patch rollouts/status/x' ? new KubeError({ kind: 'not-found' }, 'no status subresource') : undefined,
    );
    await runAction(noStatus.objects, {
      resource: 'rollouts',
      namespace: 'ns',
      name: 'x',
      action: 'promote',
      body: undefined,
      subject: 'k',
    });
    t.same(
      noStatus.calls,
      ['get rollouts/x', 'patch rollouts/status/x', 'patch rollouts/x'],
      'status first, then the object',
    );
    t.same(
      noStatus.patches,
      [{ spec: { paused: false }, status: { pauseConditions: null } }],
      'the object gets the unified patch: unpause and clear the pause conditions',
    );
    const withStatus = recordingObjects(ro, () => undefined);
    await runAction(withStatus.objects, {
      resource: 'rollouts',
      namespace: 'ns',
      name: 'x',
      action: 'promote',
      body: undefined,
      subject: 'k',
    });
    t.same(
      withStatus.patches,
      [{ status: { pauseConditions: null } }, { spec: { paused: false } }],
      'with the subresource: the status patch, then the spec patch',
    );
  },
);

void t.test(
  'promotions: promote creates a Promotion for the operator; retry and abort only where the state allows',
  async (t) => {
    t.match(runtimeActionOf('POST', '/api/products/argocd/shop/promote'), {
      kind: 'Product',
      auditAction: 'runtime.product.promote',
    });
    t.match(runtimeActionOf('POST', '/api/promotions/argocd/shop-1/abort'), { auditAction: 'runtime.promotion.abort' });
    t.equal(runtimeActionOf('POST', '/api/promotions/argocd/shop-1/promote'), undefined, 'a promotion is not promoted');
    t.same(groupOf('promotions'), { group: 'promotions.hosted-runtimes.io', version: 'v1alpha1' });
    t.same(groupOf('rollouts'), { group: 'argoproj.io', version: 'v1alpha1' });

    const product = { metadata: { namespace: 'argocd', name: 'shop' }, spec: {} };
    t.match(
      promotionRequest(product, '1.4.2', 'key-7'),
      {
        kind: 'Promotion',
        metadata: {
          generateName: 'shop-',
          namespace: 'argocd',
          labels: { 'promotions.hosted-runtimes.io/product': 'shop' },
        },
        spec: { product: 'shop', release: '1.4.2', requestedBy: 'key-7' },
      },
      'a promotion of the release asked for, by the caller',
    );
    t.notOk(
      'release' in (promotionRequest(product, undefined, 'k').spec as object),
      'without a release the operator takes what the trigger environment holds',
    );
    t.equal(
      reasonOf(() => promotionRequest({ metadata: { ...product.metadata, deletionTimestamp: 'x' } }, undefined, 'k')),
      'Deleting',
    );

    const promotion = (status: Record<string, unknown>, spec: Record<string, unknown> = {}) => ({
      metadata: { namespace: 'argocd', name: 'shop-1', resourceVersion: '9' },
      spec: { product: 'shop', ...spec },
      status,
    });
    t.same(promotionRetryPatch(promotion({ phase: 'Failed' })), { spec: { retry: 1 } }, 'first retry');
    t.same(
      promotionRetryPatch(promotion({ phase: 'Failed', observedRetry: 2 }, { retry: 2 })),
      { spec: { retry: 3 } },
      'raised by one from the last taken',
    );
    t.equal(
      reasonOf(() => promotionRetryPatch(promotion({ phase: 'Running' }))),
      'NotFailed',
    );
    t.equal(
      reasonOf(() => promotionRetryPatch(promotion({ phase: 'Succeeded' }))),
      'NotFailed',
    );
    t.equal(
      reasonOf(() => promotionRetryPatch(promotion({ phase: 'Failed', observedRetry: 0 }, { retry: 1 }))),
      'RetryPending',
      'a retry not yet taken is not asked twice',
    );
    t.same(promotionAbortPatch(promotion({ phase: 'Running' })), { spec: { abort: true } });
    t.same(promotionAbortPatch(promotion({})), { spec: { abort: true } }, 'a promotion not yet started can be aborted');
    for (const phase of ['Succeeded', 'Failed', 'Aborted', 'Superseded'])
      t.equal(
        reasonOf(() => promotionAbortPatch(promotion({ phase }))),
        'Finished',
        `${phase}: nothing to abort`,
      );
    t.equal(
      reasonOf(() => promotionAbortPatch(promotion({ phase: 'Running' }, { abort: true }))),
      'AlreadyAborting',
    );

    const rec = recordingObjects(promotion({ phase: 'Failed' }), () => undefined);
    await runAction(rec.objects, {
      resource: 'promotions',
      namespace: 'argocd',
      name: 'shop-1',
      action: 'retry',
      body: undefined,
      subject: 'k',
    });
    t.same(rec.calls, ['get promotions/shop-1', 'patch promotions/shop-1']);
    t.same(
      rec.patches,
      [{ spec: { retry: 1 }, metadata: { resourceVersion: '9' } }],
      'guarded by the resourceVersion read',
    );

    const made = recordingObjects(product, () => undefined);
    const created = await runAction(made.objects, {
      resource: 'products',
      namespace: 'argocd',
      name: 'shop',
      action: 'promote',
      body: { release: '2.0.0' },
      subject: 'key-9',
    });
    t.same(made.calls, ['get products/shop', 'create promotions'], 'the product is read, then the promotion created');
    t.match(runtimeActionOf('POST', '/api/products/argocd/shop/rollback'), { auditAction: 'runtime.product.rollback' });
    await runAction(made.objects, {
      resource: 'products',
      namespace: 'argocd',
      name: 'shop',
      action: 'rollback',
      body: { environment: 'prod' },
      subject: 'key-9',
    });
    t.match(
      made.patches.at(-1),
      { kind: 'Promotion', spec: { product: 'shop', rollback: { environment: 'prod' }, requestedBy: 'key-9' } },
      'a rollback is a Promotion of that environment for the operator',
    );
    t.match(runtimeActionOf('POST', '/api/products/argocd/shop/dry-run'), { auditAction: 'runtime.product.dry-run' });
    await runAction(made.objects, {
      resource: 'products',
      namespace: 'argocd',
      name: 'shop',
      action: 'dry-run',
      body: { release: '2.0.0' },
      subject: 'key-9',
    });
    t.match(
      made.patches.at(-1),
      { kind: 'PromotionPreview', spec: { product: 'shop', release: '2.0.0', requestedBy: 'key-9' } },
      'a dry run is a PromotionPreview for the operator',
    );
    t.notOk(Object.hasOwn((made.patches.at(-1) as { spec: object }).spec, 'dryRun'), 'never a Promotion with dryRun');
    t.equal(made.calls.at(-1), 'create promotionpreviews', 'created as its own kind');
    t.match(runtimeActionOf('POST', '/api/promotionpreviews/argocd/shop-x/abort'), {
      kind: 'PromotionPreview',
      auditAction: 'runtime.promotionpreview.abort',
    });
    const previewing = recordingObjects(
      { ...promotion({ phase: 'Running' }), kind: 'PromotionPreview' },
      () => undefined,
    );
    await runAction(previewing.objects, {
      resource: 'promotionpreviews',
      namespace: 'argocd',
      name: 'shop-1',
      action: 'abort',
      body: undefined,
      subject: 'k',
    });
    t.same(
      previewing.calls,
      ['get promotionpreviews/shop-1', 'patch promotionpreviews/shop-1'],
      "a preview's abort: its spec.abort, guarded like a promotion's",
    );
    t.equal(
      reasonOf(() => promotionAbortPatch({ ...promotion({ phase: 'Succeeded' }), kind: 'PromotionPreview' })),
      'Finished',
      'a finished preview: nothing to abort',
    );
    t.equal(
      runtimeActionOf('POST', '/api/promotionpreviews/argocd/shop-x/retry'),
      undefined,
      'a preview is not retried',
    );
    await t.rejects(
      runAction(made.objects, {
        resource: 'products',
        namespace: 'argocd',
        name: 'shop',
        action: 'dry-run',
        body: { environment: 'prod' },
        subject: 'key-9',
      }),
      { name: 'InvalidInput', message: /'environment' is not a field of this action/ },
      'a field it does not take is refused, named',
    );
    t.equal(created.metadata?.name, 'created-1', 'the created Promotion is answered');
  },
);
