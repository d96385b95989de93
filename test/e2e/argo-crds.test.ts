/**
 * The real Argo CRDs on a real kube-apiserver (harness/argo.ts): they install and become
 * Established; their schemas are in force (a stand-in accepting anything would not reject a
 * malformed Application); realistic Applications, Rollouts and Workflows are accepted, and their
 * status is written the way the Argo controllers write it — with the object for Applications and
 * Workflows (no status subresource), through `/status` for Rollouts; and a watch from a
 * resourceVersion sees an Application's health change, which is what the event reporter relies on.
 */
import t from 'tap';
import { readFileSync } from 'node:fs';
import { parse } from 'yaml';
import { CoreV1Api, Watch } from '@kubernetes/client-node';
import {
  ARGO_GROUP,
  ARGO_VERSION,
  applicationStatus,
  argoApiServerUnavailable,
  argoCrdsDir,
  rawGet,
  rolloutStatus,
  sampleApplication,
  sampleRollout,
  sampleWorkflow,
  startArgoApiServer,
  workflowStatus,
} from './harness/argo.ts';
import { statusOf } from './harness/kube.ts';

t.setTimeout(5 * 60_000);

const unavailable = argoApiServerUnavailable();
if (unavailable) {
  if (process.env.CI === 'true') t.fail(`the Argo API server cannot start: ${unavailable}`);
  else t.plan(0, unavailable);
} else {
  const argo = await startArgoApiServer(t);
  t.comment(`timing: API server with the Argo CRDs Established in ${argo.startSeconds.toFixed(1)} s`);
  for (const c of argo.crds) t.comment(`CRD ${c.name} from ${c.source}`);
  const ns = 'team-a';
  await argo.kc.makeApiClient(CoreV1Api).createNamespace({ body: { metadata: { name: ns } } });
  const objects = argo.objects;
  const ref = (plural: string, name: string) => ({
    group: ARGO_GROUP,
    version: ARGO_VERSION,
    namespace: ns,
    plural,
    name,
  });
  type Obj = {
    metadata: { resourceVersion: string; generation: number; uid: string };
    spec: Record<string, unknown>;
    status?: Record<string, unknown> & {
      sync?: { status: string; revision: string };
      health?: { status: string };
      operationState?: { phase: string };
    };
  };

  await t.test('the four real CRDs come from the Argo modules and are Established', async (t) => {
    t.same(
      argo.crds.map((c) => [c.kind, c.source.split('@')[0]]),
      [
        ['Application', 'github.com/argoproj/argo-cd/v3'],
        ['AppProject', 'github.com/argoproj/argo-cd/v3'],
        ['Rollout', 'github.com/argoproj/argo-rollouts'],
        ['Workflow', 'github.com/argoproj/argo-workflows/v3'],
      ],
      'Application and AppProject come from the argo-cd module, Rollout from argo-rollouts, Workflow from argo-workflows',
    );
    t.same(
      Object.fromEntries(argo.crds.map((c) => [c.kind, c.statusSubresource])),
      { Application: false, AppProject: false, Rollout: true, Workflow: false },
      'only the Rollout CRD has a status subresource (Argo CD and the workflow controller write status with the object)',
    );
    for (const c of argo.crds) {
      type Crd = { spec: { versions: { name: string; schema: unknown }[] } };
      const shipped = parse(readFileSync(`${argoCrdsDir()}/${c.name}.yaml`, 'utf8')) as Crd;
      const served = (await rawGet(
        argo.kc,
        `/apis/apiextensions.k8s.io/v1/customresourcedefinitions/${c.name}`,
      )) as Crd;
      t.same(
        served.spec.versions.find((v) => v.name === ARGO_VERSION)?.schema,
        shipped.spec.versions.find((v) => v.name === ARGO_VERSION)?.schema,
        `the API server serves ${c.name} with exactly the schema the module ships`,
      );
    }
  });

  await t.test(
    'the real Application schema rejects what a preserve-unknown-fields stand-in would accept',
    async (t) => {
      const bad = sampleApplication(ns, 'no-destination');
      delete (bad.spec as Record<string, unknown>).destination;
      const err = await objects.createNamespacedCustomObject({ ...ref('applications', ''), body: bad }).then(
        () => undefined,
        (e: unknown) => e,
      );
      t.equal(statusOf(err), 422, 'an Application without spec.destination is refused with 422');
      t.match(String((err as Error).message), /destination/, 'the refusal names spec.destination');
    },
  );

  await t.test('an Application is created and its status is written with the object', async (t) => {
    const created = (await objects.createNamespacedCustomObject({
      ...ref('applications', ''),
      body: sampleApplication(ns, 'guestbook'),
    })) as Obj;
    t.notOk(created.status, 'a new Application has no status until the controller writes one');
    const status = applicationStatus({ sync: 'Synced', health: 'Healthy', revision: 'a'.repeat(40) });
    const updated = (await objects.replaceNamespacedCustomObject({
      ...ref('applications', 'guestbook'),
      body: { ...created, status },
    })) as Obj;
    // Without a status subresource every write counts as a change of the object: generation is
    // no spec version for Applications (the reporter must not read it as one).
    t.equal(
      updated.metadata.generation,
      created.metadata.generation + 1,
      'a status write bumps the generation (no status subresource)',
    );
    const read = (await objects.getNamespacedCustomObject(ref('applications', 'guestbook'))) as Obj;
    t.equal(read.status?.sync?.status, 'Synced', 'sync status stored');
    t.equal(read.status?.health?.status, 'Healthy', 'health status stored');
    t.equal(read.status?.sync?.revision, 'a'.repeat(40), 'synced revision stored');
    t.equal(read.status?.operationState?.phase, 'Succeeded', 'operation phase stored');
    const viaStatus = await objects.getNamespacedCustomObjectStatus(ref('applications', 'guestbook')).then(
      () => undefined,
      (e: unknown) => e,
    );
    t.equal(statusOf(viaStatus), 404, 'an Application has no /status endpoint (404)');
  });

  await t.test('a Rollout is created and its status is written through /status only', async (t) => {
    const created = (await objects.createNamespacedCustomObject({
      ...ref('rollouts', ''),
      body: sampleRollout(ns, 'rollouts-demo'),
    })) as Obj;
    const paused = rolloutStatus({
      phase: 'Paused',
      currentStepIndex: 1,
      stableRS: '6d8f7c9b5',
      canaryRS: '7c6b5d4f8',
    });
    const afterStatus = (await objects.replaceNamespacedCustomObjectStatus({
      ...ref('rollouts', 'rollouts-demo'),
      body: { ...created, status: paused },
    })) as Obj;
    t.equal(afterStatus.status?.phase, 'Paused', 'phase written through /status');
    t.equal(afterStatus.status?.currentStepIndex, 1, 'current step written through /status');
    t.equal(afterStatus.status?.stableRS, '6d8f7c9b5', 'stable ReplicaSet hash written');
    t.equal(afterStatus.status?.currentPodHash, '7c6b5d4f8', 'canary pod hash written');
    // A write of the main resource carrying a different status changes the spec but not the status.
    const viaMain = (await objects.replaceNamespacedCustomObject({
      ...ref('rollouts', 'rollouts-demo'),
      body: {
        ...afterStatus,
        spec: { ...afterStatus.spec, replicas: 4 },
        status: rolloutStatus({ phase: 'Degraded' }),
      },
    })) as Obj;
    t.equal(viaMain.spec.replicas, 4, 'the spec change is applied');
    t.equal(viaMain.status?.phase, 'Paused', 'status in a main-resource write is ignored (status subresource)');
    t.equal(viaMain.metadata.generation, created.metadata.generation + 1, 'the spec change bumps the generation');
  });

  await t.test('a Workflow is created and its progress is written with the object', async (t) => {
    const created = (await objects.createNamespacedCustomObject({
      ...ref('workflows', ''),
      body: { ...sampleWorkflow(ns, 'hello'), status: workflowStatus({ phase: 'Running', progress: '0/1' }) },
    })) as Obj;
    t.equal(created.status?.phase, 'Running', 'status is accepted on create (no status subresource)');
    const started = new Date(Date.now() - 12_000);
    const finished = new Date();
    const done = (await objects.replaceNamespacedCustomObject({
      ...ref('workflows', 'hello'),
      body: {
        ...created,
        status: workflowStatus({
          phase: 'Failed',
          progress: '0/1',
          message: 'main: exit code 1',
          startedAt: started,
          finishedAt: finished,
        }),
      },
    })) as Obj;
    t.equal(done.status?.phase, 'Failed', 'phase stored');
    t.equal(done.status?.progress, '0/1', 'progress stored');
    t.equal(done.status?.message, 'main: exit code 1', 'message stored');
    t.equal(done.status?.finishedAt, finished.toISOString().replace(/\.\d+Z$/, 'Z'), 'finishedAt stored');
  });

  await t.test('a watch from a resourceVersion sees an Application health change', async (t) => {
    const current = (await objects.getNamespacedCustomObject(ref('applications', 'guestbook'))) as Obj;
    const seen = new Promise<string | undefined>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('no MODIFIED event within 30 s')), 30_000);
      void new Watch(argo.kc)
        .watch(
          `/apis/${ARGO_GROUP}/${ARGO_VERSION}/namespaces/${ns}/applications`,
          { resourceVersion: current.metadata.resourceVersion, allowWatchBookmarks: true },
          (type, obj: Obj) => {
            if (type === 'MODIFIED') {
              clearTimeout(timer);
              resolve(obj.status?.health?.status);
            }
          },
          (err: unknown) => {
            if (err) reject(err instanceof Error ? err : new Error(`watch ended: ${JSON.stringify(err)}`));
          },
        )
        .then((ctl) => t.teardown(() => ctl.abort()));
    });
    await objects.replaceNamespacedCustomObject({
      ...ref('applications', 'guestbook'),
      body: { ...current, status: applicationStatus({ sync: 'OutOfSync', health: 'Degraded' }) },
    });
    t.equal(await seen, 'Degraded', 'the MODIFIED event carries the new health status');
  });
}
