import type { Queryable } from '../db/tx.ts';

export interface Actor {
  /** API key id, or 'public' for unauthenticated signup, or 'system'. */
  id: string;
  role: string;
}

/** Who asks for a change, through which request: what a service records in the audit row. */
export interface Requester {
  actor: Actor;
  requestId: string;
}

export interface AuditEntry {
  action: string;
  targetType: string;
  targetId: string;
  before?: unknown;
  after?: unknown;
  requestId?: string;
}

export async function writeAudit(db: Queryable, actor: Actor, e: AuditEntry): Promise<void> {
  await db.query(
    `INSERT INTO audit_log (actor, actor_role, action, target_type, target_id, before, after, request_id)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
    [
      actor.id,
      actor.role,
      e.action,
      e.targetType,
      e.targetId,
      e.before === undefined ? null : JSON.stringify(e.before),
      e.after === undefined ? null : JSON.stringify(e.after),
      e.requestId ?? null,
    ],
  );
}

/** Several audit rows of one actor, in one statement, in the order given. */
export async function writeAudits(db: Queryable, actor: Actor, entries: readonly AuditEntry[]): Promise<void> {
  if (entries.length === 0) return;
  const json = (v: unknown) => (v === undefined ? null : JSON.stringify(v));
  await db.query(
    `INSERT INTO audit_log (actor, actor_role, action, target_type, target_id, before, after, request_id)
     SELECT $1, $2, u.action, u.target_type, u.target_id, u.before, u.after, u.request_id
       FROM unnest($3::text[], $4::text[], $5::text[], $6::jsonb[], $7::jsonb[], $8::text[])
            WITH ORDINALITY AS u(action, target_type, target_id, before, after, request_id, n)
      ORDER BY u.n`,
    [
      actor.id,
      actor.role,
      entries.map((e) => e.action),
      entries.map((e) => e.targetType),
      entries.map((e) => e.targetId),
      entries.map((e) => json(e.before)),
      entries.map((e) => json(e.after)),
      entries.map((e) => e.requestId ?? null),
    ],
  );
}

/** What an audit row of a runtime action records in `after` (target: the tenant). */
export interface RuntimeActionRecord {
  kind: string;
  namespace: string;
  name: string;
  /** The runtime's HTTP status; null until it answered (or when the answer never came). */
  status: number | null;
  /** The control plane's error code when the request failed before the runtime answered. */
  error?: string;
  /** The hybrid runtime the action went to, by name (none: the tenant's hosted runtime). */
  runtime?: string;
}

/**
 * The audit row of an action on a tenant's runtime (`runtime.<kind>.<action>`, target the tenant),
 * written before the request is forwarded (an action is never executed unaudited), its status
 * filled in by finishRuntimeActionAudit when the answer is known. Returns the row id.
 */
export async function beginRuntimeActionAudit(
  db: Queryable,
  actor: Actor,
  e: {
    action: string;
    tenantId: string;
    /** A hybrid runtime's name (none: the tenant's hosted runtime). */
    runtime?: string;
    target: { kind: string; namespace: string; name: string };
    requestId: string;
  },
): Promise<number> {
  const after: RuntimeActionRecord = {
    ...e.target,
    ...(e.runtime !== undefined ? { runtime: e.runtime } : {}),
    status: null,
  };
  const { rows } = await db.query<{ id: string }>(
    `INSERT INTO audit_log (actor, actor_role, action, target_type, target_id, after, request_id)
     VALUES ($1, $2, $3, 'tenant', $4, $5, $6) RETURNING id`,
    [actor.id, actor.role, e.action, e.tenantId, JSON.stringify(after), e.requestId],
  );
  return Number(rows[0]!.id);
}

export async function finishRuntimeActionAudit(
  db: Queryable,
  id: number,
  result: { status: number; error?: string },
): Promise<void> {
  await db.query(`UPDATE audit_log SET after = after || $2::jsonb WHERE id = $1`, [
    id,
    JSON.stringify(result.error === undefined ? { status: result.status } : result),
  ]);
}

export interface AuditRow {
  id: number;
  at: string;
  actor: string;
  actorRole: string;
  action: string;
  targetType: string;
  targetId: string;
  before: unknown;
  after: unknown;
  requestId: string | null;
}

/** An audit_log row as Postgres gives it. */
export interface AuditRecord {
  id: number;
  at: Date;
  actor: string;
  actor_role: string;
  action: string;
  target_type: string;
  target_id: string;
  before: unknown;
  after: unknown;
  request_id: string | null;
}

/** The row as the API answers it. */
export function auditRowOf(r: AuditRecord): AuditRow {
  return {
    id: r.id,
    at: r.at.toISOString(),
    actor: r.actor,
    actorRole: r.actor_role,
    action: r.action,
    targetType: r.target_type,
    targetId: r.target_id,
    before: r.before,
    after: r.after,
    requestId: r.request_id,
  };
}

export async function listAudit(
  db: Queryable,
  q: { targetType?: string; targetId?: string; beforeId?: number; limit: number },
): Promise<AuditRow[]> {
  const { rows } = await db.query<AuditRecord>(
    `SELECT * FROM audit_log
      WHERE ($1::text IS NULL OR target_type = $1) AND ($2::text IS NULL OR target_id = $2)
        AND ($3::bigint IS NULL OR id < $3)
      ORDER BY id DESC LIMIT $4`,
    [q.targetType ?? null, q.targetId ?? null, q.beforeId ?? null, q.limit],
  );
  return rows.map(auditRowOf);
}
