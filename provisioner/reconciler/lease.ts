/**
 * Leases: which worker may reconcile a tenant. A lease is (lease_owner, lease_expires_at) on the
 * tenant row. Claiming takes due tenants whose lease is free or expired with FOR UPDATE SKIP
 * LOCKED; a heartbeat renews the leases a worker holds; the transaction that records an
 * outcome releases the lease. Every write after the claim is fenced by `lease_owner = $owner`.
 */
import type pg from 'pg';
import { rollback, type Queryable } from '../db/tx.ts';
import type { Condition, TenantRow } from '../store/tenants.ts';
import { logWaits, waitLine, waitingStatus, type WaitBackoff } from './outcome.ts';
import { choosePlacement, type ClusterLoad } from './placement.ts';

/** The tenant columns an attempt works from, read as the lease is taken (the type and the query both come from this list). */
const CLAIMED_COLUMNS = [
  'id',
  'organization',
  'plan',
  'runtime_version',
  'suspended',
  'deleted',
  'generation',
  'phase',
  'observed_generation',
  'actual_runtime_version',
  'previous_runtime_version',
  'cluster_id',
  'conditions',
] as const satisfies ReadonlyArray<keyof TenantRow>;

/** The tenant as claimed: the spec snapshot (generation G) the attempt works from. */
export interface ClaimedTenant extends Pick<TenantRow, (typeof CLAIMED_COLUMNS)[number]> {
  consecutive_failures: number;
  next_attempt_at: Date | null;
  runtime_token_enc: Buffer | null;
  /** Why the root-cluster watch asked for a resync (null: none asked; a periodic resync or another attempt). */
  resync_reason: string | null;
  /** placed: run it on its cluster; none-needed: a delete of a tenant never placed. */
  placement: 'placed' | 'none-needed';
}

export interface ClaimOptions {
  owner: string;
  limit: number;
  leaseTtlMs: number;
  clusterParallelism: number;
  /** 0 turns periodic resync off. */
  resyncMs: number;
  /** Retry delays of a tenant no cluster can take. */
  noCapacityWait: WaitBackoff;
  /** Set while this process's engine is unavailable: due tenants wait (EngineUnavailable) instead of being leased. */
  engineUnavailable?: { message: string; wait: WaitBackoff };
}

/** What a claim did: the tenants it leased, and how many due tenants it found waiting and rescheduled. */
export interface Claim {
  leased: ClaimedTenant[];
  waiting: number;
}

interface DueRow {
  id: string;
  cluster_id: string | null;
  plan: string;
  region: string | null;
  deleted: boolean;
  conditions: Condition[];
}

const DUE_COLUMNS = 't.id, t.cluster_id, t.plan, t.region, t.deleted, t.conditions';

const NOT_LEASED = `NOT t.stalled AND t.phase <> 'Deleted' AND (t.lease_expires_at IS NULL OR t.lease_expires_at < now())`;

/** Tenants whose spec changed, oldest change first (index tenants_spec_due), row-locked, skipping locked rows. */
export async function selectSpecChanged(db: Queryable, limit: number): Promise<DueRow[]> {
  const { rows } = await db.query<DueRow>(
    `SELECT ${DUE_COLUMNS} FROM tenants t
      WHERE t.generation <> t.observed_generation AND t.next_attempt_at IS NULL AND ${NOT_LEASED}
      ORDER BY t.updated_at LIMIT $1 FOR UPDATE OF t SKIP LOCKED`,
    [limit],
  );
  return rows;
}

/** Tenants whose retry time has come, earliest first (index tenants_retry_due). */
export async function selectRetryDue(db: Queryable, limit: number): Promise<DueRow[]> {
  const { rows } = await db.query<DueRow>(
    `SELECT ${DUE_COLUMNS} FROM tenants t
      WHERE t.next_attempt_at <= now() AND ${NOT_LEASED}
      ORDER BY t.next_attempt_at LIMIT $1 FOR UPDATE OF t SKIP LOCKED`,
    [limit],
  );
  return rows;
}

/** Ready/Suspended tenants the root-cluster watch asked to resync, oldest request first (index tenants_resync_requested). */
export async function selectResyncRequested(db: Queryable, limit: number): Promise<DueRow[]> {
  const { rows } = await db.query<DueRow>(
    `SELECT ${DUE_COLUMNS} FROM tenants t
      WHERE t.resync_requested_at IS NOT NULL AND t.phase IN ('Ready', 'Suspended')
        AND t.generation = t.observed_generation AND t.next_attempt_at IS NULL AND ${NOT_LEASED}
      ORDER BY t.resync_requested_at LIMIT $1 FOR UPDATE OF t SKIP LOCKED`,
    [limit],
  );
  return rows;
}

/**
 * Share of the resync period by which a tenant's periodic resync is spread (± RESYNC_JITTER / 2,
 * fixed per tenant by a hash of its id), so tenants reconciled together do not resync together.
 */
export const RESYNC_JITTER = 0.2;

/**
 * Ready/Suspended tenants whose periodic resync is due, least recently reconciled first (index
 * tenants_resync_due). A tenant is due after the period × (1 ± jitter/2); the index range stops
 * at the shortest of those, so a claim does not read the tenants that are not nearly due.
 */
export async function selectResyncDue(db: Queryable, limit: number, resyncMs: number): Promise<DueRow[]> {
  const { rows } = await db.query<DueRow>(
    `SELECT ${DUE_COLUMNS} FROM tenants t
      WHERE t.phase IN ('Ready', 'Suspended') AND t.generation = t.observed_generation AND t.next_attempt_at IS NULL
        AND (t.last_reconciled_at IS NULL OR (
          t.last_reconciled_at < now() - make_interval(secs => $2::float8 / 1000 * (1 - $3::float8 / 2))
          AND t.last_reconciled_at < now() - make_interval(secs => $2::float8 / 1000 *
                (1 - $3::float8 / 2 + $3::float8 * ((hashtext(t.id::text) & 65535) / 65535.0)))))
        AND ${NOT_LEASED}
      ORDER BY t.last_reconciled_at NULLS FIRST LIMIT $1 FOR UPDATE OF t SKIP LOCKED`,
    [limit, resyncMs, RESYNC_JITTER],
  );
  return rows;
}

/**
 * Selects and row-locks due tenants that no live lease holds, most urgent first: spec changes,
 * then retries, then resyncs the root-cluster watch asked for, then periodic resyncs — each from its own partial index, so a claim reads only the rows
 * it returns. Rows other transactions hold are skipped, not waited for.
 */
export async function selectDueTenants(db: Queryable, limit: number, resyncMs: number): Promise<DueRow[]> {
  const due = await selectSpecChanged(db, limit);
  if (due.length < limit) due.push(...(await selectRetryDue(db, limit - due.length)));
  if (due.length < limit) due.push(...(await selectResyncRequested(db, limit - due.length)));
  if (due.length < limit && resyncMs > 0) due.push(...(await selectResyncDue(db, limit - due.length, resyncMs)));
  return due;
}

/**
 * Locks root cluster rows in id order (no deadlocks) so that concurrent claimers count leases and
 * tenants per cluster one after the other: the per-cluster bounds hold across processes.
 */
export async function lockClusters(
  db: Queryable,
  ids: string[],
  all: boolean,
): Promise<Omit<ClusterLoad, 'tenants' | 'leases'>[]> {
  const { rows } = await db.query<Omit<ClusterLoad, 'tenants' | 'leases'>>(
    `SELECT id, name, region, capacity, plans, cordoned FROM root_clusters
      WHERE $2 OR id = ANY($1::uuid[]) ORDER BY id FOR UPDATE`,
    [ids, all],
  );
  return rows;
}

/** Live leases and live tenants per cluster (committed state; call after lockClusters). */
export async function countClusterLoad(
  db: Queryable,
  ids: string[],
): Promise<Map<string, { leases: number; tenants: number }>> {
  // Two counts, each from its own partial index (tenants_live_leases, tenants_live_by_cluster):
  // one statement with FILTERs would read every tenant row of the clusters.
  const [leases, tenants] = await Promise.all([
    db.query<{ cluster_id: string; n: number }>(
      `SELECT cluster_id, count(*)::int AS n FROM tenants
        WHERE cluster_id = ANY($1::uuid[]) AND lease_owner IS NOT NULL AND lease_expires_at > now() GROUP BY cluster_id`,
      [ids],
    ),
    db.query<{ cluster_id: string; n: number }>(
      `SELECT cluster_id, count(*)::int AS n FROM tenants
        WHERE cluster_id = ANY($1::uuid[]) AND phase <> 'Deleted' GROUP BY cluster_id`,
      [ids],
    ),
  ]);
  const out = new Map<string, { leases: number; tenants: number }>();
  for (const id of ids) out.set(id, { leases: 0, tenants: 0 });
  for (const r of leases.rows) out.get(r.cluster_id)!.leases = r.n;
  for (const r of tenants.rows) out.get(r.cluster_id)!.tenants = r.n;
  return out;
}

/** Sets the lease (and a first placement) on the chosen tenants; returns their snapshots. */
export async function takeLeases(
  db: Queryable,
  owner: string,
  leaseTtlMs: number,
  picks: Array<{ id: string; clusterId: string | null }>,
): Promise<Omit<ClaimedTenant, 'placement'>[]> {
  if (picks.length === 0) return [];
  const { rows } = await db.query<Omit<ClaimedTenant, 'placement'>>(
    `UPDATE tenants t SET lease_owner = $1, lease_expires_at = now() + make_interval(secs => $2::float8 / 1000),
            cluster_id = coalesce(t.cluster_id, x.cluster_id)
       FROM unnest($3::uuid[], $4::uuid[]) AS x(id, cluster_id)
      WHERE t.id = x.id
      RETURNING ${CLAIMED_COLUMNS.map((c) => `t.${c}`).join(', ')}, t.consecutive_failures, t.next_attempt_at, t.runtime_token_enc, t.resync_reason`,
    [owner, leaseTtlMs, picks.map((p) => p.id), picks.map((p) => p.clusterId)],
  );
  return rows;
}

/**
 * Reschedules due tenants that cannot run yet (NoCapacity, EngineUnavailable) in the claim's
 * transaction: Ready=False with the reason, the next try after the waiting backoff, no lease. A
 * waiting tenant's retry so costs a share of one claim instead of a lease and a transaction of
 * its own (docs/benchmarks.md "Cost at rest").
 */
async function rescheduleWaiting(
  db: Queryable,
  waiting: Array<{ id: string; conditions: Condition[]; retryInMs: number }>,
): Promise<void> {
  if (waiting.length === 0) return;
  await db.query(
    `UPDATE tenants t SET conditions = x.conditions, next_attempt_at = now() + make_interval(secs => x.ms / 1000),
            lease_owner = NULL, lease_expires_at = NULL, updated_at = now()
       FROM unnest($1::uuid[], $2::jsonb[], $3::float8[]) AS x(id, conditions, ms)
      WHERE t.id = x.id`,
    [waiting.map((w) => w.id), waiting.map((w) => JSON.stringify(w.conditions)), waiting.map((w) => w.retryInMs)],
  );
}

/**
 * Claims up to `limit` due tenants in one transaction: selects them (SKIP LOCKED), respects the
 * per-cluster parallelism, places unplaced tenants, and takes the leases. Tenants whose cluster
 * is busy stay unclaimed (still due). Tenants that cannot run yet (no cluster can take them, or
 * the engine is unavailable) are rescheduled in the same transaction without a lease.
 */
export async function claimDueTenants(pool: pg.Pool, o: ClaimOptions): Promise<Claim> {
  if (o.limit <= 0) return { leased: [], waiting: 0 };
  const client = await pool.connect();
  let broken: Error | undefined;
  try {
    await client.query('BEGIN');
    // Look a little further than the free slots: some candidates may sit on busy clusters.
    const due = await selectDueTenants(client, o.limit * 3, o.resyncMs);
    if (due.length === 0) {
      await client.query('COMMIT');
      return { leased: [], waiting: 0 };
    }
    const waiting: Array<{ id: string; conditions: Condition[]; retryInMs: number }> = [];
    const waitLines: Array<{ tenantId: string; line: string }> = [];
    const wait = (d: DueRow, reason: 'NoCapacity' | 'EngineUnavailable', message: string, w: WaitBackoff) => {
      waiting.push({ id: d.id, ...waitingStatus(d.conditions, reason, message, w) });
      const line = waitLine(d.conditions, reason, message);
      if (line) waitLines.push({ tenantId: d.id, line });
    };
    // Without an engine only deletes of never-placed tenants (nothing to destroy) can run.
    const engine = o.engineUnavailable;
    const runnable = engine
      ? due.filter((d) => {
          if (d.deleted && d.cluster_id === null) return true;
          wait(d, 'EngineUnavailable', engine.message, engine.wait);
          return false;
        })
      : due;
    const needPlacement = runnable.some((d) => d.cluster_id === null && !d.deleted);
    const placedIds = [...new Set(runnable.flatMap((d) => (d.cluster_id ? [d.cluster_id] : [])))];
    const clusters = placedIds.length > 0 || needPlacement ? await lockClusters(client, placedIds, needPlacement) : [];
    const load =
      clusters.length > 0
        ? await countClusterLoad(
            client,
            clusters.map((c) => c.id),
          )
        : new Map<string, { leases: number; tenants: number }>();
    const loads: ClusterLoad[] = clusters.map((c) => ({
      ...c,
      leases: load.get(c.id)?.leases ?? 0,
      tenants: load.get(c.id)?.tenants ?? 0,
    }));
    const byId = new Map(loads.map((c) => [c.id, c]));

    const picks: Array<{ id: string; clusterId: string | null; placement: ClaimedTenant['placement'] }> = [];
    for (const d of runnable) {
      if (d.cluster_id !== null) {
        if (picks.length >= o.limit) continue; // no free worker: stays due
        const c = byId.get(d.cluster_id);
        if (c && c.leases >= o.clusterParallelism) continue; // busy: stays due
        if (c) c.leases += 1;
        picks.push({ id: d.id, clusterId: null, placement: 'placed' });
      } else if (d.deleted) {
        if (picks.length >= o.limit) continue;
        picks.push({ id: d.id, clusterId: null, placement: 'none-needed' }); // never placed: nothing to destroy
      } else {
        const decision = choosePlacement(loads, { plan: d.plan, region: d.region }, o.clusterParallelism);
        if (decision.kind === 'no-capacity') {
          wait(d, 'NoCapacity', decision.message, o.noCapacityWait);
          continue;
        }
        if (decision.kind === 'busy' || picks.length >= o.limit) continue;
        const c = byId.get(decision.clusterId)!;
        c.leases += 1;
        c.tenants += 1;
        picks.push({ id: d.id, clusterId: decision.clusterId, placement: 'placed' });
      }
    }
    await rescheduleWaiting(client, waiting);
    await logWaits(client, waitLines);
    const taken = await takeLeases(
      client,
      o.owner,
      o.leaseTtlMs,
      picks.map((p) => ({ id: p.id, clusterId: p.clusterId })),
    );
    await client.query('COMMIT');
    const pickById = new Map(picks.map((p) => [p.id, p]));
    return { leased: taken.map((t) => ({ ...t, placement: pickById.get(t.id)!.placement })), waiting: waiting.length };
  } catch (err) {
    broken = await rollback(client, err);
    throw err;
  } finally {
    client.release(broken);
  }
}

/** Renews the leases this owner still holds; returns each held tenant's current spec markers. */
export async function renewLeases(
  db: Queryable,
  owner: string,
  ids: string[],
  leaseTtlMs: number,
): Promise<Array<{ id: string; generation: number; deleted: boolean }>> {
  if (ids.length === 0) return [];
  const { rows } = await db.query<{ id: string; generation: number; deleted: boolean }>(
    `UPDATE tenants SET lease_expires_at = now() + make_interval(secs => $3::float8 / 1000)
      WHERE id = ANY($2::uuid[]) AND lease_owner = $1
      RETURNING id, generation, deleted`,
    [owner, ids, leaseTtlMs],
  );
  return rows;
}

/** Reads a held tenant's spec markers (after a NOTIFY) without touching the lease. */
export async function readSpecMarkers(
  db: Queryable,
  id: string,
): Promise<{ generation: number; deleted: boolean; owner: string | null } | undefined> {
  const { rows } = await db.query<{ generation: number; deleted: boolean; lease_owner: string | null }>(
    'SELECT generation, deleted, lease_owner FROM tenants WHERE id = $1',
    [id],
  );
  const r = rows[0];
  return r ? { generation: r.generation, deleted: r.deleted, owner: r.lease_owner } : undefined;
}

/** Hands leases back (graceful shutdown): another worker may claim them at once. */
export async function releaseLeases(db: Queryable, owner: string, ids: string[]): Promise<number> {
  if (ids.length === 0) return 0;
  const { rowCount } = await db.query(
    `UPDATE tenants SET lease_owner = NULL, lease_expires_at = NULL WHERE id = ANY($2::uuid[]) AND lease_owner = $1`,
    [owner, ids],
  );
  return rowCount ?? 0;
}
