/**
 * The reconciler's statements on tenant rows: which due tenants a claim takes (each kind from its
 * own partial index), the per-cluster counts it places them by, the leases (take, renew, hand
 * back), and the status an attempt writes at its start and end, each fenced by the lease
 * (`lease_owner = $owner`): when another worker took the tenant over, nothing is written.
 * reconciler/lease.ts, attempt.ts and outcome.ts compose them.
 */
import type { Queryable } from '../db/tx.ts';
import { KEY_REVOKED_CHANNEL } from './keys.ts';
import { OPERATION_LOG_CHANNEL } from './operations.ts';
import { TENANT_CHANNEL, type TenantRow } from './tenants.ts';
import type { Condition, Phase } from './states.ts';

/** The tenant columns an attempt works from, read as the lease is taken (the type and the query both come from this list). */
const CLAIMED_COLUMNS = [
  'id',
  'organization',
  'plan',
  'runtime_version',
  'suspended',
  'sleeping',
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

/** A root cluster as a claim places tenants on it (reconciler/placement.ts adds its counts). */
export interface ClusterRow {
  id: string;
  name: string;
  region: string;
  capacity: number;
  plans: string[];
  cordoned: boolean;
}

export interface DueRow {
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
export async function lockClusters(db: Queryable, ids: string[], all: boolean): Promise<ClusterRow[]> {
  const { rows } = await db.query<ClusterRow>(
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
export async function rescheduleWaiting(
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

/** Locks the tenant row when this owner still holds its lease; undefined when the lease is lost. */
export async function lockHeldTenant(
  db: Queryable,
  id: string,
  owner: string,
): Promise<
  | {
      generation: number;
      deleted: boolean;
      conditions: ClaimedTenant['conditions'];
      consecutive_failures: number;
      actual_runtime_version: string | null;
    }
  | undefined
> {
  const { rows } = await db.query<{
    generation: number;
    deleted: boolean;
    conditions: ClaimedTenant['conditions'];
    consecutive_failures: number;
    actual_runtime_version: string | null;
  }>(
    `SELECT generation, deleted, conditions, consecutive_failures, actual_runtime_version FROM tenants
      WHERE id = $1 AND lease_owner = $2 FOR UPDATE`,
    [id, owner],
  );
  return rows[0];
}

/** A runtime key to create with the attempt (its clear value goes to the engine). */
export interface NewRuntimeKey {
  id: string;
  hash: Buffer;
  prefix: string;
  enc: Buffer;
}

/** The name in api_keys of the runtime key a warm pool entry's runtime authenticates with while unclaimed. */
export const POOL_CREDENTIAL_NAME = 'warm pool credential (made by the reconciler; revoked once the entry is bound)';

/**
 * Marks the chosen operation running (attempt + 1), supersedes older open ones, shows the running
 * phase and Reconciling=True on the tenant and, on a first attempt, stores the runtime key (an
 * unclaimed warm pool entry's is its pool credential, recorded as such: pool_credential_id): one
 * statement, fenced by the lease (nothing changes when this owner lost it). Returns the attempt.
 */
export async function markAttemptRunning(
  db: Queryable,
  a: {
    tenantId: string;
    owner: string;
    chosen: string;
    older: string[];
    phase: Phase;
    conditions: Condition[];
    runtimeKey: NewRuntimeKey | undefined;
    /** A resync (refresh + update) starts: it answers the root-cluster watch's request, if any. */
    resync: boolean;
  },
): Promise<number | undefined> {
  const { rows } = await db.query<{ attempt: number }>(
    `WITH held AS (
       UPDATE tenants SET phase = $4, conditions = $5, last_operation_id = $3, updated_at = now(),
              runtime_token_enc = coalesce(runtime_token_enc, $8),
              pool_credential_id = CASE WHEN pool_state = 'pooled' AND runtime_token_enc IS NULL AND $8::bytea IS NOT NULL
                                        THEN $11::uuid ELSE pool_credential_id END,
              resync_requested_at = CASE WHEN $10 THEN NULL ELSE resync_requested_at END,
              resync_reason = CASE WHEN $10 THEN NULL ELSE resync_reason END
        WHERE id = $1 AND lease_owner = $2 RETURNING id, pool_state),
     key AS (
       INSERT INTO api_keys (id, key_hash, prefix, role, tenant_id, name, created_by)
       SELECT $11, $6, $7, 'runtime', id,
              CASE WHEN pool_state = 'pooled' THEN $12 ELSE 'runtime agents (made by the reconciler)' END, 'system'
         FROM held WHERE $6::bytea IS NOT NULL),
     sup AS (
       UPDATE operations SET state = 'superseded', finished_at = now(),
              error = jsonb_build_object('code', 'Superseded', 'message', 'coalesced into operation ' || $3::text)
        WHERE id = ANY($9::uuid[]) AND EXISTS (SELECT 1 FROM held))
     UPDATE operations SET state = 'running', attempt = attempt + 1, owner = $2, started_at = coalesce(started_at, now()),
            error = NULL, finished_at = NULL
      WHERE id = $3 AND EXISTS (SELECT 1 FROM held)
      RETURNING attempt`,
    [
      a.tenantId,
      a.owner,
      a.chosen,
      a.phase,
      JSON.stringify(a.conditions),
      a.runtimeKey?.hash ?? null,
      a.runtimeKey?.prefix ?? null,
      a.runtimeKey?.enc ?? null,
      a.older,
      a.resync,
      a.runtimeKey?.id ?? null,
      POOL_CREDENTIAL_NAME,
    ],
  );
  return rows[0]?.attempt;
}

/** The status a successful attempt writes (reconciler/outcome.ts works it out). */
export interface SuccessStatus {
  phase: Phase;
  version: string | null;
  conditions: Condition[];
  endpoints: Record<string, string>;
}

/**
 * Writes a success in one statement (one transaction): tenant status, lease release, the
 * operation, operations queued for this generation or older (a retry requested meanwhile: it is
 * satisfied), key revocation on delete, and the log NOTIFY. Fenced by the lease and by the
 * generation: returns false when either moved (the caller then takes the locking path).
 *
 * A claimed warm pool entry's pool credential (pool_credential_id) is revoked here, by the first
 * success of a run that installed the tenant's current runtime key (`installedKey`, the sealed
 * value the run read: equal to the row's, so a run of the entry's credential from before the claim
 * revokes nothing), with its audit row (`warm_pool.credential_revoked`) and the revocation NOTIFY:
 * until then both keys authenticate, so the runtime stays reachable while the new key reaches it.
 */
export async function writeSuccess(
  db: Queryable,
  owner: string,
  t: ClaimedTenant,
  operationId: string,
  expectedGeneration: number,
  status: SuccessStatus,
  installedKey: Buffer | null = null,
): Promise<boolean> {
  const { rowCount } = await db.query(
    `WITH cred AS (
       SELECT pool_credential_id AS id FROM tenants
        WHERE id = $1 AND NOT $8 AND pool_state IS NULL AND pool_credential_id IS NOT NULL
          AND $11::bytea IS NOT NULL AND runtime_token_enc = $11::bytea),
     ten AS (
       UPDATE tenants SET observed_generation = $3, phase = $4,
              pool_credential_id = CASE WHEN EXISTS (SELECT 1 FROM cred) THEN NULL ELSE pool_credential_id END,
              previous_runtime_version = CASE WHEN actual_runtime_version IS NOT NULL AND actual_runtime_version IS DISTINCT FROM $5
                                              THEN actual_runtime_version ELSE previous_runtime_version END,
              actual_runtime_version = $5, endpoints = $6, conditions = $7,
              consecutive_failures = 0, stalled = false, next_attempt_at = NULL, last_reconciled_at = now(),
              runtime_token_enc = CASE WHEN $8 THEN NULL ELSE runtime_token_enc END,
              lease_owner = NULL, lease_expires_at = NULL, updated_at = now()
        WHERE id = $1 AND lease_owner = $2 AND generation = $10 RETURNING id),
     keys AS (
       UPDATE api_keys SET revoked_at = now() WHERE tenant_id = $1 AND revoked_at IS NULL AND $8 AND EXISTS (SELECT 1 FROM ten) RETURNING id),
     pool AS (
       UPDATE api_keys SET revoked_at = coalesce(revoked_at, now())
        WHERE id = (SELECT id FROM cred) AND EXISTS (SELECT 1 FROM ten) RETURNING id),
     pool_audit AS (
       INSERT INTO audit_log (actor, actor_role, action, target_type, target_id, after)
       SELECT 'warm-pool', 'system', 'warm_pool.credential_revoked', 'tenant', $1::text,
              jsonb_build_object('keyId', id, 'operationId', $9::uuid::text,
                                 'reason', 'the tenant''s runtime key is installed: the entry''s pool credential is revoked')
         FROM pool),
     sup AS (
       UPDATE operations SET state = 'superseded', finished_at = now(),
              error = jsonb_build_object('code', 'Superseded', 'message', 'satisfied by operation ' || $9::text)
        WHERE tenant_id = $1 AND state = 'queued' AND generation <= $3 AND id <> $9 AND EXISTS (SELECT 1 FROM ten)),
     op AS (
       UPDATE operations SET state = 'succeeded', error = NULL, finished_at = now()
        WHERE id = $9 AND EXISTS (SELECT 1 FROM ten) RETURNING id)
     SELECT pg_notify('${OPERATION_LOG_CHANNEL}', id::text) FROM op
     UNION ALL
     -- The same notice as every other revocation: each replica closes the keys' tunnels and streams at once.
     SELECT pg_notify('${KEY_REVOKED_CHANNEL}', id::text) FROM keys
     UNION ALL
     SELECT pg_notify('${KEY_REVOKED_CHANNEL}', id::text) FROM pool`,
    [
      t.id,
      owner,
      t.generation,
      status.phase,
      status.version,
      JSON.stringify(status.endpoints),
      JSON.stringify(status.conditions),
      t.deleted,
      operationId,
      expectedGeneration,
      installedKey,
    ],
  );
  return (rowCount ?? 0) > 0;
}

/** Wakes the workers for the tenant (at the caller's commit): its spec moved on. */
export async function notifyTenantDue(db: Queryable, tenantId: string): Promise<void> {
  await db.query('SELECT pg_notify($1, $2)', [TENANT_CHANNEL, tenantId]);
}

/** Sets the held tenant's conditions and hands its lease back (no failure counted, no retry time). */
export async function releaseWithConditions(db: Queryable, tenantId: string, conditions: Condition[]): Promise<void> {
  await db.query(
    `UPDATE tenants SET conditions = $2, lease_owner = NULL, lease_expires_at = NULL, updated_at = now() WHERE id = $1`,
    [tenantId, JSON.stringify(conditions)],
  );
}

/** Records a failed attempt on the held tenant: its failure count, stalled or the retry time, conditions; the lease handed back. */
export async function writeFailure(
  db: Queryable,
  tenantId: string,
  f: { failures: number; stalled: boolean; retryInMs: number | null; conditions: Condition[] },
): Promise<void> {
  await db.query(
    `UPDATE tenants SET consecutive_failures = $2, stalled = $3,
            next_attempt_at = CASE WHEN $3 THEN NULL ELSE now() + make_interval(secs => $4::float8 / 1000) END,
            phase = CASE WHEN $3 THEN 'Failed' ELSE phase END,
            conditions = $5, lease_owner = NULL, lease_expires_at = NULL, updated_at = now()
      WHERE id = $1`,
    [tenantId, f.failures, f.stalled, f.retryInMs ?? 0, JSON.stringify(f.conditions)],
  );
}

/** Records why the held tenant waits: its conditions, the next try, the lease handed back. */
export async function writeWaiting(
  db: Queryable,
  tenantId: string,
  conditions: Condition[],
  retryInMs: number,
): Promise<void> {
  await db.query(
    `UPDATE tenants SET conditions = $2, next_attempt_at = now() + make_interval(secs => $3::float8 / 1000),
            lease_owner = NULL, lease_expires_at = NULL, updated_at = now()
      WHERE id = $1`,
    [tenantId, JSON.stringify(conditions), retryInMs],
  );
}
