/**
 * The audit log on the API side: reads for operators, and the rows of the actions proxied to a
 * runtime (written before the runtime is asked, completed with its answer). Every change writes its
 * audit row itself, in its own transaction (store/audit.ts's writeAudit, called by each resource's
 * service).
 */
import type pg from 'pg';
import {
  beginRuntimeActionAudit,
  finishRuntimeActionAudit,
  listAudit,
  type Actor,
  type AuditRow,
} from '../store/audit.ts';

/** A runtime action about to be proxied (runtime/protocol/actions.ts), as its audit row records it. */
export interface RuntimeActionEntry {
  action: string;
  tenantId: string;
  /** A hybrid runtime's name (none: the tenant's hosted runtime). */
  runtime?: string;
  target: { kind: string; namespace: string; name: string };
  requestId: string;
}

export interface AuditQuery {
  targetType?: string;
  targetId?: string;
  /** Entries with an id below this one (the page after the last one read). */
  beforeId?: number;
  limit: number;
}

export class AuditService {
  readonly #pool: pg.Pool;

  constructor(deps: { pool: pg.Pool }) {
    this.#pool = deps.pool;
  }

  /** Entries newest first, optionally of one target. */
  list(q: AuditQuery): Promise<AuditRow[]> {
    return listAudit(this.#pool, q);
  }

  /**
   * Writes the audit row of a runtime action before it is proxied; the function it answers
   * completes the row with the runtime's answer (its status, or the error that kept it from one).
   */
  async beginRuntimeAction(
    actor: Actor,
    entry: RuntimeActionEntry,
  ): Promise<(outcome: { status: number; error?: string }) => Promise<void>> {
    const id = await beginRuntimeActionAudit(this.#pool, actor, entry);
    return (outcome) => finishRuntimeActionAudit(this.#pool, id, outcome);
  }
}
