/** Event reporter configuration, from the environment (validated once at start). */
import { hostname } from 'node:os';
import { DIGEST_INTERVAL_SECONDS, HEARTBEAT_INTERVAL_SECONDS } from '../../protocol/events.ts';
import {
  ConfigError,
  controlPlaneUrl,
  type Env,
  int,
  kubeconfigFile,
  type LogLevel,
  logLevel,
  secret,
  str,
  url,
} from '../common/config.ts';

/** The agents' namespace inside the vcluster (runtime/component/agents.ts RUNTIME_NAMESPACE). */
const DEFAULT_NAMESPACE = 'hosted-runtime';
const DNS_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;

export interface EventReporterConfig {
  /** CONTROL_PLANE_URL: where batches go (`${controlPlaneUrl}/v1/runtime/events`). */
  controlPlaneUrl: string;
  /** RUNTIME_TOKEN or RUNTIME_TOKEN_FILE (re-read before every batch when it is a file). */
  token: () => string;
  /** REPLICA_NAME, else POD_NAME, else the host name: this replica's identity and Lease suffix. */
  replica: string;
  /** LEASE_NAMESPACE, else POD_NAMESPACE, else hosted-runtime: where the membership Leases live. */
  namespace: string;
  /**
   * RUNTIME_VERSION: the runtime version this replica belongs to (x.y.z; the hybrid bundle sets
   * it), sent with every heartbeat; unset, none is sent.
   */
  runtimeVersion: string | undefined;
  /**
   * WATCH_NAMESPACE: the only namespace whose Argo objects are watched (a hybrid runtime next to a
   * customer's existing Argo CD, which grants it rights there only); unset, every namespace.
   */
  watchNamespace: string | undefined;
  /** QUEUE_LIMIT: distinct objects waiting for delivery before the watches pause (default 1000). */
  queueLimit: number;
  /** LEASE_DURATION_SECONDS: a replica whose Lease is not renewed for this long is gone (default 15). */
  leaseDurationSeconds: number;
  /** HEARTBEAT_INTERVAL_SECONDS and DIGEST_INTERVAL_SECONDS (defaults from the wire contract). */
  heartbeatIntervalSeconds: number;
  digestIntervalSeconds: number;
  /** RETRY_MAX_SECONDS: the cap of the delivery backoff (default 30). */
  retryMaxSeconds: number;
  /** KUBECONFIG: a kubeconfig file; unset, the in-cluster service account is used. */
  kubeconfig: string | undefined;
  /** PORT (default 8080) and HOST (default 0.0.0.0): /metrics, /healthz, /readyz. */
  port: number;
  host: string;
  /** SHUTDOWN_GRACE_SECONDS: how long SIGTERM may take to hand over and flush (default 20). */
  shutdownGraceSeconds: number;
  /**
   * SOURCE_SERVER_URL: the runtime's Source Server (runtime versions from 1.7.0), asked what changed
   * each Application (changes.ts); unset, Applications are reported without it.
   */
  sourceServerUrl: string | undefined;
  /** SOURCE_SERVER_CONCURRENCY: lookups in flight at most (default 4). */
  sourceServerConcurrency: number;
  /** SOURCE_SERVER_TIMEOUT_SECONDS: longest wait for one lookup (default 20). */
  sourceServerTimeoutSeconds: number;
  logLevel: LogLevel;
}

export function loadEventReporterConfig(env: Env = process.env): EventReporterConfig {
  const cpUrl = controlPlaneUrl(env);
  const first = secret(env, 'RUNTIME_TOKEN');
  const tokenVar = first.file ? 'RUNTIME_TOKEN_FILE' : 'RUNTIME_TOKEN';
  if (first.value.length < 24) throw new ConfigError(tokenVar, 'does not look like a runtime token');
  const file = first.file;
  const token =
    file === undefined ? () => first.value : () => secret({ RUNTIME_TOKEN_FILE: file }, 'RUNTIME_TOKEN').value;

  const replicaVar = env.REPLICA_NAME ? 'REPLICA_NAME' : env.POD_NAME ? 'POD_NAME' : 'HOSTNAME';
  const replica = (env.REPLICA_NAME || env.POD_NAME || hostname()).toLowerCase();
  // The Lease is named `event-reporter-<replica>`: a DNS label of at most 63 characters.
  if (!DNS_LABEL.test(replica) || replica.length > 48)
    throw new ConfigError(replicaVar, `'${replica}' is not a DNS label of at most 48 characters`);
  const nsVar = env.LEASE_NAMESPACE ? 'LEASE_NAMESPACE' : 'POD_NAMESPACE';
  const namespace = str(env, nsVar, DEFAULT_NAMESPACE);
  if (!DNS_LABEL.test(namespace) || namespace.length > 63)
    throw new ConfigError(nsVar, `'${namespace}' is not a namespace name`);

  const runtimeVersion = env.RUNTIME_VERSION || undefined;
  if (runtimeVersion !== undefined && !/^\d+\.\d+\.\d+$/.test(runtimeVersion))
    throw new ConfigError('RUNTIME_VERSION', `'${runtimeVersion.slice(0, 40)}' is not a version x.y.z`);

  const watchNamespace = env.WATCH_NAMESPACE || undefined;
  if (watchNamespace !== undefined && (!DNS_LABEL.test(watchNamespace) || watchNamespace.length > 63))
    throw new ConfigError('WATCH_NAMESPACE', `'${watchNamespace}' is not a namespace name`);

  const kubeconfig = kubeconfigFile(env);

  const leaseDurationSeconds = int(env, 'LEASE_DURATION_SECONDS', 15, 3, 300);
  return {
    controlPlaneUrl: cpUrl,
    token,
    replica,
    namespace,
    runtimeVersion,
    watchNamespace,
    queueLimit: int(env, 'QUEUE_LIMIT', 1000, 1, 1_000_000),
    leaseDurationSeconds,
    heartbeatIntervalSeconds: int(env, 'HEARTBEAT_INTERVAL_SECONDS', HEARTBEAT_INTERVAL_SECONDS, 1, 3600),
    digestIntervalSeconds: int(env, 'DIGEST_INTERVAL_SECONDS', DIGEST_INTERVAL_SECONDS, 1, 86_400),
    retryMaxSeconds: int(env, 'RETRY_MAX_SECONDS', 30, 1, 600),
    kubeconfig,
    port: int(env, 'PORT', 8080, 0, 65535),
    host: str(env, 'HOST', '0.0.0.0'),
    shutdownGraceSeconds: int(env, 'SHUTDOWN_GRACE_SECONDS', 20, 1, 600),
    sourceServerUrl: env.SOURCE_SERVER_URL
      ? url(env, 'SOURCE_SERVER_URL', ['http:', 'https:']).toString().replace(/\/+$/, '')
      : undefined,
    sourceServerConcurrency: int(env, 'SOURCE_SERVER_CONCURRENCY', 4, 1, 64),
    sourceServerTimeoutSeconds: int(env, 'SOURCE_SERVER_TIMEOUT_SECONDS', 20, 1, 300),
    logLevel: logLevel(env),
  };
}
