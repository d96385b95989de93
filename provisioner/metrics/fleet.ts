/**
 * Fleet upgrades (fleet/).
 */
import client from 'prom-client';
import type pg from 'pg';
import { activeFleetTenantsByState, fleetUpgradesByState } from '../store/gauges.ts';
import type { Metrics } from './registry.ts';

/** What the fleet metrics read from this process's fleet upgrade driver. */
export interface FleetDriverView {
  stats: { ticks: number; lastTickMs: number; maxTickMs: number; decisions: Map<string, number> };
}

/**
 * Fleet upgrades (docs/fleet-upgrades.md): fleet upgrades by state and the tenants of the active
 * ones by state, read at scrape time; this process's driver decisions and tick durations.
 */
export function registerFleetMetrics(metrics: Metrics, pool: pg.Pool, driver: FleetDriverView | undefined): void {
  const registers = [metrics.registry];
  new client.Gauge({
    name: 'provisioner_fleet_upgrades',
    help: 'Fleet upgrades by state',
    labelNames: ['state'] as const,
    registers,
    async collect() {
      this.reset();
      for (const r of await fleetUpgradesByState(pool)) this.set({ state: r.state }, r.n);
    },
  });
  new client.Gauge({
    name: 'provisioner_fleet_upgrade_tenants',
    help: 'Tenants of the fleet upgrades not finished, by their state in the fleet upgrade',
    labelNames: ['state'] as const,
    registers,
    async collect() {
      this.reset();
      for (const r of await activeFleetTenantsByState(pool)) this.set({ state: r.state }, r.n);
    },
  });
  if (!driver) return;
  new client.Counter({
    name: 'provisioner_fleet_decisions_total',
    help: "Decisions of this process's fleet upgrade driver (started, hop, succeeded, rollback, quarantined, halted, wave_completed, completed, revert, reverted, left, skipped, aborted)",
    labelNames: ['decision'] as const,
    registers,
    collect() {
      this.reset();
      for (const [decision, n] of driver.stats.decisions) this.inc({ decision }, n);
    },
  });
  new client.Gauge({
    name: 'provisioner_fleet_tick_seconds',
    help: "The fleet upgrade driver's decision rounds in this process: the last and the slowest, in seconds",
    labelNames: ['which'] as const,
    registers,
    collect() {
      this.set({ which: 'last' }, driver.stats.lastTickMs / 1000);
      this.set({ which: 'max' }, driver.stats.maxTickMs / 1000);
    },
  });
}
