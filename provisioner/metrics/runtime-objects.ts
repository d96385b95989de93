/**
 * The application state runtimes report (runtime-objects/).
 */
import client from 'prom-client';
import type pg from 'pg';
import { liveReportedObjects, staleReportingTenants } from '../store/gauges.ts';
import type { Metrics } from './registry.ts';

/** How many tenants the objects gauge names one by one (the largest); the rest only count in the total. */
export const TOP_TENANTS = 10;

/**
 * The application state runtimes report: items received and how they ended (`applied`, `stale`:
 * not newer than the stored state), objects removed by digests, batch sizes; and, read from the
 * reporters' heartbeats at scrape time (a small table, not the objects), the objects reporters own
 * in total and for the TOP_TENANTS largest tenants (a label per tenant would be 10,000 series), and
 * the runtimes whose reporter went stale.
 */
export function registerRuntimeObjectMetrics(
  metrics: Metrics,
  pool: pg.Pool,
  staleAfterSeconds: number,
): {
  onBatch(r: { items: number; applied: number; stale: number; removedByDigest: number }): void;
  onPurged(n: number): void;
  onRefused(budget: IngestBudget): void;
} {
  const registers = [metrics.registry];
  const items = new client.Counter({
    name: 'provisioner_runtime_event_items_total',
    help: 'Event reporter items received, by result: applied, or stale (not newer than the stored state)',
    labelNames: ['result'] as const,
    registers,
  });
  const removed = new client.Counter({
    name: 'provisioner_runtime_objects_removed_by_digest_total',
    help: 'Objects removed because a digest no longer listed them (deleted while the control plane could not hear)',
    registers,
  });
  const purged = new client.Counter({
    name: 'provisioner_runtime_object_tombstones_purged_total',
    help: 'Tombstones of deleted runtime objects purged after PROVISIONER_TOMBSTONE_RETENTION_HOURS (by this replica)',
    registers,
  });
  const refused = new client.Counter({
    name: 'provisioner_runtime_event_batches_refused_total',
    help: "Event batches refused by a tenant budget: objects or bytes (the batch would take the tenant's stored objects over its budget), batch_rate, digest_rate or in_flight (429)",
    labelNames: ['budget'] as const,
    registers,
  });
  for (const budget of ['objects', 'bytes', 'batch_rate', 'digest_rate', 'in_flight'] as const)
    refused.inc({ budget }, 0);
  const batchSize = new client.Histogram({
    name: 'provisioner_runtime_event_batch_items',
    help: 'Items per event batch',
    buckets: [0, 1, 10, 50, 100, 250, 500],
    registers,
  });
  new client.Gauge({
    name: 'provisioner_runtime_objects',
    help: 'Objects owned by live event reporters (heartbeats within the stale window): in total (tenant="") and for the largest tenants',
    labelNames: ['tenant'] as const,
    registers,
    async collect() {
      this.reset();
      for (const r of await liveReportedObjects(pool, staleAfterSeconds, TOP_TENANTS))
        this.set({ tenant: r.tenant }, r.n);
    },
  });
  new client.Gauge({
    name: 'provisioner_runtime_reporting_stale',
    help: 'Tenants (not deleted) whose event reporter has sent nothing within the stale window',
    registers,
    async collect() {
      this.set(await staleReportingTenants(pool, staleAfterSeconds));
    },
  });
  return {
    onBatch(r) {
      batchSize.observe(r.items);
      if (r.applied) items.inc({ result: 'applied' }, r.applied);
      if (r.stale) items.inc({ result: 'stale' }, r.stale);
      if (r.removedByDigest) removed.inc(r.removedByDigest);
    },
    onPurged(n) {
      purged.inc(n);
    },
    onRefused(budget) {
      refused.inc({ budget });
    },
  };
}

/** The budget an event batch was refused by (docs/security.md). */
export type IngestBudget = 'objects' | 'bytes' | 'batch_rate' | 'digest_rate' | 'in_flight';
