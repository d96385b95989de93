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
  shutdownPatch,
  syncOperation,
} from '../../runtime/agents/app-proxy/actions.ts';
import type { ArgoObjects } from '../../runtime/agents/app-proxy/kube.ts';

const meta = { namespace: 'ns', name: 'x', resourceVersion: '7' };

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
    t.throws(
      () => promotePatches({ metadata: meta, spec: canary, status: { currentStepIndex: 3 } }, false),
      new ActionRefused('NotPaused', ''),
      'a canary past its last step has nothing to promote',
    );
    t.throws(
      () => promotePatches({ metadata: meta, spec: { strategy: { blueGreen: {} } }, status: {} }, false),
      { reason: 'NotPaused' },
      'a blue-green Rollout that is not paused has nothing to promote',
    );
    t.same(
      promotePatches({ metadata: meta, spec: {}, status: { currentPodHash: 'b', stableRS: 'a' } }, true).status,
      { status: { promoteFull: true } },
      'full: status.promoteFull',
    );
    t.throws(() => promotePatches({ metadata: meta, spec: {}, status: { currentPodHash: 'a', stableRS: 'a' } }, true), {
      reason: 'AlreadyPromoted',
    });
  },
);

void t.test('Rollout abort and retry toggle status.abort and refuse the states where it changes nothing', async (t) => {
  t.same(abortPatch({ metadata: meta, status: { currentPodHash: 'b', stableRS: 'a' } }), { status: { abort: true } });
  t.throws(() => abortPatch({ metadata: meta, status: { abort: true } }), { reason: 'AlreadyAborted' });
  t.throws(() => abortPatch({ metadata: meta, status: { currentPodHash: 'a', stableRS: 'a' } }), {
    reason: 'NothingInProgress',
  });
  t.same(retryRolloutPatch({ metadata: meta, status: { abort: true } }), { status: { abort: false } });
  t.throws(() => retryRolloutPatch({ metadata: meta, status: {} }), { reason: 'NotAborted' });
});

void t.test('Workflow terminate and stop set spec.shutdown; finished Workflows and retry are refused', async (t) => {
  t.same(shutdownPatch({ metadata: meta, status: { phase: 'Running' } }, 'Terminate'), {
    spec: { shutdown: 'Terminate' },
  });
  t.same(shutdownPatch({ metadata: meta, status: {} }, 'Stop'), { spec: { shutdown: 'Stop' } });
  for (const phase of ['Succeeded', 'Failed', 'Error'])
    t.throws(() => shutdownPatch({ metadata: meta, status: { phase } }, 'Stop'), { reason: 'Finished' }, phase);
  t.throws(() => refuseWorkflowRetry({ metadata: meta, status: { phase: 'Running' } }), { reason: 'NotFailed' });
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
  t.same(syncOperation(app, {}, 'key-1'), {
    sync: {
      source: app.spec.source,
      revision: 'main',
      syncOptions: ['CreateNamespace=true'],
    },
    initiatedBy: { username: 'key-1' },
    retry: { limit: 2 },
  });
  t.match(syncOperation(app, { revision: 'v2', prune: true }, 'k'), { sync: { revision: 'v2', prune: true } });
  const multi = {
    metadata: meta,
    spec: { sources: [{ repoURL: 'a', targetRevision: 'v1' }, { repoURL: 'b' }] },
  };
  t.match(syncOperation(multi, {}, 'k'), { sync: { sources: multi.spec.sources, revisions: ['v1', ''] } });
  t.throws(() => syncOperation(multi, { revision: 'x' }, 'k'), { field: 'revision' });
  t.throws(() => refuseSync({ ...app, operation: { sync: {} } }), { reason: 'OperationInProgress' });
  t.throws(() => refuseSync({ ...app, metadata: { ...meta, deletionTimestamp: '2026-01-01T00:00:00Z' } }), {
    reason: 'Deleting',
  });
});

void t.test('bad bodies and names are refused before the API server is asked', async (t) => {
  // A double that fails the test when called: validation must come first.
  const untouched: ArgoObjects = {
    get: () => Promise.reject(new Error('API server called')),
    mergePatch: () => Promise.reject(new Error('API server called')),
  };
  const run = (resource: 'applications' | 'rollouts' | 'workflows', action: string, body: unknown, name = 'x') =>
    runAction(untouched, { resource, namespace: 'ns', name, action, body, subject: 'k' });
  await t.rejects(run('applications', 'sync', { prune: 'yes' }), new InvalidInput('prune', ''));
  await t.rejects(run('applications', 'sync', { revision: 'a b' }), { field: 'revision' });
  await t.rejects(run('applications', 'sync', { force: true }), { field: 'force' }, 'unknown field');
  await t.rejects(run('applications', 'refresh', { type: 'soft' }), { field: 'type' });
  await t.rejects(run('applications', 'sync', [1]), { field: 'body' });
  await t.rejects(run('rollouts', 'abort', { now: true }), { field: 'now' }, 'abort takes no body');
  await t.rejects(run('workflows', 'stop', {}, 'Bad_Name'), { field: 'name' });
});
