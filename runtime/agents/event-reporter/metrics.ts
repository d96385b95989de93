/** Prometheus metrics of one event reporter replica (served at /metrics). */
import client from 'prom-client';

export interface ReporterMetrics {
  registry: client.Registry;
  coalesced: client.Counter;
  reportsSent: client.Counter<'type'>;
  reportsFailed: client.Counter<'reason'>;
  batches: client.Counter<'result'>;
  deliveryLag: client.Histogram;
  watchRestarts: client.Counter<'kind' | 'reason'>;
  relists: client.Counter<'kind'>;
  backPressurePauses: client.Counter<'kind'>;
  membershipChanges: client.Counter;
  changeLookups: client.Counter<'result'>;
  changeLookupSeconds: client.Histogram;
}

export interface ReporterGauges {
  queueDepth(): number;
  oldestPendingSeconds(): number;
  ownedObjects(): Partial<Record<string, number>>;
  members(): number;
}

export function createMetrics(gauges: ReporterGauges): ReporterMetrics {
  const registry = new client.Registry();
  client.collectDefaultMetrics({ register: registry, prefix: 'event_reporter_' });
  const registers = [registry];
  new client.Gauge({
    name: 'event_reporter_queue_depth',
    help: 'Distinct objects waiting for delivery',
    registers,
    collect() {
      this.set(gauges.queueDepth());
    },
  });
  new client.Gauge({
    name: 'event_reporter_oldest_pending_seconds',
    help: 'Age of the oldest object waiting for delivery (the reporting lag)',
    registers,
    collect() {
      this.set(gauges.oldestPendingSeconds());
    },
  });
  new client.Gauge({
    name: 'event_reporter_owned_objects',
    help: 'Objects this replica owns, by kind',
    labelNames: ['kind'] as const,
    registers,
    collect() {
      this.reset();
      for (const [kind, n] of Object.entries(gauges.ownedObjects())) this.set({ kind }, n ?? 0);
    },
  });
  new client.Gauge({
    name: 'event_reporter_members',
    help: 'Live replicas this replica sees (its own Lease included while it holds it)',
    registers,
    collect() {
      this.set(gauges.members());
    },
  });
  return {
    registry,
    coalesced: new client.Counter({
      name: 'event_reporter_coalesced_updates_total',
      help: 'Updates that replaced a not yet delivered state of the same object',
      registers,
    }),
    reportsSent: new client.Counter({
      name: 'event_reporter_reports_sent_total',
      help: 'Object states delivered (acknowledged by the control plane), by item type',
      labelNames: ['type'] as const,
      registers,
    }),
    reportsFailed: new client.Counter({
      name: 'event_reporter_reports_failed_total',
      help: 'Object states given up on: rejected by the control plane with a 4xx that retrying cannot fix',
      labelNames: ['reason'] as const,
      registers,
    }),
    batches: new client.Counter({
      name: 'event_reporter_batches_total',
      help: 'Batches posted, by result (ok, retry, rejected)',
      labelNames: ['result'] as const,
      registers,
    }),
    deliveryLag: new client.Histogram({
      name: 'event_reporter_delivery_lag_seconds',
      help: 'From seeing a state in the watch to its acknowledgement by the control plane',
      buckets: [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300],
      registers,
    }),
    watchRestarts: new client.Counter({
      name: 'event_reporter_watch_restarts_total',
      help: 'Watches started again, by kind and reason (closed, error, gone, paused)',
      labelNames: ['kind', 'reason'] as const,
      registers,
    }),
    relists: new client.Counter({
      name: 'event_reporter_relists_total',
      help: 'Full lists of a kind (at start and after 410 Gone)',
      labelNames: ['kind'] as const,
      registers,
    }),
    backPressurePauses: new client.Counter({
      name: 'event_reporter_back_pressure_pauses_total',
      help: 'Times a watch was paused because the queue was full',
      labelNames: ['kind'] as const,
      registers,
    }),
    membershipChanges: new client.Counter({
      name: 'event_reporter_membership_changes_total',
      help: 'Changes of the live replica set seen by this replica',
      registers,
    }),
    changeLookups: new client.Counter({
      name: 'event_reporter_change_lookups_total',
      help: 'Questions to the Source Server about what changed an Application, by result (ok, error, too_large)',
      labelNames: ['result'] as const,
      registers,
    }),
    changeLookupSeconds: new client.Histogram({
      name: 'event_reporter_change_lookup_seconds',
      help: 'Time the Source Server took to say what changed an Application (failures included)',
      buckets: [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
      registers,
    }),
  };
}
