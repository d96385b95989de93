/**
 * The end of an attempt: status, operation result and lease release in ONE transaction, fenced
 * by the lease (when another worker took the tenant over, nothing is written). Each function is
 * one outcome: success, failure, cancellation, or waiting (no capacity, engine unavailable). The
 * statements are store/leases.ts's and store/operations.ts's.
 */
import type pg from 'pg';
import { withTx } from '../db/tx.ts';
import {
  lockHeldTenant,
  notifyTenantDue,
  releaseWithConditions,
  writeFailure,
  writeSuccess,
  writeWaiting,
  type ClaimedTenant,
  type SuccessStatus,
} from '../store/leases.ts';
import { appendWaitLines, finishOperation, type OperationError } from '../store/operations.ts';
import { condition, mergeConditions } from '../store/tenants.ts';
import type { Condition, Phase } from '../store/states.ts';

function str(v: unknown): string | undefined {
  return typeof v === 'string' && v !== '' ? v : undefined;
}

/** Endpoints the tenant sees, from the program's outputs (plain string outputs ending in Url/Endpoint). */
export function endpointsFrom(outputs: Record<string, unknown>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(outputs)) {
    const s = str(v);
    if (s && /(Url|URL|Endpoint|endpoint|url)$/.test(k)) out[k] = s;
  }
  return out;
}

export interface SuccessInput {
  tenant: ClaimedTenant;
  operationId: string;
  outputs: Record<string, unknown>;
  /** The tenant's conditions as the attempt left them (the fast path merges into these). */
  conditions: Condition[];
  /**
   * The sealed runtime key the run installed (the row's runtime_token_enc it read, or the key it
   * minted): a claimed warm pool entry's pool credential is revoked by the success of a run that
   * installed the tenant's current key (store/leases.ts writeSuccess).
   */
  installedKey?: Buffer | null;
}

function successStatus(
  t: ClaimedTenant,
  outputs: Record<string, unknown>,
  current: { generation: number; deleted: boolean; conditions: Condition[] },
): SuccessStatus & { moved: boolean } {
  const moved = current.generation > t.generation;
  const phase: Phase = t.deleted
    ? 'Deleted'
    : current.deleted
      ? 'Deleting'
      : t.suspended
        ? 'Suspended'
        : t.sleeping
          ? 'Sleeping'
          : 'Ready';
  const version = t.deleted ? t.actual_runtime_version : (str(outputs.runtimeVersion) ?? t.runtime_version);
  const ready =
    phase === 'Deleted'
      ? condition('Ready', 'False', 'Deleted', 'the runtime and its virtual cluster were deleted')
      : phase === 'Suspended'
        ? condition('Ready', 'False', 'Suspended', 'the runtime is suspended')
        : phase === 'Sleeping'
          ? condition(
              'Ready',
              'False',
              'Sleeping',
              'the runtime is asleep after a time without activity; the next request to it wakes it',
            )
          : condition('Ready', 'True', 'Ready', version ? `runtime ${version} is ready` : 'the runtime is ready');
  const updates: Condition[] = [
    ready,
    moved
      ? condition(
          'Reconciling',
          'True',
          'SpecChanged',
          `generation ${current.generation} arrived during the operation; reconciling again`,
        )
      : condition('Reconciling', 'False', 'ReconcileSucceeded', `generation ${t.generation} applied`),
  ];
  if (current.conditions.some((c) => c.type === 'Stalled'))
    updates.push(condition('Stalled', 'False', 'ReconcileSucceeded', 'the last operation succeeded'));
  return {
    moved,
    phase,
    version,
    conditions: mergeConditions(current.conditions, updates),
    endpoints: t.deleted ? {} : endpointsFrom(outputs),
  };
}

/**
 * Records a successful attempt: observed_generation = G, phase, versions, endpoints, conditions,
 * operation succeeded, lease released, all in one transaction. When the spec moved on meanwhile
 * (generation > G) the tenant stays due and workers are woken. Returns false when the lease was lost.
 */
export async function recordSuccess(pool: pg.Pool, owner: string, s: SuccessInput): Promise<boolean> {
  const t = s.tenant;
  // Fast path: the spec did not move (the common case): one statement.
  const fast = successStatus(t, s.outputs, { generation: t.generation, deleted: t.deleted, conditions: s.conditions });
  const key = s.installedKey ?? null;
  if (await writeSuccess(pool, owner, t, s.operationId, t.generation, fast, key)) return true;
  return withTx(pool, async (db) => {
    const held = await lockHeldTenant(db, t.id, owner);
    if (!held) return false;
    const status = successStatus(t, s.outputs, held);
    if (!(await writeSuccess(db, owner, t, s.operationId, held.generation, status, key))) return false;
    if (status.moved) await notifyTenantDue(db, t.id);
    return true;
  });
}

export interface FailureInput {
  tenant: ClaimedTenant;
  operationId: string;
  error: OperationError;
  maxFailures: number;
  /** Delay before the next attempt for a given failure count. */
  backoffMs: (failures: number) => number;
}

/**
 * Records a failed attempt: operation failed; consecutive_failures + 1 and a retry time with
 * backoff; at maxFailures the tenant is Stalled (phase Failed) until its spec changes or a retry
 * is requested. A failure of an outdated generation (the spec moved on) does not count.
 * Returns the failure count, or undefined when the lease was lost.
 */
export async function recordFailure(
  pool: pg.Pool,
  owner: string,
  f: FailureInput,
): Promise<{ failures: number; stalled: boolean; retryInMs: number | null } | undefined> {
  const t = f.tenant;
  return withTx(pool, async (db) => {
    const held = await lockHeldTenant(db, t.id, owner);
    if (!held) return undefined;
    await finishOperation(db, f.operationId, 'failed', f.error);
    if (held.generation > t.generation) {
      // The spec changed during the attempt: the new generation gets a fresh start (changeSpec reset the counters).
      const conditions = mergeConditions(held.conditions, [
        condition(
          'Reconciling',
          'True',
          'SpecChanged',
          `generation ${held.generation} arrived while generation ${t.generation} failed: ${f.error.message}`.slice(
            0,
            2000,
          ),
        ),
      ]);
      await releaseWithConditions(db, t.id, conditions);
      await notifyTenantDue(db, t.id);
      return { failures: held.consecutive_failures, stalled: false, retryInMs: 0 };
    }
    const failures = held.consecutive_failures + 1;
    const stalled = failures >= f.maxFailures;
    const message = `${f.error.code}: ${f.error.message}`.slice(0, 2000);
    const neverRan = held.actual_runtime_version === null;
    const updates: Condition[] = stalled
      ? [
          condition('Ready', 'False', 'UpdateFailed', message),
          condition('Reconciling', 'False', 'Stalled', `gave up after ${failures} consecutive failures`),
          condition(
            'Stalled',
            'True',
            'UpdateFailed',
            `${failures} consecutive failures; the last: ${message}. Change the spec or request a retry.`.slice(
              0,
              2000,
            ),
          ),
        ]
      : [
          ...(neverRan ? [condition('Ready', 'False', 'ReconcileFailed', message)] : []),
          condition(
            'Reconciling',
            'True',
            'RetryingAfterFailure',
            `attempt failed (${failures}/${f.maxFailures}): ${message}`.slice(0, 2000),
          ),
        ];
    const retryInMs = stalled ? null : f.backoffMs(failures);
    await writeFailure(db, t.id, {
      failures,
      stalled,
      retryInMs,
      conditions: mergeConditions(held.conditions, updates),
    });
    return { failures, stalled, retryInMs };
  });
}

/**
 * Records an attempt the worker aborted because the spec moved on (a delete arrived during a
 * create): operation cancelled, no failure counted, lease released, and workers woken so the
 * newer generation runs at once. Returns false when the lease was lost.
 */
export async function recordCancelled(
  pool: pg.Pool,
  owner: string,
  t: ClaimedTenant,
  operationId: string,
  message: string,
): Promise<boolean> {
  return withTx(pool, async (db) => {
    const held = await lockHeldTenant(db, t.id, owner);
    if (!held) return false;
    await finishOperation(db, operationId, 'cancelled', { code: 'Cancelled', message });
    const conditions = mergeConditions(held.conditions, [condition('Reconciling', 'True', 'Cancelled', message)]);
    await releaseWithConditions(db, t.id, conditions);
    await notifyTenantDue(db, t.id);
    return true;
  });
}

/** Retry delays of a waiting tenant: the first, then as long as it has waited so far, up to the cap. */
export interface WaitBackoff {
  firstMs: number;
  capMs: number;
}

/**
 * How long a tenant waiting for `reason` waits before its next try: `firstMs` when it starts
 * waiting, then as long as it has been not Ready so far (Ready=False's lastTransitionTime), so the
 * delays double, up to `capMs`. The event that frees it (wakeWaiters) makes it due earlier.
 */
export function waitingRetryMs(
  conditions: Condition[],
  reason: 'NoCapacity' | 'EngineUnavailable',
  wait: WaitBackoff,
  now = Date.now(),
): number {
  const ready = conditions.find((c) => c.type === 'Ready');
  if (ready?.status !== 'False' || ready.reason !== reason) return Math.min(wait.capMs, wait.firstMs);
  const waited = now - Date.parse(ready.lastTransitionTime);
  return Math.round(Math.min(wait.capMs, Math.max(wait.firstMs, Number.isFinite(waited) ? waited : 0)));
}

/** The conditions and the retry delay of a tenant waiting for `reason` (recordWaiting, and the claim: lease.ts). */
export function waitingStatus(
  current: Condition[],
  reason: 'NoCapacity' | 'EngineUnavailable',
  message: string,
  wait: WaitBackoff,
): { retryInMs: number; conditions: Condition[] } {
  const retryInMs = waitingRetryMs(current, reason, wait);
  const conditions = mergeConditions(current, [
    condition('Ready', 'False', reason, message.slice(0, 2000)),
    condition(
      'Reconciling',
      'True',
      reason === 'NoCapacity' ? 'WaitingForCapacity' : 'WaitingForEngine',
      `retrying in ${Math.round(retryInMs / 1000)}s`,
    ),
  ]);
  return { retryInMs, conditions };
}

/**
 * The operation-log line for a tenant that starts waiting, or waits for another reason than
 * before; undefined while it waits for the same thing (a retry is not news).
 */
export function waitLine(
  current: Condition[],
  reason: 'NoCapacity' | 'EngineUnavailable',
  message: string,
): string | undefined {
  const ready = current.find((c) => c.type === 'Ready');
  const text = message.slice(0, 2000);
  if (ready?.status === 'False' && ready.reason === reason && ready.message === text) return undefined;
  const what = reason === 'NoCapacity' ? 'waiting for a root cluster' : 'waiting for the Pulumi engine';
  return `${what} (${reason}): ${text}; retrying by itself, and at once when that changes`;
}

/**
 * Records why a due tenant cannot run yet (NoCapacity, EngineUnavailable): Ready=False with the
 * reason, a retry time, lease released. The queued operation stays queued and the failure
 * counter is untouched: waiting for capacity or for the CLI is not the tenant's failure.
 */
export async function recordWaiting(
  pool: pg.Pool,
  owner: string,
  t: ClaimedTenant,
  reason: 'NoCapacity' | 'EngineUnavailable',
  message: string,
  wait: WaitBackoff,
): Promise<boolean> {
  return withTx(pool, async (db) => {
    const held = await lockHeldTenant(db, t.id, owner);
    if (!held) return false;
    const { retryInMs, conditions } = waitingStatus(held.conditions, reason, message, wait);
    const line = waitLine(held.conditions, reason, message);
    if (line) await appendWaitLines(db, [{ tenantId: t.id, line }]);
    await writeWaiting(db, t.id, conditions, retryInMs);
    return true;
  });
}
