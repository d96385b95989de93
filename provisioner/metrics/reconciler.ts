/**
 * The reconciler: its queue, its attempts and the engine's runs.
 */
import client from 'prom-client';
import type pg from 'pg';
import { openOperationCounts, waitingTenantCounts } from '../store/gauges.ts';
import type { OperationResult } from '../reconciler/reconciler.ts';
import type { Metrics } from './registry.ts';

/** What the reconciler metrics read from the reconciler of this process. */
export interface ReconcilerView {
  readonly engineAvailable: boolean;
  readonly running: readonly string[];
  /** The engine memory budget (MiB; 0: none) and what the running attempts reserve of it. */
  readonly memory: { budgetMb: number; inUseMb: number };
  onOperation: ((kind: string, result: OperationResult, seconds: number) => void) | undefined;
}

/** Seconds an attempt runs: a scripted engine takes milliseconds, a real create of a tenant minutes. */
const ENGINE_RUN_BUCKETS = [0.1, 0.5, 1, 5, 15, 30, 60, 120, 300, 600, 1200, 1800];

/**
 * The reconciler: the queue by state (read from the database at scrape time: operations queued
 * and running, tenants waiting for capacity, for the engine, or for a retry after a failure, and
 * stalled ones), operations this replica finished by kind and result, how long their attempts
 * ran, the leases it holds, and whether its engine is available. Every label takes a handful of
 * fixed values.
 */
export function registerReconcilerMetrics(metrics: Metrics, pool: pg.Pool, reconciler: ReconcilerView): void {
  const registers = [metrics.registry];
  new client.Gauge({
    name: 'provisioner_reconcile_queue',
    help: 'The reconcile queue by state: operations queued or running; tenants waiting_capacity, waiting_engine, retry_backoff or stalled',
    labelNames: ['state'] as const,
    registers,
    async collect() {
      const [o, w] = await Promise.all([openOperationCounts(pool), waitingTenantCounts(pool)]);
      this.set({ state: 'queued' }, o.queued);
      this.set({ state: 'running' }, o.running);
      this.set({ state: 'waiting_capacity' }, w.capacity);
      this.set({ state: 'waiting_engine' }, w.engine);
      this.set({ state: 'retry_backoff' }, w.backoff);
      this.set({ state: 'stalled' }, w.stalled);
    },
  });
  new client.Gauge({
    name: 'provisioner_reconciler_leases',
    help: 'Tenant leases this replica holds (attempts running here)',
    registers,
    collect() {
      this.set(reconciler.running.length);
    },
  });
  new client.Gauge({
    name: 'provisioner_engine_memory_budget_bytes',
    help: "This replica's memory budget for engine runs (PROVISIONER_ENGINE_MEMORY_MB; 0: none)",
    registers,
    collect() {
      this.set(reconciler.memory.budgetMb * 1048576);
    },
  });
  new client.Gauge({
    name: 'provisioner_engine_memory_in_use_bytes',
    help: 'What the engine runs of this replica reserve of its memory budget now (per-kind peak estimates)',
    registers,
    collect() {
      this.set(reconciler.memory.inUseMb * 1048576);
    },
  });
  new client.Gauge({
    name: 'provisioner_engine_available',
    help: "1 when this replica's Pulumi engine can run (CLI and plugins found), else 0",
    registers,
    collect() {
      this.set(reconciler.engineAvailable ? 1 : 0);
    },
  });
  const operations = new client.Counter({
    name: 'provisioner_operations_total',
    help: 'Operations this replica finished, by kind and result (succeeded, failed, cancelled)',
    labelNames: ['kind', 'result'] as const,
    registers,
  });
  const runs = new client.Histogram({
    name: 'provisioner_engine_run_duration_seconds',
    help: 'How long the attempts this replica finished ran (engine and bookkeeping), by kind and result',
    labelNames: ['kind', 'result'] as const,
    buckets: ENGINE_RUN_BUCKETS,
    registers,
  });
  reconciler.onOperation = (kind, result, seconds) => {
    operations.inc({ kind, result });
    runs.observe({ kind, result }, seconds);
  };
}
