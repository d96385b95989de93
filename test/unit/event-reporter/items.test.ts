import t from 'tap';
import { MAX_OBJECT_BYTES } from '../../../runtime/protocol/events.ts';
import {
  byteSize,
  deleteItem,
  summarize,
  trimObject,
  upsertItem,
} from '../../../runtime/agents/event-reporter/items.ts';

const application = {
  apiVersion: 'argoproj.io/v1alpha1',
  kind: 'Application',
  metadata: {
    name: 'guestbook',
    namespace: 'argocd',
    uid: '0b6c5d0e-1',
    resourceVersion: '4711',
    generation: 3,
    managedFields: [{ manager: 'argocd-application-controller', fieldsV1: { 'f:status': {} } }],
    annotations: { 'kubectl.kubernetes.io/last-applied-configuration': '{"big":"json"}', team: 'web' },
  },
  spec: {
    destination: { server: 'https://kubernetes.default.svc', namespace: 'guestbook' },
    source: { repoURL: 'https://git.example/apps.git', path: 'guestbook', targetRevision: 'HEAD' },
  },
  status: {
    sync: { status: 'OutOfSync', revision: 'a1b2c3' },
    health: { status: 'Degraded' },
    operationState: { phase: 'Failed', message: 'one or more objects failed to apply' },
    conditions: [{ type: 'SyncError', message: 'boom', lastTransitionTime: '2026-01-01T00:00:00Z' }],
    resources: [{ kind: 'Deployment', name: 'guestbook-ui', status: 'OutOfSync' }],
  },
};

void t.test('Application summary: sync, health, revision, operation, conditions, destination and source', async (t) => {
  t.same(summarize('Application', application), {
    syncStatus: 'OutOfSync',
    healthStatus: 'Degraded',
    revision: 'a1b2c3',
    operationPhase: 'Failed',
    operationMessage: 'one or more objects failed to apply',
    conditions: [{ type: 'SyncError', message: 'boom' }],
    destination: { server: 'https://kubernetes.default.svc', namespace: 'guestbook' },
    source: { repoURL: 'https://git.example/apps.git', path: 'guestbook', targetRevision: 'HEAD' },
  });
  const operation = (status: Record<string, unknown>, op?: Record<string, unknown>) =>
    summarize('Application', { ...application, ...(op ? { operation: op } : {}), status });
  t.match(
    operation({
      sync: { status: 'Synced', revision: 'b2' },
      operationState: {
        phase: 'Succeeded',
        message: 'successfully synced (all tasks run)',
        startedAt: '2026-01-01T00:00:00Z',
        finishedAt: '2026-01-01T00:00:09Z',
        operation: { sync: { revision: 'HEAD' } },
        syncResult: { revision: 'b2' },
      },
    }),
    {
      operationPhase: 'Succeeded',
      operationRevision: 'b2',
      operationStartedAt: '2026-01-01T00:00:00Z',
      operationFinishedAt: '2026-01-01T00:00:09Z',
      operationMessage: 'successfully synced (all tasks run)',
    },
    'a finished sync: the revision it synced, when it ran, its message',
  );
  t.match(
    operation({ sync: { status: 'OutOfSync', revision: 'b2' } }, { sync: { revision: 'c3' } }),
    { operationRevision: 'c3' },
    'a sync asked for but without a result yet: the revision it was asked for',
  );
  t.same(
    summarize('Application', {
      spec: { sources: [{ repoURL: 'https://charts.example', chart: 'redis', targetRevision: '1.2.3' }] },
      status: { sync: { status: 'Synced', revisions: ['r1', 'r2'] } },
    }),
    {
      syncStatus: 'Synced',
      revision: 'r1',
      revisions: ['r1', 'r2'],
      source: { repoURL: 'https://charts.example', chart: 'redis', targetRevision: '1.2.3' },
    },
    'a multi-source Application: the first source and first revision, and every source’s revision',
  );
  t.same(
    summarize('Application', { metadata: { name: 'new' } }),
    {},
    'an Application without status: an empty summary',
  );
});

void t.test('Rollout and Workflow summaries', async (t) => {
  t.same(
    summarize('Rollout', {
      status: {
        phase: 'Paused',
        currentStepIndex: 2,
        stableRS: '6d4f',
        currentPodHash: '7c9b',
        message: 'CanaryPauseStep',
      },
    }),
    { phase: 'Paused', currentStep: 2, stableRevision: '6d4f', canaryRevision: '7c9b', message: 'CanaryPauseStep' },
  );
  t.same(
    summarize('Workflow', {
      status: {
        phase: 'Running',
        startedAt: '2026-01-01T00:00:00Z',
        finishedAt: null,
        progress: '1/3',
        message: '',
        nodes: { x: {} },
      },
    }),
    { phase: 'Running', startedAt: '2026-01-01T00:00:00Z', progress: '1/3' },
    'a Workflow still running has no finishedAt; empty strings are left out',
  );
});

void t.test('an upsert item: identity, summary, the object without managedFields or last-applied', async (t) => {
  const at = new Date('2026-02-03T04:05:06Z');
  const item = upsertItem('Application', application, at)!;
  t.match(item, {
    type: 'upsert',
    kind: 'Application',
    namespace: 'argocd',
    name: 'guestbook',
    uid: '0b6c5d0e-1',
    resourceVersion: '4711',
    generation: 3,
    observedAt: '2026-02-03T04:05:06.000Z',
    truncated: false,
  });
  const meta = item.object.metadata as Record<string, unknown>;
  t.notOk('managedFields' in meta, 'managedFields are removed');
  t.same(meta.annotations, { team: 'web' }, 'the last-applied annotation is removed, other annotations stay');
  t.ok((application.metadata as Record<string, unknown>).managedFields, 'the watched object itself is not changed');
  t.equal(upsertItem('Application', { metadata: { name: 'x' } }), undefined, 'an object without uid is not reported');
  t.same(deleteItem('Rollout', { namespace: 'n', name: 'r', uid: 'u' }, '99', at), {
    type: 'delete',
    kind: 'Rollout',
    namespace: 'n',
    name: 'r',
    uid: 'u',
    resourceVersion: '99',
    observedAt: '2026-02-03T04:05:06.000Z',
  });
});

void t.test('data and stringData are never reported, at any depth', async (t) => {
  const wf = {
    apiVersion: 'argoproj.io/v1alpha1',
    kind: 'Workflow',
    metadata: { name: 'w', namespace: 'n', uid: 'u', resourceVersion: '1' },
    data: { password: 'c2VjcmV0' },
    stringData: { token: 'plain-secret' },
    spec: {
      templates: [
        { name: 'mk', resource: { action: 'create', manifest: { kind: 'Secret', stringData: { a: 'plain-secret' } } } },
      ],
    },
  };
  const out = JSON.stringify(upsertItem('Workflow', wf));
  t.notOk(out.includes('plain-secret'), 'no stringData value anywhere in the item');
  t.notOk(out.includes('c2VjcmV0'), 'no data value anywhere in the item');
  t.notOk(/"(data|stringData)"/.test(out), 'no data or stringData key anywhere in the item');
});

void t.test('trimming: within 256 KiB, the big status lists go first, identity always stays', async (t) => {
  const resources = Array.from({ length: 5000 }, (_, i) => ({ kind: 'ConfigMap', name: `cm-${i}`, status: 'Synced' }));
  const big = { ...application, status: { ...application.status, resources } };
  t.ok(byteSize(big) > MAX_OBJECT_BYTES, `the test Application is larger than the bound (${byteSize(big)} bytes)`);
  const trimmed = trimObject(big);
  t.ok(trimmed.truncated, 'truncated is set');
  t.ok(
    byteSize(trimmed.object) <= MAX_OBJECT_BYTES,
    `the object is within the bound (${byteSize(trimmed.object)} bytes)`,
  );
  const status = trimmed.object.status as Record<string, unknown>;
  t.notOk('resources' in status, 'status.resources was dropped');
  t.same(status.health, { status: 'Degraded' }, 'the rest of the status is kept');

  const huge = { ...application, spec: { ...application.spec, blob: 'x'.repeat(400 * 1024) } };
  const minimal = trimObject(huge);
  t.ok(minimal.truncated, 'an object too big even without its status lists is truncated');
  t.ok(byteSize(minimal.object) <= MAX_OBJECT_BYTES, 'and within the bound');
  t.match(
    minimal.object,
    { apiVersion: 'argoproj.io/v1alpha1', kind: 'Application', metadata: { name: 'guestbook', uid: '0b6c5d0e-1' } },
    'its identity is kept',
  );
  t.notOk('spec' in minimal.object, 'the oversized spec is gone');
  const item = upsertItem('Application', huge)!;
  t.equal(
    (item.summary as { healthStatus?: string }).healthStatus,
    'Degraded',
    'the summary is taken from the whole object, before trimming',
  );

  const small = trimObject(application);
  t.notOk(small.truncated, 'an object within the bound is not truncated');
});

void t.test('Product and Promotion summaries: the release per environment, the phase and each step', async (t) => {
  t.same(
    summarize('Product', {
      metadata: { name: 'shop' },
      spec: { flow: 'dev-to-prod', repository: 'https://git.example/config.git' },
      status: {
        environments: [
          { environment: 'dev', release: '1.2.0', revision: 'c0ffee' },
          { environment: 'prod', release: '1.1.0', revision: 'c0ffee' },
        ],
      },
    }),
    {
      flow: 'dev-to-prod',
      environments: [
        { environment: 'dev', release: '1.2.0', revision: 'c0ffee' },
        { environment: 'prod', release: '1.1.0', revision: 'c0ffee' },
      ],
    },
    "the Product's releases as the operator found them",
  );
  const promotion = {
    metadata: { name: 'shop-1-2-0-ab12cd34' },
    spec: { product: 'shop', release: '1.2.0', requestedBy: 'trigger' },
    status: {
      phase: 'Failed',
      release: '1.2.0',
      message: 'prod: pre-action Workflow w failed',
      startedAt: '2026-11-29T01:00:00Z',
      finishedAt: '2026-11-29T01:05:00Z',
      steps: [
        { environment: 'staging', phase: 'Succeeded', commit: 'abc', finishedAt: '2026-11-29T01:03:00Z' },
        {
          environment: 'prod',
          phase: 'Failed',
          message: 'x'.repeat(5000),
          preAction: { workflow: 'w', phase: 'Failed', message: 'smoke tests failed', extra: 1 },
          postAction: { phase: 'Succeeded' },
        },
      ],
    },
  };
  const s = summarize('Promotion', promotion) as { phase: string; steps: Array<{ message?: string }> };
  t.match(
    s,
    {
      product: 'shop',
      release: '1.2.0',
      phase: 'Failed',
      requestedBy: 'trigger',
      steps: [
        { environment: 'staging', phase: 'Succeeded', commit: 'abc' },
        { environment: 'prod', phase: 'Failed' },
      ],
    },
    'its phase, release and steps',
  );
  t.equal(s.steps[1]!.message!.length, 1000, 'texts bounded');
  t.same(
    (s.steps[1] as { preAction?: unknown }).preAction,
    { workflow: 'w', phase: 'Failed', message: 'smoke tests failed' },
    "a step's gate: its Workflow and how it ended",
  );
  t.notOk('postAction' in s.steps[1]!, 'an action without its Workflow is left out');
  t.equal(
    (summarize('Promotion', { metadata: { name: 'p' }, spec: { product: 'shop' } }) as { phase: string }).phase,
    'Pending',
    'a Promotion the operator has not looked at yet is Pending',
  );
});
