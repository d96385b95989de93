/**
 * What tenants cost on the root clusters and how fast they start, per plan (GET /v1/capacity,
 * `provisioner capacity`, the console's Capacity page): tenants awake, asleep and waking with what
 * each reserves (the plan's runtime at the default version, steady state; nothing asleep), the warm
 * pool against its size (per root cluster, and in all), the last day's signups warm and cold, and
 * the last day's wakes.
 */
import type pg from 'pg';
import type { SleepConfig, WarmPoolConfig } from '../config.ts';
import type { Capacity } from '../api/types.ts';
import { sleepCounts, wakeDurations } from '../store/sleep.ts';
import { poolCounts, signupSources } from '../store/pool.ts';
import { listClusters } from '../store/clusters.ts';
import { currentDefaultVersion } from '../runtime-versions/service.ts';
import { planBudget, totals } from '../../runtime/render/budget.ts';
import type { Catalog } from '../../runtime/catalog.ts';
import { PLANS } from '../../tenants/plans.ts';

export interface CapacityServiceOptions {
  pool: pg.Pool;
  catalog: Catalog;
  sleep: SleepConfig;
  warmPool: WarmPoolConfig;
}

export class CapacityService {
  readonly #o: CapacityServiceOptions;

  constructor(o: CapacityServiceOptions) {
    this.#o = o;
  }

  async read(): Promise<Capacity> {
    const ctx = {
      pool: this.#o.pool,
      catalog: this.#o.catalog,
      config: { sleep: this.#o.sleep, warmPool: this.#o.warmPool },
    };
    const [version, sleep, pool, signups, wakes, clusters] = await Promise.all([
      currentDefaultVersion(ctx.pool, ctx.catalog),
      sleepCounts(ctx.pool),
      poolCounts(ctx.pool),
      signupSources(ctx.pool, 24),
      wakeDurations(ctx.pool, 24),
      listClusters(ctx.pool),
    ]);
    const reservation = (cpuMillicores: number, memoryBytes: number) => ({
      cpuMillicores: Math.round(cpuMillicores),
      memoryBytes: Math.round(memoryBytes),
    });
    return {
      defaultVersion: version,
      plans: Object.values(PLANS).map((plan) => {
        const s = sleep.find((x) => x.plan === plan.name) ?? { awake: 0, asleep: 0, waking: 0 };
        const entries = pool.filter((x) => x.plan === plan.name && x.runtime_version === version);
        const sum = (f: (c: (typeof entries)[number]) => number) => entries.reduce((n, c) => n + f(c), 0);
        const oldest = entries.flatMap((c) => (c.oldest_ready_seconds === null ? [] : [c.oldest_ready_seconds]));
        const size = ctx.config.warmPool.size[plan.name] ?? 0;
        const taking = clusters.filter(
          (c) => !c.cordoned && (c.plans.length === 0 || c.plans.includes(plan.name)),
        ).length;
        const g = signups.find((x) => x.plan === plan.name);
        const one = totals(planBudget(plan, version), true);
        const awake = s.awake + s.waking;
        const idle = ctx.config.sleep.idleSeconds[plan.name] ?? 0;
        return {
          plan: plan.name,
          tenants: { awake: s.awake, asleep: s.asleep, waking: s.waking },
          reservation: {
            awakeTenant: reservation(one.requestsCpu, one.requestsMemory),
            asleepTenant: reservation(0, 0),
            now: reservation(awake * one.requestsCpu, awake * one.requestsMemory),
          },
          sleepAfterSeconds: idle > 0 ? idle : null,
          warmPool: {
            size,
            target: size * taking,
            ready: sum((c) => c.ready),
            provisioning: sum((c) => c.provisioning),
            failing: sum((c) => c.failing),
            oldestReadySeconds: oldest.length > 0 ? Math.max(...oldest) : null,
            clusters: entries.map((c) => ({
              cluster: c.cluster ?? '(none)',
              ready: c.ready,
              provisioning: c.provisioning,
              failing: c.failing,
            })),
          },
          signups24h: { warm: g?.warm ?? 0, cold: g?.cold ?? 0 },
        };
      }),
      wakes24h: { count: wakes.count, p50Seconds: wakes.p50, maxSeconds: wakes.max },
    };
  }
}
