/**
 * The warm pool (pool/).
 */
import client from 'prom-client';
import type pg from 'pg';
import { poolCounts } from '../store/pool.ts';
import type { Metrics } from './registry.ts';

/**
 * The warm pool (docs/operations.md "Warm pool"): unclaimed entries per plan, version, state and
 * root cluster and the oldest Ready one's age (read at scrape time), and this replica's signups by
 * where their runtime came from. Answers the signup counter's increment.
 */
export function registerPoolMetrics(
  metrics: Metrics,
  pool: pg.Pool,
  sizes: Readonly<Record<string, number>>,
): (warm: boolean) => void {
  const registers = [metrics.registry];
  new client.Gauge({
    name: 'provisioner_warm_pool_size',
    help: 'Unclaimed Ready entries the warm pool keeps per plan on each root cluster that takes the plan (PROVISIONER_WARM_POOL)',
    labelNames: ['plan'] as const,
    registers,
    collect() {
      this.reset();
      for (const [plan, n] of Object.entries(sizes)) this.set({ plan }, n);
    },
  });
  new client.Gauge({
    name: 'provisioner_warm_pool_entries',
    help: 'Unclaimed warm pool entries by plan, runtime version, state (ready, provisioning, failing) and root cluster',
    labelNames: ['plan', 'version', 'state', 'cluster'] as const,
    registers,
    async collect() {
      this.reset();
      for (const c of await poolCounts(pool)) {
        const at = { plan: c.plan, version: c.runtime_version, cluster: c.cluster ?? '' };
        this.set({ plan: at.plan, version: at.version, state: 'ready', cluster: at.cluster }, c.ready);
        this.set({ plan: at.plan, version: at.version, state: 'provisioning', cluster: at.cluster }, c.provisioning);
        this.set({ plan: at.plan, version: at.version, state: 'failing', cluster: at.cluster }, c.failing);
      }
    },
  });
  new client.Gauge({
    name: 'provisioner_warm_pool_oldest_ready_seconds',
    help: 'Age of the oldest Ready unclaimed entry, by plan and version (all root clusters)',
    labelNames: ['plan', 'version'] as const,
    registers,
    async collect() {
      this.reset();
      const oldest = new Map<string, { plan: string; version: string; seconds: number }>();
      for (const c of await poolCounts(pool)) {
        if (c.oldest_ready_seconds === null) continue;
        const key = `${c.plan}\t${c.runtime_version}`;
        const seen = oldest.get(key);
        if (!seen || c.oldest_ready_seconds > seen.seconds)
          oldest.set(key, { plan: c.plan, version: c.runtime_version, seconds: c.oldest_ready_seconds });
      }
      for (const o of oldest.values()) this.set({ plan: o.plan, version: o.version }, o.seconds);
    },
  });
  const signups = new client.Counter({
    name: 'provisioner_signups_total',
    help: 'Signups this replica served, by where the runtime came from: warm (a pool entry, Ready at once) or cold',
    labelNames: ['source'] as const,
    registers,
  });
  return (warm) => signups.inc({ source: warm ? 'warm' : 'cold' });
}
