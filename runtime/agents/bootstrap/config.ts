/** Configuration of the bootstrap Job of a hybrid runtime, from the environment (validated once at start). */
import { existsSync, readFileSync } from 'node:fs';
import { BOOTSTRAP_TOKEN_PATTERN } from '../../protocol/bootstrap.ts';
import {
  ConfigError,
  controlPlaneUrl,
  type Env,
  int,
  kubeconfigFile,
  type LogLevel,
  logLevel,
  str,
  url,
} from '../common/config.ts';

/** The runtime's namespace (runtime/component/agents.ts RUNTIME_NAMESPACE). */
const DEFAULT_NAMESPACE = 'hosted-runtime';
const DNS_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;

export interface BootstrapConfig {
  /** CONTROL_PLANE_URL: where the token is exchanged (`${controlPlaneUrl}/v1/runtimes/bootstrap`). */
  controlPlaneUrl: string;
  /** TUNNEL_URL and CONTROL_PLANE_PUBLIC_KEY: written to the credentials where the control plane's answer lacks them. */
  tunnelUrl: string | undefined;
  publicKey: string | undefined;
  /**
   * BOOTSTRAP_TOKEN, or the file BOOTSTRAP_TOKEN_FILE names (the mounted bootstrap Secret). Absent
   * once the token was redeemed and its Secret deleted: the credentials are then expected written.
   */
  token: string | undefined;
  /** POD_NAMESPACE: where the two Secrets are (default hosted-runtime). */
  namespace: string;
  /** BOOTSTRAP_MAX_ATTEMPTS: calls of the control plane (and of the API server) before giving up (default 8). */
  maxAttempts: number;
  /** RETRY_MAX_SECONDS: the cap of the backoff between attempts (default 30). */
  retryMaxSeconds: number;
  /** REQUEST_TIMEOUT_SECONDS: one call's limit (default 15). */
  requestTimeoutSeconds: number;
  /** KUBECONFIG: a kubeconfig file; unset, the pod's service account is used. */
  kubeconfig: string | undefined;
  logLevel: LogLevel;
}

export function loadBootstrapConfig(env: Env = process.env): BootstrapConfig {
  const cp = controlPlaneUrl(env);

  let token: string | undefined;
  let tokenVar = 'BOOTSTRAP_TOKEN';
  const file = env.BOOTSTRAP_TOKEN_FILE;
  if (file) {
    tokenVar = 'BOOTSTRAP_TOKEN_FILE';
    // The Secret is mounted optionally: no file is no token, not an error.
    if (existsSync(file)) {
      try {
        token = readFileSync(file, 'utf8').trim() || undefined;
      } catch (err) {
        throw new ConfigError(tokenVar, `cannot read '${file}': ${(err as Error).message}`);
      }
    }
  } else {
    token = env.BOOTSTRAP_TOKEN?.trim() || undefined;
  }
  // The message never repeats the value.
  if (token !== undefined && !BOOTSTRAP_TOKEN_PATTERN.test(token))
    throw new ConfigError(tokenVar, 'does not hold a bootstrap token (hrth_ and 43 base64url characters)');

  const namespace = str(env, 'POD_NAMESPACE', DEFAULT_NAMESPACE);
  if (!DNS_LABEL.test(namespace) || namespace.length > 63)
    throw new ConfigError('POD_NAMESPACE', `'${namespace}' is not a namespace name`);

  const kubeconfig = kubeconfigFile(env);

  if (env.TUNNEL_URL) url(env, 'TUNNEL_URL', ['ws:', 'wss:']);
  const tunnelUrl = env.TUNNEL_URL || undefined;
  return {
    controlPlaneUrl: cp,
    tunnelUrl,
    publicKey: env.CONTROL_PLANE_PUBLIC_KEY || undefined,
    token,
    namespace,
    maxAttempts: int(env, 'BOOTSTRAP_MAX_ATTEMPTS', 8, 1, 100),
    retryMaxSeconds: int(env, 'RETRY_MAX_SECONDS', 30, 1, 600),
    requestTimeoutSeconds: int(env, 'REQUEST_TIMEOUT_SECONDS', 15, 1, 300),
    kubeconfig,
    logLevel: logLevel(env),
  };
}
