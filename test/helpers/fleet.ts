/**
 * Test-data builders for fleet upgrades' own rows. The store has no write that ends a lease
 * without its owner, so this module is the one place of the tests that writes that SQL.
 */
import type { Queryable } from '../../provisioner/db/tx.ts';

/** Makes every fleet upgrade's lease expired a second ago (as when its holder died), owner left as it is. */
export async function expireFleetLeases(db: Queryable): Promise<void> {
  await db.query(`UPDATE fleet_upgrades SET lease_expires_at = now() - interval '1 second'`);
}
