import type { Queryable } from '../db/tx.ts';
import type { Availability } from './states.ts';

/** Availability overrides set by ops; catalog versions without a row are available. */
export async function availabilityMap(db: Queryable): Promise<Map<string, Availability>> {
  const { rows } = await db.query<{ version: string; availability: Availability }>(
    'SELECT version, availability FROM runtime_version_availability',
  );
  return new Map(rows.map((r) => [r.version, r.availability]));
}

export async function availabilityOf(db: Queryable, version: string): Promise<Availability> {
  const { rows } = await db.query<{ availability: Availability }>(
    'SELECT availability FROM runtime_version_availability WHERE version = $1',
    [version],
  );
  return rows[0]?.availability ?? 'available';
}

export async function setAvailability(
  db: Queryable,
  version: string,
  availability: Availability,
  by: string,
): Promise<void> {
  await db.query(
    `INSERT INTO runtime_version_availability (version, availability, updated_by) VALUES ($1, $2, $3)
     ON CONFLICT (version) DO UPDATE SET availability = $2, updated_by = $3, updated_at = now()`,
    [version, availability, by],
  );
}
