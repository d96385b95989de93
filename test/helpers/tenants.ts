/**
 * Test-data builders for tenants: states a test starts from without running the reconciler. Where
 * the store has a function for a write, the builder calls it; where it has none (a tenant made to
 * look reconciled), this module is the one place of the tests that writes the SQL.
 */
import type { Queryable } from '../../provisioner/db/tx.ts';

/** The Ready condition a reconciled tenant carries (its time fixed, so that tests can compare it). */
export const READY_CONDITION = {
  type: 'Ready',
  status: 'True',
  reason: 'Reconciled',
  message: '',
  lastTransitionTime: '2026-01-01T00:00:00Z',
};

export interface Reconciled {
  /** The phase reached; `Ready` unless told. */
  phase?: 'Ready' | 'Suspended' | 'Failed' | 'Sleeping';
  /** The root cluster (by name) it is placed on; left as it is unless told. */
  cluster?: string;
  /** The runtime version running; the spec's unless told. */
  actualRuntimeVersion?: string;
  suspended?: boolean;
  stalled?: boolean;
  /** Whether its conditions become READY_CONDITION alone (left as they are unless told). */
  readyCondition?: boolean;
  /** Whether last_reconciled_at becomes now (left as it is unless told). */
  reconciledNow?: boolean;
}

/**
 * Makes tenants look reconciled: the phase reached, its generation observed, the spec's runtime
 * version running, and what `o` adds. Their operations are left as they are.
 */
export async function markReconciled(db: Queryable, ids: string | string[], o: Reconciled = {}): Promise<void> {
  await db.query(
    `UPDATE tenants SET phase = $2, observed_generation = generation,
            actual_runtime_version = COALESCE($3, runtime_version),
            cluster_id = CASE WHEN $4::text IS NULL THEN cluster_id ELSE (SELECT id FROM root_clusters WHERE name = $4) END,
            suspended = COALESCE($5, suspended), stalled = COALESCE($6, stalled),
            conditions = CASE WHEN $7 THEN $8::jsonb ELSE conditions END,
            last_reconciled_at = CASE WHEN $9 THEN now() ELSE last_reconciled_at END
      WHERE id = ANY($1::uuid[])`,
    [
      typeof ids === 'string' ? [ids] : ids,
      o.phase ?? 'Ready',
      o.actualRuntimeVersion ?? null,
      o.cluster ?? null,
      o.suspended ?? null,
      o.stalled ?? null,
      o.readyCondition ?? false,
      JSON.stringify([READY_CONDITION]),
      o.reconciledNow ?? false,
    ],
  );
}

/** Moves the tenants' last activity `seconds` back (instead of waiting out their plan's idle time). */
export async function markIdle(db: Queryable, ids: string | string[], seconds: number): Promise<void> {
  await db.query(`UPDATE tenants SET last_activity_at = now() - make_interval(secs => $2) WHERE id = ANY($1::uuid[])`, [
    typeof ids === 'string' ? [ids] : ids,
    seconds,
  ]);
}
