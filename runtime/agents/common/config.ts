/**
 * Environment parsing for the runtime agents: each agent reads its environment once at start,
 * validates it into a typed object, and exits with a message naming the variable when it is wrong.
 */
import { existsSync, readFileSync } from 'node:fs';

export type Env = Record<string, string | undefined>;
export type LogLevel = 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace' | 'silent';
const LOG_LEVELS: readonly string[] = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'];

export class ConfigError extends Error {
  readonly variable: string;
  constructor(variable: string, message: string) {
    super(`${variable}: ${message}`);
    this.name = 'ConfigError';
    this.variable = variable;
  }
}

export function str(env: Env, name: string, fallback?: string): string {
  const v = env[name];
  if (v === undefined || v === '') {
    if (fallback === undefined) throw new ConfigError(name, 'is required');
    return fallback;
  }
  return v;
}

export function int(env: Env, name: string, fallback: number, min: number, max: number): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  if (!/^\d+$/.test(raw)) throw new ConfigError(name, `'${raw}' is not a whole number`);
  const n = Number(raw);
  if (n < min || n > max) throw new ConfigError(name, `${n} is outside ${min}..${max}`);
  return n;
}

export function url(env: Env, name: string, protocols: readonly string[], fallback?: string): URL {
  const raw = str(env, name, fallback);
  let u: URL;
  try {
    u = new URL(raw);
  } catch {
    throw new ConfigError(name, `'${raw}' is not a URL`);
  }
  if (!protocols.includes(u.protocol))
    throw new ConfigError(name, `scheme '${u.protocol}' is not one of ${protocols.join(', ')}`);
  return u;
}

export function logLevel(env: Env): LogLevel {
  const v = env.LOG_LEVEL ?? 'info';
  if (!LOG_LEVELS.includes(v)) throw new ConfigError('LOG_LEVEL', `'${v}' is not one of ${LOG_LEVELS.join(', ')}`);
  return v as LogLevel;
}

/** A secret given inline (NAME) or as a mounted file (NAME_FILE); the file wins. */
export function secret(env: Env, name: string): { value: string; file: string | undefined } {
  const file = env[`${name}_FILE`];
  if (file !== undefined && file !== '') {
    try {
      return { value: readFileSync(file, 'utf8').trim(), file };
    } catch (err) {
      throw new ConfigError(
        `${name}_FILE`,
        `cannot read '${file}': ${err instanceof Error ? err.message : String(err)}`,
      );
    }
  }
  return { value: str(env, name).trim(), file: undefined };
}

const LOOPBACK_HOSTS = ['127.0.0.1', 'localhost', '[::1]'];

/**
 * CONTROL_PLANE_URL: https, or http only to loopback (or with CONTROL_PLANE_ALLOW_INSECURE=true).
 * Answered without a trailing slash.
 */
export function controlPlaneUrl(env: Env): string {
  const cp = url(env, 'CONTROL_PLANE_URL', ['http:', 'https:']);
  if (cp.protocol === 'http:' && !LOOPBACK_HOSTS.includes(cp.hostname) && env.CONTROL_PLANE_ALLOW_INSECURE !== 'true')
    throw new ConfigError(
      'CONTROL_PLANE_URL',
      'must use https:// unless it points at loopback (or CONTROL_PLANE_ALLOW_INSECURE=true)',
    );
  return cp.toString().replace(/\/+$/, '');
}

/** KUBECONFIG: a kubeconfig file that exists; unset, the pod's service account (then KUBERNETES_SERVICE_HOST must be set). */
export function kubeconfigFile(env: Env): string | undefined {
  const kubeconfig = env.KUBECONFIG || undefined;
  if (kubeconfig !== undefined && !existsSync(kubeconfig))
    throw new ConfigError('KUBECONFIG', `'${kubeconfig}' does not exist`);
  if (kubeconfig === undefined && !env.KUBERNETES_SERVICE_HOST)
    throw new ConfigError('KUBECONFIG', 'is required outside a cluster (KUBERNETES_SERVICE_HOST is not set)');
  return kubeconfig;
}
