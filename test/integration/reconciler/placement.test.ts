import t from 'tap';
import { backoffMs } from '../../../provisioner/reconciler/backoff.ts';
import { choosePlacement, type ClusterLoad } from '../../../provisioner/reconciler/placement.ts';
import { setCordoned } from '../../../provisioner/store/clusters.ts';
import { createHarness, scripted } from './harness.ts';
import { until } from '../../../sandbox/until.ts';
import { setAllClustersCordoned } from '../../helpers/clusters.ts';

const FREE = { plan: 'free', region: null };
const cluster = (o: Partial<ClusterLoad> & { name: string }): ClusterLoad => ({
  id: o.name,
  region: 'eu-1',
  capacity: 10,
  plans: [],
  cordoned: false,
  tenants: 0,
  leases: 0,
  ...o,
});

t.test('placement rules (pure)', async (t) => {
  t.match(
    choosePlacement([cluster({ name: 'a', tenants: 5 }), cluster({ name: 'b', tenants: 2 })], FREE, 4),
    { kind: 'placed', clusterId: 'b' },
    'least loaded',
  );
  t.match(
    choosePlacement(
      [cluster({ name: 'a', tenants: 5, capacity: 100 }), cluster({ name: 'b', tenants: 2, capacity: 4 })],
      FREE,
      4,
    ),
    { kind: 'placed', clusterId: 'a' },
    'load is relative to capacity',
  );
  t.match(
    choosePlacement([cluster({ name: 'a', cordoned: true }), cluster({ name: 'b', tenants: 9 })], FREE, 4),
    { kind: 'placed', clusterId: 'b' },
    'cordoned skipped',
  );
  t.match(choosePlacement([cluster({ name: 'a', plans: ['enterprise'] })], FREE, 4), {
    kind: 'no-capacity',
    message: /plan free not allowed/,
  });
  t.match(choosePlacement([cluster({ name: 'a', tenants: 10 })], FREE, 4), {
    kind: 'no-capacity',
    message: /full \(10\/10\)/,
  });
  t.match(choosePlacement([], FREE, 4), { kind: 'no-capacity', message: /no root cluster is registered/ });
  t.match(
    choosePlacement([cluster({ name: 'a', leases: 4 })], FREE, 4),
    { kind: 'busy' },
    'eligible but at its parallelism',
  );
  const regions = [
    cluster({ name: 'eu', region: 'eu-1', tenants: 8 }),
    cluster({ name: 'us', region: 'us-1', tenants: 1 }),
  ];
  t.match(
    choosePlacement(regions, { plan: 'free', region: 'eu-1' }, 4),
    { kind: 'placed', clusterId: 'eu' },
    'a region constraint beats load',
  );
  t.match(choosePlacement(regions, FREE, 4), { kind: 'placed', clusterId: 'us' }, 'no region: any cluster');
  t.match(
    choosePlacement(
      [cluster({ name: 'eu', region: 'eu-1', tenants: 10 }), cluster({ name: 'us', region: 'us-1' })],
      { plan: 'free', region: 'eu-1' },
      4,
    ),
    { kind: 'no-capacity', message: /a free tenant in region eu-1 \(eu: full \(10\/10\); us: region us-1\)/ },
    'a full region is not spilled into another',
  );
});

t.test('backoff: 10 s × 3^(n-1), capped, jitter never exceeds the cap', async (t) => {
  const o = { baseMs: 10_000, capMs: 600_000, jitter: 0 };
  t.same(
    [1, 2, 3, 4, 5, 6].map((n) => backoffMs(n, o)),
    [10_000, 30_000, 90_000, 270_000, 600_000, 600_000],
  );
  t.equal(
    backoffMs(1, { ...o, jitter: 0.2 }, () => 1),
    12_000,
  );
  t.equal(
    backoffMs(9, { ...o, jitter: 0.2 }, () => 1),
    600_000,
  );
});

const h = await createHarness();
t.teardown(() => h.close());

t.test('placement, capacity, cordon and NoCapacity against the database', async (t) => {
  const engine = scripted();
  const small = await h.addCluster('root-small', { capacity: 2 });
  const big = await h.addCluster('root-big', { capacity: 10, plans: ['team', 'enterprise'] });
  const r = await h.reconciler(engine);
  const first = await h.createTenant({ plan: 'free' });
  await until('placed', 10_000, async () => (await h.tenant(first.id)).phase === 'Ready');
  t.equal((await h.tenant(first.id)).cluster_id, small, 'free plan goes where free is allowed');
  const team = await h.createTenant({ plan: 'team' });
  await until('placed', 10_000, async () => (await h.tenant(team.id)).phase === 'Ready');
  t.equal((await h.tenant(team.id)).cluster_id, big, 'least loaded eligible cluster (0/10 beats 1/2)');
  const second = await h.createTenant({ plan: 'free' });
  await until('placed', 10_000, async () => (await h.tenant(second.id)).phase === 'Ready');
  t.equal((await h.tenant(second.id)).cluster_id, small);

  const third = await h.createTenant({ plan: 'free' });
  const row = await until('NoCapacity', 10_000, async () => {
    const x = await h.tenant(third.id);
    return x.conditions.some((c) => c.type === 'Ready' && c.reason === 'NoCapacity') && x;
  });
  t.equal(row.phase, 'Pending');
  t.equal(row.cluster_id, null);
  t.equal(row.consecutive_failures, 0, 'waiting for capacity is not counted as a failure');
  const why = row.conditions.find((c) => c.reason === 'NoCapacity')?.message ?? '';
  t.match(why, /root-small: full \(2\/2\)/);
  t.match(why, /root-big: plan free not allowed/);
  t.ok(row.next_attempt_at, 'retried later');
  t.equal((await h.operations(third.id))[0]!.state, 'queued', 'its create stays queued');
  t.equal(engine.callsFor(third.id).length, 0);

  // Deleting a tenant frees a slot; the waiting tenant is placed on the next retry.
  await h.change(first.id, { deleted: true }, 'delete');
  const placed = await until('placed after a slot freed', 10_000, async () => {
    const x = await h.tenant(third.id);
    return x.phase === 'Ready' && x;
  });
  t.equal(placed.cluster_id, small);

  // Cordon: no new tenants, existing ones stay (sticky).
  await setCordoned(h.db.pool, 'root-big', true);
  const fourth = await h.createTenant({ plan: 'team' });
  await until('NoCapacity on cordon', 10_000, async () =>
    (await h.tenant(fourth.id)).conditions.some((c) => c.reason === 'NoCapacity'),
  );
  t.match((await h.tenant(fourth.id)).conditions.find((c) => c.reason === 'NoCapacity')?.message, /root-big: cordoned/);
  await h.change(team.id, { runtimeVersion: '1.1.0' }, 'upgrade');
  await until('upgrade applied', 10_000, async () => (await h.tenant(team.id)).observed_generation === 2);
  t.equal((await h.tenant(team.id)).cluster_id, big, 'placement is sticky, even on a cordoned cluster');
  await setCordoned(h.db.pool, 'root-big', false);
  await until('placed after uncordon', 10_000, async () => (await h.tenant(fourth.id)).phase === 'Ready');
  await r.stop();
});

t.test('a tenant deleted before it was ever placed is marked Deleted without the engine', async (t) => {
  const engine = scripted();
  await setAllClustersCordoned(h.db.pool, true);
  t.teardown(() => setAllClustersCordoned(h.db.pool, false));
  const r = await h.reconciler(engine);
  const x = await h.createTenant({ plan: 'free' });
  await until('NoCapacity', 10_000, async () =>
    (await h.tenant(x.id)).conditions.some((c) => c.reason === 'NoCapacity'),
  );
  await h.change(x.id, { deleted: true }, 'delete');
  const row = await until('Deleted', 10_000, async () => {
    const y = await h.tenant(x.id);
    return y.phase === 'Deleted' && y;
  });
  t.equal(row.cluster_id, null);
  t.equal(engine.callsFor(x.id).length, 0);
  const ops = await h.operations(x.id);
  t.same(
    ops.map((o) => o.state),
    ['superseded', 'succeeded'],
    'the create is coalesced into the delete',
  );
  await r.stop();
});

t.test(
  'a region constraint: placed in its region even when another is emptier; none there → NoCapacity naming the region',
  async (t) => {
    const engine = scripted();
    const us = await h.addCluster('root-us', { capacity: 10, region: 'us-9' });
    await h.addCluster('root-eu-empty', { capacity: 100, region: 'eu-9' });
    const r = await h.reconciler(engine);
    const inUs = await h.createTenant({ plan: 'free', region: 'us-9' });
    await until('placed', 10_000, async () => (await h.tenant(inUs.id)).phase === 'Ready');
    t.equal((await h.tenant(inUs.id)).cluster_id, us);
    const nowhere = await h.createTenant({ plan: 'free', region: 'ap-9' });
    const row = await until('NoCapacity', 10_000, async () => {
      const x = await h.tenant(nowhere.id);
      return x.conditions.some((c) => c.reason === 'NoCapacity') && x;
    });
    t.match(
      row.conditions.find((c) => c.reason === 'NoCapacity')?.message,
      /no root cluster can take a free tenant in region ap-9 \(.*root-us: region us-9/,
    );
    t.equal(row.cluster_id, null);
    await r.stop();
  },
);
