/**
 * Test-data builders for operations: the states a reconciler would have moved them to, without
 * running it. Where the store has a function for the write (an operation ended), the builder calls
 * it; where it has none, this module is the one place of the tests that writes the SQL. The reader
 * (tenantOperations, tenantLogLines, logLinesOf) read through the store; operationRecords reads the
 * rows with the reconciler that ran them, which the store's reads leave out.
 */
import type { Queryable } from '../../provisioner/db/tx.ts';
import { finishOperation, listOperations, readLog, type Operation } from '../../provisioner/store/operations.ts';
import type { OperationKind, OperationState } from '../../provisioner/store/states.ts';

const idList = (ids: string | readonly string[]): readonly string[] => (typeof ids === 'string' ? [ids] : ids);

/**
 * Ends operations succeeded through the store (finished now, no error, their log followers woken),
 * or `state` when told.
 */
export async function finishOperations(
  db: Queryable,
  ids: string | readonly string[],
  state: 'succeeded' | 'failed' | 'cancelled' = 'succeeded',
): Promise<void> {
  for (const id of idList(ids)) await finishOperation(db, id, state, null);
}

// SQL: states no production path writes (an operation's state set without a run, or ended without telling its followers).
/**
 * Sets operations' state, their start and end times becoming now when told (each left as it is
 * otherwise): a running operation, or one ended without its log followers being told.
 */
export async function setOperationState(
  db: Queryable,
  ids: string | readonly string[],
  state: OperationState,
  o: { startedNow?: boolean; finishedNow?: boolean } = {},
): Promise<void> {
  await db.query(
    `UPDATE operations SET state = $2,
            started_at = CASE WHEN $3 THEN now() ELSE started_at END,
            finished_at = CASE WHEN $4 THEN now() ELSE finished_at END
      WHERE id = ANY($1::uuid[])`,
    [idList(ids), state, o.startedNow ?? false, o.finishedNow ?? false],
  );
}

// SQL: states no production path writes (runs ended without the reconciler: no lease, no attempt).
/**
 * Makes every operation of the tenant look succeeded (its queued create and what followed), so that
 * nothing is under way; finished now unless `finishedNow` is false.
 */
export async function settleTenantOperations(
  db: Queryable,
  tenantId: string,
  o: { finishedNow?: boolean } = {},
): Promise<void> {
  await db.query(
    `UPDATE operations SET state = 'succeeded', finished_at = CASE WHEN $2 THEN now() ELSE finished_at END
      WHERE tenant_id = $1`,
    [tenantId, o.finishedNow ?? true],
  );
}

/**
 * Does what a reconciler does with the queued upgrades: their tenants observe their generation and
 * run their spec's version, the operations end succeeded (started and finished now).
 */
export async function completeQueuedUpgrades(db: Queryable): Promise<void> {
  await db.query(
    `UPDATE tenants SET observed_generation = generation, actual_runtime_version = runtime_version
      WHERE id IN (SELECT tenant_id FROM operations WHERE kind = 'upgrade' AND state = 'queued')`,
  );
  await db.query(
    `UPDATE operations SET state = 'succeeded', started_at = now(), finished_at = now()
      WHERE kind = 'upgrade' AND state = 'queued'`,
  );
}

// SQL: time moved back (an operation created and ended in the past).
/** A past operation, for the history a planner reads: `createdSecondsAgo` back, lasting `durationSeconds`. */
export interface PastOperation {
  kind: OperationKind;
  fromVersion: string | null;
  toVersion: string | null;
  state: 'succeeded' | 'failed' | 'cancelled';
  /** Created and started this many seconds ago (0: now). */
  createdSecondsAgo: number;
  durationSeconds: number;
  generation?: number;
}

/** Inserts a tenant's past (ended) operation with the times of `p`; answers its id. */
export async function insertPastOperation(db: Queryable, tenantId: string, p: PastOperation): Promise<string> {
  const { rows } = await db.query<{ id: string }>(
    `INSERT INTO operations (tenant_id, kind, generation, from_version, to_version, state, created_at, started_at, finished_at)
     SELECT $1, $2, $3, $4, $5, $6, at, at, at + make_interval(secs => $8::float8)
       FROM (SELECT now() - make_interval(secs => $7::float8) AS at) t
     RETURNING id`,
    [tenantId, p.kind, p.generation ?? 1, p.fromVersion, p.toVersion, p.state, p.createdSecondsAgo, p.durationSeconds],
  );
  return rows[0]!.id;
}

/** Which of a tenant's operations tenantOperations answers; each field left out selects all. */
export interface OperationFilter {
  kind?: OperationKind;
  /** Any of these states. */
  states?: readonly OperationState[];
  toVersion?: string;
}

/** A tenant's operations (the store's read), oldest first; those `f` selects when told. */
export async function tenantOperations(db: Queryable, tenantId: string, f: OperationFilter = {}): Promise<Operation[]> {
  const ops = (await listOperations(db, tenantId, { limit: 100_000 })).reverse();
  return ops.filter(
    (o) =>
      (f.kind === undefined || o.kind === f.kind) &&
      (f.states === undefined || f.states.includes(o.state)) &&
      (f.toVersion === undefined || o.toVersion === f.toVersion),
  );
}

/** Every log line of a tenant's operations (the store's read), oldest operation first. */
export async function tenantLogLines(db: Queryable, tenantId: string): Promise<string[]> {
  const lines: string[] = [];
  for (const op of await tenantOperations(db, tenantId)) lines.push(...(await logLinesOf(db, op.id)));
  return lines;
}

// SQL: a read of a column no store read answers (the reconciler that ran each operation).
/** An operation's row with the bookkeeping the store's Operation leaves out (the reconciler that ran it). */
export interface OperationRecord {
  id: string;
  kind: OperationKind;
  state: OperationState;
  attempt: number;
  /** The reconciler (its owner name) that last took it; null: none yet. */
  owner: string | null;
  generation: number;
  error: { code: string; message: string } | null;
}

/** A tenant's operations' rows, oldest first. */
export async function operationRecords(db: Queryable, tenantId: string): Promise<OperationRecord[]> {
  const { rows } = await db.query<OperationRecord>(
    `SELECT id, kind, state, attempt, owner, generation, error FROM operations WHERE tenant_id = $1 ORDER BY created_at, id`,
    [tenantId],
  );
  return rows;
}

/** An operation's log lines (the store's read), in order. */
export async function logLinesOf(db: Queryable, operationId: string): Promise<string[]> {
  return (await readLog(db, operationId, 0, 100_000)).map((l) => l.line);
}

// SQL: fault injection (a trigger).
/**
 * Makes the database refuse to mark a create operation succeeded (a trigger raising an error), so
 * that the write of a run's end fails; answers the undo.
 */
export async function refuseCreateSuccess(db: Queryable): Promise<() => Promise<void>> {
  await db.query(`CREATE FUNCTION test_refuse_success() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN IF NEW.state = 'succeeded' AND NEW.kind = 'create' THEN RAISE EXCEPTION 'refused by test'; END IF; RETURN NEW; END $$`);
  await db.query(
    `CREATE TRIGGER test_refuse BEFORE UPDATE ON operations FOR EACH ROW EXECUTE FUNCTION test_refuse_success()`,
  );
  return async () => {
    await db.query('DROP TRIGGER test_refuse ON operations; DROP FUNCTION test_refuse_success()');
  };
}

/**
 * Whether a statement the pool was given is the store's read of an operation's state
 * (operationState), for a test that counts a follower's polls on the real pool.
 */
export function isOperationStateRead(statement: unknown): boolean {
  return typeof statement === 'string' && statement.startsWith('SELECT state FROM operations');
}
