/**
 * The start of a reconcile attempt, fenced by the lease: pick the newest open operation (older
 * queued or interrupted ones are superseded: coalescing), or open a new one for a retry or a
 * resync, mark it running, and show the running phase on the tenant.
 */
import type { Queryable } from '../db/tx.ts';
import type { Condition, OperationKind, Phase } from '../store/tenants.ts';
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
  /** The tenant's conditions as this attempt wrote them. */
  conditions: Condition[];
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
): Promise<
  | {
      generation: number;
      deleted: boolean;
      conditions: ClaimedTenant['conditions'];
      consecutive_failures: number;
      actual_runtime_version: string | null;
    }
  | undefined
> {
  const { rows } = await db.query<{
    generation: number;
    deleted: boolean;
    conditions: ClaimedTenant['conditions'];
    consecutive_failures: number;
    actual_runtime_version: string | null;
  }>(
    `SELECT generation, deleted, conditions, consecutive_failures, actual_runtime_version FROM tenants
      WHERE id = $1 AND lease_owner = $2 FOR UPDATE`,
    [id, owner],
  );
  return rows[0];
}

/** Queued and running operations of a tenant, newest first. */
export async function readOpenOperations(db: Queryable, tenantId: string): Promise<OpenOperation[]> {
  const { rows } = await db.query<OpenOperation>(
    `SELECT id, kind, state, owner, attempt FROM operations
      WHERE tenant_id = $1 AND state IN ('queued', 'running')
      ORDER BY created_at DESC, id DESC`,
    [tenantId],
  );
  return rows;
}

/** Opens an operation for an attempt that has none queued: a retry after a failure, or a resync. */
export async function insertAttemptOperation(db: Queryable, t: ClaimedTenant): Promise<OpenOperation> {
  const { rows: last } = await db.query<{
    kind: OperationKind;
    state: string;
    attempt: number;
    from_version: string | null;
    to_version: string | null;
    generation: number;
  }>(
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

export function runningPhase(t: ClaimedTenant, kind: OperationKind): Phase {
  if (t.deleted) return 'Deleting';
  if (kind === 'resync') return t.phase;
  return t.actual_runtime_version === null ? 'Provisioning' : 'Updating';
}

const REASONS: Record<Phase, string> = {
  Pending: 'Pending',
  Provisioning: 'Provisioning',
  Ready: 'Resyncing',
  Updating: 'Updating',
  Suspended: 'Resyncing',
  Failed: 'Retrying',
  Deleting: 'Deleting',
  Deleted: 'Deleted',
};

/** A runtime key to create with the attempt (its clear value goes to the engine). */
export interface NewRuntimeKey {
  hash: Buffer;
  prefix: string;
  enc: Buffer;
}

/**
 * Marks the chosen operation running (attempt + 1), supersedes older open ones, shows the running
 * phase and Reconciling=True on the tenant and, on a first attempt, stores the runtime key: one
 * statement, fenced by the lease (nothing changes when this owner lost it). Returns the attempt.
 */
export async function markAttemptRunning(
  db: Queryable,
  a: {
    tenantId: string;
    owner: string;
    chosen: string;
    older: string[];
    phase: Phase;
    conditions: Condition[];
    runtimeKey: NewRuntimeKey | undefined;
    /** A resync (refresh + update) starts: it answers the root-cluster watch's request, if any. */
    resync: boolean;
  },
): Promise<number | undefined> {
  const { rows } = await db.query<{ attempt: number }>(
    `WITH held AS (
       UPDATE tenants SET phase = $4, conditions = $5, last_operation_id = $3, updated_at = now(),
              runtime_token_enc = coalesce(runtime_token_enc, $8),
              resync_requested_at = CASE WHEN $10 THEN NULL ELSE resync_requested_at END,
              resync_reason = CASE WHEN $10 THEN NULL ELSE resync_reason END
        WHERE id = $1 AND lease_owner = $2 RETURNING id),
     key AS (
       INSERT INTO api_keys (key_hash, prefix, role, tenant_id, name, created_by)
       SELECT $6, $7, 'runtime', id, 'runtime agents (made by the reconciler)', 'system' FROM held WHERE $6::bytea IS NOT NULL),
     sup AS (
       UPDATE operations SET state = 'superseded', finished_at = now(),
              error = jsonb_build_object('code', 'Superseded', 'message', 'coalesced into operation ' || $3::text)
        WHERE id = ANY($9::uuid[]) AND EXISTS (SELECT 1 FROM held))
     UPDATE operations SET state = 'running', attempt = attempt + 1, owner = $2, started_at = coalesce(started_at, now()),
            error = NULL, finished_at = NULL
      WHERE id = $3 AND EXISTS (SELECT 1 FROM held)
      RETURNING attempt`,
    [
      a.tenantId,
      a.owner,
      a.chosen,
      a.phase,
      JSON.stringify(a.conditions),
      a.runtimeKey?.hash ?? null,
      a.runtimeKey?.prefix ?? null,
      a.runtimeKey?.enc ?? null,
      a.older,
      a.resync,
    ],
  );
  return rows[0]?.attempt;
}

/**
 * Starts the attempt: reads the open operations, picks the newest (older ones are coalesced into
 * it) or opens one for a retry or resync, and marks it running in one fenced statement.
 * Undefined when the lease was lost meanwhile: the caller must not run the engine. An
 * operation queued between the read and the write stays queued; its generation keeps the tenant
 * due, so it runs next (not lost).
 */
export async function startAttempt(
  db: Queryable,
  t: ClaimedTenant,
  owner: string,
  runtimeKey?: NewRuntimeKey,
): Promise<StartedAttempt | undefined> {
  const open = await readOpenOperations(db, t.id);
  const chosen = open[0] ?? (await insertAttemptOperation(db, t));
  const older = open.slice(1);
  const running = open.filter((o) => o.state === 'running');
  const phase = runningPhase(t, chosen.kind);
  const verb = t.deleted
    ? 'deleting the runtime'
    : chosen.kind === 'resync'
      ? 'checking for drift'
      : phase === 'Provisioning'
        ? 'provisioning the runtime'
        : 'updating the runtime';
  const conditions = mergeConditions(t.conditions, [
    condition('Reconciling', 'True', REASONS[phase], `${verb} (operation ${chosen.id}, attempt ${chosen.attempt + 1})`),
  ]);
  const attempt = await markAttemptRunning(db, {
    tenantId: t.id,
    owner,
    chosen: chosen.id,
    older: older.map((o) => o.id),
    phase,
    conditions,
    runtimeKey,
    resync: chosen.kind === 'resync' && !t.deleted,
  });
  if (attempt === undefined) return undefined;
  const first = running[0];
  return {
    operationId: chosen.id,
    kind: chosen.kind,
    attempt,
    interrupted: running.length > 0,
    superseded: older.map((o) => o.id),
    conditions,
    ...(first ? { interruptedOperation: { id: first.id, owner: first.owner } } : {}),
  };
}
