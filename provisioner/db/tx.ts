import type pg from 'pg';
import { isConnectionError } from './availability.ts';

export type Queryable = Pick<pg.PoolClient, 'query'>;

/**
 * Runs `fn` in a transaction on one pooled client; rolls back on any error. A client whose
 * connection fails meanwhile (the server went away) throws from the query in flight, its error
 * event is handled by the pool's guard (db/availability.ts), and it is dropped, not reused.
 */
export async function withTx<T>(pool: pg.Pool, fn: (client: pg.PoolClient) => Promise<T>): Promise<T> {
  const client = await pool.connect();
  let broken: Error | undefined;
  try {
    await client.query('BEGIN');
    const out = await fn(client);
    await client.query('COMMIT');
    return out;
  } catch (err) {
    broken = await rollback(client, err);
    throw err;
  } finally {
    client.release(broken);
  }
}

/**
 * Rolls back; returns an error to release the client with (the pool then drops it) when even that
 * failed, or when the transaction failed for a connection's reason (e.g. the server became a
 * read-only standby after a failover: the next connection may reach the new primary).
 */
export async function rollback(client: pg.PoolClient, cause: unknown): Promise<Error | undefined> {
  const drop = cause instanceof Error ? cause : new Error(String(cause));
  try {
    await client.query('ROLLBACK');
    return isConnectionError(cause) ? drop : undefined;
  } catch {
    return drop;
  }
}

/** Postgres error code of a failed query (e.g. 23505 unique_violation), if any. */
export function pgCode(err: unknown): string | undefined {
  return typeof err === 'object' && err !== null && 'code' in err && typeof err.code === 'string'
    ? err.code
    : undefined;
}

export function pgConstraint(err: unknown): string | undefined {
  return typeof err === 'object' && err !== null && 'constraint' in err && typeof err.constraint === 'string'
    ? err.constraint
    : undefined;
}

/** Waits for the transaction-scoped advisory lock named `name` (hashtext); it is released at commit or rollback. */
export async function lockForTransaction(db: Queryable, name: string): Promise<void> {
  await db.query('SELECT pg_advisory_xact_lock(hashtext($1))', [name]);
}

/** Takes the transaction-scoped advisory lock named `name` (hashtextextended) when free; false when another holds it. */
export async function tryLockForTransaction(db: Queryable, name: string): Promise<boolean> {
  const { rows } = await db.query<{ ok: boolean }>({
    name: 'try-advisory-xact-lock',
    text: `SELECT pg_try_advisory_xact_lock(hashtextextended($1, 0)) AS ok`,
    values: [name],
  });
  return rows[0]?.ok === true;
}
