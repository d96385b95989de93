/**
 * Test-data builders and readers for fleet upgrades' own rows (the store has no write that ends a
 * lease without its owner, and no count of the tenants every fleet upgrade holds, so this module is
 * the one place of the tests that writes that SQL; the progress stream is read through the store),
 * and the plan and start of a fleet upgrade through the one API client, their answers narrowed.
 */
import type { Queryable } from '../../provisioner/db/tx.ts';
import type { AnswerOf, ApiClient, BodyOf } from '../../provisioner/http/api-client.ts';
import { fleetEvents, type FleetEvent } from '../../provisioner/store/fleet-upgrades.ts';

/** Makes every fleet upgrade's lease expired a second ago (as when its holder died), owner left as it is. */
export async function expireFleetLeases(db: Queryable): Promise<void> {
  await db.query(`UPDATE fleet_upgrades SET lease_expires_at = now() - interval '1 second'`);
}

type FleetAnswer = AnswerOf<'POST /v1/fleet-upgrades'>;
/** A fleet upgrade's plan, as its dry run answers it. */
export type FleetPlan = Exclude<FleetAnswer, { fleetUpgrade: unknown }>;
/** A started fleet upgrade and its plan, as the start answers them. */
export type FleetStarted = Extract<FleetAnswer, { fleetUpgrade: unknown }>;

/** POST /v1/fleet-upgrades?dryRun=1: the plan (the route answers a plan or a started upgrade: narrowed here). */
export async function planFleetUpgrade(client: ApiClient, body: BodyOf<'POST /v1/fleet-upgrades'>): Promise<FleetPlan> {
  const answer = await client.call('POST /v1/fleet-upgrades', { query: { dryRun: '1' }, body });
  if ('fleetUpgrade' in answer) throw new Error('a dry run answered a started fleet upgrade');
  return answer;
}

/** POST /v1/fleet-upgrades: the started fleet upgrade and its plan (narrowed as planFleetUpgrade's). */
export async function startFleetUpgrade(
  client: ApiClient,
  body: BodyOf<'POST /v1/fleet-upgrades'>,
): Promise<FleetStarted> {
  const answer = await client.call('POST /v1/fleet-upgrades', { body });
  if (!('fleetUpgrade' in answer)) throw new Error('a start answered a plan only');
  return answer;
}

/** The progress stream's events of a fleet upgrade (the store's read), oldest first; of one action or tenant when told. */
export async function fleetEventsOf(
  db: Queryable,
  fleetUpgradeId: string,
  f: { action?: string; tenantId?: string } = {},
): Promise<FleetEvent[]> {
  const events = await fleetEvents(db, fleetUpgradeId, 0, 100_000);
  return events.filter(
    (e) => (f.action === undefined || e.action === f.action) && (f.tenantId === undefined || e.tenantId === f.tenantId),
  );
}

/** How many tenants any fleet upgrade still holds (its active rows; a finished or aborted one holds none). */
export async function heldFleetTenants(db: Queryable): Promise<number> {
  const { rows } = await db.query<{ n: number }>('SELECT count(*)::int AS n FROM fleet_upgrade_tenants WHERE active');
  return rows[0]!.n;
}
