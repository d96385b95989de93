/**
 * Test-data readers for the audit log: what tests assert was audited, read through the store's
 * listAudit (the API's page: newest first, by target type and id) and narrowed here by action, by
 * an action's prefix and by several targets, oldest first. The SQL left here is fault injection:
 * the audit log dropped, or a trigger that refuses some of its rows.
 */
import type { Queryable } from '../../provisioner/db/tx.ts';
import { listAudit, type AuditRow } from '../../provisioner/store/audit.ts';

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

/** Every audit row a test's database holds fits one page of this size. */
const ALL = 1_000_000;

/** The audit rows the filter selects, oldest first. */
export async function auditRows(db: Queryable, f: AuditFilter = {}): Promise<AuditRead[]> {
  const page = await listAudit(db, {
    targetType: f.targetType,
    targetId: typeof f.targetId === 'string' ? f.targetId : undefined,
    limit: ALL,
  });
  const ids = typeof f.targetId === 'object' ? new Set(f.targetId) : undefined;
  return page
    .filter(
      (r) =>
        (f.action === undefined || r.action === f.action) &&
        (f.actionPrefix === undefined || r.action.startsWith(f.actionPrefix)) &&
        (ids === undefined || ids.has(r.targetId)),
    )
    .reverse()
    .map((r) => ({
      ...r,
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
  return (await auditRows(db, f)).length;
}

/** How many audit rows the filter selects, per action. */
export async function auditCountsByAction(db: Queryable, f: AuditFilter = {}): Promise<Record<string, number>> {
  const counts: Record<string, number> = {};
  for (const r of await auditRows(db, f)) counts[r.action] = (counts[r.action] ?? 0) + 1;
  return counts;
}

// Fault injection: a database broken on purpose. No production path drops a table or refuses a row.

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
