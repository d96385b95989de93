/**
 * Reads that put names and context on a fleet upgrade's answer: who started it (the API key's
 * name and role, not only its id), and the fleet upgrades a tenant is part of (for its page).
 */
import type { Queryable } from '../db/tx.ts';
import { ACTIVE_FLEET_STATES, getFleetRow, type FleetRow, type FleetTenantRow } from '../store/fleet-upgrades.ts';

/** The API key an action was taken with, as people know it. */
export interface KeyLabel {
  id: string;
  name: string;
  role: string;
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/**
 * Name and role of each key among `ids` (actor ids: a key's id, or `system`/`public`, which are
 * no key and are left out). A revoked key keeps its name: what it did stays attributed.
 */
export async function keyLabels(db: Queryable, ids: Iterable<string>): Promise<Map<string, KeyLabel>> {
  const wanted = [...new Set([...ids].filter((id) => UUID.test(id)))];
  if (wanted.length === 0) return new Map();
  const { rows } = await db.query<KeyLabel>('SELECT id, name, role FROM api_keys WHERE id = ANY($1::uuid[])', [wanted]);
  return new Map(rows.map((r) => [r.id, r]));
}

/**
 * The fleet upgrades a tenant is part of, newest first: the one that holds it (pending or under
 * way), and any other still running, paused, halted or aborting in which it finished (a
 * quarantined tenant of a halted fleet upgrade), each with the tenant's own row.
 */
export async function fleetUpgradesOfTenant(
  db: Queryable,
  tenantId: string,
  limit: number,
): Promise<Array<{ fleet: FleetRow; tenant: FleetTenantRow }>> {
  const { rows } = await db.query<FleetTenantRow & { fleet_upgrade_id: string }>(
    `SELECT ft.*, t.organization
       FROM fleet_upgrade_tenants ft
       JOIN fleet_upgrades f ON f.id = ft.fleet_upgrade_id
       JOIN tenants t ON t.id = ft.tenant_id
      WHERE ft.tenant_id = $1
        AND (ft.active OR ft.fleet_upgrade_id IN (SELECT id FROM fleet_upgrades WHERE state = ANY($2::text[])))
      ORDER BY f.created_at DESC, f.id DESC
      LIMIT $3`,
    [tenantId, ACTIVE_FLEET_STATES, limit],
  );
  const out: Array<{ fleet: FleetRow; tenant: FleetTenantRow }> = [];
  for (const tenant of rows) {
    const fleet = await getFleetRow(db, tenant.fleet_upgrade_id);
    if (fleet) out.push({ fleet, tenant });
  }
  return out;
}
