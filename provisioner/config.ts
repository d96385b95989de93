/**
 * Provisioner configuration: read from the environment once at start-up, validated into a typed
 * object and passed down. Nothing else in the code reads process.env.
 */
import os from 'node:os';
import { isIP, type AddressInfo } from 'node:net';
import { createPrivateKey, X509Certificate } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { isAbsolute, join, resolve } from 'node:path';
import { ConfigError, int, type Env } from '../runtime/agents/common/config.ts';
import { chartRepositoryProblem, vclusterServerTemplateProblem } from '../tenants/config.ts';
import { PLAN_NAMES } from '../tenants/plans.ts';
import { checkWindow } from './fleet/windows.ts';
import type { MaintenanceWindow } from './store/tenants.ts';
import { DEFAULT_RECONCILER_SETTINGS } from './reconciler/settings.ts';
import { defaultEngineMemoryMb } from './reconciler/memory-budget.ts';
import { DEFAULT_TUNNEL_LIMITS, tunnelLimitProblems, type TunnelLimits } from './tunnel/limits.ts';
import type { KubeconfigPolicy } from '../kubeconfig-policy/policy.ts';
import { parseCidr } from '../kubeconfig-policy/address.ts';

export type LogLevel = 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace' | 'silent';

export interface Config {
  /** TCP port of the HTTP API (PORT, default 8080; 0 picks a free one). */
  port: number;
  /** Listen address (HOST, default 127.0.0.1). */
  host: string;
  /** Postgres connection string (DATABASE_URL); when unset an embedded server runs under dataDir. */
  databaseUrl: string | undefined;
  /** Where the embedded Postgres, the development encryption key and engine work dirs live. */
  dataDir: string;
  /** Bootstrap admin key (PROVISIONER_ADMIN_TOKEN); when unset one is generated on first start. */
  adminToken: string | undefined;
  /** 32-byte AES-256-GCM key for secrets at rest; undefined means "generate one in dataDir". */
  encryptionKey: Buffer | undefined;
  /** Ed25519 private key (PEM) signing requests forwarded to runtimes (PROVISIONER_REQUEST_SIGNING_KEY); undefined: kept in dataDir. */
  requestSigningKeyPem: string | undefined;
  logLevel: LogLevel;
  /** Largest accepted request body in bytes (PROVISIONER_BODY_LIMIT, default 65536). */
  bodyLimit: number;
  /** Signups allowed per client address per minute (PROVISIONER_SIGNUP_RATE_LIMIT, default 20). */
  signupRateLimit: number;
  /** How long a resolved API key is cached in a process (PROVISIONER_KEY_CACHE_MS, default 2000; 0 turns it off). */
  keyCacheMs: number;
  /** Longest time a caller may take to send a whole request, headers and body (PROVISIONER_REQUEST_TIMEOUT_SECONDS, default 60). */
  requestTimeoutMs: number;
  /** Event streams (log follow) one API key may hold open at once (PROVISIONER_SSE_STREAMS_PER_KEY, default 20). */
  sseStreamsPerKey: number;
  /**
   * How long a deleted runtime object's tombstone is kept before it is purged
   * (PROVISIONER_TOMBSTONE_RETENTION_HOURS, default 24, 1 to 8760; docs/runtime.md "Tombstone retention").
   */
  tombstoneRetentionHours: number;
  /**
   * How long an application history entry is kept before the `app-history-pruner` loop deletes it
   * (PROVISIONER_APP_HISTORY_RETENTION_DAYS, default 90, 1 to 3650; docs/api.md "Application history").
   */
  appHistoryRetentionDays: number;
  /** Proxies (IPs or CIDRs) whose X-Forwarded-For is believed for the client address (PROVISIONER_TRUSTED_PROXIES; default none). */
  trustedProxies: string[];
  /**
   * Where other provisioner replicas reach this one, to relay requests for runtimes whose tunnel
   * this replica holds (PROVISIONER_ADVERTISE_URL; default: the listen address).
   */
  advertiseUrl: string | undefined;
  /** Reconciler and engine settings (see docs/reconciler.md); defaults in reconciler/settings.ts. */
  reconciler: ReconcilerConfig;
  engine: EngineConfig;
  /** Limits of the runtime tunnel and the forwarding route (docs/tunnel.md). */
  tunnel: TunnelLimits;
  /** What an operator-registered kubeconfig may hold beyond inline credentials (docs/security.md). */
  kubeconfig: KubeconfigPolicy;
  /** Tenants' managed clusters (docs/operations.md "Managed clusters"). */
  managedClusters: ManagedClustersConfig;
  /** What one tenant or its runtime may take of the shared control plane (docs/security.md). */
  budgets: TenantBudgets;
  /** Hybrid runtimes, installed in customers' clusters (docs/api.md "Runtimes"). */
  hybrid: HybridConfig;
  /** Idle hosted runtimes sleep and wake on demand (docs/operations.md "Sleep"). */
  sleep: SleepConfig;
  /** Git webhooks kept for tenants' runtimes (docs/operations.md "Webhooks while asleep"). */
  webhooks: WebhookConfig;
  /** Runtimes provisioned ahead of signups (docs/operations.md "Warm pool"). */
  warmPool: WarmPoolConfig;
}

export interface WarmPoolConfig {
  /**
   * Unclaimed Ready entries to keep per plan on each root cluster that takes the plan, at the
   * catalog's default version (PROVISIONER_WARM_POOL, `plan=count` pairs, comma-separated, 0..100
   * per cluster; default none: every signup starts cold).
   */
  size: Readonly<Record<string, number>>;
  /** Entries provisioning at once, all plans and root clusters (PROVISIONER_WARM_POOL_PARALLELISM, default 1, 1..32): the refill's CPU budget. */
  parallelism: number;
  /** How often the `warm-pool` loop looks at the pool (PROVISIONER_WARM_POOL_CHECK_SECONDS, default 30, 1..3600). */
  checkSeconds: number;
}

export interface WebhookConfig {
  /** Largest webhook body accepted (PROVISIONER_WEBHOOK_MAX_BYTES, default 1048576, 1024..26214400). */
  maxBytes: number;
  /** Webhooks one tenant may have waiting for its runtime (PROVISIONER_WEBHOOK_QUEUE_PER_TENANT, default 100, 1..10000). */
  queuePerTenant: number;
  /** Their bytes together (PROVISIONER_WEBHOOK_QUEUE_BYTES_PER_TENANT, default 16777216, 1024..1073741824). */
  queueBytesPerTenant: number;
}

export interface SleepConfig {
  /**
   * Seconds without activity after which a Ready tenant of a plan is put to sleep
   * (PROVISIONER_SLEEP_IDLE_SECONDS, `plan=seconds` pairs, comma-separated; default `free=1800`:
   * free tenants after 30 minutes, the other plans never). A plan absent or at 0 never sleeps.
   */
  idleSeconds: Readonly<Record<string, number>>;
  /**
   * Windows during which a plan's tenants are kept awake whatever their activity (business hours):
   * PROVISIONER_SLEEP_AWAKE_WINDOWS, `plan=RRULE TIME-ZONE MINUTES` entries separated by `|`, e.g.
   * `team=FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR;BYHOUR=8 Europe/Berlin 600` (a maintenance window's form).
   * A tenant with a time zone of its own (`timeZone`) has the window's local times read in it; the
   * entry's zone applies to the tenants without one (sleep/service.ts idlePlans).
   */
  awakeWindows: Readonly<Record<string, readonly MaintenanceWindow[]>>;
  /** How often the `idle-sleep` loop looks for idle tenants (PROVISIONER_SLEEP_CHECK_SECONDS, default 60, 1..3600). */
  checkSeconds: number;
  /**
   * How long a request to a sleeping runtime's API waits for the runtime to be back before it is
   * answered 503 TENANT_WAKING with Retry-After (PROVISIONER_WAKE_WAIT_SECONDS, default 20, 0..120).
   */
  wakeWaitSeconds: number;
}

export interface HybridConfig {
  /**
   * The control plane's base URL as customers' clusters reach it: PROVISIONER_PUBLIC_URL when it
   * is set; undefined otherwise (the default URL is this host's listen address, which no other
   * cluster reaches), and hybrid runtimes cannot be registered.
   */
  publicUrl: string | undefined;
  /** Life of a hybrid runtime's bootstrap token (PROVISIONER_HYBRID_BOOTSTRAP_TTL_SECONDS, default 86400, 60..604800). */
  bootstrapTtlSeconds: number;
  /** Ingress-based hybrid runtimes, called over https (docs/hybrid.md "Ingress access"). */
  ingress: HybridIngressConfig;
  /**
   * How long a removed hybrid runtime's row is kept (its audit rows stay) before the
   * `removed-runtime-purger` loop deletes it (PROVISIONER_REMOVED_RUNTIME_RETENTION_HOURS, default 24, 1..8760).
   */
  removedRetentionHours: number;
  /**
   * Bytes of generated bundles and diffs kept in this process (runtime-registry/bundle-cache.ts;
   * PROVISIONER_HYBRID_BUNDLE_CACHE_MB, default 64, 0..4096; 0 keeps none).
   */
  bundleCacheBytes: number;
}

export interface HybridIngressConfig {
  /**
   * Loopback or private ranges an ingressUrl may resolve to (PROVISIONER_HYBRID_INGRESS_ALLOWED_CIDRS,
   * comma-separated CIDRs; unset: public addresses only). Link-local and metadata addresses never.
   */
  allowedCidrs: string[];
  allowedCidrsVariable: 'PROVISIONER_HYBRID_INGRESS_ALLOWED_CIDRS';
  /**
   * PEM certificates trusted for runtimes' ingresses besides the default CAs, read at start-up from
   * the file PROVISIONER_HYBRID_INGRESS_CA_FILE names (an operator's file; unset: the default CAs only).
   */
  caPem: string | undefined;
  /**
   * Requests one ingress-based runtime may have in flight on this replica, which is also its most
   * open connections (PROVISIONER_HYBRID_INGRESS_REQUESTS_PER_RUNTIME, default 32, 1..4096); more: 503 RUNTIME_BUSY.
   */
  requestsPerRuntime: number;
  /**
   * The same across all of one tenant's ingress-based runtimes on this replica
   * (PROVISIONER_HYBRID_INGRESS_REQUESTS_PER_TENANT, default 64, 1..65536); more: 503 RUNTIME_BUSY.
   */
  requestsPerTenant: number;
}

/** Per-tenant budgets (docs/security.md "Tenant against tenant through shared resources"). */
export interface TenantBudgets {
  /** Live runtime objects stored per tenant (PROVISIONER_RUNTIME_OBJECTS_PER_TENANT, default 20000). */
  runtimeObjects: number;
  /** Bytes of stored runtime object rows per tenant (PROVISIONER_RUNTIME_OBJECT_BYTES_PER_TENANT, default 64 MiB). */
  runtimeObjectBytes: number;
  /** Event batches one runtime may post per second, per replica (PROVISIONER_RUNTIME_EVENT_BATCHES_PER_SECOND, default 20). */
  eventBatchesPerSecond: number;
  /** Digests one runtime may send per minute, per replica (PROVISIONER_RUNTIME_DIGESTS_PER_MINUTE, default 120). */
  digestsPerMinute: number;
  /** Managed clusters per tenant (PROVISIONER_MANAGED_CLUSTERS_PER_TENANT, default 50). */
  managedClusters: number;
  /** Unrevoked API keys bound to one tenant, tenant and runtime keys (PROVISIONER_KEYS_PER_TENANT, default 100). */
  keys: number;
  /** Hybrid runtimes per tenant, not removed (PROVISIONER_HYBRID_RUNTIMES_PER_TENANT, default 10). */
  hybridRuntimes: number;
  /** Hybrid runtime registrations one tenant may ask for per hour, per replica (PROVISIONER_HYBRID_REGISTRATIONS_PER_HOUR, default 30). */
  hybridRegistrationsPerHour: number;
  /**
   * Upgrade bundles (GET …/runtimes/:name/bundle, POST …/runtimes/:name/upgrade) one tenant may ask
   * for per minute, all its runtimes, per replica (PROVISIONER_HYBRID_BUNDLES_PER_MINUTE, default 60).
   */
  hybridBundlesPerMinute: number;
  /** The same per runtime (PROVISIONER_HYBRID_BUNDLES_PER_RUNTIME_PER_MINUTE, default 20). */
  hybridBundlesPerRuntimePerMinute: number;
  /**
   * In-cluster upgraders' polls (GET /v1/runtime/upgrade) per minute, all of one tenant's runtimes,
   * per replica (PROVISIONER_HYBRID_UPGRADER_POLLS_PER_MINUTE, default 120).
   */
  upgraderPollsPerMinute: number;
  /** The same per runtime (PROVISIONER_HYBRID_UPGRADER_POLLS_PER_RUNTIME_PER_MINUTE, default 60; an upgrader polls every 30 s). */
  upgraderPollsPerRuntimePerMinute: number;
  /**
   * Application history entries kept per tenant, all its runtimes (PROVISIONER_APP_HISTORY_MAX_PER_TENANT,
   * default 10000, 1..1000000): storing a newer one deletes the oldest beyond it.
   */
  appHistoryEntries: number;
  /**
   * Bytes of application history kept per tenant, all its runtimes (PROVISIONER_APP_HISTORY_MAX_BYTES_PER_TENANT,
   * default 64 MiB, 1 MiB..16 GiB; an entry's size is migration 032's `size_bytes`): storing a newer
   * entry deletes the oldest beyond it.
   */
  appHistoryBytes: number;
}

export const DEFAULT_TENANT_BUDGETS: TenantBudgets = {
  runtimeObjects: 20_000,
  runtimeObjectBytes: 64 * 1024 * 1024,
  eventBatchesPerSecond: 20,
  digestsPerMinute: 120,
  managedClusters: 50,
  keys: 100,
  hybridRuntimes: 10,
  hybridRegistrationsPerHour: 30,
  hybridBundlesPerMinute: 60,
  hybridBundlesPerRuntimePerMinute: 20,
  upgraderPollsPerMinute: 120,
  upgraderPollsPerRuntimePerMinute: 60,
  appHistoryEntries: 10_000,
  appHistoryBytes: 64 * 1024 * 1024,
};

function loadBudgets(env: Env): TenantBudgets {
  const d = DEFAULT_TENANT_BUDGETS;
  return {
    runtimeObjects: int(env, 'PROVISIONER_RUNTIME_OBJECTS_PER_TENANT', d.runtimeObjects, 1, 10_000_000),
    runtimeObjectBytes: int(
      env,
      'PROVISIONER_RUNTIME_OBJECT_BYTES_PER_TENANT',
      d.runtimeObjectBytes,
      1024 * 1024,
      2 ** 40,
    ),
    eventBatchesPerSecond: int(env, 'PROVISIONER_RUNTIME_EVENT_BATCHES_PER_SECOND', d.eventBatchesPerSecond, 1, 10_000),
    digestsPerMinute: int(env, 'PROVISIONER_RUNTIME_DIGESTS_PER_MINUTE', d.digestsPerMinute, 1, 100_000),
    managedClusters: int(env, 'PROVISIONER_MANAGED_CLUSTERS_PER_TENANT', d.managedClusters, 1, 100_000),
    keys: int(env, 'PROVISIONER_KEYS_PER_TENANT', d.keys, 2, 100_000),
    hybridRuntimes: int(env, 'PROVISIONER_HYBRID_RUNTIMES_PER_TENANT', d.hybridRuntimes, 1, 10_000),
    hybridRegistrationsPerHour: int(
      env,
      'PROVISIONER_HYBRID_REGISTRATIONS_PER_HOUR',
      d.hybridRegistrationsPerHour,
      1,
      1_000_000,
    ),
    hybridBundlesPerMinute: int(env, 'PROVISIONER_HYBRID_BUNDLES_PER_MINUTE', d.hybridBundlesPerMinute, 1, 1_000_000),
    hybridBundlesPerRuntimePerMinute: int(
      env,
      'PROVISIONER_HYBRID_BUNDLES_PER_RUNTIME_PER_MINUTE',
      d.hybridBundlesPerRuntimePerMinute,
      1,
      1_000_000,
    ),
    upgraderPollsPerMinute: int(
      env,
      'PROVISIONER_HYBRID_UPGRADER_POLLS_PER_MINUTE',
      d.upgraderPollsPerMinute,
      1,
      1_000_000,
    ),
    upgraderPollsPerRuntimePerMinute: int(
      env,
      'PROVISIONER_HYBRID_UPGRADER_POLLS_PER_RUNTIME_PER_MINUTE',
      d.upgraderPollsPerRuntimePerMinute,
      1,
      1_000_000,
    ),
    appHistoryEntries: int(env, 'PROVISIONER_APP_HISTORY_MAX_PER_TENANT', d.appHistoryEntries, 1, 1_000_000),
    appHistoryBytes: int(
      env,
      'PROVISIONER_APP_HISTORY_MAX_BYTES_PER_TENANT',
      d.appHistoryBytes,
      1024 * 1024,
      16 * 1024 * 1024 * 1024,
    ),
  };
}

export interface ManagedClustersConfig {
  /**
   * What a tenant's managed-cluster credentials may hold: always the strict policy (no exec, TLS
   * verified, https only); loopback and private ranges only as PROVISIONER_MANAGED_CLUSTER_ALLOWED_CIDRS lists.
   */
  kubeconfig: KubeconfigPolicy;
  /** Time between health probes of one managed cluster (PROVISIONER_MANAGED_CLUSTER_PROBE_SECONDS, default 30; 0 turns probing off). */
  probeIntervalMs: number;
  /**
   * Short-lived ServiceAccount tokens (docs/operations.md "Managed clusters"): lifetime asked of each
   * (PROVISIONER_MANAGED_CLUSTER_TOKEN_SECONDS, default 3600, 600..86400) and time between renewals
   * (PROVISIONER_MANAGED_CLUSTER_TOKEN_REFRESH_SECONDS, default half the lifetime, below it; 0 turns
   * short-lived tokens off).
   */
  tokens: { lifetimeSeconds: number; refreshMs: number };
  /** Image of the bootstrap Job (PROVISIONER_MANAGED_CLUSTER_BOOTSTRAP_IMAGE; default the tunnel client's, docs/decisions.md). */
  bootstrapImage: string | undefined;
}

export interface ReconcilerConfig {
  /** Concurrent reconciles in this process (PROVISIONER_WORKERS, default 2). */
  workers: number;
  /**
   * Memory budget of this process's engine runs in MiB (PROVISIONER_ENGINE_MEMORY_MB; default: the
   * workers at the largest measured per-run peak, reconciler/memory-budget.ts; 0: no budget). Runs
   * are admitted by it as well as by the worker count.
   */
  engineMemoryMb: number;
  /** Concurrent reconciles per root cluster across all processes (PROVISIONER_CLUSTER_PARALLELISM, default 4). */
  clusterParallelism: number;
  /** Lease time to live (PROVISIONER_LEASE_TTL_SECONDS, default 30); heartbeats renew it every third of it. */
  leaseTtlSeconds: number;
  /**
   * Periodic resync (drift detection) of Ready tenants, the safety net behind the root-cluster
   * watch (PROVISIONER_RESYNC_SECONDS, default 86400, spread ±10 % per tenant; 0 turns it off).
   */
  resyncSeconds: number;
  /** Watch the root clusters' tenant objects and resync a tenant when one changes (PROVISIONER_DRIFT_WATCH, default on). */
  driftWatch: boolean;
  /** Consecutive failures before a tenant is Stalled (PROVISIONER_MAX_FAILURES, default 5). */
  maxFailures: number;
  /** First retry delay (PROVISIONER_BACKOFF_BASE_SECONDS, default 10); grows ×3 per failure. */
  backoffBaseSeconds: number;
  /** Longest retry delay (PROVISIONER_BACKOFF_CAP_SECONDS, default 600). */
  backoffCapSeconds: number;
  /** Polling interval, the safety net under LISTEN/NOTIFY (PROVISIONER_POLL_MS, default 2000). */
  pollMs: number;
  /** How long shutdown waits for running operations before handing leases back (PROVISIONER_SHUTDOWN_GRACE_SECONDS, default 20). */
  shutdownGraceSeconds: number;
  /** Fleet upgrade steps with an engine run pending or running per root cluster, all fleet upgrades (PROVISIONER_FLEET_CLUSTER_PARALLELISM, default 2). */
  fleetClusterParallelism: number;
}

export interface EngineConfig {
  /** `pulumi` runs the tenants program through the Automation API; `none` starts no reconciler (PROVISIONER_ENGINE). */
  kind: 'pulumi' | 'none';
  /** Pulumi state backend (PULUMI_BACKEND_URL); default: the provisioner's Postgres, table pulumi_state. */
  backendUrl: string | undefined;
  /** Secrets provider (PROVISIONER_SECRETS_PROVIDER, default `passphrase`; KMS URLs pass through). */
  secretsProvider: string;
  /** Passphrase for the passphrase secrets provider (PULUMI_CONFIG_PASSPHRASE). */
  passphrase: string | undefined;
  /** Folder holding the Pulumi CLI (`bin/pulumi` or `pulumi`) (PROVISIONER_PULUMI_CLI_DIR); default: PATH. */
  cliDir: string | undefined;
  /** PULUMI_HOME for the engine (PROVISIONER_PULUMI_HOME, default `<dataDir>/engine/.pulumi`). */
  pulumiHome: string;
  /**
   * Base URL runtimes use to reach the control plane (PROVISIONER_PUBLIC_URL, default http://HOST:PORT;
   * plain http only for a loopback host or with PROVISIONER_PUBLIC_URL_ALLOW_HTTP=true).
   */
  publicUrl: string;
  /**
   * Chart repository overrides handed to the tenants program as `tenant:chartRepositories`
   * (PROVISIONER_CHART_REPOSITORIES, JSON such as `{"argo": "/srv/charts", "vcluster": "oci://…"}`;
   * default: upstream repositories). Names and locations are checked at start-up.
   */
  chartRepositories: Record<string, string> | undefined;
  /** Server of the exported vcluster kubeconfig, `tenant:vclusterServerTemplate` (PROVISIONER_VCLUSTER_SERVER_TEMPLATE; default the program's). */
  vclusterServerTemplate: string | undefined;
  /**
   * How long each Argo chart release of a runtime may take to become ready before the run fails,
   * `tenant:runtimeReleaseTimeoutSeconds` (PROVISIONER_RUNTIME_RELEASE_TIMEOUT_SECONDS; default the program's, 600).
   */
  runtimeReleaseTimeoutSeconds: number | undefined;
}

// Variable parsing and its error type are shared with the runtime agents.
export { ConfigError };

function signingKey(raw: string | undefined): string | undefined {
  if (raw === undefined || raw === '') return undefined;
  try {
    const key = createPrivateKey(raw);
    if (key.asymmetricKeyType !== 'ed25519') throw new Error(key.asymmetricKeyType);
  } catch {
    throw new ConfigError(
      'PROVISIONER_REQUEST_SIGNING_KEY',
      'must be an Ed25519 private key in PEM (e.g. `openssl genpkey -algorithm ed25519`)',
    );
  }
  return raw;
}

function encryptionKey(raw: string | undefined): Buffer | undefined {
  if (raw === undefined || raw === '') return undefined;
  const name = 'PROVISIONER_ENCRYPTION_KEY';
  let key: Buffer;
  if (/^[0-9a-fA-F]{64}$/.test(raw)) key = Buffer.from(raw, 'hex');
  else if (/^[A-Za-z0-9+/_-]{43}=?$/.test(raw)) key = Buffer.from(raw, 'base64');
  else throw new ConfigError(name, 'must be 32 bytes as 64 hex characters or base64 (e.g. `openssl rand -hex 32`)');
  if (key.length !== 32) throw new ConfigError(name, `decodes to ${key.length} bytes; 32 are required`);
  return key;
}

function url(env: Env, name: string, schemes: string[]): string | undefined {
  const raw = env[name];
  if (raw === undefined || raw === '') return undefined;
  let parsed: URL;
  try {
    parsed = new URL(raw);
  } catch {
    throw new ConfigError(name, `is not a URL (expected ${schemes.map((s) => `${s}//…`).join(' or ')})`);
  }
  if (!schemes.includes(parsed.protocol))
    throw new ConfigError(name, `scheme '${parsed.protocol}' is not supported; use ${schemes.join(', ')}`);
  return raw;
}

/**
 * PROVISIONER_PUBLIC_URL: where customers' clusters send their runtime keys and single-use
 * bootstrap tokens, and where the install command fetches its manifest. Plain http would hand
 * those to anyone on the path, so it is refused unless the host is a loopback address (one
 * machine: the sandbox, the tests) or PROVISIONER_PUBLIC_URL_ALLOW_HTTP=true says the operator
 * accepts it (a lab network; docs/decisions.md "Plain-http public URL").
 */
function publicUrl(env: Env): string | undefined {
  const name = 'PROVISIONER_PUBLIC_URL';
  const raw = url(env, name, ['https:', 'http:']);
  if (raw === undefined) return undefined;
  const parsed = new URL(raw);
  const allow = 'PROVISIONER_PUBLIC_URL_ALLOW_HTTP';
  if (parsed.protocol === 'http:' && !loopbackHost(parsed.hostname) && !bool(env, allow, false)) {
    throw new ConfigError(
      name,
      `'${parsed.origin}' is plain http on a host other than loopback: runtime keys and bootstrap tokens would cross the network in clear; use https, or set ${allow}=true to accept it`,
    );
  }
  return raw;
}

/** Whether a URL's hostname is a loopback address or `localhost` (IPv6 in brackets, as URL gives it). */
function loopbackHost(hostname: string): boolean {
  const host = hostname.replace(/^\[(.*)\]$/, '$1').toLowerCase();
  if (host === 'localhost' || host.endsWith('.localhost')) return true;
  if (isIP(host) === 4) return host.startsWith('127.');
  return isIP(host) === 6 && (host === '::1' || /^::ffff:127\./.test(host) || /^::ffff:7f[0-9a-f]{2}:/.test(host));
}

function loadReconcilerConfig(env: Env): ReconcilerConfig {
  const d = DEFAULT_RECONCILER_SETTINGS;
  const backoffBaseSeconds = int(env, 'PROVISIONER_BACKOFF_BASE_SECONDS', d.backoff.baseMs / 1000, 1, 3600);
  const backoffCapSeconds = int(env, 'PROVISIONER_BACKOFF_CAP_SECONDS', d.backoff.capMs / 1000, 1, 86_400);
  if (backoffCapSeconds < backoffBaseSeconds) {
    throw new ConfigError(
      'PROVISIONER_BACKOFF_CAP_SECONDS',
      `${backoffCapSeconds} is below PROVISIONER_BACKOFF_BASE_SECONDS (${backoffBaseSeconds})`,
    );
  }
  const workers = int(env, 'PROVISIONER_WORKERS', d.workers, 1, 256);
  return {
    workers,
    engineMemoryMb: int(env, 'PROVISIONER_ENGINE_MEMORY_MB', defaultEngineMemoryMb(workers), 0, 1_048_576),
    clusterParallelism: int(env, 'PROVISIONER_CLUSTER_PARALLELISM', d.clusterParallelism, 1, 1024),
    leaseTtlSeconds: int(env, 'PROVISIONER_LEASE_TTL_SECONDS', d.leaseTtlMs / 1000, 3, 3600),
    resyncSeconds: int(env, 'PROVISIONER_RESYNC_SECONDS', d.resyncMs / 1000, 0, 30 * 86_400),
    driftWatch: bool(env, 'PROVISIONER_DRIFT_WATCH', true),
    maxFailures: int(env, 'PROVISIONER_MAX_FAILURES', d.maxFailures, 1, 100),
    backoffBaseSeconds,
    backoffCapSeconds,
    pollMs: int(env, 'PROVISIONER_POLL_MS', d.pollMs, 50, 600_000),
    shutdownGraceSeconds: int(env, 'PROVISIONER_SHUTDOWN_GRACE_SECONDS', d.shutdownGraceMs / 1000, 0, 3600),
    fleetClusterParallelism: int(env, 'PROVISIONER_FLEET_CLUSTER_PARALLELISM', 2, 1, 1024),
  };
}

function loadEngineConfig(env: Env, dataDir: string, host: string, port: number): EngineConfig {
  const kind =
    env.PROVISIONER_ENGINE === undefined || env.PROVISIONER_ENGINE === '' ? 'pulumi' : env.PROVISIONER_ENGINE;
  if (kind !== 'pulumi' && kind !== 'none')
    throw new ConfigError('PROVISIONER_ENGINE', `'${kind}' is not one of pulumi, none`);
  const secretsProvider =
    env.PROVISIONER_SECRETS_PROVIDER === undefined || env.PROVISIONER_SECRETS_PROVIDER === ''
      ? 'passphrase'
      : env.PROVISIONER_SECRETS_PROVIDER;
  if (secretsProvider !== 'passphrase' && !/^[a-z0-9]+:\/\//.test(secretsProvider)) {
    throw new ConfigError(
      'PROVISIONER_SECRETS_PROVIDER',
      `'${secretsProvider}' must be 'passphrase' or a KMS URL such as awskms://…, gcpkms://…, azurekeyvault://…, hashivault://…`,
    );
  }
  const passphrase = env.PULUMI_CONFIG_PASSPHRASE === '' ? undefined : env.PULUMI_CONFIG_PASSPHRASE;
  const cliDir =
    env.PROVISIONER_PULUMI_CLI_DIR === undefined || env.PROVISIONER_PULUMI_CLI_DIR === ''
      ? undefined
      : resolve(env.PROVISIONER_PULUMI_CLI_DIR);
  const home =
    env.PROVISIONER_PULUMI_HOME === undefined || env.PROVISIONER_PULUMI_HOME === ''
      ? join(dataDir, 'engine', '.pulumi')
      : resolve(env.PROVISIONER_PULUMI_HOME);
  const publicHost = host === '0.0.0.0' || host === '::' ? '127.0.0.1' : host;
  return {
    kind,
    backendUrl: url(env, 'PULUMI_BACKEND_URL', ['postgres:', 'postgresql:', 'file:', 's3:', 'gs:', 'azblob:']),
    secretsProvider,
    passphrase,
    cliDir,
    pulumiHome: home,
    publicUrl: publicUrl(env) ?? `http://${publicHost.includes(':') ? `[${publicHost}]` : publicHost}:${port}`,
    chartRepositories: chartRepositories(env.PROVISIONER_CHART_REPOSITORIES),
    vclusterServerTemplate: serverTemplate(env.PROVISIONER_VCLUSTER_SERVER_TEMPLATE),
    runtimeReleaseTimeoutSeconds: env.PROVISIONER_RUNTIME_RELEASE_TIMEOUT_SECONDS
      ? int(env, 'PROVISIONER_RUNTIME_RELEASE_TIMEOUT_SECONDS', 600, 1, 3600)
      : undefined,
  };
}

/** The exported kubeconfig's server: an https URL once {release} and {namespace} are filled in (tenants/config.ts). */
function serverTemplate(raw: string | undefined): string | undefined {
  if (raw === undefined || raw === '') return undefined;
  const problem = vclusterServerTemplateProblem(raw, { httpsOnly: true });
  if (problem) throw new ConfigError('PROVISIONER_VCLUSTER_SERVER_TEMPLATE', problem);
  return raw;
}

/** A JSON object of repository name to location, each checked as the tenants program does (tenants/config.ts). */
function chartRepositories(raw: string | undefined): Record<string, string> | undefined {
  if (raw === undefined || raw === '') return undefined;
  const name = 'PROVISIONER_CHART_REPOSITORIES';
  let parsed: unknown;
  try {
    parsed = JSON.parse(raw);
  } catch {
    throw new ConfigError(name, 'is not JSON; expected an object such as {"argo": "/srv/charts"}');
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed))
    throw new ConfigError(name, 'must be a JSON object of repository name to location');
  const out: Record<string, string> = {};
  for (const [repository, location] of Object.entries(parsed)) {
    const problem = chartRepositoryProblem(repository, location);
    if (problem) throw new ConfigError(name, problem);
    out[repository] = location as string;
  }
  return out;
}

/** PROVISIONER_ADVERTISE_URL: an http(s) origin, e.g. http://10.0.3.7:8080. */
function advertiseUrlFrom(raw: string | undefined): string | undefined {
  if (raw === undefined || raw === '') return undefined;
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new ConfigError(
      'PROVISIONER_ADVERTISE_URL',
      `'${raw}' is not a URL; expected http://<address of this replica>:<port>`,
    );
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:')
    throw new ConfigError(
      'PROVISIONER_ADVERTISE_URL',
      `scheme '${url.protocol}' is not supported; use http:// or https://`,
    );
  if (url.pathname !== '/' || url.search !== '' || url.hash !== '' || url.username !== '' || url.password !== '') {
    throw new ConfigError(
      'PROVISIONER_ADVERTISE_URL',
      `'${raw}' must be an origin only (scheme, host, port), without path, query or credentials`,
    );
  }
  return url.origin;
}

const LOG_LEVELS: readonly LogLevel[] = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'];

export function loadConfig(env: Env = process.env, cwd = process.cwd()): Config {
  const databaseUrl = env.DATABASE_URL === '' ? undefined : env.DATABASE_URL;
  if (databaseUrl !== undefined) {
    let url: URL;
    try {
      url = new URL(databaseUrl);
    } catch {
      throw new ConfigError('DATABASE_URL', 'is not a URL; expected postgres://user:password@host:5432/database');
    }
    if (url.protocol !== 'postgres:' && url.protocol !== 'postgresql:') {
      throw new ConfigError('DATABASE_URL', `scheme '${url.protocol}' is not supported; use postgres://`);
    }
  }
  const host = env.HOST ?? '127.0.0.1';
  if (host === '' || /\s/.test(host)) throw new ConfigError('HOST', `'${host}' is not a listen address`);
  const adminToken = env.PROVISIONER_ADMIN_TOKEN === '' ? undefined : env.PROVISIONER_ADMIN_TOKEN;
  if (adminToken !== undefined && adminToken.length < 24) {
    throw new ConfigError('PROVISIONER_ADMIN_TOKEN', 'must be at least 24 characters');
  }
  const logLevel = (env.LOG_LEVEL ?? 'info') as LogLevel;
  if (!LOG_LEVELS.includes(logLevel))
    throw new ConfigError('LOG_LEVEL', `'${logLevel}' is not one of ${LOG_LEVELS.join(', ')}`);
  const dataDirRaw = env.PROVISIONER_DATA_DIR && env.PROVISIONER_DATA_DIR !== '' ? env.PROVISIONER_DATA_DIR : './.data';
  const port = int(env, 'PORT', 8080, 0, 65535);
  const dataDir = isAbsolute(dataDirRaw) ? dataDirRaw : resolve(cwd, dataDirRaw);
  return {
    port,
    host,
    databaseUrl,
    dataDir,
    adminToken,
    encryptionKey: encryptionKey(env.PROVISIONER_ENCRYPTION_KEY),
    requestSigningKeyPem: signingKey(env.PROVISIONER_REQUEST_SIGNING_KEY),
    logLevel,
    bodyLimit: int(env, 'PROVISIONER_BODY_LIMIT', 64 * 1024, 1024, 16 * 1024 * 1024),
    signupRateLimit: int(env, 'PROVISIONER_SIGNUP_RATE_LIMIT', 20, 1, 1_000_000_000),
    keyCacheMs: int(env, 'PROVISIONER_KEY_CACHE_MS', 2000, 0, 60_000),
    requestTimeoutMs: int(env, 'PROVISIONER_REQUEST_TIMEOUT_SECONDS', 60, 1, 3600) * 1000,
    sseStreamsPerKey: int(env, 'PROVISIONER_SSE_STREAMS_PER_KEY', 20, 1, 10_000),
    tombstoneRetentionHours: int(env, 'PROVISIONER_TOMBSTONE_RETENTION_HOURS', 24, 1, 8760),
    appHistoryRetentionDays: int(env, 'PROVISIONER_APP_HISTORY_RETENTION_DAYS', 90, 1, 3650),
    trustedProxies: trustedProxies(env.PROVISIONER_TRUSTED_PROXIES),
    advertiseUrl: advertiseUrlFrom(env.PROVISIONER_ADVERTISE_URL),
    reconciler: loadReconcilerConfig(env),
    engine: loadEngineConfig(env, dataDir, host, port),
    tunnel: loadTunnelLimits(env),
    kubeconfig: loadKubeconfigPolicy(env),
    managedClusters: {
      kubeconfig: {
        execCommands: [],
        allowInsecureTls: false,
        allowHttp: false,
        allowedCidrs: cidrList(env, 'PROVISIONER_MANAGED_CLUSTER_ALLOWED_CIDRS'),
        allowedCidrsVariable: 'PROVISIONER_MANAGED_CLUSTER_ALLOWED_CIDRS',
      },
      probeIntervalMs: int(env, 'PROVISIONER_MANAGED_CLUSTER_PROBE_SECONDS', 30, 0, 3600) * 1000,
      tokens: managedClusterTokens(env),
      bootstrapImage: env.PROVISIONER_MANAGED_CLUSTER_BOOTSTRAP_IMAGE || undefined,
    },
    budgets: loadBudgets(env),
    sleep: {
      idleSeconds: idleSeconds(env.PROVISIONER_SLEEP_IDLE_SECONDS),
      awakeWindows: awakeWindows(env.PROVISIONER_SLEEP_AWAKE_WINDOWS),
      checkSeconds: int(env, 'PROVISIONER_SLEEP_CHECK_SECONDS', 60, 1, 3600),
      wakeWaitSeconds: int(env, 'PROVISIONER_WAKE_WAIT_SECONDS', 20, 0, 120),
    },
    warmPool: {
      size: poolSizes(env.PROVISIONER_WARM_POOL),
      parallelism: int(env, 'PROVISIONER_WARM_POOL_PARALLELISM', 1, 1, 32),
      checkSeconds: int(env, 'PROVISIONER_WARM_POOL_CHECK_SECONDS', 30, 1, 3600),
    },
    webhooks: {
      maxBytes: int(env, 'PROVISIONER_WEBHOOK_MAX_BYTES', 1024 * 1024, 1024, 25 * 1024 * 1024),
      queuePerTenant: int(env, 'PROVISIONER_WEBHOOK_QUEUE_PER_TENANT', 100, 1, 10_000),
      queueBytesPerTenant: int(env, 'PROVISIONER_WEBHOOK_QUEUE_BYTES_PER_TENANT', 16 * 1024 * 1024, 1024, 1024 ** 3),
    },
    hybrid: {
      // Without a trailing slash: the bundle and the bootstrap Job append paths to it.
      publicUrl: publicUrl(env)?.replace(/\/+$/, ''),
      bootstrapTtlSeconds: int(env, 'PROVISIONER_HYBRID_BOOTSTRAP_TTL_SECONDS', 86_400, 60, 7 * 86_400),
      ingress: {
        allowedCidrs: cidrList(env, 'PROVISIONER_HYBRID_INGRESS_ALLOWED_CIDRS'),
        allowedCidrsVariable: 'PROVISIONER_HYBRID_INGRESS_ALLOWED_CIDRS',
        caPem: caBundle(env, 'PROVISIONER_HYBRID_INGRESS_CA_FILE'),
        requestsPerRuntime: int(env, 'PROVISIONER_HYBRID_INGRESS_REQUESTS_PER_RUNTIME', 32, 1, 4096),
        requestsPerTenant: int(env, 'PROVISIONER_HYBRID_INGRESS_REQUESTS_PER_TENANT', 64, 1, 65_536),
      },
      removedRetentionHours: int(env, 'PROVISIONER_REMOVED_RUNTIME_RETENTION_HOURS', 24, 1, 8760),
      bundleCacheBytes: int(env, 'PROVISIONER_HYBRID_BUNDLE_CACHE_MB', 64, 0, 4096) * 1024 * 1024,
    },
  };
}

/** PROVISIONER_SLEEP_IDLE_SECONDS: `plan=seconds` pairs of known plans (0: never). */
function idleSeconds(raw: string | undefined): Record<string, number> {
  const name = 'PROVISIONER_SLEEP_IDLE_SECONDS';
  if (raw === undefined) return { free: 1800 };
  const out: Record<string, number> = {};
  for (const part of raw.split(',').map((p) => p.trim())) {
    if (part === '') continue;
    const m = /^([a-z][a-z0-9-]*)=(\d{1,7})$/.exec(part);
    if (!m) throw new ConfigError(name, `'${part}' is not plan=seconds (for example free=1800)`);
    const [, plan, seconds] = m;
    if (!PLAN_NAMES.includes(plan!))
      throw new ConfigError(name, `unknown plan '${plan}' (plans: ${PLAN_NAMES.join(', ')})`);
    const n = Number(seconds);
    if (n !== 0 && n < 10) throw new ConfigError(name, `${plan}=${n}: at least 10 seconds, or 0 for never`);
    out[plan!] = n;
  }
  return out;
}

/** PROVISIONER_WARM_POOL: `plan=count` pairs of known plans (the count is per root cluster). */
function poolSizes(raw: string | undefined): Record<string, number> {
  const name = 'PROVISIONER_WARM_POOL';
  const out: Record<string, number> = {};
  for (const part of (raw ?? '').split(',').map((p) => p.trim())) {
    if (part === '') continue;
    const m = /^([a-z][a-z0-9-]*)=(\d{1,3})$/.exec(part);
    if (!m) throw new ConfigError(name, `'${part}' is not plan=count (for example free=2)`);
    const [, plan, count] = m;
    if (!PLAN_NAMES.includes(plan!))
      throw new ConfigError(name, `unknown plan '${plan}' (plans: ${PLAN_NAMES.join(', ')})`);
    if (Number(count) > 100)
      throw new ConfigError(name, `${plan}=${count}: at most 100 entries per plan and root cluster`);
    out[plan!] = Number(count);
  }
  return out;
}

/** PROVISIONER_SLEEP_AWAKE_WINDOWS: `plan=RRULE TIME-ZONE MINUTES [DTSTART]` entries separated by `|`. */
function awakeWindows(raw: string | undefined): Record<string, MaintenanceWindow[]> {
  const name = 'PROVISIONER_SLEEP_AWAKE_WINDOWS';
  const out: Record<string, MaintenanceWindow[]> = {};
  for (const entry of (raw ?? '').split('|').map((e) => e.trim())) {
    if (entry === '') continue;
    const m = /^([a-z][a-z0-9-]*)=(\S+)\s+(\S+)\s+(\d{1,5})(?:\s+(\S+))?$/.exec(entry);
    if (!m)
      throw new ConfigError(
        name,
        `'${entry}' is not plan=RRULE TIME-ZONE MINUTES (for example team=FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR;BYHOUR=8 Europe/Berlin 600)`,
      );
    const [, plan, rrule, timeZone, minutes, dtstart] = m;
    if (!PLAN_NAMES.includes(plan!))
      throw new ConfigError(name, `unknown plan '${plan}' (plans: ${PLAN_NAMES.join(', ')})`);
    let window: MaintenanceWindow;
    try {
      window = checkWindow(
        { rrule: rrule!, timeZone: timeZone!, durationMinutes: Number(minutes), ...(dtstart ? { dtstart } : {}) },
        plan!,
      );
    } catch (err) {
      throw new ConfigError(name, `${plan}: ${err instanceof Error ? err.message : String(err)}`);
    }
    (out[plan!] ??= []).push(window);
  }
  return out;
}

/** The managed clusters' token lifetime and renewal interval (the renewal always before the expiry). */
function managedClusterTokens(env: Env): ManagedClustersConfig['tokens'] {
  const lifetimeSeconds = int(env, 'PROVISIONER_MANAGED_CLUSTER_TOKEN_SECONDS', 3600, 600, 86_400);
  const refreshSeconds = int(
    env,
    'PROVISIONER_MANAGED_CLUSTER_TOKEN_REFRESH_SECONDS',
    Math.floor(lifetimeSeconds / 2),
    0,
    lifetimeSeconds - 1,
  );
  return { lifetimeSeconds, refreshMs: refreshSeconds * 1000 };
}

/**
 * A file of PEM certificates (a CA bundle) named by the operator's setting `name`, read once at
 * start-up; every certificate in it must parse.
 */
function caBundle(env: Env, name: string): string | undefined {
  const file = env[name];
  if (file === undefined || file === '') return undefined;
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    const code = typeof err === 'object' && err !== null && 'code' in err ? String(err.code) : 'unreadable';
    throw new ConfigError(name, `cannot read '${file}' (${code})`);
  }
  const blocks = text.match(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g) ?? [];
  if (blocks.length === 0) throw new ConfigError(name, `'${file}' holds no PEM certificate`);
  blocks.forEach((block, i) => {
    try {
      new X509Certificate(block);
    } catch {
      throw new ConfigError(name, `certificate ${i + 1} in '${file}' does not parse`);
    }
  });
  return blocks.join('\n') + '\n';
}

/** A comma-separated list of CIDRs (loopback or private ranges a server may be in). */
function cidrList(env: Env, name: string): string[] {
  const list = (env[name] ?? '')
    .split(',')
    .map((c) => c.trim())
    .filter((c) => c !== '');
  for (const c of list) {
    if (!parseCidr(c)) throw new ConfigError(name, `'${c}' is not a CIDR such as 10.0.0.0/8 or fd00::/8`);
  }
  return list;
}

/**
 * PROVISIONER_KUBECONFIG_EXEC_COMMANDS: absolute paths of the commands a registered cluster's
 * kubeconfig may run as `exec` credential plugin (comma-separated; unset: exec is refused).
 * PROVISIONER_KUBECONFIG_INSECURE_TLS=true: accept `insecure-skip-tls-verify` (development only).
 * PROVISIONER_CLUSTER_ALLOWED_CIDRS: loopback/private ranges a registered cluster's server may be
 * in (comma-separated CIDRs; unset: public addresses only). PROVISIONER_CLUSTER_ALLOW_HTTP=true:
 * accept plain http servers (tests only).
 */
function loadKubeconfigPolicy(env: Env): KubeconfigPolicy {
  const raw = env.PROVISIONER_KUBECONFIG_EXEC_COMMANDS ?? '';
  const execCommands = raw
    .split(',')
    .map((c) => c.trim())
    .filter((c) => c !== '');
  for (const c of execCommands) {
    if (!isAbsolute(c))
      throw new ConfigError(
        'PROVISIONER_KUBECONFIG_EXEC_COMMANDS',
        `'${c}' is not an absolute path; list the exact commands a kubeconfig may run, e.g. /usr/local/bin/aws-iam-authenticator`,
      );
  }
  const allowedCidrs = cidrList(env, 'PROVISIONER_CLUSTER_ALLOWED_CIDRS');
  return {
    execCommands,
    allowInsecureTls: bool(env, 'PROVISIONER_KUBECONFIG_INSECURE_TLS', false),
    allowedCidrs,
    allowHttp: bool(env, 'PROVISIONER_CLUSTER_ALLOW_HTTP', false),
  };
}

/** PROVISIONER_TRUSTED_PROXIES: comma-separated IPs or CIDRs of the ingress in front of the API. */
function trustedProxies(raw: string | undefined): string[] {
  const list = (raw ?? '')
    .split(',')
    .map((p) => p.trim())
    .filter((p) => p !== '');
  for (const p of list) {
    if (isIP(p) === 0 && !parseCidr(p))
      throw new ConfigError('PROVISIONER_TRUSTED_PROXIES', `'${p}' is not an IP address or CIDR (e.g. 10.0.0.0/8)`);
  }
  return list;
}

function bool(env: Env, name: string, fallback: boolean): boolean {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  if (raw === 'true' || raw === '1') return true;
  if (raw === 'false' || raw === '0') return false;
  throw new ConfigError(name, `'${raw}' is not one of true, false`);
}

const KiB = 1024;
const MiB = 1024 * KiB;

/** The variable that sets each tunnel limit, its range, and whether it is given in seconds (the limit in ms). */
const TUNNEL_VARIABLES: {
  readonly [K in keyof TunnelLimits]: { variable: string; min: number; max: number; seconds?: true };
} = {
  maxPayload: { variable: 'PROVISIONER_TUNNEL_MAX_PAYLOAD_BYTES', min: 16 * KiB, max: 64 * MiB },
  maxStreams: { variable: 'PROVISIONER_TUNNEL_MAX_STREAMS', min: 1, max: 65_535 },
  maxStreamsPerTenant: { variable: 'PROVISIONER_TUNNEL_MAX_STREAMS_PER_TENANT', min: 1, max: 1_000_000 },
  streamWindow: { variable: 'PROVISIONER_TUNNEL_STREAM_WINDOW_BYTES', min: 16 * KiB, max: 64 * MiB },
  maxChunkBytes: { variable: 'PROVISIONER_TUNNEL_MAX_CHUNK_BYTES', min: KiB, max: 16 * MiB },
  maxHeaderBytes: { variable: 'PROVISIONER_TUNNEL_MAX_HEADER_BYTES', min: KiB, max: MiB },
  maxRequestBodyBytes: { variable: 'PROVISIONER_TUNNEL_MAX_REQUEST_BODY_BYTES', min: 0, max: 1024 * 1024 * MiB },
  requestTimeoutMs: { variable: 'PROVISIONER_TUNNEL_REQUEST_TIMEOUT_SECONDS', min: 1, max: 3600, seconds: true },
  idleTimeoutMs: { variable: 'PROVISIONER_TUNNEL_IDLE_TIMEOUT_SECONDS', min: 1, max: 86_400, seconds: true },
  heartbeatIntervalMs: { variable: 'PROVISIONER_TUNNEL_HEARTBEAT_SECONDS', min: 1, max: 3600, seconds: true },
  handshakeTimeoutMs: { variable: 'PROVISIONER_TUNNEL_HANDSHAKE_TIMEOUT_SECONDS', min: 1, max: 600, seconds: true },
  maxPendingHandshakes: { variable: 'PROVISIONER_TUNNEL_MAX_PENDING_HANDSHAKES', min: 1, max: 1_000_000 },
  maxPendingHandshakesPerTenant: {
    variable: 'PROVISIONER_TUNNEL_MAX_PENDING_HANDSHAKES_PER_TENANT',
    min: 1,
    max: 1000,
  },
  revalidateIntervalMs: { variable: 'PROVISIONER_TUNNEL_REVALIDATE_SECONDS', min: 0, max: 86_400, seconds: true },
  drainTimeoutMs: { variable: 'PROVISIONER_TUNNEL_DRAIN_SECONDS', min: 0, max: 600, seconds: true },
};

/**
 * PROVISIONER_TUNNEL_*: every tunnel limit, defaults from the tunnel server; a combination the
 * tunnel server would refuse (tunnelLimitProblems) is refused here, naming the variable.
 */
function loadTunnelLimits(env: Env): TunnelLimits {
  const limits = { ...DEFAULT_TUNNEL_LIMITS };
  for (const limit of Object.keys(TUNNEL_VARIABLES) as Array<keyof TunnelLimits>) {
    const { variable, min, max, seconds } = TUNNEL_VARIABLES[limit];
    limits[limit] = seconds
      ? int(env, variable, DEFAULT_TUNNEL_LIMITS[limit] / 1000, min, max) * 1000
      : int(env, variable, DEFAULT_TUNNEL_LIMITS[limit], min, max);
  }
  const [problem] = tunnelLimitProblems(limits, (limit) => TUNNEL_VARIABLES[limit].variable);
  if (problem) throw new ConfigError(TUNNEL_VARIABLES[problem.limit].variable, problem.message);
  return limits;
}

/**
 * The address other replicas reach this one at: PROVISIONER_ADVERTISE_URL, else the listen
 * address, with a wildcard host replaced by this machine's first non-loopback IPv4 address (a
 * pod's IP in Kubernetes).
 */
export function advertiseUrl(config: Config, address: AddressInfo | string | null): string {
  if (config.advertiseUrl) return config.advertiseUrl;
  const port = address !== null && typeof address === 'object' ? address.port : config.port;
  let host = config.host;
  if (host === '0.0.0.0' || host === '::') {
    const ipv4 = Object.values(os.networkInterfaces())
      .flat()
      .find((i) => i?.family === 'IPv4' && !i.internal);
    host = ipv4?.address ?? '127.0.0.1';
  }
  return `http://${host.includes(':') ? `[${host}]` : host}:${port}`;
}
