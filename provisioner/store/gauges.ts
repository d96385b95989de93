/**
 * The counts the metrics endpoint reports (provisioner/metrics/), read when a scrape collects them:
 * each a statement over committed state, so every replica reports the same figures.
 */
import type { Queryable } from '../db/tx.ts';

export async function tenantsByPhase(db: Queryable): Promise<Array<{ phase: string; n: number }>> {
  const { rows } = await db.query<{ phase: string; n: number }>(
    'SELECT phase, count(*)::int AS n FROM tenants WHERE pool_state IS NULL GROUP BY phase',
  );
  return rows;
}

/**
 * Objects owned by event reporters heard from within `staleAfterSeconds`: the total (tenant '')
 * and the `top` tenants with the most.
 */
export async function liveReportedObjects(
  db: Queryable,
  staleAfterSeconds: number,
  top: number,
): Promise<Array<{ tenant: string; n: number }>> {
  const { rows } = await db.query<{ tenant: string; n: string }>(
    `WITH live AS (
       SELECT tenant_id::text AS tenant, sum(owned_objects)::bigint AS n FROM runtime_reporters
        WHERE last_seen > now() - make_interval(secs => $1) GROUP BY tenant_id)
     (SELECT '' AS tenant, coalesce(sum(n), 0)::bigint AS n FROM live)
     UNION ALL (SELECT tenant, n FROM live ORDER BY n DESC LIMIT $2)`,
    [staleAfterSeconds, top],
  );
  return rows.map((r) => ({ tenant: r.tenant, n: Number(r.n) }));
}

/** Tenants (not deleted) whose event reporters sent nothing within `staleAfterSeconds`. */
export async function staleReportingTenants(db: Queryable, staleAfterSeconds: number): Promise<number> {
  const { rows } = await db.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM (
       SELECT r.tenant_id FROM runtime_reporters r JOIN tenants t ON t.id = r.tenant_id AND t.phase <> 'Deleted'
         JOIN runtimes h ON h.id = r.runtime_id AND h.mode = 'hosted'
        GROUP BY r.tenant_id HAVING max(r.last_seen) <= now() - make_interval(secs => $1)) s`,
    [staleAfterSeconds],
  );
  return rows[0]?.n ?? 0;
}

/** Operations queued and running. */
export async function openOperationCounts(db: Queryable): Promise<{ queued: number; running: number }> {
  const { rows } = await db.query<{ queued: number; running: number }>(
    `SELECT count(*) FILTER (WHERE state = 'queued')::int AS queued, count(*) FILTER (WHERE state = 'running')::int AS running
       FROM operations WHERE state IN ('queued', 'running')`,
  );
  return rows[0]!;
}

/** Tenants (not deleted) with a retry time or stalled, by why: waiting for capacity, for the engine, backing off, stalled. */
export async function waitingTenantCounts(
  db: Queryable,
): Promise<{ capacity: number; engine: number; backoff: number; stalled: number }> {
  const { rows } = await db.query<{ capacity: number; engine: number; backoff: number; stalled: number }>(
    `SELECT count(*) FILTER (WHERE NOT stalled AND reason = 'NoCapacity')::int AS capacity,
            count(*) FILTER (WHERE NOT stalled AND reason = 'EngineUnavailable')::int AS engine,
            count(*) FILTER (WHERE NOT stalled AND reason IS DISTINCT FROM 'NoCapacity'
                               AND reason IS DISTINCT FROM 'EngineUnavailable')::int AS backoff,
            count(*) FILTER (WHERE stalled)::int AS stalled
       FROM (SELECT t.stalled, (SELECT c->>'reason' FROM jsonb_array_elements(t.conditions) c
                                  WHERE c->>'type' = 'Ready') AS reason
               FROM tenants t WHERE t.phase <> 'Deleted' AND (t.next_attempt_at IS NOT NULL OR t.stalled)) w`,
  );
  return rows[0]!;
}

export async function fleetUpgradesByState(db: Queryable): Promise<Array<{ state: string; n: number }>> {
  const { rows } = await db.query<{ state: string; n: number }>(
    'SELECT state, count(*)::int AS n FROM fleet_upgrades GROUP BY state',
  );
  return rows;
}

/** Tenants of the fleet upgrades not finished, by their state in the fleet upgrade. */
export async function activeFleetTenantsByState(db: Queryable): Promise<Array<{ state: string; n: number }>> {
  const { rows } = await db.query<{ state: string; n: number }>(
    `SELECT ft.state, count(*)::int AS n FROM fleet_upgrade_tenants ft JOIN fleet_upgrades f ON f.id = ft.fleet_upgrade_id
      WHERE f.state IN ('running', 'paused', 'halted', 'aborting') GROUP BY ft.state`,
  );
  return rows;
}
