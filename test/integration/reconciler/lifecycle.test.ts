import t from 'tap';
import { EngineError, type ResourceStep } from '../../../provisioner/engine/engine.ts';
import type { CallScript } from '../../helpers/scripted-engine.ts';
import { checkKubeconfig } from '../../../kubeconfig-policy/policy.ts';
import { createKey, lookupKey } from '../../../provisioner/store/keys.ts';
import { createHarness, gate, scripted, KUBECONFIG } from './harness.ts';
import { until } from '../../../sandbox/until.ts';
import { storedKeys } from '../../helpers/keys.ts';
import { refuseCreateSuccess } from '../../helpers/operations.ts';

const h = await createHarness();
t.teardown(() => h.close());
await h.addCluster('root-a');

t.test('a new tenant is provisioned: Ready, outputs in status, operation succeeded, lease released', async (t) => {
  const engine = scripted({ script: () => ({ lines: ['creating namespace', 'creating vcluster'] }) });
  const r = await h.reconciler(engine);
  const { id, operationId } = await h.createTenant({ runtimeVersion: '1.2.0' });
  const row = await until('Ready', 10_000, async () => {
    const x = await h.tenant(id);
    return x.phase === 'Ready' && x;
  });
  t.equal(row.observed_generation, 1);
  t.equal(row.actual_runtime_version, '1.2.0');
  t.equal(row.cluster_name, 'root-a');
  t.match(row.endpoints, { vclusterEndpoint: /^https:/, argoCdUrl: /^https:/ });
  t.match(
    row.conditions.find((c) => c.type === 'Ready'),
    { status: 'True' },
  );
  t.match(
    row.conditions.find((c) => c.type === 'Reconciling'),
    { status: 'False' },
  );
  t.equal(row.lease_owner, null);
  const [op] = await h.operations(id);
  t.match(op, { id: operationId, state: 'succeeded', attempt: 1, owner: r.owner });
  const lines = await h.logLines(operationId);
  t.ok(lines.includes('creating vcluster'), 'engine output is in the operation log');
  t.ok(lines.some((l) => l.startsWith('attempt 1 of create operation')));
  t.notOk(
    lines.some((l) => l.includes('root-cluster-secret-token')),
    'no secret in the log',
  );
  const call = engine.callsFor(id)[0]!;
  t.equal(
    call.input.rootKubeconfig,
    checkKubeconfig(KUBECONFIG).text,
    'the engine got the decrypted kubeconfig as the policy sanitised it',
  );
  t.ok(await lookupKey(h.db.pool, call.input.runtimeToken), 'the runtime token is a live runtime key');
  t.equal((await lookupKey(h.db.pool, call.input.runtimeToken))?.role, 'runtime');
  await r.stop();
});

t.test('two quick changes while an operation runs coalesce into one more run of the newest spec', async (t) => {
  const g = gate();
  const engine = scripted({ script: (c) => (c.input.runtimeVersion === '1.0.0' ? { gate: g.promise } : undefined) });
  const r = await h.reconciler(engine);
  const { id } = await h.createTenant({ runtimeVersion: '1.0.0' });
  await until('create running', 10_000, async () => engine.callsFor(id).length === 1);
  const up1 = await h.change(id, { runtimeVersion: '1.1.0' }, 'upgrade');
  const up2 = await h.change(id, { runtimeVersion: '1.2.0' }, 'upgrade');
  g.open();
  const row = await until('generation 3 applied', 10_000, async () => {
    const x = await h.tenant(id);
    return x.observed_generation === 3 && x;
  });
  t.equal(row.actual_runtime_version, '1.2.0');
  t.equal(row.previous_runtime_version, '1.0.0');
  t.same(
    engine.callsFor(id).map((c) => c.input.runtimeVersion),
    ['1.0.0', '1.2.0'],
    'the middle spec never ran',
  );
  const ops = await h.operations(id);
  t.match(
    ops.find((o) => o.id === up1),
    { state: 'superseded' },
  );
  t.match(
    ops.find((o) => o.id === up2),
    { state: 'succeeded' },
  );
  await r.stop();
});

t.test('failures back off with growing delays, then the tenant is Stalled; a retry clears it', async (t) => {
  let failing = true;
  const engine = scripted({
    script: () => (failing ? { fail: new EngineError('ProgramFailed', 'helm release failed: boom') } : undefined),
  });
  const r = await h.reconciler(engine, { maxFailures: 3, backoff: { baseMs: 150, capMs: 5000, jitter: 0 } });
  const { id } = await h.createTenant();
  const row = await until('Stalled', 15_000, async () => {
    const x = await h.tenant(id);
    return x.stalled && x;
  });
  const calls = engine.callsFor(id);
  t.equal(calls.length, 3);
  const gaps = [calls[1]!.startedAt - calls[0]!.endedAt!, calls[2]!.startedAt - calls[1]!.endedAt!];
  t.ok(gaps[0]! >= 140, `first retry waited ${gaps[0]} ms (>= 150 ms)`);
  t.ok(gaps[1]! >= 440, `second retry waited ${gaps[1]} ms (>= 450 ms)`);
  t.equal(row.phase, 'Failed');
  t.equal(row.consecutive_failures, 3);
  t.match(
    row.conditions.find((c) => c.type === 'Stalled'),
    { status: 'True', reason: 'UpdateFailed', message: /helm release failed: boom/ },
  );
  const ops = await h.operations(id);
  t.same(
    ops.map((o) => [o.state, o.attempt]),
    [
      ['failed', 1],
      ['failed', 2],
      ['failed', 3],
    ],
    'one operation row per attempt',
  );
  t.match(ops[0]!.error, { code: 'ProgramFailed', message: /boom/ });
  // Stalled: nothing runs any more. Three looks for due tenants, each of which would claim a retry.
  const polled = r.stats.polls;
  await until('three polls after the third failure', 10_000, async () => r.stats.polls >= polled + 3);
  t.equal((await h.tenant(id)).lease_owner, null, 'a stalled tenant is not claimed again in three polls');
  t.equal(engine.callsFor(id).length, 3, 'a stalled tenant is not retried by itself');

  failing = false;
  const retryOp = await h.retry(id);
  const ready = await until('Ready after retry', 10_000, async () => {
    const x = await h.tenant(id);
    return x.phase === 'Ready' && x;
  });
  t.equal(ready.stalled, false);
  t.match(
    ready.conditions.find((c) => c.type === 'Stalled'),
    { status: 'False' },
  );
  t.match(
    (await h.operations(id)).find((o) => o.id === retryOp),
    { state: 'succeeded', kind: 'retry' },
  );
  await r.stop();
});

t.test('a spec change clears Stalled and runs again', async (t) => {
  const engine = scripted({
    script: (c) => (c.input.runtimeVersion === '1.0.0' ? { fail: new EngineError('ProgramFailed', 'bad') } : undefined),
  });
  const r = await h.reconciler(engine, { maxFailures: 1 });
  const { id } = await h.createTenant({ runtimeVersion: '1.0.0' });
  await until('Stalled', 10_000, async () => (await h.tenant(id)).stalled);
  await h.change(id, { runtimeVersion: '1.1.0' }, 'upgrade');
  const row = await until('Ready', 10_000, async () => {
    const x = await h.tenant(id);
    return x.phase === 'Ready' && x;
  });
  t.equal(row.actual_runtime_version, '1.1.0');
  await r.stop();
});

t.test('a delete during a create cancels the create, then destroys; keys revoked, tombstone kept', async (t) => {
  const g = gate();
  const engine = scripted({ script: (c) => (c.kind === 'up' ? { gate: g.promise } : undefined) });
  const r = await h.reconciler(engine);
  const { id, operationId } = await h.createTenant();
  const tenantKey = (await createKey(h.db.pool, { role: 'tenant', tenantId: id, name: 'owner', createdBy: 'test' }))
    .key;
  await until('create running', 10_000, async () => engine.callsFor(id).length === 1);
  const del = await h.change(id, { deleted: true }, 'delete');
  const row = await until('Deleted', 10_000, async () => {
    const x = await h.tenant(id);
    return x.phase === 'Deleted' && x;
  });
  g.open();
  t.same(
    engine.callsFor(id).map((c) => [c.kind, c.outcome]),
    [
      ['up', 'cancelled'],
      ['destroy', 'ok'],
    ],
  );
  const ops = await h.operations(id);
  t.match(
    ops.find((o) => o.id === operationId),
    { state: 'cancelled', error: { code: 'Cancelled' } },
  );
  t.match(
    ops.find((o) => o.id === del),
    { state: 'succeeded' },
  );
  t.equal(row.deleted, true);
  t.ok(row.deleted_at, 'tombstone keeps its deletion time');
  t.equal(await lookupKey(h.db.pool, tenantKey), undefined, 'tenant key revoked');
  t.equal(
    (await storedKeys(h.db.pool, { tenantId: id })).filter((k) => k.revoked_at === null).length,
    0,
    'runtime key revoked too',
  );
  t.same(row.endpoints, {});
  await r.stop();
});

t.test('status and operation result are written in one transaction', async (t) => {
  t.teardown(await refuseCreateSuccess(h.db.pool));
  const engine = scripted();
  const r = await h.reconciler(engine, { maxFailures: 1 });
  const { id, operationId } = await h.createTenant();
  const row = await until('attempt recorded', 10_000, async () => {
    const x = await h.tenant(id);
    return x.stalled && x;
  });
  t.equal(row.observed_generation, 0, 'the status write rolled back with the operation write');
  t.not(row.phase, 'Ready');
  t.match(
    (await h.operations(id)).find((o) => o.id === operationId),
    { state: 'failed' },
  );
  await r.stop();
});

t.test('a resync runs refresh + up and logs which objects drifted and what the update corrected', async (t) => {
  const quota = (id: string): ResourceStep => ({
    op: 'delete',
    urn: 'urn:pulumi:s::tenants::kubernetes:core/v1:ResourceQuota::quota',
    type: 'kubernetes:core/v1:ResourceQuota',
    custom: true,
    external: false,
    diffs: [],
    old: {
      id: `tenant-${id}/quota`,
      inputs: { spec: { hard: { pods: '20' } } },
      outputs: { spec: { hard: { pods: '20' } }, status: {} },
    },
  });
  const read: ResourceStep = {
    op: 'update',
    urn: 'urn:pulumi:s::tenants::kubernetes:core/v1:Secret::kubeconfig',
    type: 'kubernetes:core/v1:Secret',
    custom: true,
    external: true,
    diffs: [],
    old: { id: 'ns/vc-vcluster', inputs: {}, outputs: { metadata: { resourceVersion: '1' } } },
    new: { id: 'ns/vc-vcluster', inputs: {}, outputs: { metadata: { resourceVersion: '2' } } },
  };
  const engine = scripted({
    script: (c): CallScript | undefined => {
      // The periodic resync's preview sees the quota gone: refresh + update follow.
      if (c.kind === 'preview') return { changes: { create: 1, same: 10 } };
      if (c.kind === 'refresh')
        return { changes: { update: 1, delete: 1, same: 10 }, steps: [quota(c.tenantId), read] };
      const created = { ...quota(c.tenantId), op: 'create' };
      if (c.kind === 'up') return { changes: { create: 1, read: 1 }, steps: [created, { ...read, op: 'read' }] };
      return undefined;
    },
  });
  const r = await h.reconciler(engine, { resyncMs: 300 });
  const { id } = await h.createTenant();
  await until('Ready', 10_000, async () => (await h.tenant(id)).phase === 'Ready');
  const resync = await until('a resync ran', 10_000, async () =>
    (await h.operations(id)).find((o) => o.kind === 'resync' && o.state === 'succeeded'),
  );
  const lines = await h.logLines(resync.id);
  t.ok(
    lines.includes('preview with refresh: create 1; refresh + update follow'),
    'the preview found something to change',
  );
  t.ok(
    lines.includes(`drift detected: ResourceQuota tenant-${id}/quota: deleted`),
    'the log names the drifted object and how it drifted',
  );
  t.ok(
    lines.includes(`drift corrected: ResourceQuota tenant-${id}/quota: created`),
    'and what the update did about it',
  );
  t.notOk(
    lines.some((l) => /^drift (detected|corrected): Secret/.test(l)),
    'the read Secret is neither drift nor a correction',
  );
  t.ok(
    lines.some(
      (l) =>
        l.startsWith('refresh recorded changes that are not drift') &&
        l.includes('Secret ns/vc-vcluster (read by the program)'),
    ),
    'its changed state is named as not drift',
  );
  t.equal((await h.tenant(id)).phase, 'Ready', 'a resync keeps the phase');
  await r.stop();
  // Every refresh of this engine (of any tenant the reconciler resynced) reports the quota deleted.
  const resyncs = engine.calls.filter((c) => c.kind === 'refresh' && c.outcome === 'ok').length;
  t.equal(r.stats.resyncsWithDrift, resyncs, 'every resync is counted as one with drift');
  t.same(
    [...r.stats.drift.values()],
    [{ kind: 'ResourceQuota', change: 'deleted', count: resyncs }],
    'the drifted objects are counted by kind and change',
  );
});

t.test('a resync of an untouched tenant: no drift, nothing to correct', async (t) => {
  const statusOnly: ResourceStep = {
    op: 'update',
    urn: 'urn:pulumi:s::tenants::kubernetes:core/v1:ResourceQuota::quota',
    type: 'kubernetes:core/v1:ResourceQuota',
    custom: true,
    external: false,
    diffs: [],
    old: {
      id: 'ns/quota',
      inputs: { spec: { hard: { pods: '20' } } },
      outputs: { spec: { hard: { pods: '20' } }, status: {} },
    },
    new: {
      id: 'ns/quota',
      inputs: { spec: { hard: { pods: '20' } } },
      outputs: { spec: { hard: { pods: '20' } }, status: { used: { pods: '2' } } },
    },
  };
  const engine = scripted({
    script: (c): CallScript | undefined =>
      c.kind === 'preview'
        ? { changes: { update: 1 } } // a status-only change: not drift, but the preview cannot tell
        : c.kind === 'refresh'
          ? { changes: { update: 1 }, steps: [statusOnly] }
          : c.kind === 'up'
            ? { changes: { read: 1, same: 9 } }
            : undefined,
  });
  const r = await h.reconciler(engine, { resyncMs: 300 });
  const { id } = await h.createTenant();
  const resync = await until('a resync ran', 10_000, async () =>
    (await h.operations(id)).find((o) => o.kind === 'resync' && o.state === 'succeeded'),
  );
  const lines = await h.logLines(resync.id);
  t.ok(lines.includes('no drift detected by refresh'), 'a status change is not drift');
  t.ok(lines.includes('nothing to correct'), 'an update that only read is no correction');
  t.equal(r.stats.resyncsWithDrift, 0);
  await r.stop();
});

t.test('a periodic resync whose preview finds nothing to change runs no refresh and no update', async (t) => {
  const engine = scripted({
    script: (c): CallScript | undefined => (c.kind === 'preview' ? { changes: { same: 11, read: 1 } } : undefined),
  });
  const r = await h.reconciler(engine, { resyncMs: 300 });
  const { id } = await h.createTenant();
  const resync = await until('a resync ran', 10_000, async () =>
    (await h.operations(id)).find((o) => o.kind === 'resync' && o.state === 'succeeded'),
  );
  await r.stop();
  const lines = await h.logLines(resync.id);
  t.ok(
    lines.includes('preview with refresh: nothing to change (no drift, no program change); no update'),
    'the log says the preview found nothing',
  );
  t.same(
    engine
      .callsFor(id)
      .slice(0, 3)
      .map((c) => c.kind),
    ['up', 'preview', 'outputs'],
    'the create, then only a preview and a read of the stored outputs: no refresh, no update',
  );
  const row = await h.tenant(id);
  t.equal(row.phase, 'Ready', 'the tenant stays Ready');
  t.match(row.endpoints, { vclusterEndpoint: /^https:/ }, 'with its endpoints from the stored outputs');
});
