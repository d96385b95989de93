/**
 * Tenants and runtimes: how many in each phase, mode and state (read from the database at scrape
 * time).
 */
import client from 'prom-client';
import type pg from 'pg';
import { tenantsByPhase } from '../store/gauges.ts';
import { runtimesByModeAndState } from '../store/runtimes.ts';

/** Tenants by phase and runtimes by mode and state, read from the database at scrape time. */
export function registerTenantMetrics(registry: client.Registry, pool: pg.Pool): void {
  new client.Gauge({
    name: 'provisioner_tenants',
    help: 'Tenants by phase',
    labelNames: ['phase'] as const,
    registers: [registry],
    async collect() {
      this.reset();
      for (const r of await tenantsByPhase(pool)) this.set({ phase: r.phase }, r.n);
    },
  });
  new client.Gauge({
    name: 'provisioner_runtimes',
    help: "Runtimes not removed, by mode (hosted, hybrid) and state (a hosted runtime's is its tenant's phase)",
    labelNames: ['mode', 'state'] as const,
    registers: [registry],
    async collect() {
      this.reset();
      for (const r of await runtimesByModeAndState(pool)) this.set({ mode: r.mode, state: r.state }, r.n);
    },
  });
}
