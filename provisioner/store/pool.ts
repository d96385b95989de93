/**
 * The warm pool's statements (migrations 036, 038): entries are tenant rows with `pool_state =
 * 'pooled'`, each pinned to a root cluster when added and provisioned there by the reconciler like
 * any tenant; a signup claims a Ready one in its transaction and exchanges its runtime key.
 */
import type { Queryable } from '../db/tx.ts';
import {
  initialConditions,
  SETTING_COLUMNS,
  settingValues,
  TENANT_CHANNEL,
  type TenantRow,
  type TenantSettings,
} from './tenants.ts';

/** The organization of an unclaimed entry: never a customer's (signup names are checked against it). */
export const POOL_ORGANIZATION_PREFIX = 'warm-pool-';

export interface PoolClaim {
  organization: string;
  email: string;
  plan: string;
  runtimeVersion: string;
  /** A region the signup restricts placement to: the entry's cluster must be in it. */
  region: string | null;
  /** Settings given with the signup; the others get their default. */
  settings?: Partial<TenantSettings>;
}

/**
 * Claims a Ready, settled entry of the plan and version for the caller's transaction: the row
 * becomes the customer's tenant, named now. The entry is taken on the cluster placement would
 * choose for a new tenant (reconciler/placement.ts: live tenants / capacity, then fewer tenants,
 * then name), in the asked region's clusters when one is asked, never on a cordoned cluster or one
 * that no longer allows the plan (the pool recycles those); the oldest entry of that cluster.
 * Concurrent claims skip each other's rows (FOR UPDATE SKIP LOCKED), so one entry never goes to two
 * signups. Undefined when the pool has none to give.
 */
export async function claimPoolEntry(
  db: Queryable,
  c: PoolClaim,
): Promise<{ id: string; clusterId: string | null; poolCredentialId: string | null } | undefined> {
  // `load`: the live tenants of each cluster holding an entry of the plan and version (placement's
  // load), counted once per cluster rather than once per candidate entry.
  const { rows } = await db.query<{ id: string; cluster_id: string | null; pool_credential_id: string | null }>(
    `WITH load AS (
       SELECT l.cluster_id, count(*)::float8 AS n FROM tenants l
        WHERE l.phase <> 'Deleted' AND l.cluster_id IN (
                SELECT e.cluster_id FROM tenants e
                 WHERE e.pool_state = 'pooled' AND NOT e.deleted AND e.plan = $3 AND e.runtime_version = $4)
        GROUP BY l.cluster_id)
     UPDATE tenants t SET organization = $1, email = $2, region = $5, pool_state = NULL, claimed_at = now(),
            created_at = now(), updated_at = now(), last_activity_at = now(),
            ${SETTING_COLUMNS.map((c, i) => `${c} = $${6 + i}`).join(', ')}
      WHERE t.id = (
        SELECT p.id FROM tenants p
          LEFT JOIN root_clusters c ON c.id = p.cluster_id
          LEFT JOIN load ON load.cluster_id = p.cluster_id
         WHERE p.pool_state = 'pooled' AND NOT p.deleted AND p.plan = $3 AND p.runtime_version = $4
           AND p.phase = 'Ready' AND p.generation = p.observed_generation AND NOT p.stalled
           AND (p.lease_expires_at IS NULL OR p.lease_expires_at < now())
           AND ($5::text IS NULL OR c.region = $5)
           AND (c.id IS NULL OR (NOT c.cordoned AND (cardinality(c.plans) = 0 OR p.plan = ANY(c.plans))))
         ORDER BY load.n / greatest(c.capacity, 1) NULLS LAST, load.n NULLS LAST, c.name NULLS LAST, p.created_at
         LIMIT 1
         FOR UPDATE OF p SKIP LOCKED)
      RETURNING t.id, t.cluster_id, t.pool_credential_id`,
    [c.organization, c.email, c.plan, c.runtimeVersion, c.region, ...settingValues(c.settings)],
  );
  const r = rows[0];
  return r ? { id: r.id, clusterId: r.cluster_id, poolCredentialId: r.pool_credential_id } : undefined;
}

/**
 * A new entry of the plan and version pinned to root cluster `clusterId` (the reconciler keeps a
 * tenant's cluster: lease.ts places only tenants without one), with its create operation queued
 * (the reconciler provisions it). Without a cluster the reconciler places it by the usual rules.
 */
export async function insertPoolEntry(
  db: Queryable,
  plan: string,
  runtimeVersion: string,
  name: string,
  clusterId: string | null = null,
): Promise<{ id: string; operationId: string }> {
  const { rows } = await db.query<{ id: string; op: string }>(
    `WITH t AS (
       INSERT INTO tenants (organization, email, plan, runtime_version, conditions, pool_state, cluster_id)
       VALUES ($1, 'warm-pool@invalid', $2, $3, $4, 'pooled', $6) RETURNING id),
     op AS (INSERT INTO operations (tenant_id, kind, generation, to_version) SELECT id, 'create', 1, $3 FROM t RETURNING id),
     upd AS (UPDATE tenants SET last_operation_id = (SELECT id FROM op) WHERE id = (SELECT id FROM t))
     SELECT t.id, (SELECT id FROM op) AS op, pg_notify($5, t.id::text) FROM t`,
    [
      `${POOL_ORGANIZATION_PREFIX}${name}`,
      plan,
      runtimeVersion,
      JSON.stringify(initialConditions()),
      TENANT_CHANNEL,
      clusterId,
    ],
  );
  return { id: rows[0]!.id, operationId: rows[0]!.op };
}

export interface PoolEntryCounts {
  plan: string;
  runtime_version: string;
  /** The root cluster the entries are pinned to (null: an entry not placed yet, made before entries were pinned). */
  cluster_id: string | null;
  /** Its name (null with cluster_id). */
  cluster: string | null;
  ready: number;
  provisioning: number;
  failing: number;
  /** Age of the oldest Ready entry, seconds (null: none Ready). */
  oldest_ready_seconds: number | null;
}

/**
 * Unclaimed entries (not being deleted) per plan, version and root cluster: Ready ones, those still
 * provisioning, those failing.
 */
export async function poolCounts(db: Queryable): Promise<PoolEntryCounts[]> {
  const { rows } = await db.query<PoolEntryCounts>(
    `SELECT t.plan, t.runtime_version, t.cluster_id, c.name AS cluster,
            count(*) FILTER (WHERE t.phase = 'Ready' AND t.generation = t.observed_generation)::int AS ready,
            count(*) FILTER (WHERE NOT t.stalled AND t.phase <> 'Failed'
                               AND (t.phase <> 'Ready' OR t.generation <> t.observed_generation))::int AS provisioning,
            count(*) FILTER (WHERE t.phase = 'Failed' OR t.stalled)::int AS failing,
            extract(epoch FROM now() - min(t.created_at) FILTER (WHERE t.phase = 'Ready'))::int AS oldest_ready_seconds
       FROM tenants t LEFT JOIN root_clusters c ON c.id = t.cluster_id
      WHERE t.pool_state = 'pooled' AND NOT t.deleted
      GROUP BY t.plan, t.runtime_version, t.cluster_id, c.name ORDER BY t.plan, t.runtime_version, c.name`,
  );
  return rows;
}

/** An unclaimed entry to recycle, with its cluster as the pool sees it (the reason is worked out from these). */
export type StalePoolEntry = TenantRow & {
  stalled: boolean;
  /** The entry's cluster by name (null: not pinned to one). */
  cluster_name: string | null;
  cluster_cordoned: boolean | null;
  /** Whether its cluster allows the entry's plan. */
  cluster_allows: boolean | null;
};

/**
 * Unclaimed entries to recycle: of another version than the plan's current one, of a plan no longer
 * pooled, stalled (their create failed past its retries: they would hold a place in the pool
 * forever), or on a root cluster that takes no new tenant of the plan: cordoned, no longer allowing
 * the plan, gone — or on none (entries made before they were pinned, never placed).
 */
export async function stalePoolEntries(
  db: Queryable,
  keep: ReadonlyArray<{ plan: string; runtimeVersion: string }>,
  limit: number,
): Promise<StalePoolEntry[]> {
  const { rows } = await db.query<StalePoolEntry>(
    `SELECT t.*, c.name AS cluster_name, c.cordoned AS cluster_cordoned,
            (cardinality(c.plans) = 0 OR t.plan = ANY(c.plans)) AS cluster_allows
       FROM tenants t LEFT JOIN root_clusters c ON c.id = t.cluster_id
      WHERE t.pool_state = 'pooled' AND NOT t.deleted
        AND (t.stalled OR t.phase = 'Failed'
             OR NOT EXISTS (SELECT 1 FROM unnest($1::text[], $2::text[]) AS k(plan, version)
                             WHERE k.plan = t.plan AND k.version = t.runtime_version)
             OR c.id IS NULL OR c.cordoned OR NOT (cardinality(c.plans) = 0 OR t.plan = ANY(c.plans)))
      ORDER BY t.created_at LIMIT $3 FOR UPDATE OF t SKIP LOCKED`,
    [keep.map((k) => k.plan), keep.map((k) => k.runtimeVersion), limit],
  );
  return rows;
}

/** The name of a claimed tenant's runtime key in api_keys (the one the claim mints). */
export const CLAIM_RUNTIME_KEY_NAME = 'runtime agents (exchanged at the warm pool claim)';

/**
 * The rest of a signup served by a claimed entry, in the signup's transaction: the tenant's API key
 * (hash only); the tenant's runtime key, exchanged for the entry's pool credential (its hash in
 * api_keys, its clear value encrypted on the row, where the engine reads the runtime token — the
 * pool credential stays valid until an engine run installed the new key: store/leases.ts
 * writeSuccess); the audit rows (the signup, and `warm_pool.claim` naming both keys by id and
 * prefix, never their values); and a `bind` operation (a new generation) that applies the tenant's
 * names and its runtime key to what runs; the phase stays Ready meanwhile.
 */
export async function bindClaimedEntry(
  db: Queryable,
  b: {
    tenantId: string;
    operationId: string;
    key: { id: string; hash: Buffer; prefix: string };
    /** The tenant's runtime key: `enc` is its clear value sealed for the row (reconciler/runtime-token.ts). */
    runtimeKey: { id: string; hash: Buffer; prefix: string; enc: Buffer };
    /** The entry's pool credential (revoked once the new key is installed), null for an entry made before it had one. */
    poolCredentialId: string | null;
    /** The root cluster the entry runs on. */
    clusterId: string | null;
    audit: { after: unknown; requestId: string };
  },
): Promise<void> {
  await db.query(
    `WITH op AS (
       INSERT INTO operations (id, tenant_id, kind, generation, from_version, to_version)
       SELECT $2, id, 'bind', generation + 1, actual_runtime_version, runtime_version FROM tenants WHERE id = $1
       RETURNING generation),
     upd AS (
       UPDATE tenants SET generation = (SELECT generation FROM op), last_operation_id = $2, next_attempt_at = NULL,
              runtime_token_enc = $12,
              conditions = (SELECT coalesce(jsonb_agg(c), '[]'::jsonb) FROM jsonb_array_elements(conditions) c
                             WHERE c->>'type' <> 'Reconciling')
                           || jsonb_build_array(jsonb_build_object('type', 'Reconciling', 'status', 'True',
                                'reason', 'Binding', 'message', 'claimed from the warm pool: applying the tenant''s names and runtime key',
                                'lastTransitionTime', now()))
        WHERE id = $1),
     k AS (INSERT INTO api_keys (id, key_hash, prefix, role, tenant_id, name, created_by)
           VALUES ($3, $4, $5, 'tenant', $1, 'signup', 'public'), ($9, $10, $11, 'runtime', $1, $13, 'public')),
     a AS (INSERT INTO audit_log (actor, actor_role, action, target_type, target_id, after, request_id)
           VALUES ('public', 'public', 'tenant.signup', 'tenant', $1::text, $6, $7),
                  ('public', 'public', 'warm_pool.claim', 'tenant', $1::text,
                   jsonb_build_object('operationId', $2::uuid::text, 'clusterId', $15::uuid::text,
                                      'runtimeKeyId', $9::uuid::text, 'runtimeKeyPrefix', $11::text,
                                      'poolCredentialId', $14::uuid::text), $7))
     SELECT pg_notify($8, $1::text)`,
    [
      b.tenantId,
      b.operationId,
      b.key.id,
      b.key.hash,
      b.key.prefix,
      JSON.stringify(b.audit.after),
      b.audit.requestId,
      TENANT_CHANNEL,
      b.runtimeKey.id,
      b.runtimeKey.hash,
      b.runtimeKey.prefix,
      b.runtimeKey.enc,
      CLAIM_RUNTIME_KEY_NAME,
      b.poolCredentialId,
      b.clusterId,
    ],
  );
}

/** Signups of the last `hours`: served from the pool (claimed) and cold, per plan. */
export async function signupSources(
  db: Queryable,
  hours: number,
): Promise<Array<{ plan: string; warm: number; cold: number }>> {
  const { rows } = await db.query<{ plan: string; warm: number; cold: number }>(
    `SELECT plan, count(*) FILTER (WHERE claimed_at IS NOT NULL)::int AS warm,
            count(*) FILTER (WHERE claimed_at IS NULL)::int AS cold
       FROM tenants WHERE pool_state IS NULL AND created_at > now() - make_interval(hours => $1)
      GROUP BY plan ORDER BY plan`,
    [hours],
  );
  return rows;
}

/** The pool's round lock for the caller's transaction: one replica's round at a time (false: another holds it). */
export async function tryPoolLock(db: Queryable): Promise<boolean> {
  const { rows } = await db.query<{ locked: boolean }>(
    "SELECT pg_try_advisory_xact_lock(hashtext('warm-pool')) AS locked",
  );
  return rows[0]!.locked;
}
