/**
 * A wake's head start (provisioner/reconciler/reconciler.ts, Engine.startControlPlane): a wake or a
 * resume asks the engine to scale the tenant's vcluster control plane before its engine run, and
 * the operation log says so; a sleep, a suspend, a create or a plan change do not; a head start
 * that fails or does not answer in time is logged and the wake still succeeds through its run.
 * Real Postgres, the real app and reconciler; the engine is the ScriptedEngine TEST DOUBLE (the
 * real scaling runs against a real kube-apiserver in test/integration/tenants/synced-pods.test.ts
 * and with the real engine and vcluster in test/e2e/hosted-runtime.test.ts).
 */
import t from 'tap';
import { ScriptedEngine } from '../../helpers/scripted-engine.ts';
import { Reconciler } from '../../../provisioner/reconciler/reconciler.ts';
import { createTestApi } from '../../helpers/api.ts';
import { until } from '../../../sandbox/until.ts';

const KUBECONFIG =
  'apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: "https://203.0.113.10:6443"}}]\n' +
  'users: [{name: u, user: {token: root-cluster-token-0123456789}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n';

const api = await createTestApi();
t.teardown(() => api.close());

/** What each tenant's head start does (default: scales at once). */
const behaviour = new Map<string, () => 'scaled' | 'unchanged' | Error | Promise<'scaled' | 'unchanged' | Error>>();
// TEST DOUBLE engine: every call succeeds at once; the head start does what `behaviour` says.
const engine = new ScriptedEngine({
  script: (c) => (c.kind === 'up' ? { outputs: { suspended: c.input.suspended } } : undefined),
  controlPlane: (tenantId) => behaviour.get(tenantId)?.() ?? 'scaled',
});
const reconciler = new Reconciler({
  pool: api.db.pool,
  engine,
  box: api.services.box,
  pollMs: 100,
  logFlushMs: 10,
  headStartTimeoutMs: 300,
});
await reconciler.start();
t.teardown(() => reconciler.stop({ graceMs: 0 }));

t.equal(
  (
    await api.request('POST', '/v1/clusters', {
      key: api.operatorKey,
      body: { name: 'root-head-start', region: 'eu', capacity: 100, kubeconfig: KUBECONFIG, force: true },
    })
  ).statusCode,
  201,
  'a root cluster is registered',
);

interface Operation {
  id: string;
  kind: string;
  state: string;
}
const operation = async (id: string) =>
  (await api.request('GET', `/v1/operations/${id}`, { key: api.operatorKey })).json<Operation>();
const done = (id: string) =>
  until(`operation ${id} to end`, 30_000, async () => {
    const op = await operation(id);
    return op.state === 'succeeded' || op.state === 'failed' ? op : undefined;
  });
const logOf = async (id: string) =>
  (await api.request('GET', `/v1/operations/${id}/log`, { key: api.operatorKey }))
    .json<{ items: Array<{ line: string }> }>()
    .items.map((l) => l.line);
/** POSTs a lifecycle action and waits for its operation to end. */
const act = async (tenantId: string, action: 'sleep' | 'wake' | 'suspend' | 'resume') => {
  const res = await api.request('POST', `/v1/tenants/${tenantId}/${action}`, { key: api.operatorKey });
  t.equal(res.statusCode, 202, `${action} accepted`);
  return done(res.json<{ operationId: string }>().operationId);
};
const readyTenant = async () => {
  const s = await api.signup();
  await done(s.operationId);
  return s.tenantId;
};
const startsOf = (tenantId: string) => engine.controlPlaneStarts.filter((s) => s.tenantId === tenantId);
const upsOf = (tenantId: string) => engine.calls.filter((c) => c.tenantId === tenantId && c.kind === 'up');

t.test('a wake and a resume start the control plane before their engine run; nothing else does', async (t) => {
  const id = await readyTenant();
  t.same(startsOf(id), [], 'the create has no head start');

  const sleep = await act(id, 'sleep');
  t.equal(sleep.state, 'succeeded', 'asleep');
  t.same(startsOf(id), [], 'the sleep has none');

  const before = upsOf(id).length;
  const wake = await act(id, 'wake');
  t.equal(wake.state, 'succeeded', 'awake again');
  t.equal(startsOf(id).length, 1, 'the wake asked for one head start');
  const start = startsOf(id)[0]!;
  const run = upsOf(id)[before];
  t.equal(run?.input.suspended, false, "the wake's engine run leaves the runtime up");
  t.ok(run && start.at <= run.startedAt, 'the head start came before the engine run');
  const log = await logOf(wake.id);
  const headStart = log.findIndex((l) => l.startsWith('head start: '));
  t.equal(
    log[headStart],
    "head start: the vcluster's control plane scaled to 1 on the root cluster; the engine run below confirms it",
    'the operation log says what the head start did',
  );
  t.ok(headStart < log.findIndex((l) => l.startsWith('operation succeeded')), 'before the run’s outcome in the log');

  t.equal((await act(id, 'suspend')).state, 'succeeded', 'suspended');
  t.equal(startsOf(id).length, 1, 'the suspend has no head start');
  behaviour.set(id, () => 'unchanged');
  const resume = await act(id, 'resume');
  t.equal(resume.state, 'succeeded', 'resumed');
  t.equal(startsOf(id).length, 2, 'the resume asked for one too');
  t.ok(
    (await logOf(resume.id)).includes("head start: the vcluster's control plane is already at 1 on the root cluster"),
    'and the log says it found the control plane already scaled',
  );

  const patched = await api.request('PATCH', `/v1/tenants/${id}`, { key: api.operatorKey, body: { plan: 'team' } });
  t.equal(patched.statusCode, 202, 'a plan change is accepted');
  await done(patched.json<{ operationId: string }>().operationId);
  t.equal(startsOf(id).length, 2, 'a plan change has no head start');
});

t.test('a head start that fails or does not answer is logged; the wake succeeds through its run', async (t) => {
  const refused = await readyTenant();
  behaviour.set(refused, () => new Error('scaling StatefulSet vcluster: the API server answered HTTP 403'));
  await act(refused, 'sleep');
  const wake = await act(refused, 'wake');
  t.equal(wake.state, 'succeeded', 'the wake succeeded');
  t.ok(
    (await logOf(wake.id)).includes(
      'head start skipped (scaling StatefulSet vcluster: the API server answered HTTP 403); the engine run below scales the control plane',
    ),
    'the log names why the head start was skipped',
  );
  t.equal(upsOf(refused).at(-1)?.input.suspended, false, 'the engine run woke it');

  const silent = await readyTenant();
  behaviour.set(silent, () => new Promise(() => {}));
  await act(silent, 'sleep');
  const slow = await act(silent, 'wake');
  t.equal(slow.state, 'succeeded', 'the wake succeeded without an answer from the head start');
  t.ok(
    (await logOf(slow.id)).includes(
      'head start skipped (no answer within 0.3 s); the engine run below scales the control plane',
    ),
    'the log says the head start did not answer in time',
  );
});
