/**
 * The `runtimes` table (migration 022): a tenant's hosted runtime (one row, its state read from the
 * tenant row) and the hybrid runtimes it registered. Bootstrap tokens are stored as their SHA-256
 * only; the statement that redeems one is the only one that can, once.
 */
import type { Queryable } from '../db/tx.ts';
import { liveTunnel } from './tunnels.ts';
import type { UpgraderPhase, UpgraderReport } from '../../runtime/protocol/upgrade.ts';

export type RuntimeMode = 'hosted' | 'hybrid';
export type HybridAccess = 'tunnel' | 'ingress';
export type HybridArgo = 'new' | 'existing';
export type HybridUpgrades = 'customer' | 'agent';
export type HybridState = 'awaiting-install' | 'installed' | 'removed';
export const HYBRID_STATES: readonly HybridState[] = ['awaiting-install', 'installed', 'removed'];

export interface RuntimeRow {
  id: string;
  tenant_id: string;
  name: string;
  mode: RuntimeMode;
  access: HybridAccess | null;
  ingress_url: string | null;
  argo: HybridArgo | null;
  argo_namespace: string | null;
  /** A hybrid runtime's namespace in the customer's cluster (migration 030); null: `hosted-runtime` (registered before). */
  namespace: string | null;
  upgrades: HybridUpgrades | null;
  version: string | null;
  state: HybridState | null;
  bootstrap_expires_at: Date | null;
  bootstrap_redeemed_at: Date | null;
  runtime_key_id: string | null;
  last_heartbeat_at: Date | null;
  /** Seconds since last_heartbeat_at by the database's clock (null: never). */
  heartbeat_age_seconds: number | null;
  reported_version: string | null;
  /** Whether its event reporter lists and watches Argo CD Applications, as its last heartbeat said (null: never said). */
  argo_cd_listed: boolean | null;
  created_by: string;
  created_at: Date;
  removed_at: Date | null;
  /** The replica holding a hybrid runtime's tunnel within the lease, and since when (null: none). */
  tunnel_replica: string | null;
  tunnel_connected_at: Date | null;
  /** A tunnel row whose replica stopped renewing it (the replica died): when it was last renewed. */
  tunnel_lost_at: Date | null;
  /** A hybrid runtime's version before its last change (migration 026), and when it changed. */
  previous_version: string | null;
  version_changed_at: Date | null;
  /** upgrades=agent: the last upgrade the in-cluster upgrader was asked to apply (migration 027). */
  upgrade_phase: UpgraderPhase | null;
  upgrade_from: string | null;
  upgrade_to: string | null;
  upgrade_message: string | null;
  upgrade_updated_at: Date | null;
  /** Seconds since upgrade_updated_at by the database's clock. */
  upgrade_age_seconds: number | null;
  /**
   * The runtime holds a runtime key that is not revoked: a hybrid runtime its own (from the
   * bootstrap exchange), a hosted runtime the one the reconciler made for its tenant's agents.
   */
  key_live: boolean;
}

const COLUMNS = `r.id, r.tenant_id, r.name, r.mode, r.access, r.ingress_url, r.argo, r.argo_namespace, r.namespace, r.upgrades,
  r.version, r.state, r.bootstrap_expires_at, r.bootstrap_redeemed_at, r.runtime_key_id, r.last_heartbeat_at,
  extract(epoch FROM now() - r.last_heartbeat_at)::float8 AS heartbeat_age_seconds, r.argo_cd_listed,
  r.reported_version, r.created_by, r.created_at, r.removed_at,
  (SELECT ht.replica_id FROM hybrid_runtime_tunnels ht WHERE ht.runtime_id = r.id AND ${liveTunnel('ht')}) AS tunnel_replica,
  (SELECT ht.connected_at FROM hybrid_runtime_tunnels ht WHERE ht.runtime_id = r.id AND ${liveTunnel('ht')}) AS tunnel_connected_at,
  (SELECT ht.seen_at FROM hybrid_runtime_tunnels ht WHERE ht.runtime_id = r.id AND NOT ${liveTunnel('ht')}) AS tunnel_lost_at,
  r.previous_version, r.version_changed_at,
  r.upgrade_phase, r.upgrade_from, r.upgrade_to, r.upgrade_message, r.upgrade_updated_at,
  extract(epoch FROM now() - r.upgrade_updated_at)::float8 AS upgrade_age_seconds,
  CASE WHEN r.mode = 'hosted'
       THEN EXISTS (SELECT 1 FROM api_keys k WHERE k.tenant_id = r.tenant_id AND k.role = 'runtime'
                      AND k.runtime_id IS NULL AND k.revoked_at IS NULL)
       ELSE EXISTS (SELECT 1 FROM api_keys k WHERE k.id = r.runtime_key_id AND k.revoked_at IS NULL) END AS key_live`;

export interface NewHybridRuntime {
  tenantId: string;
  name: string;
  access: HybridAccess;
  ingressUrl: string | undefined;
  argo: HybridArgo;
  argoNamespace: string | undefined;
  /** Its namespace in the customer's cluster (absent: `hosted-runtime`, as registered before migration 030). */
  namespace?: string | undefined;
  upgrades: HybridUpgrades;
  version: string;
  tokenHash: string;
  ttlSeconds: number;
  createdBy: string;
}

export async function insertHybridRuntime(db: Queryable, r: NewHybridRuntime): Promise<RuntimeRow> {
  const { rows } = await db.query<RuntimeRow>(
    `INSERT INTO runtimes AS r (tenant_id, name, mode, access, ingress_url, argo, argo_namespace, upgrades, version, state,
                             bootstrap_token_hash, bootstrap_expires_at, created_by, namespace)
     VALUES ($1, $2, 'hybrid', $3, $4, $5, $6, $7, $8, 'awaiting-install', $9, now() + make_interval(secs => $10), $11, $12)
     RETURNING ${COLUMNS}`,
    [
      r.tenantId,
      r.name,
      r.access,
      r.ingressUrl ?? null,
      r.argo,
      r.argoNamespace ?? null,
      r.upgrades,
      r.version,
      r.tokenHash,
      r.ttlSeconds,
      r.createdBy,
      r.namespace ?? null,
    ],
  );
  return rows[0]!;
}

/** The tenant's runtimes that are not removed: the hosted one first, then by creation. */
export async function listTenantRuntimes(db: Queryable, tenantId: string): Promise<RuntimeRow[]> {
  const { rows } = await db.query<RuntimeRow>(
    `SELECT ${COLUMNS} FROM runtimes r WHERE r.tenant_id = $1 AND r.removed_at IS NULL
      ORDER BY r.mode = 'hybrid', r.created_at, r.id`,
    [tenantId],
  );
  return rows;
}

/** The tenant's runtime of that name that is not removed. */
export async function getRuntimeByName(
  db: Queryable,
  tenantId: string,
  name: string,
  forUpdate = false,
): Promise<RuntimeRow | undefined> {
  const { rows } = await db.query<RuntimeRow>(
    `SELECT ${COLUMNS} FROM runtimes r WHERE r.tenant_id = $1 AND r.name = $2 AND r.removed_at IS NULL
     ${forUpdate ? 'FOR UPDATE' : ''}`,
    [tenantId, name],
  );
  return rows[0];
}

/** A runtime by id, not removed (a hybrid runtime's key carries its id). */
export async function getRuntimeById(
  db: Queryable,
  runtimeId: string,
  forUpdate = false,
): Promise<RuntimeRow | undefined> {
  const { rows } = await db.query<RuntimeRow>(
    `SELECT ${COLUMNS} FROM runtimes r WHERE r.id = $1 AND r.removed_at IS NULL ${forUpdate ? 'FOR UPDATE' : ''}`,
    [runtimeId],
  );
  return rows[0];
}

/** Every tenant's runtimes that are not removed, in creation order after `after`. */
export async function listAllRuntimes(
  db: Queryable,
  q: { after?: { ts: string; id: string }; limit: number; mode?: RuntimeMode | undefined },
): Promise<Array<RuntimeRow & { cursor_ts: string }>> {
  const { rows } = await db.query<RuntimeRow & { cursor_ts: string }>(
    `SELECT ${COLUMNS}, r.created_at::text AS cursor_ts FROM runtimes r
      WHERE r.removed_at IS NULL AND ($1::timestamptz IS NULL OR (r.created_at, r.id) > ($1::timestamptz, $2::uuid))
        AND NOT EXISTS (SELECT 1 FROM tenants p WHERE p.id = r.tenant_id AND p.pool_state IS NOT NULL)
        AND ($4::text IS NULL OR r.mode = $4)
      ORDER BY r.created_at, r.id LIMIT $3`,
    [q.after?.ts ?? null, q.after?.id ?? null, q.limit, q.mode ?? null],
  );
  return rows;
}

/** Hybrid runtimes of the tenant that are not removed: what its hybrid-runtime budget counts. */
export async function countHybridRuntimes(db: Queryable, tenantId: string): Promise<number> {
  const { rows } = await db.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM runtimes WHERE tenant_id = $1 AND mode = 'hybrid' AND removed_at IS NULL`,
    [tenantId],
  );
  return rows[0]?.n ?? 0;
}

/**
 * Claims a bootstrap token for its one redemption: the runtime when the token is known, unexpired,
 * unredeemed, its runtime not removed and its tenant not deleted, now `installed` with `bootstrap_redeemed_at` set;
 * undefined otherwise (nothing changed). The caller records the runtime key in the same transaction.
 */
export async function claimRuntimeBootstrap(db: Queryable, tokenHash: string): Promise<RuntimeRow | undefined> {
  const { rows } = await db.query<RuntimeRow>(
    `UPDATE runtimes r SET bootstrap_redeemed_at = now(), state = 'installed'
      WHERE r.bootstrap_token_hash = $1 AND r.mode = 'hybrid' AND r.state = 'awaiting-install'
        AND r.bootstrap_redeemed_at IS NULL AND r.bootstrap_expires_at > now()
        AND EXISTS (SELECT 1 FROM tenants t WHERE t.id = r.tenant_id AND NOT t.deleted)
      RETURNING ${COLUMNS}`,
    [tokenHash],
  );
  return rows[0];
}

/**
 * The hybrid runtime a bootstrap token was issued for, whatever became of it (its install URL
 * answers why it no longer serves): with `usable`, whether it is still awaiting install with the
 * token unexpired and unredeemed, its tenant not deleted. Reads only: the token is redeemed by
 * claimRuntimeBootstrap alone.
 */
export async function runtimeByBootstrapToken(
  db: Queryable,
  tokenHash: string,
): Promise<(RuntimeRow & { usable: boolean; expired: boolean; tenant_deleted: boolean }) | undefined> {
  const { rows } = await db.query<RuntimeRow & { usable: boolean; expired: boolean; tenant_deleted: boolean }>(
    `SELECT ${COLUMNS},
            r.bootstrap_expires_at <= now() AS expired,
            t.deleted AS tenant_deleted,
            (r.state = 'awaiting-install' AND r.bootstrap_redeemed_at IS NULL AND r.bootstrap_expires_at > now()
             AND NOT t.deleted) AS usable
       FROM runtimes r JOIN tenants t ON t.id = r.tenant_id
      WHERE r.bootstrap_token_hash = $1 AND r.mode = 'hybrid'`,
    [tokenHash],
  );
  return rows[0];
}

export async function setRuntimeKey(db: Queryable, runtimeId: string, keyId: string): Promise<void> {
  await db.query('UPDATE runtimes SET runtime_key_id = $2 WHERE id = $1', [runtimeId, keyId]);
}

/** Marks a hybrid runtime removed; returns the row as it is now. */
export async function markRuntimeRemoved(db: Queryable, runtimeId: string): Promise<RuntimeRow> {
  const { rows } = await db.query<RuntimeRow>(
    `UPDATE runtimes r SET state = 'removed', removed_at = now()
      WHERE r.id = $1 AND r.mode = 'hybrid'
     RETURNING ${COLUMNS}`,
    [runtimeId],
  );
  return rows[0]!;
}

/** Runtimes not removed, by mode and state (a hosted runtime's state is its tenant's phase). */
export async function runtimesByModeAndState(
  db: Queryable,
): Promise<Array<{ mode: string; state: string; n: number }>> {
  const { rows } = await db.query<{ mode: string; state: string; n: number }>(
    `SELECT r.mode, coalesce(r.state, t.phase) AS state, count(*)::int AS n
       FROM runtimes r JOIN tenants t ON t.id = r.tenant_id
      WHERE r.removed_at IS NULL GROUP BY 1, 2`,
  );
  return rows;
}

/**
 * Whether the hybrid runtime is not removed, read under its tenant's ingest lock: a batch that
 * passed authentication just before the runtime's removal finds it removed here and stores nothing.
 */
export async function hybridRuntimeLive(db: Queryable, runtimeId: string): Promise<boolean> {
  const { rows } = await db.query<{ live: boolean }>({
    name: 'runtime-hybrid-live',
    text: `SELECT removed_at IS NULL AS live FROM runtimes WHERE id = $1 AND mode = 'hybrid'`,
    values: [runtimeId],
  });
  return rows[0]?.live === true;
}

/**
 * A hybrid runtime's agents reported (an accepted event batch): its heartbeat is now, and its
 * reported version and Argo CD listing are what they said (null: unchanged). Writes nothing when
 * the row already says so and its heartbeat is younger than `minIntervalSeconds` (another replica
 * wrote it), nor for a removed runtime.
 */
export async function recordRuntimeHeartbeat(
  db: Queryable,
  runtimeId: string,
  hb: { version: string | null; argoCdListed: boolean | null; minIntervalSeconds: number },
): Promise<void> {
  await db.query({
    name: 'runtime-heartbeat',
    text: `UPDATE runtimes SET last_heartbeat_at = now(), reported_version = coalesce($2, reported_version),
                  argo_cd_listed = coalesce($3, argo_cd_listed)
            WHERE id = $1 AND mode = 'hybrid' AND removed_at IS NULL
              AND (last_heartbeat_at IS NULL OR last_heartbeat_at < now() - make_interval(secs => $4)
                   OR reported_version IS DISTINCT FROM coalesce($2, reported_version)
                   OR argo_cd_listed IS DISTINCT FROM coalesce($3, argo_cd_listed))`,
    values: [runtimeId, hb.version, hb.argoCdListed, hb.minIntervalSeconds],
  });
}

/**
 * Moves a hybrid runtime (not removed) to another catalog version: the version it had becomes its
 * previous one. Answers the row after the change, or undefined when it is gone or removed.
 */
/**
 * Records a hybrid runtime's new version (the one before becomes `previous_version`). `byAgent`:
 * its in-cluster upgrader is to apply it (upgrade `pending`, with what a rollback restores);
 * otherwise the customer applies it and any upgrade left to the upgrader is dropped.
 */
export async function setHybridRuntimeVersion(
  db: Queryable,
  runtimeId: string,
  version: string,
  byAgent = false,
): Promise<RuntimeRow | undefined> {
  const { rows } = await db.query<RuntimeRow>(
    `UPDATE runtimes r SET previous_version = r.version, version = $2, version_changed_at = now(),
            upgrade_phase = CASE WHEN $3 THEN 'pending' END,
            upgrade_from = CASE WHEN $3 THEN r.version END,
            upgrade_to = CASE WHEN $3 THEN $2 END,
            upgrade_from_previous = CASE WHEN $3 THEN r.previous_version END,
            upgrade_message = NULL,
            upgrade_updated_at = CASE WHEN $3 THEN now() END
      WHERE r.id = $1 AND r.mode = 'hybrid' AND r.removed_at IS NULL
      RETURNING ${COLUMNS}`,
    [runtimeId, version, byAgent],
  );
  return rows[0];
}

/**
 * Records what the in-cluster upgrader reports about the upgrade to `to`, if that is still the
 * upgrade asked and not ended (else undefined: superseded). `rolled-back` restores the version
 * before (and the one before that) as the runtime's version.
 */
export async function recordUpgraderReport(
  db: Queryable,
  runtimeId: string,
  to: string,
  phase: UpgraderReport,
  message: string | null,
): Promise<RuntimeRow | undefined> {
  const { rows } = await db.query<RuntimeRow>(
    `UPDATE runtimes r SET upgrade_phase = $3, upgrade_message = $4, upgrade_updated_at = now(),
            version = CASE WHEN $3 = 'rolled-back' THEN r.upgrade_from ELSE r.version END,
            previous_version = CASE WHEN $3 = 'rolled-back' THEN r.upgrade_from_previous ELSE r.previous_version END,
            version_changed_at = CASE WHEN $3 = 'rolled-back' THEN now() ELSE r.version_changed_at END
      WHERE r.id = $1 AND r.mode = 'hybrid' AND r.removed_at IS NULL AND r.upgrades = 'agent'
        AND r.upgrade_to = $2 AND r.version = $2 AND r.upgrade_phase IN ('pending', 'applying')
      RETURNING ${COLUMNS}`,
    [runtimeId, to, phase, message],
  );
  return rows[0];
}

/** A hybrid runtime of a fleet upgrade's tenants that its customer has yet to move to the target. */
export interface HybridRuntimeBehind {
  tenant_id: string;
  name: string;
  version: string;
  reported_version: string | null;
  upgrades: HybridUpgrades;
  /** The last upgrade its in-cluster upgrader was asked to apply (upgrades=agent). */
  upgrade_phase: UpgraderPhase | null;
  upgrade_to: string | null;
  upgrade_message: string | null;
  /** Its tenant's state in the fleet upgrade (the hosted runtime's step). */
  tenant_state: string;
}

/**
 * The hybrid runtimes (not removed) of the tenants a fleet upgrade selected whose customer has not
 * been asked to run `target` yet, or whose agents do not report it yet: fleet upgrades move hosted
 * runtimes only, so these need their customer.
 */
export async function hybridRuntimesBehind(
  db: Queryable,
  fleetUpgradeId: string,
  target: string,
): Promise<HybridRuntimeBehind[]> {
  const { rows } = await db.query<HybridRuntimeBehind>(
    `SELECT r.tenant_id, r.name, r.version, r.reported_version, r.upgrades,
            r.upgrade_phase, r.upgrade_to, r.upgrade_message, ft.state AS tenant_state
       FROM runtimes r
       JOIN fleet_upgrade_tenants ft ON ft.tenant_id = r.tenant_id AND ft.fleet_upgrade_id = $1
      WHERE r.mode = 'hybrid' AND r.removed_at IS NULL
        AND (r.version <> $2 OR r.reported_version IS DISTINCT FROM $2)
      ORDER BY r.tenant_id, r.name`,
    [fleetUpgradeId, target],
  );
  return rows;
}

/**
 * Deletes up to `limit` hybrid runtimes removed more than `retentionHours` ago, with what still
 * names them: their tunnel rows and runtime objects (ON DELETE CASCADE; removal already deleted
 * the objects) and their runtime keys (revoked at removal; a key row names its runtime, and the
 * runtime row its key, so the row's reference is cleared first). Rows another transaction holds
 * are skipped (SKIP LOCKED): replicas purging at once each take others. Answers how many went.
 * The audit rows of the runtime's registration, removal and upgrades stay.
 */
export async function purgeRemovedRuntimes(db: Queryable, retentionHours: number, limit: number): Promise<number> {
  const { rows } = await db.query<{ id: string }>(
    `SELECT id FROM runtimes
      WHERE mode = 'hybrid' AND removed_at < now() - make_interval(hours => $1)
      ORDER BY removed_at LIMIT $2 FOR UPDATE SKIP LOCKED`,
    [retentionHours, limit],
  );
  if (rows.length === 0) return 0;
  const ids = rows.map((r) => r.id);
  await db.query('UPDATE runtimes SET runtime_key_id = NULL WHERE id = ANY($1::uuid[])', [ids]);
  await db.query('DELETE FROM api_keys WHERE runtime_id = ANY($1::uuid[])', [ids]);
  const { rowCount } = await db.query('DELETE FROM runtimes WHERE id = ANY($1::uuid[])', [ids]);
  return rowCount ?? 0;
}
