/**
 * One decision round ("tick") of a fleet upgrade as the driver's parts share it: the round's
 * transaction and clock, the driver it runs for, and the decisions it makes. A decision is a
 * change of a tenant's row of the fleet upgrade (and maybe of its spec) now, plus an event and an
 * audit row written with the round's others at its end.
 */
import type pg from 'pg';
import type pino from 'pino';
import { writeAudits, type Actor, type Requester } from '../store/audit.ts';
import {
  readTenantSnapshot,
  recordEvents,
  updateFleetTenant,
  type FleetRow,
  type FleetTenantFields,
} from '../store/fleet-upgrades.ts';
import type { FleetTenantState } from '../store/states.ts';
import { changeSpec, getTenantRow, type TenantRow } from '../store/tenants.ts';
import type { Catalog } from '../../runtime/catalog.ts';
import { STALE_AFTER_SECONDS } from '../../runtime/protocol/events.ts';
import type { FleetOptions } from './plan.ts';

export type FleetDriverLog = Pick<pino.Logger, 'info' | 'warn' | 'error'>;

export type StepKind = 'upgrade' | 'rollback' | 'revert';

/** What the windows say of a pending tenant: start (neither field), wait until `deferUntil`, or skip. */
export interface WindowAnswer {
  skip?: string;
  deferUntil?: Date;
  what?: string;
}

/** What a round needs of the driver it runs for. */
export interface DriverContext {
  readonly catalog: Catalog;
  /** Most steps whose engine run is pending or running on one root cluster, across all fleet upgrades. */
  readonly clusterParallelism: number;
  readonly log: FleetDriverLog;
  readonly actor: Actor;
  /** Deferrals (valid until their instant) and skips (valid for good) by fleet upgrade, deadline, expected duration and windows. */
  readonly deferrals: Map<string, WindowAnswer>;
  /** Counts a decision by kind (the driver's stats). */
  count(kind: string): void;
  /** Asks the tenant's opted-in hybrid runtimes for `target` (their in-cluster upgraders apply it); answers their names. */
  readonly askHybridUpgrades?: AskHybridUpgrades;
}

/** RuntimeService.askUpgradesByAgent, in the tick's transaction. */
export type AskHybridUpgrades = (
  tx: pg.PoolClient,
  tenantId: string,
  target: string,
  by: Requester,
  fleetUpgradeId: string,
) => Promise<string[]>;

/** Everything one tick decided, for the audit log and the stats. */
export interface Tick {
  fleet: FleetRow;
  options: FleetOptions;
  now: Date;
  tx: pg.PoolClient;
  driver: DriverContext;
  /** Events written by this tick (a NOTIFY tells the progress streams). */
  events: number;
  /** The tick's decisions, in order: written as events and audit rows at its end, two statements in all. */
  decided: Array<{ action: string; tenantId: string | null; after: Record<string, unknown> }>;
}

/** A decision: an event of the fleet upgrade and an audit row, written with the tick's others at its end (writeDecisions). */
export function decide(t: Tick, action: string, after: Record<string, unknown>, tenantId?: string): Promise<void> {
  t.decided.push({ action, tenantId: tenantId ?? null, after });
  t.events += 1;
  return Promise.resolve();
}

/**
 * The tick's decisions as events and audit rows, in the order they were made, one statement
 * each: every round trip of a tick delays the steps it starts (their engine runs begin once it
 * commits), and a tick starting ten tenants made twenty of these.
 */
export async function writeDecisions(t: Tick): Promise<void> {
  if (t.decided.length === 0) return;
  await recordEvents(
    t.tx,
    t.fleet.id,
    t.decided.map((d) => ({ action: d.action, tenantId: d.tenantId, data: d.after })),
  );
  await writeAudits(
    t.tx,
    t.driver.actor,
    t.decided.map((d) => ({
      action: `fleet_upgrade.${d.action}`,
      targetType: d.tenantId ? 'tenant' : 'fleet_upgrade',
      targetId: d.tenantId ?? t.fleet.id,
      after: d.tenantId ? { fleetUpgradeId: t.fleet.id, ...d.after } : d.after,
    })),
  );
}

export async function setTenant(t: Tick, tenantId: string, fields: FleetTenantFields): Promise<void> {
  await updateFleetTenant(t.tx, t.fleet.id, tenantId, fields);
}

/** Finishes a tenant's part: its final state, why, and it no longer holds the tenant. */
export async function finish(
  t: Tick,
  tenantId: string,
  state: FleetTenantState,
  fields: FleetTenantFields = {},
): Promise<void> {
  await setTenant(t, tenantId, { state, finished_at: t.now, active: false, ...fields });
}

/** Changes the tenant's version (one spec change, as the API would) and records the step. */
export async function startStep(
  t: Tick,
  tenantId: string,
  kind: StepKind,
  from: string,
  to: string,
  fields: FleetTenantFields,
  locked?: TenantRow,
): Promise<boolean> {
  const row = locked ?? (await getTenantRow(t.tx, tenantId, true));
  if (!row || row.deleted) {
    await finish(t, tenantId, 'skipped', { reason: 'the tenant was deleted' });
    t.driver.count('skipped');
    return false;
  }
  // Only the Applications check compares with the snapshot: without it, no query for one.
  const snapshot =
    kind === 'upgrade' && t.options.gate.applications
      ? await readTenantSnapshot(t.tx, tenantId, STALE_AFTER_SECONDS)
      : null;
  const what = kind === 'upgrade' ? 'upgrade' : kind === 'rollback' ? 'automatic rollback' : 'rollback after abort';
  const op = await changeSpec(
    t.tx,
    row,
    { runtimeVersion: to },
    'upgrade',
    `fleet upgrade ${t.fleet.id}: ${what} ${from} -> ${to}`,
  );
  await setTenant(t, tenantId, {
    state: kind === 'upgrade' ? 'upgrading' : kind === 'rollback' ? 'rolling_back' : 'reverting',
    generation: op.generation,
    operation_id: op.id,
    step_from: from,
    step_to: to,
    step_started_at: t.now,
    snapshot: snapshot === null ? null : JSON.stringify(snapshot),
    gate: null,
    ...fields,
  });
  await decide(t, kind === 'upgrade' ? 'tenant_upgrade' : `tenant_${kind}`, { from, to, operationId: op.id }, tenantId);
  t.driver.count(kind === 'upgrade' ? 'started' : kind);
  return true;
}
