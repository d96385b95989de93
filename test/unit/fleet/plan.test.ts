import t from 'tap';
import { DEFAULT_OPTIONS, planFleetUpgrade, waveSizes } from '../../../provisioner/fleet/plan.ts';
import type { Candidate } from '../../../provisioner/store/fleet-upgrades.ts';
import { catalog } from '../../../runtime/catalog.ts';

t.test('wave sizes: a canary, counts, cumulative percentages, and a last wave for what is left', async (t) => {
  t.same(
    waveSizes(100, [{ count: 1 }, { percent: 5 }, { percent: 25 }, { percent: 100 }]),
    [1, 4, 20, 75],
    '5 %, 25 %, 100 % are cumulative',
  );
  t.same(waveSizes(10, [{ count: 2 }, { count: 3 }]), [2, 3, 5], 'what the waves leave over forms a last wave');
  t.same(waveSizes(3, [{ count: 5 }, { percent: 100 }]), [3], 'a canary larger than the fleet takes it all');
  t.same(waveSizes(0, [{ count: 1 }]), [], 'no tenants, no waves');
  t.same(
    waveSizes(10, [{ count: 1 }, { percent: 5 }, { percent: 100 }]),
    [1, 9],
    'a percentage already reached makes no empty wave',
  );
});

t.test('a plan of 10,000 tenants keeps every tenant, with multi-hop paths and waves', async (t) => {
  const candidates: Candidate[] = Array.from({ length: 10_000 }, (_, i) => ({
    id: `t${i}`,
    organization: `o${i}`,
    version: i % 3 === 0 ? '1.3.0' : '1.4.1',
    actualVersion: i % 3 === 0 ? '1.3.0' : '1.4.1',
    phase: 'Ready',
    suspended: i % 100 === 7,
    stalled: false,
    cluster: 'c',
    inFleetUpgrade: null,
  }));
  const plan = planFleetUpgrade(catalog, '1.6.0', candidates, DEFAULT_OPTIONS);
  t.equal(plan.tenants.length + plan.excluded.length, 10_000, 'every candidate is planned or excluded');
  t.equal(plan.excluded.length, 100, 'the suspended ones are excluded');
  t.same(
    plan.tenants.find((p) => p.tenantId === 't3')?.path,
    catalog.upgradePath('1.3.0', '1.6.0').path,
    'multi-hop path',
  );
  t.same(
    plan.waves.map((w) => w.size),
    [1, Math.ceil(9900 * 0.25) - 1, 9900 - Math.ceil(9900 * 0.25)],
    'canary, 25 %, the rest',
  );
  t.equal(plan.waves[0]!.maxConcurrency, 1, "a wave's concurrency is at most its size");
});
