/**
 * Losing the database is an outage, not a crash. This module tells a lost or refused connection
 * from every other failure (isConnectionError), keeps every pooled client's errors handled
 * (guardPool: idle and checked-out clients alike; a client that failed is dropped by the pool
 * when released), and tracks whether the database is reachable (DatabaseHealth), logging each
 * change of state once instead of a line per failed query.
 */
import { EventEmitter } from 'node:events';
import type pg from 'pg';

/** Waiting longer for a connection than this is an outage (503 DATABASE_UNAVAILABLE), not a slow request. */
export const CONNECT_TIMEOUT_MS = 5_000;

/** Seconds a client is told to wait (Retry-After) while the database is unavailable. */
export const DATABASE_RETRY_AFTER_SECONDS = 2;

const NODE_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'EPIPE',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ENOTFOUND',
  'EAI_AGAIN',
  'ECONNABORTED',
]);
/**
 * admin_shutdown, crash_shutdown, cannot_connect_now, too_many_connections (a server starting or
 * restarting), and read_only_sql_transaction: after a failover the address may still lead to the
 * old primary, now a standby. node-postgres has no `target_session_attrs`; instead such a
 * connection counts as lost, is dropped, and the next one is tried (and the request retried).
 */
const PG_CODES = new Set(['57P01', '57P02', '57P03', '53300', '25006']);
const MESSAGES = [
  /Connection terminated/i,
  /timeout exceeded when trying to connect/i,
  /Client has encountered a connection error and is not queryable/i,
  /Client was closed and is not queryable/i,
  /Cannot use a pool after calling end on the pool/i,
  /the database system is (starting up|shutting down|in recovery mode)/i,
  /terminating connection due to administrator command/i,
];

/** True when `err` (or an error it wraps) says the database could not be reached or went away. */
export function isConnectionError(err: unknown, depth = 0): boolean {
  if (depth > 4 || typeof err !== 'object' || err === null) return false;
  const code = 'code' in err && typeof err.code === 'string' ? err.code : undefined;
  if (code !== undefined && (NODE_CODES.has(code) || PG_CODES.has(code) || code.startsWith('08'))) return true;
  const message = 'message' in err && typeof err.message === 'string' ? err.message : '';
  if (MESSAGES.some((m) => m.test(message))) return true;
  // A host name with several addresses fails with an AggregateError of the per-address errors.
  if (err instanceof AggregateError && err.errors.some((e) => isConnectionError(e, depth + 1))) return true;
  return 'cause' in err && isConnectionError(err.cause, depth + 1);
}

/** A short description of a connection failure, safe to log and to show (no credentials). */
export function describeConnectionError(err: unknown): string {
  if (err instanceof AggregateError && err.errors.length > 0) return describeConnectionError(err.errors[0]);
  if (err instanceof Error) return err.message || ('code' in err && typeof err.code === 'string' ? err.code : err.name);
  return String(err);
}

export interface HealthLog {
  error(obj: object, msg: string): void;
  info(obj: object, msg: string): void;
}

/**
 * Whether the database answers, as last seen by any user of it. `down()` on a connection error,
 * `up()` on a successful connection: the first of each after the other is logged, once. Emits
 * 'down' and 'up' so that workers can pause and resume.
 */
export class DatabaseHealth extends EventEmitter<{ down: [reason: string]; up: [] }> {
  #downSince: Date | undefined;
  #reason = '';
  readonly #log: HealthLog | undefined;

  constructor(log?: HealthLog) {
    super();
    this.#log = log;
  }

  get available(): boolean {
    return this.#downSince === undefined;
  }

  /** Why the database is unavailable and since when; undefined while it is available. */
  get outage(): { since: Date; reason: string } | undefined {
    return this.#downSince === undefined ? undefined : { since: this.#downSince, reason: this.#reason };
  }

  down(err: unknown): void {
    this.#reason = describeConnectionError(err);
    if (this.#downSince !== undefined) return;
    this.#downSince = new Date();
    this.#log?.error(
      { reason: this.#reason },
      'database unavailable: API requests that need it answer 503 DATABASE_UNAVAILABLE, the reconciler pauses',
    );
    this.emit('down', this.#reason);
  }

  up(): void {
    if (this.#downSince === undefined) return;
    const downMs = Date.now() - this.#downSince.getTime();
    this.#downSince = undefined;
    this.#reason = '';
    this.#log?.info({ downMs }, 'database available again');
    this.emit('up');
  }

  /** Records the outcome of a call: a connection error marks the database down, success up. */
  async track<T>(work: Promise<T>): Promise<T> {
    try {
      const out = await work;
      this.up();
      return out;
    } catch (err) {
      if (isConnectionError(err)) this.down(err);
      throw err;
    }
  }
}

const healthOfPool = new WeakMap<pg.Pool, DatabaseHealth>();

/**
 * Handles the errors of every client of `pool`: an idle client's (the pool drops it) and a
 * checked-out client's (pg-pool listens only while a client is idle; without a listener the
 * error would end the process). The query in flight on that client fails with the error, and
 * the pool drops the client when it is released. Connection errors mark `health` down, a new
 * connection marks it up. Guarding a pool twice keeps the first health.
 */
export function guardPool(pool: pg.Pool, health: DatabaseHealth = new DatabaseHealth()): pg.Pool {
  if (healthOfPool.has(pool)) return pool;
  healthOfPool.set(pool, health);
  pool.on('error', (err) => {
    if (isConnectionError(err)) health.down(err);
  });
  pool.on('connect', (client) => {
    health.up();
    client.on('error', (err) => {
      if (isConnectionError(err)) health.down(err);
    });
  });
  return pool;
}

/** The health a pool reports to (guarding it now if nobody has). */
/** One round trip to the database (readiness). */
export async function pingDatabase(pool: pg.Pool): Promise<void> {
  await pool.query('SELECT 1');
}

export function healthOf(pool: pg.Pool): DatabaseHealth {
  guardPool(pool);
  return healthOfPool.get(pool)!;
}
