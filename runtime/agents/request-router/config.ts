/** Request router configuration, from the environment (validated once at start). */
import { type Env, int, type LogLevel, logLevel, str, url } from '../common/config.ts';

export interface RouterConfig {
  /** PORT (default 8081), HOST (default 0.0.0.0). */
  port: number;
  host: string;
  /** APP_PROXY_URL (default http://127.0.0.1:8082). */
  appProxyUrl: string;
  /** EVENT_SOURCE_URL: the Argo Events webhook event source (required). */
  eventSourceUrl: string;
  upstreamTimeoutMs: number;
  logLevel: LogLevel;
}

export function loadRouterConfig(env: Env = process.env): RouterConfig {
  return {
    port: int(env, 'PORT', 8081, 0, 65535),
    host: str(env, 'HOST', '0.0.0.0'),
    appProxyUrl: url(env, 'APP_PROXY_URL', ['http:', 'https:'], 'http://127.0.0.1:8082').toString(),
    eventSourceUrl: url(env, 'EVENT_SOURCE_URL', ['http:', 'https:']).toString(),
    upstreamTimeoutMs: int(env, 'UPSTREAM_TIMEOUT_MS', 30_000, 100, 600_000),
    logLevel: logLevel(env),
  };
}
