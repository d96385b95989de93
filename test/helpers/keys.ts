/**
 * Test-data builders for API keys. Creating and revoking go through the store (createKey,
 * revokeKey); a revocation no replica hears of, which the store has no write for, is SQL here,
 * the one place of the tests that writes it.
 */
import type { Queryable } from '../../provisioner/db/tx.ts';

/**
 * Revokes a key behind the API's back: revoked now, without the NOTIFY of the store's revokeKey,
 * so that a replica only learns of it when its cached entry expires.
 */
export async function revokeKeyUnannounced(db: Queryable, id: string): Promise<void> {
  await db.query('UPDATE api_keys SET revoked_at = now() WHERE id = $1', [id]);
}
