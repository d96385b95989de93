/**
 * The start of a reconcile attempt, fenced by the lease: pick the newest open operation (older
 * queued or interrupted ones are superseded: coalescing), or open a new one for a retry or a
 * resync, mark it running, and show the running phase on the tenant.
 */
import type { Queryable } from '../db/tx.ts';
import { markAttemptRunning, type ClaimedTenant, type NewRuntimeKey } from '../store/leases.ts';
import { insertAttemptOperation, readOpenOperations } from '../store/operations.ts';
import type { Condition, OperationKind, Phase } from '../store/states.ts';
import { condition, mergeConditions } from '../store/tenants.ts';

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

export function runningPhase(t: ClaimedTenant, kind: OperationKind): Phase {
  if (t.deleted) return 'Deleting';
  // A resync, and the binding of a claimed warm pool entry, keep the phase: the runtime runs.
  if (kind === 'resync' || kind === 'bind') return t.phase;
  if (kind === 'wake') return 'Waking';
  if (kind === 'sleep') return 'Sleeping';
  return t.actual_runtime_version === null ? 'Provisioning' : 'Updating';
}

const REASONS: Record<Phase, string> = {
  Pending: 'Pending',
  Provisioning: 'Provisioning',
  Ready: 'Resyncing',
  Updating: 'Updating',
  Suspended: 'Resyncing',
  Sleeping: 'FallingAsleep',
  Waking: 'Waking',
  Failed: 'Retrying',
  Deleting: 'Deleting',
  Deleted: 'Deleted',
};

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
      : chosen.kind === 'bind'
        ? "applying its tenant's names to the warm runtime it was given"
        : chosen.kind === 'sleep'
          ? 'putting the idle runtime to sleep'
          : chosen.kind === 'wake'
            ? 'waking the runtime'
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
