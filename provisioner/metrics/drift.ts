/**
 * Drift: what this replica's resyncs found, and the root-cluster watch (drift-watch/).
 */
import client from 'prom-client';
import type { Metrics } from './registry.ts';

/** What the drift counters read from the reconciler (ReconcilerStats). */
export interface DriftStats {
  resyncsWithDrift: number;
  drift: ReadonlyMap<string, { kind: string; change: string; count: number }>;
}

/**
 * Drift found by this replica's resyncs: resyncs whose refresh found drift, and the drifted
 * objects by kind and change (`deleted`, `changed`). The operation log names each object.
 */
export function registerDriftMetrics(metrics: Metrics, stats: DriftStats): void {
  const registers = [metrics.registry];
  new client.Counter({
    name: 'provisioner_resyncs_with_drift_total',
    help: 'Resyncs whose refresh found a managed object deleted or changed by hand',
    registers,
    collect() {
      this.reset();
      this.inc(stats.resyncsWithDrift);
    },
  });
  new client.Counter({
    name: 'provisioner_drifted_objects_total',
    help: 'Managed objects found deleted or changed by hand by a resync, by kind and change',
    labelNames: ['kind', 'change'] as const,
    registers,
    collect() {
      this.reset();
      for (const d of stats.drift.values()) this.inc({ kind: d.kind, change: d.change }, d.count);
    },
  });
}

/** What the root-cluster watch metrics read (DriftWatch). */
export interface DriftWatchView {
  stats: {
    events: { changed: number; unchanged: number; ignored: number };
    requested: number;
    restarts: number;
  };
  status(): Array<{ cluster: string; kind: string; synced: boolean; objects: number }>;
}

/**
 * The root-cluster watch of this replica: watch events by what they were (`changed`: a tenant's
 * object created, changed or deleted; `unchanged`: status or server-set fields only; `ignored`:
 * not a tenant's object), resyncs it requested, watch restarts, and per cluster and kind the
 * objects it knows and whether its first list is done.
 */
export function registerDriftWatchMetrics(metrics: Metrics, watch: DriftWatchView): void {
  const registers = [metrics.registry];
  new client.Counter({
    name: 'provisioner_drift_watch_events_total',
    help: 'Root-cluster watch events by result (changed, unchanged, ignored)',
    labelNames: ['result'] as const,
    registers,
    collect() {
      this.reset();
      for (const [result, n] of Object.entries(watch.stats.events)) this.inc({ result }, n);
    },
  });
  new client.Counter({
    name: 'provisioner_drift_watch_resyncs_requested_total',
    help: 'Tenant resyncs requested by the root-cluster watch',
    registers,
    collect() {
      this.reset();
      this.inc(watch.stats.requested);
    },
  });
  new client.Counter({
    name: 'provisioner_drift_watch_restarts_total',
    help: 'Root-cluster watches restarted (error, closed, or resourceVersion gone)',
    registers,
    collect() {
      this.reset();
      this.inc(watch.stats.restarts);
    },
  });
  new client.Gauge({
    name: 'provisioner_drift_watch_objects',
    help: 'Tenant objects the root-cluster watch knows, by cluster and kind',
    labelNames: ['cluster', 'kind'] as const,
    registers,
    collect() {
      this.reset();
      for (const s of watch.status()) this.set({ cluster: s.cluster, kind: s.kind }, s.objects);
    },
  });
  new client.Gauge({
    name: 'provisioner_drift_watch_synced',
    help: '1 when the first list of the kind on the cluster is done (the watch is live)',
    labelNames: ['cluster', 'kind'] as const,
    registers,
    collect() {
      this.reset();
      for (const s of watch.status()) this.set({ cluster: s.cluster, kind: s.kind }, s.synced ? 1 : 0);
    },
  });
}
