/**
 * Test-data builders and readers for rows the housekeeping loops prune: their times moved back
 * instead of waited out, and what is stored. The store has no write or read for these, so this
 * module is the one place of the tests that writes their SQL.
 */
import type { Queryable } from '../../provisioner/db/tx.ts';

// SQL: time moved back.
/** Makes a stored idempotency key (by its digest) created `seconds` ago. */
export async function ageIdempotencyKey(db: Queryable, digest: string, seconds: number): Promise<void> {
  await db.query('UPDATE idempotency_keys SET created_at = now() - make_interval(secs => $2::float8) WHERE key = $1', [
    digest,
    seconds,
  ]);
}

// SQL: a read no store read answers (the store looks a key up by its digest only).
/** The stored idempotency keys (their digests, as stored). */
export async function storedIdempotencyKeys(db: Queryable): Promise<string[]> {
  const { rows } = await db.query<{ key: string }>('SELECT key FROM idempotency_keys ORDER BY created_at');
  return rows.map((r) => r.key);
}
