/** App-proxy configuration, from the environment (validated once at start). */
import { ConfigError, type Env, int, type LogLevel, logLevel, secret, str, url } from '../common/config.ts';
import { loadPublicKey } from './request-token.ts';
import { fileRuntimeInfo, parseRuntimeInfo, type RuntimeInfoSource, staticRuntimeInfo } from './runtime-info.ts';
import type { KeyObject } from 'node:crypto';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export interface AppProxyConfig {
  port: number;
  host: string;
  /** TENANT_ID: the tenant this runtime belongs to (tokens for others are refused). */
  tenantId: string;
  /**
   * RUNTIME_ID: a hybrid runtime's id (its install bundle sets it): only tokens for this runtime are
   * accepted. Unset: the tenant's hosted runtime.
   */
  runtimeId: string | undefined;
  /** CONTROL_PLANE_PUBLIC_KEY or CONTROL_PLANE_PUBLIC_KEY_FILE: Ed25519 public key, PEM. */
  publicKey: KeyObject;
  /** RUNTIME_INFO_FILE (mounted ConfigMap JSON), or RUNTIME_VERSION + RUNTIME_COMPONENTS (JSON). */
  runtimeInfo: RuntimeInfoSource;
  /** KUBECONFIG: a kubeconfig file to act with (tests, development); unset: the pod's service account. */
  kubeconfigFile: string | undefined;
  /** KUBE_TIMEOUT_MS (default 10000): longest wait for the API server before answering 503. */
  kubeTimeoutMs: number;
  /**
   * SOURCE_SERVER_URL: the runtime's Source Server (runtime versions from 1.7.0), asked for
   * Application diffs; unset, diffs are answered 404 SOURCE_SERVER_NOT_INSTALLED.
   */
  sourceServerUrl: string | undefined;
  logLevel: LogLevel;
}

export function loadAppProxyConfig(env: Env = process.env): AppProxyConfig {
  const tenantId = str(env, 'TENANT_ID');
  const runtimeId = env.RUNTIME_ID === undefined || env.RUNTIME_ID === '' ? undefined : env.RUNTIME_ID;
  if (runtimeId !== undefined && !UUID.test(runtimeId))
    throw new ConfigError('RUNTIME_ID', `'${runtimeId}' is not a runtime id (a UUID)`);
  const pem = secret(env, 'CONTROL_PLANE_PUBLIC_KEY');
  let publicKey: KeyObject;
  try {
    publicKey = loadPublicKey(pem.value.replace(/\\n/g, '\n'));
  } catch (err) {
    throw new ConfigError(
      pem.file ? 'CONTROL_PLANE_PUBLIC_KEY_FILE' : 'CONTROL_PLANE_PUBLIC_KEY',
      err instanceof Error ? err.message : 'is not a PEM public key',
    );
  }
  let runtimeInfo: RuntimeInfoSource;
  const file = env.RUNTIME_INFO_FILE;
  if (file !== undefined && file !== '') {
    runtimeInfo = fileRuntimeInfo(file);
  } else {
    let components: unknown;
    try {
      components = JSON.parse(str(env, 'RUNTIME_COMPONENTS', '{}'));
    } catch {
      throw new ConfigError('RUNTIME_COMPONENTS', 'is not JSON; expected {"argoCd": "7.9.1", ...}');
    }
    try {
      runtimeInfo = staticRuntimeInfo(
        parseRuntimeInfo({ version: str(env, 'RUNTIME_VERSION'), components }, 'RUNTIME_VERSION/RUNTIME_COMPONENTS'),
      );
    } catch (err) {
      throw new ConfigError('RUNTIME_COMPONENTS', err instanceof Error ? err.message : 'is invalid');
    }
  }
  const kubeconfigFile = env.KUBECONFIG === undefined || env.KUBECONFIG === '' ? undefined : env.KUBECONFIG;
  if (kubeconfigFile === undefined && (env.KUBERNETES_SERVICE_HOST ?? '') === '')
    throw new ConfigError(
      'KUBECONFIG',
      'is required outside a cluster (KUBERNETES_SERVICE_HOST is unset, so there is no service account to act with)',
    );
  return {
    port: int(env, 'PORT', 8082, 0, 65535),
    host: str(env, 'HOST', '0.0.0.0'),
    tenantId,
    runtimeId,
    publicKey,
    runtimeInfo,
    kubeconfigFile,
    kubeTimeoutMs: int(env, 'KUBE_TIMEOUT_MS', 10_000, 100, 120_000),
    sourceServerUrl: env.SOURCE_SERVER_URL
      ? url(env, 'SOURCE_SERVER_URL', ['http:', 'https:']).toString().replace(/\/+$/, '')
      : undefined,
    logLevel: logLevel(env),
  };
}
