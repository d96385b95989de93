/**
 * What tenants cost on the root clusters and how fast they start, per plan (GET /v1/capacity,
 * `provisioner capacity`, the console's Capacity page): tenants awake, asleep and waking with what
 * each reserves (the plan's runtime at the default version, steady state; nothing asleep), the warm
 * pool against its size, the last day's signups warm and cold, and the last day's wakes.
 */
import type pg from 'pg';
import type { SleepConfig, WarmPoolConfig } from '../config.ts';
import type { Capacity } from '../http/api-types.ts';
import { sleepCounts, wakeDurations } from '../store/sleep.ts';
import { poolCounts, signupSources } from '../store/pool.ts';
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
    const [version, sleep, pool, signups, wakes] = await Promise.all([
      currentDefaultVersion(ctx.pool, ctx.catalog),
      sleepCounts(ctx.pool),
      poolCounts(ctx.pool),
      signupSources(ctx.pool, 24),
      wakeDurations(ctx.pool, 24),
    ]);
    const reservation = (cpuMillicores: number, memoryBytes: number) => ({
      cpuMillicores: Math.round(cpuMillicores),
      memoryBytes: Math.round(memoryBytes),
    });
    return {
      defaultVersion: version,
      plans: Object.values(PLANS).map((plan) => {
        const s = sleep.find((x) => x.plan === plan.name) ?? { awake: 0, asleep: 0, waking: 0 };
        const p = pool.find((x) => x.plan === plan.name && x.runtime_version === version);
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
            size: ctx.config.warmPool.size[plan.name] ?? 0,
            ready: p?.ready ?? 0,
            provisioning: p?.provisioning ?? 0,
            failing: p?.failing ?? 0,
            oldestReadySeconds: p?.oldest_ready_seconds ?? null,
          },
          signups24h: { warm: g?.warm ?? 0, cold: g?.cold ?? 0 },
        };
      }),
      wakes24h: { count: wakes.count, p50Seconds: wakes.p50, maxSeconds: wakes.max },
    };
  }
}
