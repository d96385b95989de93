/**
 * /metrics shows the reconciler as `provisioner serve` wires it: the queue by state, operations
 * by kind and result, how long attempts ran, the leases this replica holds and whether its engine
 * is available, and its engine memory budget and what the running attempts reserve of it.
 */
import t from 'tap';
import { EngineError } from '../../../provisioner/engine/engine.ts';
import { ScriptedEngine } from '../../helpers/scripted-engine.ts';
import { ENGINE_RUN_PEAK_MB } from '../../../provisioner/reconciler/memory-budget.ts';
import { insertCluster } from '../../../provisioner/store/clusters.ts';
import { createTestApi, uniqueOrg } from '../../helpers/api.ts';
import { KUBECONFIG } from '../reconciler/harness.ts';
import { until } from '../../../sandbox/until.ts';

t.test('after reconciles with the scripted engine, /metrics has the reconciler with plausible values', async (t) => {
  let openGate: () => void = () => {};
  const gate = new Promise<void>((resolve) => (openGate = resolve));
  const failing = uniqueOrg('fails');
  // TEST DOUBLE engine (the reconciler, database and HTTP app are real): the `fails` tenant's
  // create fails; every other create takes at least 200 ms and waits for the gate.
  const engine = new ScriptedEngine({
    script: (call) =>
      call.input.organization === failing
        ? { fail: new EngineError('ProgramFailed', 'scripted failure') }
        : { delayMs: 200, gate },
  });
  const api = await createTestApi({
    engine,
    env: { PROVISIONER_POLL_MS: '100', PROVISIONER_ENGINE_MEMORY_MB: '1500' },
  });
  t.teardown(() => api.close());
  await insertCluster(api.db.pool, {
    name: 'metrics-root',
    region: 'eu-1',
    labels: {},
    capacity: 10,
    plans: [],
    kubeconfigEnc: api.services.box.encrypt(KUBECONFIG, 'cluster/metrics-root'),
  });
  const reconciler = api.services.reconciler!;
  await reconciler.start();
  const metric = async (name: string, labels = ''): Promise<number | undefined> => {
    const text = (await api.request('GET', '/metrics', { key: null })).body;
    const line = text.split('\n').find((l) => l.startsWith(`${name}${labels} `));
    return line === undefined ? undefined : Number(line.split(' ')[1]);
  };

  t.equal(await metric('provisioner_engine_available'), 1, 'engine available: 1');
  const ok = await api.signup();
  // The engine call starts after the attempt's start (operation `running`) is committed; the lease
  // (reconciler.running) is there before it.
  await until(
    'the create running in the engine',
    15_000,
    async () => reconciler.running.includes(ok.tenantId) && engine.running === 1,
  );
  t.equal(await metric('provisioner_reconciler_leases'), 1, 'one lease held while the create runs');
  t.equal(await metric('provisioner_reconcile_queue', '{state="running"}'), 1, 'queue: one operation running');
  t.equal(
    await metric('provisioner_engine_memory_budget_bytes'),
    1500 * 1048576,
    'the engine memory budget as PROVISIONER_ENGINE_MEMORY_MB set it',
  );
  t.equal(
    await metric('provisioner_engine_memory_in_use_bytes'),
    ENGINE_RUN_PEAK_MB.create * 1048576,
    "the running create reserves a create's estimate",
  );

  await api.signup({ organization: failing });
  await until('the failure recorded', 15_000, async () => reconciler.stats.failed === 1);
  t.equal(await metric('provisioner_operations_total', '{kind="create",result="failed"}'), 1, 'one create failed');
  t.equal(
    await metric('provisioner_reconcile_queue', '{state="retry_backoff"}'),
    1,
    'queue: the failed tenant waits for its retry',
  );

  openGate();
  await until('the create succeeded', 15_000, async () => reconciler.stats.succeeded === 1);
  t.equal(
    await metric('provisioner_operations_total', '{kind="create",result="succeeded"}'),
    1,
    'one create succeeded',
  );
  t.equal(
    await metric('provisioner_engine_run_duration_seconds_count', '{kind="create",result="succeeded"}'),
    1,
    'its run is one observation',
  );
  const seconds = (await metric('provisioner_engine_run_duration_seconds_sum', '{kind="create",result="succeeded"}'))!;
  t.ok(seconds >= 0.2 && seconds < 30, `it ran ${seconds} s: at least the scripted 200 ms, less than 30 s`);
  t.equal(await metric('provisioner_reconciler_leases'), 0, 'no lease held once done');
  t.equal(await metric('provisioner_engine_memory_in_use_bytes'), 0, 'nothing reserved once done');
  t.equal(await metric('provisioner_reconcile_queue', '{state="running"}'), 0, 'queue: nothing running');
  // The reconciler as one of the process's loops, by name.
  t.equal(await metric('provisioner_loop_running', '{loop="reconciler"}'), 1, 'loop metrics: the reconciler runs');
  const rounds = (await metric('provisioner_loop_rounds_total', '{loop="reconciler"}'))!;
  t.ok(
    rounds >= reconciler.stats.polls && reconciler.stats.polls > 0,
    `loop metrics: ${rounds} rounds, at least its ${reconciler.stats.polls} looks for due tenants`,
  );
  t.equal(await metric('provisioner_loop_failures_total', '{loop="reconciler"}'), 0, 'loop metrics: no failed round');
  const ready = (await api.request('GET', '/readyz', { key: null })).json<{
    loops: Array<{ name: string; state: string; lastSuccessAt?: string }>;
  }>();
  const listed = ready.loops.find((l) => l.name === 'reconciler');
  t.equal(listed?.state, 'running', '/readyz lists the reconciler as running');
  t.ok(listed?.lastSuccessAt, '/readyz gives its last successful round');
  t.equal(
    await metric('provisioner_reconcile_queue', '{state="waiting_capacity"}'),
    0,
    'queue: none waits for capacity',
  );

  engine.setAvailability({ available: false, message: 'no CLI' });
  t.equal(await metric('provisioner_engine_available'), 0, 'engine unavailable: 0');
  await reconciler.stop({ graceMs: 0 });
});
