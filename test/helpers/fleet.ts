/**
 * Test-data builders and readers for fleet upgrades: the progress stream, the state and the steps
 * (those under way, the succeeded ones' times) read through the store, and the plan and start of a
 * fleet upgrade through the one API client, their answers narrowed. The SQL left here is a lease
 * moved back in time (the store has no write that ends a lease without its owner), a count of the
 * tenants every fleet upgrade holds (a column no store read answers) and a benchmark's bare read.
 */
import type { Queryable } from '../../provisioner/db/tx.ts';
import type { AnswerOf, ApiClient, BodyOf } from '../../provisioner/http/api-client.ts';
import { getOperation } from '../../provisioner/store/operations.ts';
import {
  fleetEvents,
  fleetTenantRows,
  getFleetRow,
  inFlightSteps,
  type FleetEvent,
} from '../../provisioner/store/fleet-upgrades.ts';
import type { FleetState } from '../../provisioner/store/states.ts';

// SQL: time moved back (the store ends a lease only as its owner).
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

// SQL: a column no store read answers (fleet_upgrade_tenants.active, over every fleet upgrade).
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
  const steps = await inFlightSteps(db, fleetUpgradeId);
  return steps
    .filter((s) => s.state === 'upgrading')
    .map((s) => ({ tenantId: s.tenant_id, operationId: s.operation_id! }));
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

/**
 * The times of a fleet upgrade's succeeded steps, each with its operation's (for a benchmark's
 * breakdown of a step); a step whose operation never ran (no start or end) is left out.
 */
export async function succeededStepTimes(db: Queryable, fleetUpgradeId: string): Promise<StepTimes[]> {
  const out: StepTimes[] = [];
  for (const step of await fleetTenantRows(db, fleetUpgradeId)) {
    if (step.state !== 'succeeded' || step.operation_id === null) continue;
    const op = await getOperation(db, step.operation_id);
    if (!op?.startedAt || !op.finishedAt || !step.started_at || !step.finished_at) continue;
    out.push({
      tenantId: step.tenant_id,
      startedAt: step.started_at,
      finishedAt: step.finished_at,
      operationStartedAt: new Date(op.startedAt),
      operationFinishedAt: new Date(op.finishedAt),
    });
  }
  return out;
}

// SQL: a raw read, the benchmark's baseline.
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
