import type { Queryable } from '../db/tx.ts';
import type { OperationKind } from './tenants.ts';

export const OPERATION_STATES = ['queued', 'running', 'succeeded', 'failed', 'cancelled', 'superseded'] as const;
export type OperationState = (typeof OPERATION_STATES)[number];

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
