/**
 * Test-data builders and readers for fleet upgrades' own rows (the store has no write that ends a
 * lease without its owner, no count of the tenants every fleet upgrade holds and no read of its
 * steps' times, so this module is the one place of the tests and benchmarks that writes that SQL;
 * the progress stream and the state are read through the store),
 * and the plan and start of a fleet upgrade through the one API client, their answers narrowed.
 */
import type { Queryable } from '../../provisioner/db/tx.ts';
import type { AnswerOf, ApiClient, BodyOf } from '../../provisioner/http/api-client.ts';
import { fleetEvents, getFleetRow, type FleetEvent } from '../../provisioner/store/fleet-upgrades.ts';
import type { FleetState } from '../../provisioner/store/states.ts';

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

/** The steps of a fleet upgrade whose upgrade is under way (state `upgrading`): the tenant and the operation that runs it. */
export async function upgradingSteps(
  db: Queryable,
  fleetUpgradeId: string,
): Promise<Array<{ tenantId: string; operationId: string }>> {
  const { rows } = await db.query<{ tenantId: string; operationId: string }>(
    `SELECT tenant_id AS "tenantId", operation_id AS "operationId" FROM fleet_upgrade_tenants
      WHERE fleet_upgrade_id = $1 AND state = 'upgrading'`,
    [fleetUpgradeId],
  );
  return rows;
}

/** A fleet upgrade's state (the store's read); throws when there is none. */
export async function fleetUpgradeState(db: Queryable, fleetUpgradeId: string): Promise<FleetState> {
  const row = await getFleetRow(db, fleetUpgradeId);
  if (!row) throw new Error(`no fleet upgrade ${fleetUpgradeId}`);
  return row.state;
}

/** When a succeeded step started and finished, and when its operation did (database times: transaction starts). */
export interface StepTimes {
  tenantId: string;
  startedAt: Date;
  finishedAt: Date;
  operationStartedAt: Date;
  operationFinishedAt: Date;
}

/** The times of a fleet upgrade's succeeded steps, each with its operation's (for a benchmark's breakdown of a step). */
export async function succeededStepTimes(db: Queryable, fleetUpgradeId: string): Promise<StepTimes[]> {
  const { rows } = await db.query<StepTimes>(
    `SELECT ft.tenant_id AS "tenantId", ft.started_at AS "startedAt", ft.finished_at AS "finishedAt",
            o.started_at AS "operationStartedAt", o.finished_at AS "operationFinishedAt"
       FROM fleet_upgrade_tenants ft JOIN operations o ON o.id = ft.operation_id
      WHERE ft.fleet_upgrade_id = $1 AND ft.state = 'succeeded'`,
    [fleetUpgradeId],
  );
  return rows;
}

/**
 * Reads the live tenants' columns a fleet plan judges, with their root cluster's name, in plan
 * order, as one bare query: a benchmark's baseline for the plan (what reading the rows alone costs).
 */
export async function readPlanRows(db: Queryable): Promise<number> {
  const { rowCount } = await db.query(
    `SELECT t.id, t.organization, t.runtime_version, t.actual_runtime_version, t.phase, t.suspended, t.stalled, c.name
       FROM tenants t LEFT JOIN root_clusters c ON c.id = t.cluster_id WHERE NOT t.deleted ORDER BY t.created_at, t.id`,
  );
  return rowCount ?? 0;
}
