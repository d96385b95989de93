/**
 * The end of an attempt: status, operation result and lease release in ONE transaction, fenced
 * by the lease (when another worker took the tenant over, nothing is written). Each function is
 * one outcome: success, failure, cancellation, or waiting (no capacity, engine unavailable).
 */
import type pg from 'pg';
import { withTx, type Queryable } from '../db/tx.ts';
import { condition, mergeConditions, TENANT_CHANNEL, type Condition, type Phase } from '../store/tenants.ts';
import { KEY_REVOKED_CHANNEL } from '../store/keys.ts';
import { lockHeldTenant } from './attempt.ts';
import type { ClaimedTenant } from './lease.ts';

/** Channel that announces new log lines and the end of an operation; payload: operation id. */
export const OPERATION_LOG_CHANNEL = 'operation_log';

export interface OperationError {
  code: string;
  message: string;
}

async function finishOperation(
  db: Queryable,
  id: string,
  state: 'succeeded' | 'failed' | 'cancelled',
  error: OperationError | null,
): Promise<void> {
  await db.query(`UPDATE operations SET state = $2, error = $3, finished_at = now() WHERE id = $1`, [
    id,
    state,
    error ? JSON.stringify(error) : null,
  ]);
  await db.query('SELECT pg_notify($1, $2)', [OPERATION_LOG_CHANNEL, id]);
}

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
}

function successStatus(
  t: ClaimedTenant,
  outputs: Record<string, unknown>,
  current: { generation: number; deleted: boolean; conditions: Condition[] },
) {
  const moved = current.generation > t.generation;
  const phase: Phase = t.deleted ? 'Deleted' : current.deleted ? 'Deleting' : t.suspended ? 'Suspended' : 'Ready';
  const version = t.deleted ? t.actual_runtime_version : (str(outputs.runtimeVersion) ?? t.runtime_version);
  const ready =
    phase === 'Deleted'
      ? condition('Ready', 'False', 'Deleted', 'the runtime and its virtual cluster were deleted')
      : phase === 'Suspended'
        ? condition('Ready', 'False', 'Suspended', 'the runtime is suspended')
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
 * Writes a success in one statement (one transaction): tenant status, lease release, the
 * operation, operations queued for this generation or older (a retry requested meanwhile: it is
 * satisfied), key revocation on delete, and the log NOTIFY. Fenced by the lease and by the
 * generation: returns false when either moved (the caller then takes the locking path).
 */
export async function writeSuccess(
  db: Queryable,
  owner: string,
  t: ClaimedTenant,
  operationId: string,
  expectedGeneration: number,
  st: ReturnType<typeof successStatus>,
): Promise<boolean> {
  const { rowCount } = await db.query(
    `WITH ten AS (
       UPDATE tenants SET observed_generation = $3, phase = $4,
              previous_runtime_version = CASE WHEN actual_runtime_version IS NOT NULL AND actual_runtime_version IS DISTINCT FROM $5
                                              THEN actual_runtime_version ELSE previous_runtime_version END,
              actual_runtime_version = $5, endpoints = $6, conditions = $7,
              consecutive_failures = 0, stalled = false, next_attempt_at = NULL, last_reconciled_at = now(),
              runtime_token_enc = CASE WHEN $8 THEN NULL ELSE runtime_token_enc END,
              lease_owner = NULL, lease_expires_at = NULL, updated_at = now()
        WHERE id = $1 AND lease_owner = $2 AND generation = $10 RETURNING id),
     keys AS (
       UPDATE api_keys SET revoked_at = now() WHERE tenant_id = $1 AND revoked_at IS NULL AND $8 AND EXISTS (SELECT 1 FROM ten) RETURNING id),
     sup AS (
       UPDATE operations SET state = 'superseded', finished_at = now(),
              error = jsonb_build_object('code', 'Superseded', 'message', 'satisfied by operation ' || $9::text)
        WHERE tenant_id = $1 AND state = 'queued' AND generation <= $3 AND id <> $9 AND EXISTS (SELECT 1 FROM ten)),
     op AS (
       UPDATE operations SET state = 'succeeded', error = NULL, finished_at = now()
        WHERE id = $9 AND EXISTS (SELECT 1 FROM ten) RETURNING id)
     SELECT pg_notify('${OPERATION_LOG_CHANNEL}', id::text) FROM op
     UNION ALL
     -- The same notice as every other revocation: each replica closes the keys' tunnels and streams at once.
     SELECT pg_notify('${KEY_REVOKED_CHANNEL}', id::text) FROM keys`,
    [
      t.id,
      owner,
      t.generation,
      st.phase,
      st.version,
      JSON.stringify(st.endpoints),
      JSON.stringify(st.conditions),
      t.deleted,
      operationId,
      expectedGeneration,
    ],
  );
  return (rowCount ?? 0) > 0;
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
  if (await writeSuccess(pool, owner, t, s.operationId, t.generation, fast)) return true;
  return withTx(pool, async (db) => {
    const held = await lockHeldTenant(db, t.id, owner);
    if (!held) return false;
    const st = successStatus(t, s.outputs, held);
    if (!(await writeSuccess(db, owner, t, s.operationId, held.generation, st))) return false;
    if (st.moved) await db.query('SELECT pg_notify($1, $2)', [TENANT_CHANNEL, t.id]);
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
      await db.query(
        `UPDATE tenants SET conditions = $2, lease_owner = NULL, lease_expires_at = NULL, updated_at = now() WHERE id = $1`,
        [t.id, JSON.stringify(conditions)],
      );
      await db.query('SELECT pg_notify($1, $2)', [TENANT_CHANNEL, t.id]);
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
    await db.query(
      `UPDATE tenants SET consecutive_failures = $2, stalled = $3,
              next_attempt_at = CASE WHEN $3 THEN NULL ELSE now() + make_interval(secs => $4::float8 / 1000) END,
              phase = CASE WHEN $3 THEN 'Failed' ELSE phase END,
              conditions = $5, lease_owner = NULL, lease_expires_at = NULL, updated_at = now()
        WHERE id = $1`,
      [t.id, failures, stalled, retryInMs ?? 0, JSON.stringify(mergeConditions(held.conditions, updates))],
    );
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
    await db.query(
      `UPDATE tenants SET conditions = $2, lease_owner = NULL, lease_expires_at = NULL, updated_at = now() WHERE id = $1`,
      [t.id, JSON.stringify(conditions)],
    );
    await db.query('SELECT pg_notify($1, $2)', [TENANT_CHANNEL, t.id]);
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

/** Appends each waiting tenant's line to its open operations and wakes their log followers. */
export async function logWaits(db: Queryable, lines: Array<{ tenantId: string; line: string }>): Promise<void> {
  if (lines.length === 0) return;
  await db.query(
    `WITH ins AS (
       INSERT INTO operation_logs (operation_id, stream, line)
       SELECT o.id, 'reconciler', x.line FROM unnest($1::uuid[], $2::text[]) AS x(tenant_id, line)
         JOIN operations o ON o.tenant_id = x.tenant_id AND o.state IN ('queued', 'running')
       RETURNING operation_id)
     SELECT pg_notify($3, operation_id::text) FROM (SELECT DISTINCT operation_id FROM ins) d`,
    [lines.map((l) => l.tenantId), lines.map((l) => l.line), OPERATION_LOG_CHANNEL],
  );
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
    if (line) await logWaits(db, [{ tenantId: t.id, line }]);
    await db.query(
      `UPDATE tenants SET conditions = $2, next_attempt_at = now() + make_interval(secs => $3::float8 / 1000),
              lease_owner = NULL, lease_expires_at = NULL, updated_at = now()
        WHERE id = $1`,
      [t.id, JSON.stringify(conditions), retryInMs],
    );
    return true;
  });
}
