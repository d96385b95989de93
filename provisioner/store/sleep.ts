/**
 * Idle sleep's statements on tenant rows (migration 034): the last activity, the idle tenants the
 * `idle-sleep` loop puts to sleep, and the counts the metrics and the console show. The spec
 * change itself (`sleeping`, a generation, a sleep or wake operation) is store/tenants.ts's
 * changeSpec, as for any other change.
 */
import type { Queryable } from '../db/tx.ts';

/**
 * How long after a wake a runtime whose tunnel is not back yet counts as waking (its pods are
 * recreated by the vcluster's syncer once its control plane runs, a minute or so): requests wait
 * for it and the not-connected alarm stays off. Past it, a runtime that did not come back is flagged.
 */
export const WAKE_CONNECT_GRACE_SECONDS = 300;

/** At most one activity write per tenant in this window (the column is read in minutes). */
export const ACTIVITY_WRITE_EVERY_SECONDS = 30;

/** Moves the tenants' last activity to now, where it is older than the write window. */
export async function touchActivity(db: Queryable, tenantIds: readonly string[]): Promise<number> {
  if (tenantIds.length === 0) return 0;
  const { rowCount } = await db.query(
    `UPDATE tenants SET last_activity_at = now()
      WHERE id = ANY($1::uuid[]) AND last_activity_at < now() - make_interval(secs => $2)`,
    [tenantIds, ACTIVITY_WRITE_EVERY_SECONDS],
  );
  return rowCount ?? 0;
}

/**
 * Which tenants of a plan the idle loop may put to sleep after `seconds` without activity: all of
 * them, or (`zones`, for a plan with keep-awake windows) only those whose time zone is listed —
 * null for the tenants without one. An empty list: none of the plan's.
 */
export interface IdlePlan {
  plan: string;
  seconds: number;
  zones?: ReadonlyArray<string | null>;
}

/**
 * Awake Ready tenants idle for longer than their plan's idle time (and, for a plan that lists
 * zones, in one of them), oldest activity first, locked for the caller's transaction (rows another
 * replica's round holds are skipped). Not those with a spec change pending, a retry timer, a live
 * lease, or a place in a fleet upgrade under way. One statement, whatever the zones.
 */
export async function lockIdleTenants(
  db: Queryable,
  plans: readonly IdlePlan[],
  limit: number,
): Promise<Array<{ id: string; idle_seconds: number }>> {
  // One row per plan (any zone), or per plan and zone: a tenant matches one row at most.
  const rows = plans
    .filter((p) => p.seconds > 0)
    .flatMap((p) =>
      p.zones === undefined
        ? [{ plan: p.plan, seconds: p.seconds, any: true, zone: null }]
        : p.zones.map((zone) => ({ plan: p.plan, seconds: p.seconds, any: false, zone })),
    );
  if (rows.length === 0) return [];
  const { rows: idle } = await db.query<{ id: string; idle_seconds: number }>(
    `SELECT t.id, extract(epoch FROM now() - t.last_activity_at)::int AS idle_seconds
       FROM tenants t JOIN unnest($1::text[], $2::int[], $3::boolean[], $4::text[]) AS p(plan, secs, any_zone, zone)
         ON p.plan = t.plan AND (p.any_zone OR p.zone IS NOT DISTINCT FROM t.time_zone)
      WHERE t.phase = 'Ready' AND NOT t.sleeping AND NOT t.suspended AND NOT t.deleted AND NOT t.stalled
        AND t.pool_state IS NULL
        AND t.generation = t.observed_generation AND t.next_attempt_at IS NULL
        AND (t.lease_expires_at IS NULL OR t.lease_expires_at < now())
        AND t.last_activity_at < now() - make_interval(secs => p.secs)
        AND NOT EXISTS (SELECT 1 FROM fleet_upgrade_tenants ft WHERE ft.tenant_id = t.id AND ft.active)
      ORDER BY t.last_activity_at
      LIMIT $5
      FOR UPDATE OF t SKIP LOCKED`,
    [rows.map((r) => r.plan), rows.map((r) => r.seconds), rows.map((r) => r.any), rows.map((r) => r.zone), limit],
  );
  return idle;
}

/**
 * The distinct time zones tenants set (migration 037), in order: read by skipping through the
 * partial index tenants_time_zone from one zone to the next, a few index probes per zone however
 * many tenants share it (the idle loop evaluates the keep-awake windows once per zone, not per
 * tenant). Deleted tenants' zones may be among them: one evaluation too many, no harm.
 */
export async function tenantTimeZones(db: Queryable): Promise<string[]> {
  const { rows } = await db.query<{ zone: string }>(
    `WITH RECURSIVE z(zone) AS (
       (SELECT time_zone FROM tenants WHERE time_zone IS NOT NULL ORDER BY time_zone LIMIT 1)
       UNION ALL
       SELECT (SELECT t.time_zone FROM tenants t WHERE t.time_zone > z.zone ORDER BY t.time_zone LIMIT 1)
         FROM z WHERE z.zone IS NOT NULL)
     SELECT zone FROM z WHERE zone IS NOT NULL`,
  );
  return rows.map((r) => r.zone);
}

export interface SleepCounts {
  plan: string;
  /** Awake: any phase but Sleeping, Waking, Deleted (a sleep under way counts as awake until it is done). */
  awake: number;
  asleep: number;
  waking: number;
}

/** Tenants per plan awake, asleep and waking (not the deleted). */
export async function sleepCounts(db: Queryable): Promise<SleepCounts[]> {
  const { rows } = await db.query<SleepCounts>(
    `SELECT plan,
            count(*) FILTER (WHERE phase NOT IN ('Sleeping', 'Waking'))::int AS awake,
            count(*) FILTER (WHERE phase = 'Sleeping')::int AS asleep,
            count(*) FILTER (WHERE phase = 'Waking')::int AS waking
       FROM tenants WHERE NOT deleted AND pool_state IS NULL GROUP BY plan ORDER BY plan`,
  );
  return rows;
}

/** Wake operations that succeeded in the last `hours`: how many, and their run time's median and maximum (seconds). */
export async function wakeDurations(
  db: Queryable,
  hours: number,
): Promise<{ count: number; p50: number | null; max: number | null }> {
  const { rows } = await db.query<{ count: number; p50: number | null; max: number | null }>(
    `SELECT count(*)::int AS count,
            percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM finished_at - started_at))::float8 AS p50,
            max(extract(epoch FROM finished_at - started_at))::float8 AS max
       FROM operations WHERE kind = 'wake' AND state = 'succeeded' AND finished_at > now() - make_interval(hours => $1)`,
    [hours],
  );
  return rows[0]!;
}
