/**
 * Test-data readers for the audit log: what tests assert was audited. The store's listAudit
 * answers the API's page (newest first, by target); tests also ask by action, by an action's
 * prefix and by several targets, oldest first, so this module is the one place of the tests that
 * reads audit_log with SQL.
 */
import type { Queryable } from '../../provisioner/db/tx.ts';
import { auditRowOf, type AuditRecord, type AuditRow } from '../../provisioner/store/audit.ts';

/** An audit row as tests read it: `before` and `after` are the JSON objects written (null: none). */
export interface AuditRead extends Omit<AuditRow, 'before' | 'after'> {
  before: Record<string, unknown> | null;
  after: Record<string, unknown> | null;
}

export interface AuditFilter {
  /** The action (`tenant.suspend`). */
  action?: string;
  /** The start of the action (`warm_pool.` for every warm pool action). */
  actionPrefix?: string;
  /** The target's type (`cluster`, `runtime`, `api_key`, …). */
  targetType?: string;
  /** The target's id, or any of several. */
  targetId?: string | readonly string[];
}

function where(f: AuditFilter): { sql: string; values: unknown[] } {
  const values: unknown[] = [];
  const clauses: string[] = [];
  const add = (clause: string, value: unknown): void => {
    values.push(value);
    clauses.push(clause.replace('?', `$${values.length}`));
  };
  if (f.action !== undefined) add('action = ?', f.action);
  if (f.actionPrefix !== undefined) add(`starts_with(action, ?)`, f.actionPrefix);
  if (f.targetType !== undefined) add('target_type = ?', f.targetType);
  if (typeof f.targetId === 'string') add('target_id = ?', f.targetId);
  else if (f.targetId !== undefined) add('target_id = ANY(?::text[])', f.targetId);
  return { sql: clauses.length ? `WHERE ${clauses.join(' AND ')}` : '', values };
}

/** The audit rows the filter selects, oldest first. */
export async function auditRows(db: Queryable, f: AuditFilter = {}): Promise<AuditRead[]> {
  const w = where(f);
  const { rows } = await db.query<AuditRecord>(`SELECT * FROM audit_log ${w.sql} ORDER BY id`, w.values);
  return rows.map((r) => ({
    ...auditRowOf(r),
    id: Number(r.id),
    before: r.before as AuditRead['before'],
    after: r.after as AuditRead['after'],
  }));
}

/** The actions of the audit rows the filter selects, oldest first. */
export async function auditActions(db: Queryable, f: AuditFilter = {}): Promise<string[]> {
  return (await auditRows(db, f)).map((r) => r.action);
}

/** How many audit rows the filter selects. */
export async function auditCount(db: Queryable, f: AuditFilter = {}): Promise<number> {
  const w = where(f);
  const { rows } = await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM audit_log ${w.sql}`, w.values);
  return rows[0]!.n;
}

/** How many audit rows the filter selects, per action. */
export async function auditCountsByAction(db: Queryable, f: AuditFilter = {}): Promise<Record<string, number>> {
  const w = where(f);
  const { rows } = await db.query<{ action: string; n: number }>(
    `SELECT action, count(*)::int AS n FROM audit_log ${w.sql} GROUP BY action`,
    w.values,
  );
  return Object.fromEntries(rows.map((r) => [r.action, r.n]));
}

/**
 * Drops the audit log, so that every write that audits fails from then on (a database broken on
 * purpose, for the error path of a file's own throwaway database).
 */
export async function dropAuditLog(db: Queryable): Promise<void> {
  await db.query('DROP TABLE audit_log');
}

/**
 * Makes the database refuse every audit row of a runtime action (`runtime.…`, a trigger raising an
 * error), so that the audit write before the action fails; answers the undo.
 */
export async function refuseRuntimeAudits(db: Queryable): Promise<() => Promise<void>> {
  await db.query(`
    CREATE FUNCTION refuse_runtime_audit() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN RAISE EXCEPTION 'audit refused by the test'; END $$;
    CREATE TRIGGER refuse_runtime_audit BEFORE INSERT ON audit_log
      FOR EACH ROW WHEN (NEW.action LIKE 'runtime.%') EXECUTE FUNCTION refuse_runtime_audit();`);
  return async () => {
    await db.query('DROP TRIGGER refuse_runtime_audit ON audit_log; DROP FUNCTION refuse_runtime_audit();');
  };
}
