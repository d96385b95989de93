/** Request router configuration, from the environment (validated once at start). */
import { ConfigError, type Env, int, type LogLevel, logLevel, secret, str, url } from '../common/config.ts';
import { loadPublicKey } from '../app-proxy/request-token.ts';
import type { RouterTokenCheck } from './router.ts';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export interface RouterConfig {
  /** PORT (default 8081), HOST (default 0.0.0.0). */
  port: number;
  host: string;
  /** APP_PROXY_URL (default http://127.0.0.1:8082). */
  appProxyUrl: string;
  /** EVENT_SOURCE_URL: the Argo Events webhook event source (required). */
  eventSourceUrl: string;
  /** ARGOCD_SERVER_URL: Argo CD's API server, for `/argo-cd/*` (unset: that route answers 404). */
  argoCdServerUrl: string | undefined;
  upstreamTimeoutMs: number;
  /** UPSTREAM_CONNECT_RETRY_MS: how long a request without a body is tried again while its upstream refuses connections (default 10000; 0: never). */
  connectRetryMs: number;
  /**
   * ACCESS_MODE: `tunnel` (default: only the tunnel client calls the router) or `ingress` (the
   * customer's ingress exposes it): then TENANT_ID, RUNTIME_ID and CONTROL_PLANE_PUBLIC_KEY (or
   * _FILE) are required, and every request but /healthz needs a valid request token.
   */
  requestTokens: Omit<RouterTokenCheck, 'now' | 'skewSeconds'> | undefined;
  logLevel: LogLevel;
}

function loadTokenCheck(env: Env): RouterConfig['requestTokens'] {
  const mode = str(env, 'ACCESS_MODE', 'tunnel');
  if (mode === 'tunnel') return undefined;
  if (mode !== 'ingress') throw new ConfigError('ACCESS_MODE', `'${mode}' is neither tunnel nor ingress`);
  const tenantId = str(env, 'TENANT_ID');
  const runtimeId = str(env, 'RUNTIME_ID');
  if (!UUID.test(runtimeId)) throw new ConfigError('RUNTIME_ID', `'${runtimeId}' is not a runtime id (a UUID)`);
  const pem = secret(env, 'CONTROL_PLANE_PUBLIC_KEY');
  try {
    return { tenantId, runtimeId, publicKey: loadPublicKey(pem.value.replace(/\\n/g, '\n')) };
  } catch (err) {
    throw new ConfigError(
      pem.file ? 'CONTROL_PLANE_PUBLIC_KEY_FILE' : 'CONTROL_PLANE_PUBLIC_KEY',
      err instanceof Error ? err.message : 'is not a PEM public key',
    );
  }
}

export function loadRouterConfig(env: Env = process.env): RouterConfig {
  return {
    port: int(env, 'PORT', 8081, 0, 65535),
    host: str(env, 'HOST', '0.0.0.0'),
    appProxyUrl: url(env, 'APP_PROXY_URL', ['http:', 'https:'], 'http://127.0.0.1:8082').toString(),
    eventSourceUrl: url(env, 'EVENT_SOURCE_URL', ['http:', 'https:']).toString(),
    argoCdServerUrl: env.ARGOCD_SERVER_URL ? url(env, 'ARGOCD_SERVER_URL', ['http:', 'https:']).toString() : undefined,
    upstreamTimeoutMs: int(env, 'UPSTREAM_TIMEOUT_MS', 30_000, 100, 600_000),
    connectRetryMs: int(env, 'UPSTREAM_CONNECT_RETRY_MS', 10_000, 0, 120_000),
    requestTokens: loadTokenCheck(env),
    logLevel: logLevel(env),
  };
}
