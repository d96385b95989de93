/**
 * Test-data builders for rows the housekeeping loops prune or re-probe: their times moved back or
 * forward instead of waited out. The store has no write for these, so this module is the one place
 * of the tests that writes their SQL.
 */
import type { Queryable } from '../../provisioner/db/tx.ts';

/** Makes a stored idempotency key (by its digest) created `seconds` ago. */
export async function ageIdempotencyKey(db: Queryable, digest: string, seconds: number): Promise<void> {
  await db.query('UPDATE idempotency_keys SET created_at = now() - make_interval(secs => $2::float8) WHERE key = $1', [
    digest,
    seconds,
  ]);
}

/** Makes the tenant's managed clusters due for a probe now; `clearConditions`: as never probed. */
export async function makeProbeDue(
  db: Queryable,
  tenantId: string,
  o: { clearConditions?: boolean } = {},
): Promise<void> {
  await db.query(
    `UPDATE managed_clusters SET probe_due_at = now(), conditions = CASE WHEN $2 THEN '[]'::jsonb ELSE conditions END
      WHERE tenant_id = $1`,
    [tenantId, o.clearConditions ?? false],
  );
}
