/**
 * Managed-cluster rows (migration 010): a tenant's registrations, their sealed credentials and
 * their health. Reads never return the credentials; `credentialsOf` is for the reconciler and
 * the health probe only.
 */
import type { Queryable } from '../db/tx.ts';
import type { Condition } from './states.ts';
import { liveTunnel } from './tunnels.ts';

/** What a bootstrap created on the cluster (stored with the registration, for the revocation). */
export interface CreatedObjects {
  /** `namespace/name` of the ServiceAccount. */
  serviceAccount: string;
  /** Namespaces holding a Role and RoleBinding named after the account. */
  namespaces: string[];
  /** A ClusterRole and ClusterRoleBinding named after the account. */
  clusterWide: boolean;
}

export type ManagedClusterReach = 'controlPlane' | 'runtime';

export interface ManagedCluster {
  name: string;
  server: string;
  /** Namespaces Argo CD may manage there; empty: the whole cluster. */
  namespaces: string[];
  /** How the credentials were given. */
  authMethod: 'kubeconfig' | 'token';
  /** Where the cluster is reached from: the control plane, or only the tenant's runtime (through its tunnel). */
  reach: ManagedClusterReach;
  /** The server's Kubernetes version when last heard from. */
  serverVersion: string | null;
  /** `Reachable`: the last probe's answer. */
  conditions: Condition[];
  lastProbeAt: string | null;
  /** Short-lived credentials the control plane keeps (null: the credentials as given, static). */
  tokenRotation: TokenRotation | null;
  createdAt: string;
  updatedAt: string;
}

/** A registration whose ServiceAccount token the control plane renews (migration 017). */
export interface TokenRotation {
  /** `namespace/name` of the ServiceAccount on the tenant's cluster. */
  serviceAccount: string;
  /** When the token Argo CD holds now expires. */
  expiresAt: string | null;
  /** When the next token is requested. */
  refreshDueAt: string | null;
  lastRotatedAt: string | null;
  /** Tokens issued since the registration (the first one at registration not counted). */
  rotations: number;
  /** `namespace/name` of the Secret the tokens are bound to: removal deletes it, which revokes them (migration 020). */
  binding: string | null;
  /** When they are not bound: why, and that each token then stays valid until it expires after removal. */
  unbound: string | null;
}

interface Row {
  id: string;
  tenant_id: string;
  name: string;
  server: string;
  namespaces: string[];
  auth_method: 'kubeconfig' | 'token';
  reach: ManagedClusterReach;
  server_version: string | null;
  conditions: Condition[];
  last_probe_at: Date | null;
  token_service_account: string | null;
  token_expires_at: Date | null;
  token_refresh_due_at: Date | null;
  token_rotated_at: Date | null;
  token_rotations: number;
  token_binding: string | null;
  token_unbound: string | null;
  created_at: Date;
  updated_at: Date;
}

const COLUMNS = `id, tenant_id, name, server, namespaces, auth_method, reach, server_version, conditions, last_probe_at,
  token_service_account, token_expires_at, token_refresh_due_at, token_rotated_at, token_rotations, token_binding, token_unbound,
  created_at, updated_at`;

const iso = (d: Date | null): string | null => (d ? d.toISOString() : null);

function toManagedCluster(r: Row): ManagedCluster {
  return {
    name: r.name,
    server: r.server,
    namespaces: r.namespaces,
    authMethod: r.auth_method,
    reach: r.reach,
    serverVersion: r.server_version,
    conditions: r.conditions,
    lastProbeAt: iso(r.last_probe_at),
    tokenRotation: r.token_service_account
      ? {
          serviceAccount: r.token_service_account,
          expiresAt: iso(r.token_expires_at),
          refreshDueAt: iso(r.token_refresh_due_at),
          lastRotatedAt: iso(r.token_rotated_at),
          rotations: r.token_rotations,
          binding: r.token_binding,
          unbound: r.token_binding ? null : r.token_unbound,
        }
      : null,
    createdAt: r.created_at.toISOString(),
    updatedAt: r.updated_at.toISOString(),
  };
}

/** The AAD of a registration's sealed credentials: ciphertexts cannot move between rows. */
export const credentialsAad = (tenantId: string, name: string): string => `managed-cluster/${tenantId}/${name}`;

export async function listManagedClusters(db: Queryable, tenantId: string): Promise<ManagedCluster[]> {
  const { rows } = await db.query<Row>(`SELECT ${COLUMNS} FROM managed_clusters WHERE tenant_id = $1 ORDER BY name`, [
    tenantId,
  ]);
  return rows.map(toManagedCluster);
}

export async function getManagedCluster(
  db: Queryable,
  tenantId: string,
  name: string,
): Promise<ManagedCluster | undefined> {
  const { rows } = await db.query<Row>(`SELECT ${COLUMNS} FROM managed_clusters WHERE tenant_id = $1 AND name = $2`, [
    tenantId,
    name,
  ]);
  return rows[0] ? toManagedCluster(rows[0]) : undefined;
}

/** The registration using `name`, or the one at `serverKey`, of a tenant (to refuse a second one early). */
/**
 * What counts against the tenant's managed-cluster budget: its registrations and its bootstrap
 * tokens that are neither redeemed nor expired.
 */
export async function countManagedClusters(db: Queryable, tenantId: string): Promise<number> {
  const { rows } = await db.query<{ n: number }>(
    `SELECT ((SELECT count(*) FROM managed_clusters WHERE tenant_id = $1)
           + (SELECT count(*) FROM managed_cluster_bootstraps
               WHERE tenant_id = $1 AND redeemed_at IS NULL AND expires_at > now()))::int AS n`,
    [tenantId],
  );
  return rows[0]?.n ?? 0;
}

export async function findConflict(
  db: Queryable,
  tenantId: string,
  name: string,
  serverKey: string,
): Promise<{ name: string; sameName: boolean } | undefined> {
  const { rows } = await db.query<{ name: string }>(
    `SELECT name FROM managed_clusters WHERE tenant_id = $1 AND (name = $2 OR server_key = $3) ORDER BY name = $2 DESC LIMIT 1`,
    [tenantId, name, serverKey],
  );
  return rows[0] ? { name: rows[0].name, sameName: rows[0].name === name } : undefined;
}

export interface InsertManagedCluster {
  tenantId: string;
  name: string;
  server: string;
  serverKey: string;
  namespaces: string[];
  authMethod: 'kubeconfig' | 'token';
  /** Default controlPlane. */
  reach?: ManagedClusterReach | undefined;
  credentialsEnc: Buffer;
  serverVersion: string;
  conditions: Condition[];
  /** When the health probe first looks at it. */
  probeInMs: number;
  /** Short-lived credentials: the ServiceAccount, the token's expiry, when to request the next. */
  token?:
    | {
        serviceAccount: string;
        expiresAt: Date;
        refreshInMs: number;
        /** `namespace/name` of the Secret the token is bound to. */
        binding?: string | undefined;
        /** Why it is not bound. */
        unbound?: string | undefined;
      }
    | undefined;
  /** What a bootstrap created on the cluster, for the revocation on removal. */
  createdObjects?: CreatedObjects | undefined;
}

/**
 * A cluster's reported Kubernetes version as stored: what the cluster (or, for a cluster reached
 * through the tenant's runtime, the runtime) answered is not trusted to be a version, so anything
 * but printable ASCII becomes U+FFFD and it is cut to 64 characters (`v1.30.2+k3s1` passes as it is).
 */
export function storedServerVersion(version: string): string {
  return version.slice(0, 64).replace(/[^\x20-\x7e]/g, '\ufffd');
}

export async function insertManagedCluster(db: Queryable, m: InsertManagedCluster): Promise<ManagedCluster> {
  const { rows } = await db.query<Row>(
    `INSERT INTO managed_clusters (tenant_id, name, server, server_key, namespaces, auth_method, credentials_enc,
            server_version, conditions, last_probe_at, probe_due_at,
            token_service_account, token_expires_at, token_refresh_due_at, created_objects, reach,
            token_binding, token_unbound)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, now(), now() + make_interval(secs => $10::float8 / 1000),
             $11, $12, now() + make_interval(secs => $13::float8 / 1000), $14, $15, $16, $17)
     RETURNING ${COLUMNS}`,
    [
      m.tenantId,
      m.name,
      m.server,
      m.serverKey,
      m.namespaces,
      m.authMethod,
      m.credentialsEnc,
      storedServerVersion(m.serverVersion),
      JSON.stringify(m.conditions),
      m.probeInMs,
      m.token?.serviceAccount ?? null,
      m.token?.expiresAt ?? null,
      m.token ? m.token.refreshInMs : null,
      m.createdObjects ? JSON.stringify(m.createdObjects) : null,
      m.reach ?? 'controlPlane',
      m.token?.binding ?? null,
      m.token?.unbound ?? null,
    ],
  );
  return toManagedCluster(rows[0]!);
}

export async function deleteManagedCluster(
  db: Queryable,
  tenantId: string,
  name: string,
): Promise<ManagedCluster | undefined> {
  const { rows } = await db.query<Row>(
    `DELETE FROM managed_clusters WHERE tenant_id = $1 AND name = $2 RETURNING ${COLUMNS}`,
    [tenantId, name],
  );
  return rows[0] ? toManagedCluster(rows[0]) : undefined;
}

/** A tenant's registrations with their sealed credentials, for the tenant's program. */
export async function sealedManagedClusters(
  db: Queryable,
  tenantId: string,
): Promise<Array<{ name: string; server: string; namespaces: string[]; credentialsEnc: Buffer }>> {
  const { rows } = await db.query<{ name: string; server: string; namespaces: string[]; credentials_enc: Buffer }>(
    'SELECT name, server, namespaces, credentials_enc FROM managed_clusters WHERE tenant_id = $1 ORDER BY name',
    [tenantId],
  );
  return rows.map((r) => ({
    name: r.name,
    server: r.server,
    namespaces: r.namespaces,
    credentialsEnc: r.credentials_enc,
  }));
}

export interface DueProbe {
  id: string;
  tenantId: string;
  name: string;
  credentialsEnc: Buffer;
  conditions: Condition[];
  reach: ManagedClusterReach;
}

/**
 * Claims up to `limit` registrations whose probe is due, moving their next probe `intervalMs`
 * ahead in the same statement: replicas probing at once each take other rows. A deleted tenant's
 * registrations are not probed (its runtime is gone). A registration reached through the runtime
 * is claimed only by the replica holding the runtime's tunnel (`replicaId`, the live row of
 * runtime_tunnels), or by any replica when no replica holds it (the probe then says so).
 */
export async function claimDueProbes(
  db: Queryable,
  limit: number,
  intervalMs: number,
  replicaId?: string,
): Promise<DueProbe[]> {
  const { rows } = await db.query<{
    id: string;
    tenant_id: string;
    name: string;
    credentials_enc: Buffer;
    conditions: Condition[];
    reach: ManagedClusterReach;
  }>(
    `UPDATE managed_clusters m SET probe_due_at = now() + make_interval(secs => $2::float8 / 1000)
      WHERE m.id IN (SELECT mc.id FROM managed_clusters mc JOIN tenants t ON t.id = mc.tenant_id
                      LEFT JOIN runtime_tunnels rt ON rt.tenant_id = mc.tenant_id AND ${liveTunnel('rt')}
                      WHERE mc.probe_due_at <= now() AND NOT t.deleted
                        AND (mc.reach = 'controlPlane' OR rt.replica_id IS NULL OR rt.replica_id = $3)
                      ORDER BY mc.probe_due_at LIMIT $1 FOR UPDATE OF mc SKIP LOCKED)
      RETURNING m.id, m.tenant_id, m.name, m.credentials_enc, m.conditions, m.reach`,
    [limit, intervalMs, replicaId ?? null],
  );
  return rows.map((r) => ({
    id: r.id,
    tenantId: r.tenant_id,
    name: r.name,
    credentialsEnc: r.credentials_enc,
    conditions: r.conditions,
    reach: r.reach,
  }));
}

/** Records a probe's answer (the row may have been deleted meanwhile: then nothing happens). */
export async function recordProbe(
  db: Queryable,
  id: string,
  conditions: Condition[],
  serverVersion: string | undefined,
): Promise<void> {
  await db.query(
    `UPDATE managed_clusters SET conditions = $2, last_probe_at = now(),
            server_version = coalesce($3, server_version) WHERE id = $1`,
    [id, JSON.stringify(conditions), serverVersion === undefined ? null : storedServerVersion(serverVersion)],
  );
}

export interface DueRefresh {
  id: string;
  tenantId: string;
  name: string;
  serviceAccount: string;
  credentialsEnc: Buffer;
  /** A bootstrap created the ServiceAccount (its tokens are revoked by deleting it, not bound). */
  bootstrap: boolean;
}

/**
 * Claims up to `limit` registrations whose token is due for renewal, moving their due time
 * `leaseMs` ahead in the same statement (SKIP LOCKED): one replica renews a registration, and a
 * failed renewal is tried again after the lease. A deleted tenant's registrations are left alone.
 */
export async function claimDueRefreshes(db: Queryable, limit: number, leaseMs: number): Promise<DueRefresh[]> {
  const { rows } = await db.query<{
    id: string;
    tenant_id: string;
    name: string;
    token_service_account: string;
    credentials_enc: Buffer;
    bootstrap: boolean;
  }>(
    `UPDATE managed_clusters m SET token_refresh_due_at = now() + make_interval(secs => $2::float8 / 1000)
      WHERE m.id IN (SELECT mc.id FROM managed_clusters mc JOIN tenants t ON t.id = mc.tenant_id
                      WHERE mc.token_service_account IS NOT NULL AND mc.token_refresh_due_at <= now()
                        AND NOT t.deleted
                      ORDER BY mc.token_refresh_due_at LIMIT $1 FOR UPDATE OF mc SKIP LOCKED)
      RETURNING m.id, m.tenant_id, m.name, m.token_service_account, m.credentials_enc,
                m.created_objects IS NOT NULL AS bootstrap`,
    [limit, leaseMs],
  );
  return rows.map((r) => ({
    id: r.id,
    tenantId: r.tenant_id,
    name: r.name,
    serviceAccount: r.token_service_account,
    credentialsEnc: r.credentials_enc,
    bootstrap: r.bootstrap,
  }));
}

/**
 * Stores a renewed token (sealed) when the registration still holds the credentials it was
 * renewed from; false when it was removed or changed meanwhile (the new token is then dropped).
 */
export async function recordRefresh(
  db: Queryable,
  r: {
    id: string;
    previousEnc: Buffer;
    credentialsEnc: Buffer;
    expiresAt: Date;
    refreshInMs: number;
    /** The Secret the new token is bound to (null: not bound, `unbound` says why). */
    binding: string | null;
    unbound: string | null;
  },
): Promise<boolean> {
  const { rowCount } = await db.query(
    `UPDATE managed_clusters SET credentials_enc = $3, token_expires_at = $4,
            token_refresh_due_at = now() + make_interval(secs => $5::float8 / 1000),
            token_rotated_at = now(), token_rotations = token_rotations + 1, updated_at = now(),
            token_binding = $6, token_unbound = $7
      WHERE id = $1 AND credentials_enc = $2`,
    [r.id, r.previousEnc, r.credentialsEnc, r.expiresAt, r.refreshInMs, r.binding, r.unbound],
  );
  return rowCount === 1;
}

/** What removing a registration revokes on its cluster. */
export interface Revocable {
  /** What a bootstrap created (null: the tenant gave the credentials). */
  createdObjects: CreatedObjects | null;
  credentialsEnc: Buffer;
  /** The ServiceAccount whose tokens the control plane requests (null: the credentials as given). */
  tokenServiceAccount: string | null;
  /** When the token held now expires. */
  tokenExpiresAt: Date | null;
  /** `namespace/name` of the Secret the tokens are bound to. */
  tokenBinding: string | null;
}

/** What removing a registration revokes on its cluster (undefined: no such registration). */
export async function revocableOf(db: Queryable, tenantId: string, name: string): Promise<Revocable | undefined> {
  const { rows } = await db.query<{
    created_objects: CreatedObjects | null;
    credentials_enc: Buffer;
    token_service_account: string | null;
    token_expires_at: Date | null;
    token_binding: string | null;
  }>(
    `SELECT created_objects, credentials_enc, token_service_account, token_expires_at, token_binding
       FROM managed_clusters WHERE tenant_id = $1 AND name = $2`,
    [tenantId, name],
  );
  const r = rows[0];
  return r
    ? {
        createdObjects: r.created_objects,
        credentialsEnc: r.credentials_enc,
        tokenServiceAccount: r.token_service_account,
        tokenExpiresAt: r.token_expires_at,
        tokenBinding: r.token_binding,
      }
    : undefined;
}

export interface Bootstrap {
  id: string;
  tenantId: string;
  name: string;
  namespaces: string[];
  clusterWide: boolean;
  expiresAt: string;
}

export async function insertBootstrap(
  db: Queryable,
  b: {
    tenantId: string;
    name: string;
    namespaces: string[];
    clusterWide: boolean;
    tokenHash: string;
    ttlSeconds: number;
    createdBy: string;
  },
): Promise<Bootstrap> {
  const { rows } = await db.query<{ id: string; expires_at: Date }>(
    `INSERT INTO managed_cluster_bootstraps (tenant_id, name, namespaces, cluster_wide, token_hash, expires_at, created_by)
     VALUES ($1, $2, $3, $4, $5, now() + make_interval(secs => $6), $7) RETURNING id, expires_at`,
    [b.tenantId, b.name, b.namespaces, b.clusterWide, b.tokenHash, b.ttlSeconds, b.createdBy],
  );
  return {
    id: rows[0]!.id,
    tenantId: b.tenantId,
    name: b.name,
    namespaces: b.namespaces,
    clusterWide: b.clusterWide,
    expiresAt: rows[0]!.expires_at.toISOString(),
  };
}

/**
 * Claims a bootstrap token for its one redemption: the bootstrap when it was unused and unexpired;
 * otherwise why not (`unknown`, `redeemed`, `expired`), nothing changed.
 */
export async function claimBootstrap(
  db: Queryable,
  tokenHash: string,
): Promise<Bootstrap | { refused: 'unknown' | 'redeemed' | 'expired'; at?: string }> {
  const { rows } = await db.query<{
    id: string;
    tenant_id: string;
    name: string;
    namespaces: string[];
    cluster_wide: boolean;
    expires_at: Date;
    redeemed_at: Date | null;
    claimed: boolean;
  }>(
    `WITH claimed AS (
       UPDATE managed_cluster_bootstraps SET redeemed_at = now()
        WHERE token_hash = $1 AND redeemed_at IS NULL AND expires_at > now() RETURNING id)
     SELECT b.id, b.tenant_id, b.name, b.namespaces, b.cluster_wide, b.expires_at, b.redeemed_at,
            EXISTS (SELECT 1 FROM claimed) AS claimed
       FROM managed_cluster_bootstraps b WHERE b.token_hash = $1`,
    [tokenHash],
  );
  const r = rows[0];
  if (!r) return { refused: 'unknown' };
  if (!r.claimed) {
    // Not claimed though unexpired and unredeemed in this statement's snapshot: a concurrent
    // redemption took it.
    if (r.redeemed_at || r.expires_at > new Date())
      return { refused: 'redeemed', ...(r.redeemed_at ? { at: r.redeemed_at.toISOString() } : {}) };
    return { refused: 'expired', at: r.expires_at.toISOString() };
  }
  return {
    id: r.id,
    tenantId: r.tenant_id,
    name: r.name,
    namespaces: r.namespaces,
    clusterWide: r.cluster_wide,
    expiresAt: r.expires_at.toISOString(),
  };
}

/** Gives a claimed bootstrap token back after a redemption the cluster's checks refused. */
export async function releaseBootstrap(db: Queryable, id: string): Promise<void> {
  await db.query('UPDATE managed_cluster_bootstraps SET redeemed_at = NULL WHERE id = $1', [id]);
}
