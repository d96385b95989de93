/**
 * The warm pool (pool/).
 */
import client from 'prom-client';
import type pg from 'pg';
import { poolCounts } from '../store/pool.ts';
import type { Metrics } from './registry.ts';

/**
 * The warm pool (docs/operations.md "Warm pool"): unclaimed entries per plan, version and state and
 * the oldest Ready one's age (read at scrape time), and this replica's signups by where their
 * runtime came from. Answers the signup counter's increment.
 */
export function registerPoolMetrics(
  metrics: Metrics,
  pool: pg.Pool,
  sizes: Readonly<Record<string, number>>,
): (warm: boolean) => void {
  const registers = [metrics.registry];
  new client.Gauge({
    name: 'provisioner_warm_pool_size',
    help: 'Unclaimed Ready entries the warm pool keeps per plan (PROVISIONER_WARM_POOL)',
    labelNames: ['plan'] as const,
    registers,
    collect() {
      this.reset();
      for (const [plan, n] of Object.entries(sizes)) this.set({ plan }, n);
    },
  });
  new client.Gauge({
    name: 'provisioner_warm_pool_entries',
    help: 'Unclaimed warm pool entries by plan, runtime version and state (ready, provisioning, failing)',
    labelNames: ['plan', 'version', 'state'] as const,
    registers,
    async collect() {
      this.reset();
      for (const c of await poolCounts(pool)) {
        this.set({ plan: c.plan, version: c.runtime_version, state: 'ready' }, c.ready);
        this.set({ plan: c.plan, version: c.runtime_version, state: 'provisioning' }, c.provisioning);
        this.set({ plan: c.plan, version: c.runtime_version, state: 'failing' }, c.failing);
      }
    },
  });
  new client.Gauge({
    name: 'provisioner_warm_pool_oldest_ready_seconds',
    help: 'Age of the oldest Ready unclaimed entry, by plan and version',
    labelNames: ['plan', 'version'] as const,
    registers,
    async collect() {
      this.reset();
      for (const c of await poolCounts(pool))
        if (c.oldest_ready_seconds !== null)
          this.set({ plan: c.plan, version: c.runtime_version }, c.oldest_ready_seconds);
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
