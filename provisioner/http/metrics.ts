/**
 * Prometheus metrics: process defaults, HTTP request durations by route and status, and the
 * number of tenants per phase (read from the database at scrape time); the runtime tunnels of
 * this replica (registerTunnelMetrics); the batched hot reads (registerReadMetrics); the actions on
 * runtime objects (registerRuntimeActionMetrics); the reconciler (registerReconcilerMetrics).
 */
import {
  activeFleetTenantsByState,
  fleetUpgradesByState,
  liveReportedObjects,
  openOperationCounts,
  staleReportingTenants,
  tenantsByPhase,
  waitingTenantCounts,
} from '../store/gauges.ts';
import { runtimesByModeAndState } from '../store/runtimes.ts';
import { sleepCounts } from '../store/sleep.ts';
import { poolCounts } from '../store/pool.ts';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import client from 'prom-client';
import type pg from 'pg';
import type { TunnelServer } from '../tunnel/index.ts';
import type { HotReads } from '../store/batched-reads.ts';
import type { OperationResult } from '../reconciler/reconciler.ts';
import type { LoopStatus } from '../../runtime/loops/health.ts';

export interface Metrics {
  registry: client.Registry;
  httpDuration: client.Histogram<'method' | 'route' | 'status'>;
  /** Stops sampling the event-loop delay. */
  close(): void;
}

/** How often the event-loop delay histogram gets an observation: the worst delay of each period. */
export const EVENT_LOOP_SAMPLE_MS = 1000;

/**
 * `provisioner_event_loop_delay_seconds`: once a second, the longest the event loop was held in
 * that second (perf_hooks.monitorEventLoopDelay at 10 ms resolution, its max, then reset). A
 * request that holds the loop holds every tenant's requests, tunnel heartbeats and lease renewals:
 * the share of seconds above 0.1 s is what to alert on (docs/operations.md). prom-client's default
 * `provisioner_nodejs_eventloop_lag_*` gauges are the same monitor's figures since start.
 */
function sampleEventLoopDelay(registry: client.Registry): () => void {
  const histogram = new client.Histogram({
    name: 'provisioner_event_loop_delay_seconds',
    help: 'The longest the event loop was held within each second (one observation per second; monitorEventLoopDelay, 10 ms resolution)',
    buckets: [0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
    registers: [registry],
  });
  const monitor = monitorEventLoopDelay({ resolution: 10 });
  monitor.enable();
  const timer = setInterval(() => {
    histogram.observe(monitor.max / 1e9);
    monitor.reset();
  }, EVENT_LOOP_SAMPLE_MS);
  timer.unref();
  return () => {
    clearInterval(timer);
    monitor.disable();
  };
}

export function createMetrics(pool: pg.Pool): Metrics {
  const registry = new client.Registry();
  client.collectDefaultMetrics({ register: registry, prefix: 'provisioner_' });
  const close = sampleEventLoopDelay(registry);
  const httpDuration = new client.Histogram({
    name: 'provisioner_http_request_duration_seconds',
    help: 'HTTP request duration by route and status',
    labelNames: ['method', 'route', 'status'] as const,
    buckets: [0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5],
    registers: [registry],
  });
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
  return { registry, httpDuration, close };
}

/** Outcomes of relaying a request to the replica that holds the runtime's tunnel. */
export type RelayOutcome = 'relayed' | 'unreachable';

/**
 * Tunnels held by this replica, their open streams and buffered bytes (read at scrape time),
 * tunnel connects/disconnects by close code, and requests relayed to other replicas. Returns the
 * relay counter's increment.
 */
export function registerTunnelMetrics(metrics: Metrics, tunnel: TunnelServer): (outcome: RelayOutcome) => void {
  const registers = [metrics.registry];
  const gauge = (name: string, help: string, read: () => number): void => {
    new client.Gauge({
      name,
      help,
      registers,
      collect() {
        this.set(read());
      },
    });
  };
  gauge('provisioner_tunnels', 'Runtime tunnels connected to this replica', () => tunnel.stats().tunnels);
  gauge(
    'provisioner_tunnel_streams',
    "Requests in flight through this replica's tunnels",
    () => tunnel.stats().streams,
  );
  gauge(
    'provisioner_tunnel_buffered_bytes',
    'Body bytes this replica holds for tunnel streams',
    () => tunnel.stats().bufferedBytes,
  );
  const connects = new client.Counter({
    name: 'provisioner_tunnel_connects_total',
    help: "Runtime tunnels that connected to this replica, by the runtime's mode (hosted, hybrid)",
    labelNames: ['mode'] as const,
    registers,
  });
  const disconnects = new client.Counter({
    name: 'provisioner_tunnel_disconnects_total',
    help: "Runtime tunnels closed, by the runtime's mode and the WebSocket close code",
    labelNames: ['mode', 'code'] as const,
    registers,
  });
  tunnel.events.on('connect', () => connects.inc({ mode: 'hosted' }));
  tunnel.events.on('disconnect', (_id, code) => disconnects.inc({ mode: 'hosted', code: String(code) }));
  tunnel.events.on('hybrid-connect', () => connects.inc({ mode: 'hybrid' }));
  tunnel.events.on('hybrid-disconnect', (_id, code) => disconnects.inc({ mode: 'hybrid', code: String(code) }));
  const relays = new client.Counter({
    name: 'provisioner_tunnel_relays_total',
    help: "Requests relayed to the replica holding the runtime's tunnel, by outcome",
    labelNames: ['outcome'] as const,
    registers,
  });
  return (outcome) => relays.inc({ outcome });
}

/**
 * Actions on runtime objects this replica forwarded (docs/api.md, "Runtime actions"), by action
 * and by the status the caller got: a rise of 409s is callers racing the controllers, of 503s an
 * unreachable runtime or vcluster API server.
 */
export function registerRuntimeActionMetrics(metrics: Metrics): (action: string, status: number) => void {
  const actions = new client.Counter({
    name: 'provisioner_runtime_actions_total',
    help: 'Actions on runtime objects forwarded by this replica, by action and answered status',
    labelNames: ['action', 'status'] as const,
    registers: [metrics.registry],
  });
  return (action, status) => actions.inc({ action, status: String(status) });
}

/**
 * Renewals of managed clusters' short-lived tokens by this replica, by outcome (`rotated`,
 * `failed`, `dropped`: the registration changed meanwhile): a rise of failures means tokens near their expiry (the operation log and the audit
 * name each rotation; tokens themselves are never recorded).
 */
export function registerManagedClusterTokenMetrics(
  metrics: Metrics,
): (outcome: 'rotated' | 'failed' | 'dropped') => void {
  const rotations = new client.Counter({
    name: 'provisioner_managed_cluster_token_rotations_total',
    help: "Managed clusters' ServiceAccount token renewals by this replica, by outcome",
    labelNames: ['outcome'] as const,
    registers: [metrics.registry],
  });
  return (outcome) => rotations.inc({ outcome });
}

/**
 * Reads answered by the batched hot reads and the statements that answered them, by kind (tenant,
 * key): their ratio is the mean batch size, and statements per second the database load they make.
 */
export function registerReadMetrics(metrics: Metrics, reads: HotReads): void {
  const counter = (name: string, help: string, field: 'reads' | 'batches'): void => {
    new client.Counter({
      name,
      help,
      labelNames: ['kind'] as const,
      registers: [metrics.registry],
      collect() {
        const s = reads.stats();
        this.reset();
        this.inc({ kind: 'tenant' }, s.tenants[field]);
        this.inc({ kind: 'key' }, s.keys[field]);
      },
    });
  };
  counter('provisioner_hot_reads_total', 'Tenant reads and key lookups answered through batched statements', 'reads');
  counter(
    'provisioner_hot_read_statements_total',
    'Batched statements sent for tenant reads and key lookups',
    'batches',
  );
}

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

/** What the sleep metrics read from this process's sleep service (sleep/service.ts). */
export interface SleepView {
  stats: { slept: number; woken: number; wokenByRequest: number; wakingAnswers: number };
}

/**
 * Idle sleep (docs/operations.md "Sleep"): tenants per plan awake, asleep and waking (read at
 * scrape time), and this process's sleeps and wakes. The wake's engine run is
 * provisioner_engine_run_duration_seconds{kind="wake"}.
 */
export function registerSleepMetrics(metrics: Metrics, pool: pg.Pool, sleep: SleepView): void {
  const registers = [metrics.registry];
  new client.Gauge({
    name: 'provisioner_tenants_sleep',
    help: 'Tenants (not deleted) by plan and sleep state: awake, asleep (phase Sleeping), waking (phase Waking)',
    labelNames: ['plan', 'state'] as const,
    registers,
    async collect() {
      this.reset();
      for (const r of await sleepCounts(pool)) {
        this.set({ plan: r.plan, state: 'awake' }, r.awake);
        this.set({ plan: r.plan, state: 'asleep' }, r.asleep);
        this.set({ plan: r.plan, state: 'waking' }, r.waking);
      }
    },
  });
  new client.Counter({
    name: 'provisioner_sleep_events_total',
    help: 'Sleeps and wakes this replica queued: slept (idle loop), woken (any wake), woken_by_request (a request to the runtime), waking_answers (503 TENANT_WAKING given)',
    labelNames: ['event'] as const,
    registers,
    collect() {
      this.reset();
      this.inc({ event: 'slept' }, sleep.stats.slept);
      this.inc({ event: 'woken' }, sleep.stats.woken);
      this.inc({ event: 'woken_by_request' }, sleep.stats.wokenByRequest);
      this.inc({ event: 'waking_answers' }, sleep.stats.wakingAnswers);
    },
  });
}

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

/** What the loop metrics read: each loop's status by name (loops/manager.ts). */
export interface LoopsView {
  status(): LoopStatus[];
}

/**
 * Every background loop by name (`loop` label): rounds and failed rounds since start, the time of
 * its last successful round, and whether it runs (1) or not (0: not started, stopped, turned off).
 */
export function registerLoopMetrics(metrics: Metrics, loops: LoopsView): void {
  const registers = [metrics.registry];
  const counted = [
    ['provisioner_loop_rounds_total', 'Rounds of each background loop since start, successful or not', 'rounds'],
    ['provisioner_loop_failures_total', 'Failed rounds of each background loop since start', 'failures'],
  ] as const;
  for (const [name, help, field] of counted)
    new client.Counter({
      name,
      help,
      labelNames: ['loop'] as const,
      registers,
      collect() {
        this.reset();
        for (const s of loops.status()) this.inc({ loop: s.name }, s[field]);
      },
    });
  const gauges = [
    [
      'provisioner_loop_last_success_timestamp_seconds',
      "Unix time of each background loop's last successful round (absent before the first)",
      (s: LoopStatus) => (s.lastSuccessAt ? s.lastSuccessAt.getTime() / 1000 : undefined),
    ],
    [
      'provisioner_loop_running',
      'Whether each background loop runs (1) or not (0: not started, stopping, stopped or turned off)',
      (s: LoopStatus) => (s.state === 'running' ? 1 : 0),
    ],
  ] as const;
  for (const [name, help, value] of gauges)
    new client.Gauge({
      name,
      help,
      labelNames: ['loop'] as const,
      registers,
      collect() {
        this.reset();
        for (const s of loops.status()) {
          const v = value(s);
          if (v !== undefined) this.set({ loop: s.name }, v);
        }
      },
    });
}
