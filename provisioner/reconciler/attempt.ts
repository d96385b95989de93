/**
 * The start of a reconcile attempt, in one transaction fenced by the lease: pick the newest open
 * operation (older queued or interrupted ones are superseded: coalescing), or open a new one for
 * a retry or a resync, mark it running, and show the running phase on the tenant.
 */
import type { Queryable } from '../db/tx.ts';
import type { OperationKind, Phase } from '../store/tenants.ts';
import { condition, mergeConditions } from '../store/tenants.ts';
import type { ClaimedTenant } from './lease.ts';

export interface StartedAttempt {
  operationId: string;
  kind: OperationKind;
  attempt: number;
  /** A previous engine run on this tenant did not finish (crash or hand-back): recover first. */
  interrupted: boolean;
  /** Operations this attempt replaced (coalesced). */
  superseded: string[];
  /** Why recovery is needed, for the operation log. */
  interruptedOperation?: { id: string; owner: string | null };
}

interface OpenOperation {
  id: string;
  kind: OperationKind;
  state: 'queued' | 'running';
  owner: string | null;
  attempt: number;
}

/** Locks the tenant row when this owner still holds its lease; undefined when the lease is lost. */
export async function lockHeldTenant(
  db: Queryable,
  id: string,
  owner: string,
): Promise<{ generation: number; deleted: boolean; conditions: ClaimedTenant['conditions']; consecutive_failures: number; actual_runtime_version: string | null } | undefined> {
  const { rows } = await db.query<{ generation: number; deleted: boolean; conditions: ClaimedTenant['conditions']; consecutive_failures: number; actual_runtime_version: string | null }>(
    `SELECT generation, deleted, conditions, consecutive_failures, actual_runtime_version FROM tenants
      WHERE id = $1 AND lease_owner = $2 FOR UPDATE`,
    [id, owner],
  );
  return rows[0];
}

/** Queued and running operations of a tenant, newest first, row-locked. */
export async function lockOpenOperations(db: Queryable, tenantId: string): Promise<OpenOperation[]> {
  const { rows } = await db.query<OpenOperation>(
    `SELECT id, kind, state, owner, attempt FROM operations
      WHERE tenant_id = $1 AND state IN ('queued', 'running')
      ORDER BY created_at DESC, id DESC FOR UPDATE`,
    [tenantId],
  );
  return rows;
}

/** Marks older open operations superseded by `by`. */
export async function supersedeOperations(db: Queryable, ids: string[], by: string): Promise<void> {
  if (ids.length === 0) return;
  await db.query(
    `UPDATE operations SET state = 'superseded', finished_at = now(),
            error = jsonb_build_object('code', 'Superseded', 'message', 'coalesced into operation ' || $2::text)
      WHERE id = ANY($1::uuid[])`,
    [ids, by],
  );
}

/** Opens an operation for an attempt that has none queued: a retry after a failure, or a resync. */
export async function insertAttemptOperation(db: Queryable, t: ClaimedTenant): Promise<OpenOperation> {
  const { rows: last } = await db.query<{ kind: OperationKind; state: string; attempt: number; from_version: string | null; to_version: string | null; generation: number }>(
    `SELECT kind, state, attempt, from_version, to_version, generation FROM operations
      WHERE tenant_id = $1 ORDER BY created_at DESC, id DESC LIMIT 1`,
    [t.id],
  );
  const prev = last[0];
  const retry = prev !== undefined && prev.state === 'failed' && prev.generation === t.generation;
  const kind: OperationKind = retry ? prev.kind : t.generation === t.observed_generation ? 'resync' : 'update';
  const from = retry ? prev.from_version : t.actual_runtime_version;
  const { rows } = await db.query<OpenOperation>(
    `INSERT INTO operations (tenant_id, kind, generation, from_version, to_version, attempt)
     VALUES ($1, $2, $3, $4, $5, $6) RETURNING id, kind, state, owner, attempt`,
    [t.id, kind, t.generation, from, t.runtime_version, retry ? prev.attempt : 0],
  );
  return rows[0]!;
}

/** Marks the chosen operation running for this owner (attempt + 1). */
export async function markOperationRunning(db: Queryable, id: string, owner: string): Promise<number> {
  const { rows } = await db.query<{ attempt: number }>(
    `UPDATE operations SET state = 'running', attempt = attempt + 1, owner = $2, started_at = coalesce(started_at, now()),
            error = NULL, finished_at = NULL
      WHERE id = $1 RETURNING attempt`,
    [id, owner],
  );
  return rows[0]!.attempt;
}

export function runningPhase(t: ClaimedTenant, kind: OperationKind): Phase {
  if (t.deleted) return 'Deleting';
  if (kind === 'resync') return t.phase;
  return t.actual_runtime_version === null ? 'Provisioning' : 'Updating';
}

/** Shows the running phase and Reconciling=True on the tenant. */
export async function markTenantReconciling(db: Queryable, t: ClaimedTenant, phase: Phase, reason: string, message: string, operationId: string): Promise<void> {
  const conditions = mergeConditions(t.conditions, [condition('Reconciling', 'True', reason, message)]);
  await db.query(
    `UPDATE tenants SET phase = $2, conditions = $3, last_operation_id = $4, updated_at = now() WHERE id = $1`,
    [t.id, phase, JSON.stringify(conditions), operationId],
  );
}

const REASONS: Record<Phase, string> = {
  Pending: 'Pending', Provisioning: 'Provisioning', Ready: 'Resyncing', Updating: 'Updating', Suspended: 'Resyncing',
  Failed: 'Retrying', Deleting: 'Deleting', Deleted: 'Deleted',
};

/**
 * Starts the attempt in the caller's transaction. Undefined when the lease was lost meanwhile
 * (another worker took the tenant over): the caller must not run the engine.
 */
export async function startAttempt(db: Queryable, t: ClaimedTenant, owner: string): Promise<StartedAttempt | undefined> {
  const held = await lockHeldTenant(db, t.id, owner);
  if (!held) return undefined;
  const open = await lockOpenOperations(db, t.id);
  const chosen = open[0] ?? (await insertAttemptOperation(db, t));
  const older = open.slice(1);
  const running = open.filter((o) => o.state === 'running');
  await supersedeOperations(db, older.map((o) => o.id), chosen.id);
  const attempt = await markOperationRunning(db, chosen.id, owner);
  const phase = runningPhase(t, chosen.kind);
  const verb = t.deleted ? 'deleting the runtime' : chosen.kind === 'resync' ? 'checking for drift' : phase === 'Provisioning' ? 'provisioning the runtime' : 'updating the runtime';
  await markTenantReconciling(db, t, phase, REASONS[phase], `${verb} (operation ${chosen.id}, attempt ${attempt})`, chosen.id);
  const first = running[0];
  return {
    operationId: chosen.id,
    kind: chosen.kind,
    attempt,
    interrupted: running.length > 0,
    superseded: older.map((o) => o.id),
    ...(first ? { interruptedOperation: { id: first.id, owner: first.owner } } : {}),
  };
}
