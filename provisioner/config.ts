/**
 * Provisioner configuration: read from the environment once at start-up, validated into a typed
 * object and passed down. Nothing else in the code reads process.env.
 */
import { isAbsolute, resolve } from 'node:path';

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
  logLevel: LogLevel;
  /** Largest accepted request body in bytes (PROVISIONER_BODY_LIMIT, default 65536). */
  bodyLimit: number;
  /** Signups allowed per client address per minute (PROVISIONER_SIGNUP_RATE_LIMIT, default 20). */
  signupRateLimit: number;
}

export class ConfigError extends Error {
  readonly variable: string;
  constructor(variable: string, message: string) {
    super(`${variable}: ${message}`);
    this.name = 'ConfigError';
    this.variable = variable;
  }
}

type Env = Record<string, string | undefined>;

function int(env: Env, name: string, fallback: number, min: number, max: number): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  if (!/^\d+$/.test(raw)) throw new ConfigError(name, `'${raw}' is not a whole number`);
  const n = Number(raw);
  if (n < min || n > max) throw new ConfigError(name, `${n} is outside ${min}..${max}`);
  return n;
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
  if (!LOG_LEVELS.includes(logLevel)) throw new ConfigError('LOG_LEVEL', `'${logLevel}' is not one of ${LOG_LEVELS.join(', ')}`);
  const dataDirRaw = env.PROVISIONER_DATA_DIR && env.PROVISIONER_DATA_DIR !== '' ? env.PROVISIONER_DATA_DIR : './.data';
  return {
    port: int(env, 'PORT', 8080, 0, 65535),
    host,
    databaseUrl,
    dataDir: isAbsolute(dataDirRaw) ? dataDirRaw : resolve(cwd, dataDirRaw),
    adminToken,
    encryptionKey: encryptionKey(env.PROVISIONER_ENCRYPTION_KEY),
    logLevel,
    bodyLimit: int(env, 'PROVISIONER_BODY_LIMIT', 64 * 1024, 1024, 16 * 1024 * 1024),
    signupRateLimit: int(env, 'PROVISIONER_SIGNUP_RATE_LIMIT', 20, 1, 1_000_000),
  };
}
