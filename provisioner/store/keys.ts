import type { Role } from './key-format.ts';
import { generateKey, hashKey, keyPrefix } from './key-format.ts';
import type { Queryable } from '../db/tx.ts';

export interface ApiKeyInfo {
  id: string;
  prefix: string;
  role: Role;
  tenantId: string | null;
  name: string;
  createdBy: string | null;
  createdAt: string;
  revokedAt: string | null;
}

interface KeyRow {
  id: string;
  prefix: string;
  role: Role;
  tenant_id: string | null;
  name: string;
  created_by: string | null;
  created_at: Date;
  revoked_at: Date | null;
}

function toInfo(r: KeyRow): ApiKeyInfo {
  return {
    id: r.id,
    prefix: r.prefix,
    role: r.role,
    tenantId: r.tenant_id,
    name: r.name,
    createdBy: r.created_by,
    createdAt: r.created_at.toISOString(),
    revokedAt: r.revoked_at?.toISOString() ?? null,
  };
}

/** Creates a key and returns it in clear exactly once, with its stored description. */
export async function createKey(
  db: Queryable,
  k: {
    role: Role;
    tenantId?: string | null;
    name: string;
    createdBy: string | null;
    key?: string;
    /** The hybrid runtime a runtime key belongs to (none: the tenant's hosted runtime). */
    runtimeId?: string;
  },
): Promise<{ key: string; info: ApiKeyInfo }> {
  const key = k.key ?? generateKey(k.role);
  const { rows } = await db.query<KeyRow>(
    `INSERT INTO api_keys (key_hash, prefix, role, tenant_id, name, created_by, runtime_id) VALUES ($1, $2, $3, $4, $5, $6, $7)
     RETURNING id, prefix, role, tenant_id, name, created_by, created_at, revoked_at`,
    [hashKey(key), keyPrefix(key), k.role, k.tenantId ?? null, k.name, k.createdBy, k.runtimeId ?? null],
  );
  return { key, info: toInfo(rows[0]!) };
}

export interface KeyIdentity {
  keyId: string;
  role: Role;
  tenantId: string | null;
  /** A hybrid runtime's key: that runtime's id; null for every other key (a hosted runtime's too). */
  runtimeId?: string | null;
}

/** Resolves a presented key to its identity; undefined when unknown or revoked. */
export async function lookupKey(db: Queryable, key: string): Promise<KeyIdentity | undefined> {
  return lookupKeyHash(db, hashKey(key));
}

export async function lookupKeyHash(db: Queryable, hash: Buffer): Promise<KeyIdentity | undefined> {
  const { rows } = await db.query<{ id: string; role: Role; tenant_id: string | null; runtime_id: string | null }>(
    'SELECT id, role, tenant_id, runtime_id FROM api_keys WHERE key_hash = $1 AND revoked_at IS NULL',
    [hash],
  );
  const r = rows[0];
  return r ? { keyId: r.id, role: r.role, tenantId: r.tenant_id, runtimeId: r.runtime_id } : undefined;
}

/** Identities of several key hashes (base64) in one statement; unknown and revoked keys are absent. */
export async function lookupKeyHashes(db: Queryable, hashes: readonly string[]): Promise<Map<string, KeyIdentity>> {
  const { rows } = await db.query<{
    id: string;
    role: Role;
    tenant_id: string | null;
    runtime_id: string | null;
    hash: string;
  }>({
    name: 'keys-by-hashes',
    text: `SELECT id, role, tenant_id, runtime_id, encode(key_hash, 'base64') AS hash FROM api_keys
           WHERE key_hash = ANY($1::bytea[]) AND revoked_at IS NULL`,
    values: [hashes.map((h) => Buffer.from(h, 'base64'))],
  });
  return new Map(
    rows.map((r) => [r.hash, { keyId: r.id, role: r.role, tenantId: r.tenant_id, runtimeId: r.runtime_id }]),
  );
}

export async function keyExists(db: Queryable, key: string): Promise<boolean> {
  const { rowCount } = await db.query('SELECT 1 FROM api_keys WHERE key_hash = $1', [hashKey(key)]);
  return (rowCount ?? 0) > 0;
}

export async function hasActiveAdmin(db: Queryable): Promise<boolean> {
  const { rowCount } = await db.query(`SELECT 1 FROM api_keys WHERE role = 'admin' AND revoked_at IS NULL LIMIT 1`);
  return (rowCount ?? 0) > 0;
}

/** The tenant's keys that are not revoked (tenant and runtime keys): what its key budget counts. */
export async function countTenantKeys(db: Queryable, tenantId: string): Promise<number> {
  const { rows } = await db.query<{ n: number }>(
    'SELECT count(*)::int AS n FROM api_keys WHERE tenant_id = $1 AND revoked_at IS NULL',
    [tenantId],
  );
  return rows[0]?.n ?? 0;
}

export async function listKeys(
  db: Queryable,
  q: { tenantId?: string; includeRevoked: boolean },
): Promise<ApiKeyInfo[]> {
  const { rows } = await db.query<KeyRow>(
    `SELECT id, prefix, role, tenant_id, name, created_by, created_at, revoked_at FROM api_keys
      WHERE ($1::uuid IS NULL OR tenant_id = $1) AND ($2 OR revoked_at IS NULL) ORDER BY created_at, id`,
    [q.tenantId ?? null, q.includeRevoked],
  );
  return rows.map(toInfo);
}

export async function getKey(db: Queryable, id: string): Promise<ApiKeyInfo | undefined> {
  const { rows } = await db.query<KeyRow>(
    'SELECT id, prefix, role, tenant_id, name, created_by, created_at, revoked_at FROM api_keys WHERE id = $1',
    [id],
  );
  return rows[0] ? toInfo(rows[0]) : undefined;
}

/** The NOTIFY channel told of every revocation (payload: the key id), for other provisioner replicas. */
export const KEY_REVOKED_CHANNEL = 'api_key_revoked';

/**
 * Revokes a tenant's live keys (all of them, or those of the given roles) the way revokeKey does:
 * every replica hears of each when the caller's transaction commits. Returns their ids.
 */
export async function revokeTenantKeys(db: Queryable, tenantId: string, roles?: Role[]): Promise<string[]> {
  const { rows } = await db.query<{ id: string }>(
    `WITH r AS (UPDATE api_keys SET revoked_at = now() WHERE tenant_id = $1 AND revoked_at IS NULL AND ($2::text[] IS NULL OR role = ANY($2::text[])) RETURNING id)
     SELECT id, pg_notify('${KEY_REVOKED_CHANNEL}', id::text) FROM r`,
    [tenantId, roles ?? null],
  );
  return rows.map((r) => r.id);
}

/** Revokes a key (revoking twice keeps the first revocation time); every replica hears of it when the caller's transaction commits. */
export async function revokeKey(db: Queryable, id: string): Promise<ApiKeyInfo | undefined> {
  await db.query(
    `WITH r AS (UPDATE api_keys SET revoked_at = coalesce(revoked_at, now()) WHERE id = $1 RETURNING id)
                  SELECT pg_notify('${KEY_REVOKED_CHANNEL}', id::text) FROM r`,
    [id],
  );
  return getKey(db, id);
}

/** The API key an action was taken with, as people know it. */
export interface KeyLabel {
  id: string;
  name: string;
  role: string;
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/**
 * Name and role of each key among `ids` (actor ids: a key's id, or `system`/`public`, which are
 * no key and are left out). A revoked key keeps its name: what it did stays attributed.
 */
export async function keyLabels(db: Queryable, ids: Iterable<string>): Promise<Map<string, KeyLabel>> {
  const wanted = [...new Set([...ids].filter((id) => UUID.test(id)))];
  if (wanted.length === 0) return new Map();
  const { rows } = await db.query<KeyLabel>('SELECT id, name, role FROM api_keys WHERE id = ANY($1::uuid[])', [wanted]);
  return new Map(rows.map((r) => [r.id, r]));
}
