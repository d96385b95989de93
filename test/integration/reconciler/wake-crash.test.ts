/**
 * A wake is an operation like the others: a provisioner killed while it wakes a tenant (no outcome
 * written, no lease handed back) leaves it to the next owner, which recovers the stack and finishes
 * the wake: the tenant is Ready, awake, with the runtime up. Real Postgres and reconcilers; the
 * engine is the ScriptedEngine TEST DOUBLE (the doomed worker's never finishes), the real engine
 * and vcluster wake a tenant in test/e2e/hosted-runtime.test.ts.
 */
import t from 'tap';
import { createHarness, scripted } from './harness.ts';
import { until } from '../../../sandbox/until.ts';
import { expireLease } from '../../helpers/tenants.ts';
import { EngineError } from '../../../provisioner/engine/engine.ts';

t.setTimeout(300_000);
const h = await createHarness();
t.teardown(() => h.close());
await h.addCluster('root-wake', { capacity: 100 });

/**
 * A Ready tenant put to sleep by reconciler `owner` (stopped afterwards), then woken by a doomed
 * worker `doomedOwner` killed once its engine run started: the wake's lease is left held.
 */
async function wakeKilledMidway(
  owner: string,
  doomedOwner: string,
): Promise<{ id: string; wake: string; phase: string }> {
  const { id } = await h.createTenant();
  const first = await h.reconciler(scripted(), { owner });
  await until('Ready', 10_000, async () => (await h.tenant(id)).phase === 'Ready');
  await h.change(id, { sleeping: true }, 'sleep');
  await until('asleep', 10_000, async () => {
    const row = await h.tenant(id);
    return row.phase === 'Sleeping' && row.observed_generation === row.generation;
  });
  await first.stop({ graceMs: 0 });
  const doomed = await h.doomedWorker({ owner: doomedOwner, leaseTtlMs: 60_000 });
  const wake = await h.change(id, { sleeping: false }, 'wake');
  await doomed.started(id);
  const phase = (await h.tenant(id)).phase;
  await doomed.kill();
  return { id, wake, phase };
}

t.test('a provisioner killed during a wake: the survivor finishes the wake', async (t) => {
  const { id, wake, phase } = await wakeKilledMidway('first', 'dies-while-waking');
  t.equal(phase, 'Waking', 'the wake runs: phase Waking');
  t.equal((await h.tenant(id)).lease_owner, 'dies-while-waking', 'the dead provisioner still holds the lease');

  const engine = scripted();
  const survivor = await h.reconciler(engine, { owner: 'survivor', pollMs: 50 });
  // Stopped when this test ends: left running, it would claim the next test's wake before its doomed worker.
  t.teardown(() => survivor.stop({ graceMs: 0 }));
  // The lease's TTL passing, without sleeping it.
  await expireLease(h.db.pool, id);
  const row = await until('Ready after the takeover', 10_000, async () => {
    const x = await h.tenant(id);
    return x.phase === 'Ready' && x;
  });
  t.equal(row.sleeping, false, 'awake');
  t.equal(row.observed_generation, row.generation, 'the wake is applied');
  const calls = engine.callsFor(id);
  t.same(
    calls.map((c) => c.kind),
    ['cancel', 'interrupted', 'refresh', 'up'],
    'the survivor recovered the stack first, then ran the wake',
  );
  t.equal(calls.at(-1)?.input.suspended, false, 'with the runtime up');
  const op = (await h.operations(id)).find((o) => o.id === wake);
  t.match(op, { kind: 'wake', state: 'succeeded', owner: 'survivor' }, 'the wake operation finished by the survivor');
  t.ok((op?.attempt ?? 0) >= 2, 'in a second attempt');
});

t.test(
  'killed before the vcluster came back: the recovery refresh that cannot reach it reads the root cluster only, and the wake finishes',
  async (t) => {
    const { id, wake } = await wakeKilledMidway('first-2', 'dies-early-in-wake');

    // The real engine's refresh of a stack whose vcluster is still scaled to zero: its provider
    // cannot reach the vcluster's API server.
    const engine = scripted({
      script: (call) =>
        call.kind === 'refresh' && !call.rootClusterOnly
          ? {
              fail: new EngineError(
                'ProgramFailed',
                'error: configured Kubernetes cluster is unreachable: unable to load schema information from the API server',
              ),
            }
          : undefined,
    });
    const survivor = await h.reconciler(engine, { owner: 'survivor-2', pollMs: 50 });
    t.teardown(() => survivor.stop({ graceMs: 0 }));
    await expireLease(h.db.pool, id);
    const row = await until('Ready after the takeover', 10_000, async () => {
      const x = await h.tenant(id);
      return (x.phase === 'Ready' || x.phase === 'Failed') && x;
    });
    t.equal(row.phase, 'Ready', 'the wake finished: Ready');
    t.equal(row.sleeping, false, 'awake');
    const calls = engine.callsFor(id);
    t.same(
      calls.map((c) => `${c.kind}${c.rootClusterOnly ? ' (root cluster only)' : ''}`),
      ['cancel', 'interrupted', 'refresh', 'refresh (root cluster only)', 'up'],
      'the full refresh failed, the root cluster was read, then the wake ran',
    );
    t.ok(
      calls.filter((c) => c.kind === 'refresh').every((c) => c.clearPendingCreates),
      'both refreshes clear pending creates',
    );
    const op = (await h.operations(id)).find((o) => o.id === wake);
    t.match(op, { kind: 'wake', state: 'succeeded', owner: 'survivor-2' }, 'the wake operation succeeded');
    const lines = await h.logLines(wake);
    t.ok(
      lines.some((l) =>
        /recovery: refresh failed \(.*unreachable.*\): refreshing the root cluster's resources only/.test(l),
      ),
      'its log says why only the root cluster was read',
    );
  },
);
