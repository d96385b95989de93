/**
 * Test-data builders for fleet upgrades' own rows (the store has no write that ends a lease
 * without its owner, so this module is the one place of the tests that writes that SQL), and the
 * plan and start of a fleet upgrade through the one API client, their answers narrowed.
 */
import type { Queryable } from '../../provisioner/db/tx.ts';
import type { AnswerOf, ApiClient, BodyOf } from '../../provisioner/http/api-client.ts';

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
