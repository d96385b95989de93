import t from 'tap';
import client from 'prom-client';
import { registerDriftMetrics } from '../../../provisioner/metrics/drift.ts';
import type { Metrics } from '../../../provisioner/metrics/registry.ts';
import type { ResourceStep } from '../../../provisioner/engine/engine.ts';
import {
  changedPaths,
  corrections,
  describeCorrection,
  describeDrift,
  describeStateOnly,
  parsePath,
  refreshFindings,
  setByProgram,
} from '../../../provisioner/reconciler/drift.ts';

const NS = 'tenant-7f3a';
const QUOTA = 'kubernetes:core/v1:ResourceQuota';
const quotaUrn = `urn:pulumi:tenant-7f3a::tenants::hosted:tenant:TenantNamespace$${QUOTA}::quota`;

/** The quota as the program applies it. */
const quotaInputs = {
  apiVersion: 'v1',
  kind: 'ResourceQuota',
  metadata: { name: 'quota', namespace: NS, labels: { 'hosted.example/tenant': '7f3a' } },
  spec: { hard: { 'requests.cpu': '2', 'limits.memory': '4Gi', pods: '20' } },
};

/** The live quota as the API server returns it: the inputs plus what the server and the quota controller add. */
function liveQuota(
  over: {
    hard?: Record<string, string>;
    used?: Record<string, string>;
    resourceVersion?: string;
    labels?: Record<string, string>;
  } = {},
) {
  const hard = over.hard ?? quotaInputs.spec.hard;
  return {
    ...quotaInputs,
    metadata: {
      ...quotaInputs.metadata,
      labels: over.labels ?? quotaInputs.metadata.labels,
      uid: '5c1e',
      resourceVersion: over.resourceVersion ?? '811',
      creationTimestamp: '2026-11-23T10:00:00Z',
      managedFields: [{ manager: 'pulumi-kubernetes', operation: 'Apply' }],
    },
    spec: { hard },
    status: { hard, ...(over.used ? { used: over.used } : {}) },
    __inputs: quotaInputs,
  };
}

function refreshStep(over: Partial<ResourceStep> & { newOutputs?: Record<string, unknown> | null }): ResourceStep {
  const { newOutputs, ...rest } = over;
  return {
    op: 'update',
    urn: quotaUrn,
    type: QUOTA,
    custom: true,
    external: false,
    diffs: [],
    old: { id: `${NS}/quota`, inputs: quotaInputs, outputs: liveQuota() },
    ...(newOutputs === null
      ? {}
      : { new: { id: `${NS}/quota`, inputs: quotaInputs, outputs: newOutputs ?? liveQuota() } }),
    ...rest,
  };
}

t.test('a status-only change (the quota controller fills status.used) is not drift', async (t) => {
  const found = refreshFindings([
    refreshStep({ newOutputs: liveQuota({ used: { pods: '3' }, resourceVersion: '990' }) }),
  ]);
  t.same(found.drift, [], 'no drift');
  t.equal(found.stateOnly.length, 1, 'the change is reported as a state-only change');
  t.same(found.stateOnly[0]!.fields, ['metadata.resourceVersion', 'status.used'], 'naming the fields that changed');
  t.equal(describeStateOnly(found.stateOnly[0]!), `ResourceQuota ${NS}/quota: metadata.resourceVersion, status.used`);
});

t.test('a field only the server or another manager sets is not drift', async (t) => {
  const labels = { ...quotaInputs.metadata.labels, 'added-by-hand': 'yes' };
  const found = refreshFindings([refreshStep({ newOutputs: liveQuota({ labels, resourceVersion: '1002' }) })]);
  t.same(found.drift, [], 'a label the program does not set, and a new resourceVersion, are no drift');
  t.same(found.stateOnly[0]?.fields, ['metadata.labels', 'metadata.resourceVersion']);
  const inputsOnly = refreshFindings([
    refreshStep({ newOutputs: { ...liveQuota(), __inputs: { ...quotaInputs, spec: { hard: { pods: '20' } } } } }),
  ]);
  t.same(inputsOnly.drift, [], "the provider's own bookkeeping field (__inputs) is not a program field");
});

t.test('a read (`.get` of an existing object) is never drift, whatever changed in it', async (t) => {
  const secretType = 'kubernetes:core/v1:Secret';
  const read: ResourceStep = {
    op: 'update',
    urn: `urn:pulumi:tenant-7f3a::tenants::${secretType}::vcluster-kubeconfig`,
    type: secretType,
    custom: true,
    external: true,
    diffs: [],
    old: { id: `${NS}/vc-vcluster`, inputs: {}, outputs: { metadata: { resourceVersion: '1' }, data: '[secret]' } },
    new: { id: `${NS}/vc-vcluster`, inputs: {}, outputs: { metadata: { resourceVersion: '2' }, data: '[secret]' } },
  };
  const found = refreshFindings([read, { ...read, op: 'delete', new: undefined }]);
  t.same(found.drift, [], 'neither a changed nor a vanished read object is drift');
  t.equal(
    describeStateOnly(found.stateOnly[0]!),
    `Secret ${NS}/vc-vcluster (read by the program): metadata.resourceVersion`,
  );
  t.same(corrections([{ ...read, op: 'read' }]), [], 'reading it again in the update is no correction');
});

t.test('a changed field the program sets is drift, named by kind, object and field', async (t) => {
  const hard = { ...quotaInputs.spec.hard, pods: '200' };
  const found = refreshFindings([refreshStep({ newOutputs: liveQuota({ hard, resourceVersion: '1200' }) })]);
  t.equal(found.drift.length, 1);
  t.equal(
    describeDrift(found.drift[0]!),
    `ResourceQuota ${NS}/quota: spec.hard changed`,
    'status.hard changing with it is not named',
  );
  const removedLabel = refreshFindings([refreshStep({ newOutputs: liveQuota({ labels: {} }) })]);
  t.equal(
    describeDrift(removedLabel.drift[0]!),
    `ResourceQuota ${NS}/quota: metadata.labels changed`,
    'a label the program sets, removed by hand',
  );
});

t.test('an object deleted by hand is drift, and the update that creates it again is its correction', async (t) => {
  const found = refreshFindings([refreshStep({ op: 'delete', newOutputs: null })]);
  t.same(found.drift, [{ kind: 'ResourceQuota', name: `${NS}/quota`, change: 'deleted', fields: [] }]);
  t.equal(describeDrift(found.drift[0]!), `ResourceQuota ${NS}/quota: deleted`);
  const fixed = corrections([
    {
      op: 'create',
      urn: quotaUrn,
      type: QUOTA,
      custom: true,
      external: false,
      diffs: [],
      new: { id: `${NS}/quota`, inputs: quotaInputs, outputs: liveQuota() },
    },
    {
      op: 'update',
      urn: quotaUrn.replace('quota', 'limits'),
      type: 'kubernetes:core/v1:LimitRange',
      custom: true,
      external: false,
      diffs: ['spec.limits[0].max["cpu"]'],
      old: { id: `${NS}/limits`, inputs: {}, outputs: {} },
    },
  ]);
  t.same(fixed.map(describeCorrection), [
    `ResourceQuota ${NS}/quota: created`,
    `LimitRange ${NS}/limits: updated (spec.limits)`,
  ]);
});

t.test('providers, components and unchanged resources are neither drift nor corrections', async (t) => {
  const provider: ResourceStep = {
    op: 'update',
    urn: 'urn:pulumi:s::tenants::pulumi:providers:kubernetes::root',
    type: 'pulumi:providers:kubernetes',
    custom: true,
    external: false,
    diffs: ['kubeconfig'],
  };
  const component: ResourceStep = {
    op: 'update',
    urn: 'urn:pulumi:s::tenants::hosted:tenant:Tenant::t',
    type: 'hosted:tenant:Tenant',
    custom: false,
    external: false,
    diffs: [],
  };
  t.same(refreshFindings([provider, component, refreshStep({ op: 'same' })]), { drift: [], stateOnly: [] });
  t.same(corrections([provider, { ...refreshStep({}), op: 'same' }]), []);
});

t.test("paths: changed leaves, program-set fields, the engine's property paths", async (t) => {
  t.same(changedPaths({ a: { b: 1, c: [1, 2] } }, { a: { b: 1, c: [1, 3], d: null } }), [
    ['a', 'c', 1],
    ['a', 'd'],
  ]);
  t.ok(setByProgram({ spec: { hard: { pods: '1' } } }, ['spec', 'hard', 'pods']), 'a leaf the inputs hold');
  t.notOk(
    setByProgram({ spec: { hard: { pods: '1' } } }, ['spec', 'hard', 'services']),
    'a sibling the inputs do not hold',
  );
  t.ok(
    setByProgram({ data: { 'config.yaml': 'x' } }, ['data', 'config.yaml', 0]),
    'below a whole value the program sets',
  );
  t.notOk(setByProgram({ spec: {} }, ['status', 'used']));
  t.same(parsePath('spec.hard["requests.cpu"]'), ['spec', 'hard', 'requests.cpu']);
  t.same(parsePath('spec.containers[0].image'), ['spec', 'containers', 0, 'image']);
});

t.test("the drift counters expose the reconciler's counts by kind and change", async (t) => {
  const registry = new client.Registry();
  const stats = { resyncsWithDrift: 0, drift: new Map<string, { kind: string; change: string; count: number }>() };
  registerDriftMetrics({ registry } as Metrics, stats);
  stats.resyncsWithDrift = 2;
  stats.drift.set('ResourceQuota\tdeleted', { kind: 'ResourceQuota', change: 'deleted', count: 2 });
  stats.drift.set('LimitRange\tchanged', { kind: 'LimitRange', change: 'changed', count: 1 });
  const text = await registry.metrics();
  t.match(text, /^provisioner_resyncs_with_drift_total 2$/m, 'resyncs with drift');
  t.match(text, /^provisioner_drifted_objects_total\{kind="ResourceQuota",change="deleted"\} 2$/m, 'deleted quotas');
  t.match(text, /^provisioner_drifted_objects_total\{kind="LimitRange",change="changed"\} 1$/m, 'changed limit ranges');
});
