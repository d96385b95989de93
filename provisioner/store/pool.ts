/**
 * The warm pool's statements (migration 036): entries are tenant rows with `pool_state = 'pooled'`,
 * provisioned by the reconciler like any tenant; a signup claims a Ready one in its transaction.
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
 * Claims the oldest Ready, settled entry of the plan and version (in the region's clusters when one
 * is asked), for the caller's transaction: the row becomes the customer's tenant, named now.
 * Concurrent claims skip each other's rows (FOR UPDATE SKIP LOCKED), so one entry never goes to two
 * signups. Undefined when the pool has none to give.
 */
export async function claimPoolEntry(db: Queryable, c: PoolClaim): Promise<{ id: string } | undefined> {
  const { rows } = await db.query<{ id: string }>(
    `UPDATE tenants t SET organization = $1, email = $2, region = $5, pool_state = NULL, claimed_at = now(),
            created_at = now(), updated_at = now(), last_activity_at = now(),
            ${SETTING_COLUMNS.map((c, i) => `${c} = $${6 + i}`).join(', ')}
      WHERE t.id = (
        SELECT p.id FROM tenants p LEFT JOIN root_clusters c ON c.id = p.cluster_id
         WHERE p.pool_state = 'pooled' AND NOT p.deleted AND p.plan = $3 AND p.runtime_version = $4
           AND p.phase = 'Ready' AND p.generation = p.observed_generation AND NOT p.stalled
           AND (p.lease_expires_at IS NULL OR p.lease_expires_at < now())
           AND ($5::text IS NULL OR c.region = $5)
         ORDER BY p.created_at
         LIMIT 1
         FOR UPDATE OF p SKIP LOCKED)
      RETURNING t.id`,
    [c.organization, c.email, c.plan, c.runtimeVersion, c.region, ...settingValues(c.settings)],
  );
  return rows[0];
}

/** A new entry of the plan and version, with its create operation queued (the reconciler provisions it). */
export async function insertPoolEntry(
  db: Queryable,
  plan: string,
  runtimeVersion: string,
  name: string,
): Promise<{ id: string; operationId: string }> {
  const { rows } = await db.query<{ id: string; op: string }>(
    `WITH t AS (
       INSERT INTO tenants (organization, email, plan, runtime_version, conditions, pool_state)
       VALUES ($1, 'warm-pool@invalid', $2, $3, $4, 'pooled') RETURNING id),
     op AS (INSERT INTO operations (tenant_id, kind, generation, to_version) SELECT id, 'create', 1, $3 FROM t RETURNING id),
     upd AS (UPDATE tenants SET last_operation_id = (SELECT id FROM op) WHERE id = (SELECT id FROM t))
     SELECT t.id, (SELECT id FROM op) AS op, pg_notify($5, t.id::text) FROM t`,
    [`${POOL_ORGANIZATION_PREFIX}${name}`, plan, runtimeVersion, JSON.stringify(initialConditions()), TENANT_CHANNEL],
  );
  return { id: rows[0]!.id, operationId: rows[0]!.op };
}

export interface PoolEntryCounts {
  plan: string;
  runtime_version: string;
  ready: number;
  provisioning: number;
  failing: number;
  /** Age of the oldest Ready entry, seconds (null: none Ready). */
  oldest_ready_seconds: number | null;
}

/** Unclaimed entries (not being deleted) per plan and version: Ready ones, those still provisioning, those failing. */
export async function poolCounts(db: Queryable): Promise<PoolEntryCounts[]> {
  const { rows } = await db.query<PoolEntryCounts>(
    `SELECT plan, runtime_version,
            count(*) FILTER (WHERE phase = 'Ready' AND generation = observed_generation)::int AS ready,
            count(*) FILTER (WHERE NOT stalled AND phase <> 'Failed'
                               AND (phase <> 'Ready' OR generation <> observed_generation))::int AS provisioning,
            count(*) FILTER (WHERE phase = 'Failed' OR stalled)::int AS failing,
            extract(epoch FROM now() - min(created_at) FILTER (WHERE phase = 'Ready'))::int AS oldest_ready_seconds
       FROM tenants WHERE pool_state = 'pooled' AND NOT deleted
      GROUP BY plan, runtime_version ORDER BY plan, runtime_version`,
  );
  return rows;
}

/**
 * Unclaimed entries to recycle: of another version than the plan's current one, of a plan no longer
 * pooled, or stalled (their create failed past its retries: they would hold a place in the pool forever).
 */
export async function stalePoolEntries(
  db: Queryable,
  keep: ReadonlyArray<{ plan: string; runtimeVersion: string }>,
  limit: number,
): Promise<Array<TenantRow & { stalled: boolean }>> {
  const { rows } = await db.query<TenantRow & { stalled: boolean }>(
    `SELECT t.* FROM tenants t
      WHERE t.pool_state = 'pooled' AND NOT t.deleted
        AND (t.stalled OR t.phase = 'Failed'
             OR NOT EXISTS (SELECT 1 FROM unnest($1::text[], $2::text[]) AS k(plan, version)
                             WHERE k.plan = t.plan AND k.version = t.runtime_version))
      ORDER BY t.created_at LIMIT $3 FOR UPDATE SKIP LOCKED`,
    [keep.map((k) => k.plan), keep.map((k) => k.runtimeVersion), limit],
  );
  return rows;
}

/**
 * The rest of a signup served by a claimed entry, in the signup's transaction: the tenant's API key
 * (hash only), the audit row, and a `bind` operation (a new generation) that applies the tenant's
 * names to what runs; the phase stays Ready meanwhile.
 */
export async function bindClaimedEntry(
  db: Queryable,
  b: {
    tenantId: string;
    operationId: string;
    key: { id: string; hash: Buffer; prefix: string };
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
              conditions = (SELECT coalesce(jsonb_agg(c), '[]'::jsonb) FROM jsonb_array_elements(conditions) c
                             WHERE c->>'type' <> 'Reconciling')
                           || jsonb_build_array(jsonb_build_object('type', 'Reconciling', 'status', 'True',
                                'reason', 'Binding', 'message', 'claimed from the warm pool: applying the tenant''s names',
                                'lastTransitionTime', now()))
        WHERE id = $1),
     k AS (INSERT INTO api_keys (id, key_hash, prefix, role, tenant_id, name, created_by)
           VALUES ($3, $4, $5, 'tenant', $1, 'signup', 'public')),
     a AS (INSERT INTO audit_log (actor, actor_role, action, target_type, target_id, after, request_id)
           VALUES ('public', 'public', 'tenant.signup', 'tenant', $1::text, $6, $7))
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
