/**
 * Test-data builders for rows the housekeeping loops prune: their times moved back instead of
 * waited out. The store has no write for these, so this module is the one place of the tests that
 * writes their SQL.
 */
import type { Queryable } from '../../provisioner/db/tx.ts';

/** Makes a stored idempotency key (by its digest) created `seconds` ago. */
export async function ageIdempotencyKey(db: Queryable, digest: string, seconds: number): Promise<void> {
  await db.query('UPDATE idempotency_keys SET created_at = now() - make_interval(secs => $2::float8) WHERE key = $1', [
    digest,
    seconds,
  ]);
}
