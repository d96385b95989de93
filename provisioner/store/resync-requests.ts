/**
 * Resync requests from the root-cluster watch, written on the tenant rows (migration 013). A
 * request is taken only for a tenant that is Ready or Suspended, has nothing else pending and is
 * not being reconciled, and only for a change seen at least `echoMs` after the tenant's last run
 * ended: the engine's own writes (a create, an upgrade, a resync's correction) arrive through the
 * watch during or just after the run that made them, and must not queue another run.
 */
import type { Queryable } from '../db/tx.ts';
import { TENANT_CHANNEL } from './tenants.ts';

export interface ResyncRequest {
  tenantId: string;
  /** What changed, for the operation log (`ResourceQuota tenant-…/tenant-quota: deleted`). */
  reason: string;
  /** How long ago the watch saw the (latest) change. */
  ageMs: number;
}

/**
 * Changes seen within this long after a tenant's last run ended are taken as that run's own
 * writes arriving late through the watch (a watch event follows its write by milliseconds; the
 * run's outcome is written after the engine has returned).
 */
export const ENGINE_ECHO_MS = 3_000;

/** Records the requests the rules above accept, wakes the reconcilers; returns the tenants taken. */
export async function requestResyncs(
  db: Queryable,
  requests: readonly ResyncRequest[],
  echoMs = ENGINE_ECHO_MS,
): Promise<string[]> {
  if (requests.length === 0) return [];
  const { rows } = await db.query<{ id: string }>(
    `WITH r AS (SELECT * FROM unnest($1::uuid[], $2::text[], $3::float8[]) AS r(id, reason, age_ms)),
     taken AS (
       UPDATE tenants t SET resync_requested_at = now(), resync_reason = r.reason
         FROM r
        WHERE t.id = r.id AND t.phase IN ('Ready', 'Suspended') AND NOT t.deleted AND NOT t.stalled
          AND t.generation = t.observed_generation AND t.next_attempt_at IS NULL
          AND t.resync_requested_at IS NULL
          AND (t.lease_expires_at IS NULL OR t.lease_expires_at < now())
          AND (t.last_reconciled_at IS NULL
               OR t.last_reconciled_at < now() - make_interval(secs => (r.age_ms + $4::float8) / 1000))
        RETURNING t.id)
     SELECT id FROM taken, LATERAL (SELECT pg_notify('${TENANT_CHANNEL}', id::text)) n`,
    [requests.map((r) => r.tenantId), requests.map((r) => r.reason), requests.map((r) => r.ageMs), echoMs],
  );
  return rows.map((r) => r.id);
}
