import type { Queryable } from '../db/tx.ts';
import type { TenantRow } from './tenants.ts';
import type { OperationKind, OperationState } from './states.ts';

/** What opening an attempt's operation reads of the tenant. */
type TenantRowForAttempt = Pick<
  TenantRow,
  'id' | 'generation' | 'observed_generation' | 'actual_runtime_version' | 'runtime_version'
>;

/** Channel that announces new log lines and the end of an operation; payload: operation id. */
export const OPERATION_LOG_CHANNEL = 'operation_log';

export interface OperationError {
  code: string;
  message: string;
}

/** An operation an attempt may run: queued, or running (interrupted). */
export interface OpenOperation {
  id: string;
  kind: OperationKind;
  state: 'queued' | 'running';
  owner: string | null;
  attempt: number;
}

export interface Operation {
  id: string;
  tenantId: string;
  kind: OperationKind;
  generation: number;
  fromVersion: string | null;
  toVersion: string | null;
  state: OperationState;
  attempt: number;
  error: { code: string; message: string } | null;
  createdAt: string;
  startedAt: string | null;
  finishedAt: string | null;
}

interface OperationRow {
  id: string;
  tenant_id: string;
  kind: OperationKind;
  generation: number;
  from_version: string | null;
  to_version: string | null;
  state: OperationState;
  attempt: number;
  error: { code: string; message: string } | null;
  created_at: Date;
  started_at: Date | null;
  finished_at: Date | null;
}

function toOperation(r: OperationRow): Operation {
  return {
    id: r.id,
    tenantId: r.tenant_id,
    kind: r.kind,
    generation: r.generation,
    fromVersion: r.from_version,
    toVersion: r.to_version,
    state: r.state,
    attempt: r.attempt,
    error: r.error,
    createdAt: r.created_at.toISOString(),
    startedAt: r.started_at?.toISOString() ?? null,
    finishedAt: r.finished_at?.toISOString() ?? null,
  };
}

export async function getOperation(db: Queryable, id: string): Promise<Operation | undefined> {
  const { rows } = await db.query<OperationRow>('SELECT * FROM operations WHERE id = $1', [id]);
  return rows[0] ? toOperation(rows[0]) : undefined;
}

export async function listOperations(
  db: Queryable,
  tenantId: string,
  q: { limit: number; before?: { ts: string; id: string } },
): Promise<Array<Operation & { cursorTs: string }>> {
  const args: unknown[] = [tenantId, q.limit];
  let where = 'tenant_id = $1';
  if (q.before) {
    args.push(q.before.ts, q.before.id);
    where += ' AND (created_at, id) < ($3::timestamptz, $4::uuid)';
  }
  const { rows } = await db.query<OperationRow & { cursor_ts: string }>(
    `SELECT *, created_at::text AS cursor_ts FROM operations WHERE ${where} ORDER BY created_at DESC, id DESC LIMIT $2`,
    args,
  );
  return rows.map((r) => ({ ...toOperation(r), cursorTs: r.cursor_ts }));
}

export interface LogLine {
  seq: number;
  stream: string;
  line: string;
  at: string;
}

export async function appendLog(
  db: Queryable,
  operationId: string,
  lines: Array<{ stream?: string; line: string }>,
): Promise<void> {
  if (lines.length === 0) return;
  await db.query(
    `INSERT INTO operation_logs (operation_id, stream, line)
     SELECT $1, s, l FROM unnest($2::text[], $3::text[]) AS x(s, l)`,
    [operationId, lines.map((l) => l.stream ?? 'engine'), lines.map((l) => l.line)],
  );
}

export async function readLog(db: Queryable, operationId: string, afterSeq = 0, limit = 1000): Promise<LogLine[]> {
  const { rows } = await db.query<{ seq: number; stream: string; line: string; created_at: Date }>(
    `SELECT seq, stream, line, created_at FROM operation_logs
      WHERE operation_id = $1 AND seq > $2 ORDER BY seq LIMIT $3`,
    [operationId, afterSeq, limit],
  );
  return rows.map((r) => ({ seq: r.seq, stream: r.stream, line: r.line, at: r.created_at.toISOString() }));
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
export async function insertAttemptOperation(db: Queryable, t: TenantRowForAttempt): Promise<OpenOperation> {
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

/** Ends the operation and wakes its log followers. */
export async function finishOperation(
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

/** Appends each waiting tenant's line to its open operations and wakes their log followers. */
export async function appendWaitLines(db: Queryable, lines: Array<{ tenantId: string; line: string }>): Promise<void> {
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

/** Appends lines and announces them on `operation_log`, in one statement. */
export async function appendLogAndNotify(
  db: Queryable,
  operationId: string,
  lines: Array<{ stream: string; line: string }>,
): Promise<void> {
  await db.query(
    `WITH ins AS (
       INSERT INTO operation_logs (operation_id, stream, line)
       SELECT $1, s, l FROM unnest($2::text[], $3::text[]) WITH ORDINALITY AS x(s, l, n) ORDER BY n
       RETURNING 1)
     SELECT pg_notify($4, $1::text) WHERE EXISTS (SELECT 1 FROM ins)`,
    [operationId, lines.map((l) => l.stream), lines.map((l) => l.line), OPERATION_LOG_CHANNEL],
  );
}

/** The operation's state; undefined: no such operation. */
export async function operationState(db: Queryable, id: string): Promise<string | undefined> {
  const { rows } = await db.query<{ state: string }>('SELECT state FROM operations WHERE id = $1', [id]);
  return rows[0]?.state;
}
