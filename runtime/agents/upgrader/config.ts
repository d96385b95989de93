/** Configuration of a hybrid runtime's in-cluster upgrader, from the environment (validated once at start). */
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
} from '../common/config.ts';

const DNS_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;

export interface UpgraderConfig {
  /** CONTROL_PLANE_URL: where the upgrade is pulled and reported (https, or http to loopback). */
  controlPlaneUrl: string;
  /** RUNTIME_TOKEN or RUNTIME_TOKEN_FILE: the runtime key (never logged). */
  token: string;
  /** POD_NAMESPACE: the runtime's namespace, where the objects it patches are (default hosted-runtime). */
  namespace: string;
  /** KUBECONFIG: a kubeconfig file; unset, the pod's service account. */
  kubeconfig: string | undefined;
  /** PORT (default 8080) and HOST (default 0.0.0.0): /healthz, /readyz. */
  port: number;
  host: string;
  /** POLL_SECONDS: how often it asks for an upgrade (default 30). */
  pollSeconds: number;
  /** ROLLOUT_TIMEOUT_SECONDS: how long the agents' rollout may take before it rolls back (default 600). */
  rolloutTimeoutSeconds: number;
  /** REQUEST_TIMEOUT_SECONDS: one call's limit, to the control plane or the API server (default 15). */
  requestTimeoutSeconds: number;
  logLevel: LogLevel;
}

export function loadUpgraderConfig(env: Env = process.env): UpgraderConfig {
  const cp = controlPlaneUrl(env);
  const token = secret(env, 'RUNTIME_TOKEN');
  // The message never repeats the value.
  if (token.value.length < 24)
    throw new ConfigError(token.file ? 'RUNTIME_TOKEN_FILE' : 'RUNTIME_TOKEN', 'does not look like a runtime token');
  const namespace = str(env, 'POD_NAMESPACE', 'hosted-runtime');
  if (!DNS_LABEL.test(namespace) || namespace.length > 63)
    throw new ConfigError('POD_NAMESPACE', `'${namespace}' is not a namespace name`);
  return {
    controlPlaneUrl: cp,
    token: token.value,
    namespace,
    kubeconfig: kubeconfigFile(env),
    port: int(env, 'PORT', 8080, 0, 65535),
    host: str(env, 'HOST', '0.0.0.0'),
    pollSeconds: int(env, 'POLL_SECONDS', 30, 1, 3600),
    rolloutTimeoutSeconds: int(env, 'ROLLOUT_TIMEOUT_SECONDS', 600, 5, 7200),
    requestTimeoutSeconds: int(env, 'REQUEST_TIMEOUT_SECONDS', 15, 1, 300),
    logLevel: logLevel(env),
  };
}
