/** Tunnel client configuration, from the environment (validated once at start). */
import { readFileSync } from 'node:fs';
import { ConfigError, type Env, int, type LogLevel, logLevel, secret, str, url } from '../common/config.ts';

export interface TunnelClientConfig {
  /** TUNNEL_URL: ws(s)://control-plane/v1/tunnel. */
  tunnelUrl: string;
  /** RUNTIME_TOKEN or RUNTIME_TOKEN_FILE (the runtime Secret, re-read on every reconnect). */
  token: () => string;
  /** ROUTER_URL: the request router (default http://127.0.0.1:8081). */
  routerUrl: string;
  /** HEALTH_PORT (default 8090) and HEALTH_HOST (default 0.0.0.0). */
  healthPort: number;
  healthHost: string;
  maxPayload: number;
  maxStreams: number;
  window: number;
  heartbeatIntervalMs: number;
  /** ROUTER_CONNECT_RETRY_MS: how long a request without a body is tried again while the router refuses connections (default 10000; 0: never). */
  routerConnectRetryMs: number;
  logLevel: LogLevel;
}

export function loadTunnelClientConfig(env: Env = process.env): TunnelClientConfig {
  const tunnelUrl = url(env, 'TUNNEL_URL', ['ws:', 'wss:']);
  if (
    tunnelUrl.protocol === 'ws:' &&
    !['127.0.0.1', 'localhost', '[::1]'].includes(tunnelUrl.hostname) &&
    env.TUNNEL_ALLOW_INSECURE !== 'true'
  ) {
    throw new ConfigError('TUNNEL_URL', 'must use wss:// unless it points at loopback (or TUNNEL_ALLOW_INSECURE=true)');
  }
  const first = secret(env, 'RUNTIME_TOKEN');
  if (first.value.length < 24)
    throw new ConfigError(first.file ? 'RUNTIME_TOKEN_FILE' : 'RUNTIME_TOKEN', 'does not look like a runtime token');
  const file = first.file;
  const token = file === undefined ? () => first.value : () => readFileSync(file, 'utf8').trim();
  return {
    tunnelUrl: tunnelUrl.toString(),
    token,
    routerUrl: url(env, 'ROUTER_URL', ['http:', 'https:'], 'http://127.0.0.1:8081').toString(),
    healthPort: int(env, 'HEALTH_PORT', 8090, 0, 65535),
    healthHost: str(env, 'HEALTH_HOST', '0.0.0.0'),
    maxPayload: int(env, 'TUNNEL_MAX_PAYLOAD', 1024 * 1024, 128 * 1024, 64 * 1024 * 1024),
    maxStreams: int(env, 'TUNNEL_MAX_STREAMS', 512, 1, 100_000),
    window: int(env, 'TUNNEL_STREAM_WINDOW', 256 * 1024, 16 * 1024, 64 * 1024 * 1024),
    heartbeatIntervalMs: int(env, 'TUNNEL_HEARTBEAT_MS', 15_000, 100, 600_000),
    routerConnectRetryMs: int(env, 'ROUTER_CONNECT_RETRY_MS', 10_000, 0, 120_000),
    logLevel: logLevel(env),
  };
}
