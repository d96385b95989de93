/**
 * The process's services, built in one place from the configuration and the database: what the
 * HTTP API serves from (http/app.ts registers routes over them), what runs beside it (the
 * reconciler, the tunnel directory), and what they share (the notifications hub, the key cache,
 * batched reads, the request signer). server.ts starts and stops them; tests build them through
 * the same function (test/helpers/api.ts).
 *
 *   notifications ─┬─ reconciler (tenant_due)          tunnel server ─ tunnel directory (runtime_tunnel)
 *                  ├─ tunnel directory                 request signer ─ tunnel server, engine (public key)
 *                  ├─ key revocations (api_key_revoked) → key cache, tunnel server
 *                  ├─ operation log hub (operation_log)
 *                  ├─ runtime object change followers (runtime_object)
 *                  └─ application history followers (application_history)
 */
import { TenantChangeService } from './tenant-api/changes.ts';
import { randomUUID } from 'node:crypto';
import type { Server } from 'node:http';
import type pg from 'pg';
import type { Logger } from 'pino';
import { advertiseUrl, type Config } from './config.ts';
import { SecretBox } from './crypto.ts';
import type { DatabaseHealth } from './db/availability.ts';
import { Notifications } from './db/notifications.ts';
import { createEngine } from './engine/create.ts';
import type { Engine } from './engine/engine.ts';
import { hashKeyBase64 } from './store/key-format.ts';
import { KeyCache } from './keys/cache.ts';
import { createMetrics, type Metrics } from './metrics/registry.ts';
import { registerDriftMetrics, registerDriftWatchMetrics } from './metrics/drift.ts';
import { registerFleetMetrics } from './metrics/fleet.ts';
import { registerLoopMetrics } from './metrics/loops.ts';
import { registerManagedClusterTokenMetrics } from './metrics/managed-clusters.ts';
import { registerPoolMetrics } from './metrics/pool.ts';
import { registerReadMetrics } from './metrics/reads.ts';
import { registerReconcilerMetrics } from './metrics/reconciler.ts';
import { registerRuntimeActionMetrics } from './metrics/runtime-actions.ts';
import { registerRuntimeObjectMetrics } from './metrics/runtime-objects.ts';
import { registerSleepMetrics } from './metrics/sleep.ts';
import { registerTunnelMetrics, type RelayOutcome } from './metrics/tunnel.ts';
import { KeyStreams } from './keys/streams.ts';
import { OperationLogHub } from './reconciler/log-follow.ts';
import { RuntimeObjectService } from './runtime-objects/service.ts';
import { TombstonePurger } from './runtime-objects/purge.ts';
import { AppHistoryService, historyPruner } from './app-history/service.ts';
import { Reconciler } from './reconciler/reconciler.ts';
import { DriftWatch } from './drift-watch/watch.ts';
import { createWritePool } from './reconciler/write-pool.ts';
import { createHotReads, type BatchOptions, type HotReads } from './store/batched-reads.ts';
import { KEY_REVOKED_CHANNEL } from './store/keys.ts';
import { ClusterService } from './clusters/service.ts';
import { KeyService } from './keys/service.ts';
import { AuditService } from './audit/service.ts';
import { RuntimeService } from './runtime-registry/service.ts';
import { ArgoCharts } from './runtime-registry/argo-charts.ts';
import { ManagedClusterService } from './managed-clusters/service.ts';
import { ManagedClusterProber } from './managed-clusters/health.ts';
import { ManagedClusterTokenRefresher } from './managed-clusters/tokens.ts';
import { RuntimeVersionService } from './runtime-versions/service.ts';
import { TenantService } from './tenant-api/service.ts';
import { FleetUpgradeService } from './fleet/service.ts';
import { FleetDriver } from './fleet/driver.ts';
import { LoopManager } from './loops/manager.ts';
import { Pruner } from './loops/pruner.ts';
import { SleepService } from './sleep/service.ts';
import { WebhookService } from './webhooks/service.ts';
import { WarmPool } from './pool/service.ts';
import { CapacityService } from './pool/capacity.ts';
import { currentDefaultVersion } from './runtime-versions/service.ts';
import { pruneKeys } from './store/idempotency.ts';
import { purgeRemovedRuntimes } from './store/runtimes.ts';
import {
  createRequestSigner,
  createTunnelServer,
  generateRequestSigningKeys,
  TunnelDirectory,
  type RequestSigner,
  type TunnelLimits,
  type TunnelServer,
} from './tunnel/index.ts';
import { createIngressTransport, type IngressTransport } from './tunnel/ingress.ts';
import { catalog as runtimeCatalog, type Catalog } from '../runtime/catalog.ts';
import { STALE_AFTER_SECONDS } from '../runtime/protocol/events.ts';

/** The database the services use: openDatabase()'s, or a test database. */
export interface ServicesDatabase {
  pool: pg.Pool;
  url: string;
  health?: DatabaseHealth;
}

export interface ServicesOptions {
  /** A pino logger; no logging when absent. */
  logger?: Logger;
  /** The runtime version catalog (default: runtime/catalog.ts). */
  catalog?: Catalog;
  /** This process's replica id in the tunnel directory (default: a new UUID). */
  replicaId?: string;
  /** Batching of the API's hot reads (defaults in store/batched-reads.ts). */
  hotReads?: BatchOptions;
  /** Tunnel limits over the configured ones (tests). */
  tunnelLimits?: Partial<TunnelLimits>;
  /**
   * An engine in place of the configured one (benchmarks: the ScriptedEngine TEST DOUBLE, so that
   * everything but the engine runs as `provisioner serve` runs it). The reconciler then runs
   * whatever PROVISIONER_ENGINE says.
   */
  engine?: Engine;
}

export interface Services {
  config: Config;
  /** The process's logger (the HTTP server logs through it); undefined: no logging. */
  logger: Logger | undefined;
  pool: pg.Pool;
  box: SecretBox;
  catalog: Catalog;
  /** The process's one LISTEN connection (db/notifications.ts). */
  notifications: Notifications;
  /** Batched reads of a tenant and of an API key (store/batched-reads.ts). */
  reads: HotReads;
  /** Resolved API keys, briefly (keys/cache.ts). */
  keyCache: KeyCache;
  /** Open event streams by API key: a revoked key's streams end at once. */
  streams: KeyStreams;
  metrics: Metrics;
  /** Counts relays to other replicas in the metrics. */
  onRelay: (outcome: RelayOutcome) => void;
  /** Counts actions on runtime objects (by action and answered status) in the metrics. */
  onRuntimeAction: (action: string, status: number) => void;
  /** Signs requests forwarded to runtimes; its public half goes to every runtime. */
  signer: RequestSigner;
  /** Tunnels of connected runtimes. */
  tunnel: TunnelServer;
  /** The https transport to ingress-based hybrid runtimes (tunnel/ingress.ts), for the runtimes' proxy route. */
  ingress: IngressTransport;
  /** Which replica holds each runtime's tunnel (shared through Postgres). */
  tunnelDirectory: TunnelDirectory;
  tenants: TenantService;
  clusters: ClusterService;
  /** Tenants' managed clusters: registration, removal, reads (managed-clusters/service.ts). */
  managedClusters: ManagedClusterService;
  /** Hosted and hybrid runtimes: registration, bootstrap exchange, removal, reads (runtime-registry/service.ts). */
  runtimes: RuntimeService;
  /** Their health probe (managed-clusters/health.ts), started with the services. */
  managedClusterProber: ManagedClusterProber;
  /** Renewal of their short-lived tokens (managed-clusters/tokens.ts), started with the services. */
  managedClusterTokens: ManagedClusterTokenRefresher;
  keys: KeyService;
  /** Reads of the audit log (audit/service.ts). */
  audit: AuditService;
  runtimeVersions: RuntimeVersionService;
  /** Fleet upgrades: plan, start, reads, pause/resume/abort (the driver runs beside the reconciler). */
  fleetUpgrades: FleetUpgradeService;
  /** Live operation log followers, woken through the notifications hub. */
  logHub: OperationLogHub;
  /** The fleet's change stream: tenants as they change, woken through the notifications hub (channel tenant_changed). */
  tenantChanges: TenantChangeService;
  /** Idle sleep and wake on demand (sleep/service.ts; the `idle-sleep` loop). */
  sleep: SleepService;
  /** Git webhooks at a public per-tenant URL, kept until the runtime takes them (webhooks/service.ts). */
  webhooks: WebhookService;
  /** Runtimes provisioned ahead of signups (pool/service.ts; the `warm-pool` loop). */
  warmPool: WarmPool;
  /** GET /v1/capacity's figures (pool/capacity.ts). */
  capacity: CapacityService;
  /** Counts a signup, served from the warm pool or cold (metrics). */
  onSignup: (warm: boolean) => void;
  /** The application state runtimes report: ingestion, reads, change followers (channel runtime_object). */
  runtimeObjects: RuntimeObjectService;
  /** Purges runtime objects' old tombstones (one replica at a time), started with the services. */
  tombstonePurger: TombstonePurger;
  /** Applications' history: reads, change followers (channel application_history); written by the ingest. */
  appHistory: AppHistoryService;
  /** Deletes application history entries older than PROVISIONER_APP_HISTORY_RETENTION_DAYS, started with the services. */
  appHistoryPruner: Pruner;
  /** Deletes Idempotency-Key records past their replay window (store/idempotency.ts), started with the services. */
  idempotencyPruner: Pruner;
  /** Deletes hybrid runtimes removed longer than PROVISIONER_REMOVED_RUNTIME_RETENTION_HOURS, started with the services. */
  removedRuntimePurger: Pruner;
  /** The reconcile loop (not started); undefined with PROVISIONER_ENGINE=none. */
  reconciler: Reconciler | undefined;
  /** The reconciler's engine (what `provisioner doctor` reports on); undefined with PROVISIONER_ENGINE=none. */
  engine: Engine | undefined;
  /** The fleet upgrade driver (not started), beside the reconciler; undefined with PROVISIONER_ENGINE=none. */
  fleetDriver: FleetDriver | undefined;
  /** The root-cluster watch that asks for resyncs (with a reconciler and PROVISIONER_DRIFT_WATCH on). */
  driftWatch: DriftWatch | undefined;
  /** Tunnels arrive as upgrades of this HTTP server, and other replicas reach this one at its address. */
  attachHttpServer(server: Server): void;
  /** The process's background loops, each by name, in start order (loops/manager.ts). */
  loops: LoopManager;
  /** Starts the loops of phase `services` in their order (the tunnel directory, the LISTEN connection, the probes, the purgers, the drift watch). */
  start(): Promise<void>;
  /** Starts the loops of phase `workers` (the reconciler, the fleet driver): call once the HTTP server listens. */
  startWorkers(): Promise<void>;
  /** Stops the workers in the reverse order (the reconciler within its grace period), beside the HTTP server's drain. */
  stopWorkers(): Promise<void>;
  /**
   * Stops every loop in the reverse start order (the directory's rows of this replica, the LISTEN
   * connection last), then what the services hold: log followers, batched reads, the reconciler's
   * write pool. Call after the HTTP server stopped; the database pool stays the caller's. A second
   * call waits for the first.
   */
  stop(): Promise<void>;
}

/**
 * Builds the services of one provisioner process. `config.encryptionKey` must be set (server.ts
 * resolves the development key first); without `config.requestSigningKeyPem` a signing key is
 * generated for this process.
 */
export async function buildServices(
  config: Config,
  db: ServicesDatabase,
  opts: ServicesOptions = {},
): Promise<Services> {
  if (!config.encryptionKey) throw new Error('buildServices: config.encryptionKey is not set');
  const { pool } = db;
  const logger = opts.logger;
  const child = (component: string): { logger?: Logger } => (logger ? { logger: logger.child({ component }) } : {});
  const box = new SecretBox(config.encryptionKey);
  const catalog = opts.catalog ?? runtimeCatalog;

  const notifications = new Notifications({ pool, ...child('notifications') });
  const metrics = createMetrics(pool);
  const keyCache = new KeyCache({ ttlMs: config.keyCacheMs });
  const reads = createHotReads(pool, opts.hotReads);
  registerReadMetrics(metrics, reads);

  const signer = createRequestSigner({
    privateKeyPem: config.requestSigningKeyPem ?? generateRequestSigningKeys().privateKeyPem,
  });
  const tunnel = createTunnelServer({
    // Only runtime keys open tunnels, each for the one tenant it is bound to; a hybrid runtime's
    // key for its runtime, held apart from the tenant's hosted runtime's tunnel.
    authenticate: async (token) => {
      const id = await reads.key(hashKeyBase64(token));
      if (id?.role !== 'runtime' || !id.tenantId) return null;
      return { tenantId: id.tenantId, keyId: id.keyId, ...(id.runtimeId ? { runtimeId: id.runtimeId } : {}) };
    },
    signer,
    ...child('tunnel'),
    ...config.tunnel,
    ...opts.tunnelLimits,
  });
  const ingress = createIngressTransport({
    signer,
    limits: { ...config.tunnel, ...opts.tunnelLimits },
    policy: { ...config.hybrid.ingress, ownUrl: config.hybrid.publicUrl },
    caPem: config.hybrid.ingress.caPem,
    requestsPerRuntime: config.hybrid.ingress.requestsPerRuntime,
    requestsPerTenant: config.hybrid.ingress.requestsPerTenant,
    ...child('ingress'),
  });
  const onRelay = registerTunnelMetrics(metrics, tunnel);
  const onRuntimeAction = registerRuntimeActionMetrics(metrics);
  const streams = new KeyStreams({ revoked: (keyId) => keyCache.revoked({ keyId }) });
  /** A key was revoked (here, or through another replica): drop it from the cache, close its tunnel and its streams here. */
  const onKeyRevoked = (keyId: string): void => {
    keyCache.revoke(keyId);
    tunnel.disconnectKey(keyId);
    streams.closeKey(keyId);
  };
  notifications.subscribe(KEY_REVOKED_CHANNEL, onKeyRevoked);
  let httpServer: Server | undefined;
  const tunnelDirectory = new TunnelDirectory({
    pool,
    notifications,
    tunnel,
    replicaId: opts.replicaId ?? randomUUID(),
    advertiseUrl: () => advertiseUrl(config, httpServer?.address() ?? null),
    ...child('tunnel-directory'),
  });

  const managedClusters = new ManagedClusterService({
    pool,
    box,
    policy: config.managedClusters.kubeconfig,
    rootPolicy: config.kubeconfig,
    probeIntervalMs: config.managedClusters.probeIntervalMs,
    tokens: config.managedClusters.tokens,
    bootstrapImage: config.managedClusters.bootstrapImage,
    tunnel,
    perTenant: config.budgets.managedClusters,
  });
  // What both managed-cluster loops reach a cluster with.
  const managedClusterAccess = { pool, box, policy: config.managedClusters.kubeconfig };
  const managedClusterTokens = new ManagedClusterTokenRefresher({
    ...managedClusterAccess,
    tokens: config.managedClusters.tokens,
    logger: logger?.child({ component: 'managed-cluster-tokens' }),
    onRotation: registerManagedClusterTokenMetrics(metrics),
  });
  const managedClusterProber = new ManagedClusterProber({
    ...managedClusterAccess,
    intervalMs: config.managedClusters.probeIntervalMs,
    logger: logger?.child({ component: 'managed-cluster-probe' }),
    tunnel,
    replicaId: tunnelDirectory.replicaId,
  });
  const reconcilerParts = await buildReconciler(
    config,
    db,
    box,
    signer.publicKeyPem,
    notifications,
    logger,
    opts.engine,
    managedClusters,
  );
  const fleetDriver = reconcilerParts
    ? new FleetDriver({
        pool,
        catalog,
        notifications,
        leaseTtlMs: config.reconciler.leaseTtlSeconds * 1000,
        clusterParallelism: config.reconciler.fleetClusterParallelism,
        // Called at tick time, once `runtimes` below exists.
        askHybridUpgrades: (tx, tenantId, target, by, fleetUpgradeId) =>
          runtimes.askUpgradesByAgent(tx, tenantId, target, by, fleetUpgradeId),
        ...child('fleet-driver'),
      })
    : undefined;
  if (reconcilerParts) {
    registerDriftMetrics(metrics, reconcilerParts.reconciler.stats);
    registerReconcilerMetrics(metrics, pool, reconcilerParts.reconciler);
  }
  registerFleetMetrics(metrics, pool, fleetDriver);
  if (reconcilerParts && fleetDriver) {
    // A finished operation may settle a fleet upgrade's step: the driver judges it now, not at its next poll.
    const counted = reconcilerParts.reconciler.onOperation;
    reconcilerParts.reconciler.onOperation = (kind, result, seconds) => {
      counted?.(kind, result, seconds);
      fleetDriver.kick();
    };
  }
  // The root-cluster watch asks for resyncs only where a reconciler runs them.
  const driftWatch =
    reconcilerParts && config.reconciler.driftWatch
      ? new DriftWatch({
          pool,
          box,
          kubeconfigPolicy: config.kubeconfig,
          ...(logger ? { log: logger.child({ component: 'drift-watch' }) } : {}),
        })
      : undefined;
  if (driftWatch) registerDriftWatchMetrics(metrics, driftWatch);
  const logHub = new OperationLogHub(pool, notifications);
  const runtimeObjectStats = registerRuntimeObjectMetrics(metrics, pool, STALE_AFTER_SECONDS);
  const runtimeObjects = new RuntimeObjectService({
    pool,
    notifications,
    stats: runtimeObjectStats,
    budgets: config.budgets,
  });
  const tombstonePurger = new TombstonePurger({
    pool,
    retentionSeconds: config.tombstoneRetentionHours * 3600,
    onPurged: (n) => runtimeObjectStats.onPurged(n),
    ...(logger ? { log: logger.child({ component: 'tombstone-purge' }) } : {}),
  });
  const appHistory = new AppHistoryService({
    pool,
    notifications,
    transport: {
      tunnel,
      ingress,
      peers: {
        replicaId: tunnelDirectory.replicaId,
        owner: (tenantId) => tunnelDirectory.owner(tenantId),
        runtimeOwner: (runtimeId) => tunnelDirectory.runtimeOwner(runtimeId),
      },
    },
  });
  const appHistoryPruner = historyPruner(
    pool,
    config.appHistoryRetentionDays,
    logger?.child({ component: 'app-history-pruner' }),
  );
  const tenantChanges = new TenantChangeService({ pool, notifications });
  const sleep = new SleepService({
    pool,
    config: config.sleep,
    connected: async (tenantId) =>
      tunnel.status(tenantId).connected || (await tunnelDirectory.owner(tenantId)) !== undefined,
    // Sleep is applied by the reconciler: a replica without one puts no tenant to sleep.
    idleLoop: reconcilerParts !== undefined,
    logger: logger?.child({ component: 'idle-sleep' }),
  });
  registerSleepMetrics(metrics, pool, sleep);
  const warmPool = new WarmPool({
    pool,
    config: config.warmPool,
    defaultVersion: () => currentDefaultVersion(pool, catalog),
    // Entries are provisioned by the reconciler: a replica without one adds none.
    enabled: reconcilerParts !== undefined,
    logger: logger?.child({ component: 'warm-pool' }),
  });
  const onSignup = registerPoolMetrics(metrics, pool, config.warmPool.size);
  const webhooks = new WebhookService({
    pool,
    config: config.webhooks,
    tunnel,
    notifications,
    wake: (tenantId, by, reason) => sleep.wake(tenantId, by, reason),
    logger: logger?.child({ component: 'webhook-delivery' }),
  });
  // Stored signup and registration answers hold secrets (API keys, bootstrap tokens): kept no longer than they are replayed.
  const idempotencyPruner = new Pruner({
    name: 'idempotency-pruner',
    pool,
    batch: (db, limit) => pruneKeys(db, limit),
    what: 'deleted Idempotency-Key records past their replay window',
    log: logger?.child({ component: 'idempotency-pruner' }),
  });
  const removedRuntimePurger = new Pruner({
    name: 'removed-runtime-purger',
    pool,
    batch: (db, limit) => purgeRemovedRuntimes(db, config.hybrid.removedRetentionHours, limit),
    batchSize: 100,
    what: 'purged hybrid runtimes removed longer than PROVISIONER_REMOVED_RUNTIME_RETENTION_HOURS',
    log: logger?.child({ component: 'removed-runtime-purger' }),
  });

  // Every loop of the process, in start order; stopped in the reverse order (loops/manager.ts).
  // `services` start with the services, `workers` once the HTTP server listens (server.ts).
  const loops = new LoopManager(
    [
      { phase: 'services', runnable: notifications.loop },
      { phase: 'services', runnable: tunnelDirectory },
      { phase: 'services', runnable: managedClusterProber.loop },
      { phase: 'services', runnable: managedClusterTokens.loop },
      { phase: 'services', runnable: tombstonePurger.loop },
      { phase: 'services', runnable: idempotencyPruner.loop },
      { phase: 'services', runnable: removedRuntimePurger.loop },
      { phase: 'services', runnable: appHistoryPruner.loop },
      { phase: 'services', runnable: sleep.loop },
      { phase: 'services', runnable: webhooks.loop },
      { phase: 'services', runnable: warmPool.loop },
      // The requests' writes stop after the watches that gather them.
      driftWatch && { phase: 'services', runnable: driftWatch.flushLoop },
      driftWatch && { phase: 'services', runnable: driftWatch.loop },
      // Renews the running attempts' leases: listed before the reconciler, so it is stopped after it
      // (the reconciler stops it itself once its grace period ended and the leases are handed back).
      reconcilerParts && { phase: 'workers', runnable: reconcilerParts.reconciler.heartbeat },
      // Its stop waits for running attempts within the grace period.
      reconcilerParts && {
        phase: 'workers',
        runnable: reconcilerParts.reconciler,
        stopMs: config.reconciler.shutdownGraceSeconds * 1000 + 10_000,
      },
      // Started by the reconciler once the engine's first start is done; stopped before it.
      reconcilerParts && { phase: 'workers', runnable: reconcilerParts.reconciler.engineCheck },
      fleetDriver && { phase: 'workers', runnable: fleetDriver },
    ],
    child('loops'),
  );
  registerLoopMetrics(metrics, loops);
  const runtimes = new RuntimeService({
    pool,
    box,
    catalog,
    publicUrl: config.hybrid.publicUrl,
    publicKeyPem: signer.publicKeyPem,
    bootstrapTtlSeconds: config.hybrid.bootstrapTtlSeconds,
    perTenant: config.budgets.hybridRuntimes,
    tunnelStatus: (tenantId) => tunnel.status(tenantId),
    runtimeTunnelStatus: (runtimeId) => tunnel.runtimeStatus(runtimeId),
    replicaId: tunnelDirectory.replicaId,
    onKeyRevoked,
    ingressPolicy: { ...config.hybrid.ingress, ownUrl: config.hybrid.publicUrl },
    rates: config.budgets,
    bundleCacheBytes: config.hybrid.bundleCacheBytes,
    argoCharts: new ArgoCharts({ chartRepositories: config.engine.chartRepositories }),
  });
  let stopped: Promise<void> | undefined;

  return {
    config,
    logger,
    pool,
    box,
    catalog,
    notifications,
    reads,
    keyCache,
    streams,
    metrics,
    onRelay,
    onRuntimeAction,
    signer,
    tunnel,
    ingress,
    tunnelDirectory,
    tenants: new TenantService({ pool, box, catalog, warmPool: config.warmPool.size }),
    clusters: new ClusterService({ pool, box, kubeconfigPolicy: config.kubeconfig }),
    managedClusters,
    runtimes,
    managedClusterProber,
    managedClusterTokens,
    keys: new KeyService({ pool, onRevoked: onKeyRevoked, perTenant: config.budgets.keys }),
    audit: new AuditService({ pool }),
    runtimeVersions: new RuntimeVersionService({ pool, catalog }),
    fleetUpgrades: new FleetUpgradeService({ pool, catalog }),
    logHub,
    runtimeObjects,
    tombstonePurger,
    appHistory,
    appHistoryPruner,
    idempotencyPruner,
    removedRuntimePurger,
    tenantChanges,
    sleep,
    webhooks,
    warmPool,
    capacity: new CapacityService({ pool, catalog, sleep: config.sleep, warmPool: config.warmPool }),
    onSignup,
    reconciler: reconcilerParts?.reconciler,
    engine: reconcilerParts?.engine,
    fleetDriver,
    driftWatch,
    attachHttpServer(server) {
      httpServer = server;
      server.on('upgrade', (req, socket, head) => {
        if (!tunnel.handleUpgrade(req, socket, head)) socket.destroy();
      });
    },
    loops,
    start: () => loops.start('services'),
    startWorkers: () => loops.start('workers'),
    stopWorkers: () => loops.stop('workers'),
    stop() {
      stopped ??= (async () => {
        await loops.stop();
        ingress.close();
        await logHub.close();
        runtimeObjects.close();
        appHistory.close();
        tenantChanges.close();
        await reads.close();
        await notifications.stop();
        await reconcilerParts?.writePool.end();
        metrics.close();
      })();
      return stopped;
    },
  };
}

/** The reconcile loop with the configured engine (none: no loop; the API still serves). */
async function buildReconciler(
  config: Config,
  db: ServicesDatabase,
  box: SecretBox,
  publicKeyPem: string,
  notifications: Notifications,
  logger: Logger | undefined,
  given: Engine | undefined,
  managedClusters: ManagedClusterService,
): Promise<{ reconciler: Reconciler; writePool: pg.Pool; engine: Engine } | undefined> {
  const log = logger?.child({ component: 'reconciler' });
  const engine =
    given ??
    (await createEngine(config.engine, {
      dataDir: config.dataDir,
      databaseUrl: db.url,
      controlPlanePublicKey: publicKeyPem,
      kubeconfigPolicy: config.kubeconfig,
      ...(log ? { log: (msg, fields) => log.info(fields ?? {}, msg) } : {}),
    }));
  if (!engine) {
    log?.warn('PROVISIONER_ENGINE=none: no reconciler runs; tenants stay as they are');
    return undefined;
  }
  const r = config.reconciler;
  const writePool = createWritePool(db.url, Math.max(4, r.workers + 2), db.health);
  const reconciler = new Reconciler({
    pool: db.pool,
    writePool,
    notifications,
    engine,
    box,
    workers: r.workers,
    engineMemoryMb: r.engineMemoryMb,
    clusterParallelism: r.clusterParallelism,
    leaseTtlMs: r.leaseTtlSeconds * 1000,
    pollMs: r.pollMs,
    resyncMs: r.resyncSeconds * 1000,
    maxFailures: r.maxFailures,
    shutdownGraceMs: r.shutdownGraceSeconds * 1000,
    backoff: { baseMs: r.backoffBaseSeconds * 1000, capMs: r.backoffCapSeconds * 1000 },
    ...(log ? { logger: log } : {}),
    logSecrets: engineSecrets(config, db.url),
    kubeconfigPolicy: config.kubeconfig,
    managedClusters: (tenantId) => managedClusters.forProgram(db.pool, tenantId),
  });
  return { reconciler, writePool, engine };
}

/** Secrets the Pulumi CLI may print (its errors quote the backend URL): masked in operation logs. */
export function engineSecrets(config: Config, databaseUrl: string): string[] {
  const out: string[] = [];
  for (const raw of [databaseUrl, config.engine.backendUrl]) {
    if (!raw) continue;
    try {
      const url = new URL(raw);
      if (url.password) out.push(url.password, decodeURIComponent(url.password));
    } catch {
      // not a URL: nothing to mask
    }
  }
  if (config.engine.passphrase) out.push(config.engine.passphrase);
  return [...new Set(out)];
}
