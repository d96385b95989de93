/**
 * The audit log on the API side: reads for operators. Every change writes its audit row itself,
 * in its own transaction (store/audit.ts's writeAudit, called by each resource's service).
 */
import type pg from 'pg';
import { listAudit, type AuditRow } from '../store/audit.ts';

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
}
