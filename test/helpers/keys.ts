/**
 * Test-data builders and readers for API keys. Creating and revoking go through the store
 * (createKey, revokeKey); a revocation no replica hears of, which the store has no write for, and
 * the stored rows themselves (their hashes, names, revocations), which the store's reads do not
 * answer, are SQL here, the one place of the tests that writes it.
 */
import type { Queryable } from '../../provisioner/db/tx.ts';

// SQL: a state no production path writes (a revocation without its NOTIFY).
/**
 * Revokes a key behind the API's back: revoked now, without the NOTIFY of the store's revokeKey,
 * so that a replica only learns of it when its cached entry expires.
 */
export async function revokeKeyUnannounced(db: Queryable, id: string): Promise<void> {
  await db.query('UPDATE api_keys SET revoked_at = now() WHERE id = $1', [id]);
}

// SQL: a read of columns no store read answers (the stored hash, the runtime, the revocation of any key).
/** An API key's stored row as tests read it (the hash, never the key, is stored). */
export interface StoredKey {
  id: string;
  key_hash: Buffer;
  role: string;
  name: string;
  tenant_id: string | null;
  runtime_id: string | null;
  created_by: string | null;
  revoked_at: Date | null;
}

/** Which keys storedKeys answers; each field left out selects all. */
export interface KeySelector {
  id?: string;
  tenantId?: string;
  /** Of any of these tenants. */
  tenantIds?: readonly string[];
  /** Of the tenants of this organization. */
  organization?: string;
  role?: string;
  name?: string;
  runtimeId?: string;
  /** The stored hash of the whole key (key-format.ts hashKey). */
  keyHash?: Buffer;
}

/** The stored keys `s` selects, revoked ones too, oldest first. */
export async function storedKeys(db: Queryable, s: KeySelector = {}): Promise<StoredKey[]> {
  const values: unknown[] = [];
  const where: string[] = [];
  const add = (clause: string, value: unknown): void => {
    values.push(value);
    where.push(clause.replace('?', `$${values.length}`));
  };
  if (s.id !== undefined) add('k.id = ?', s.id);
  if (s.tenantId !== undefined) add('k.tenant_id = ?', s.tenantId);
  if (s.tenantIds !== undefined) add('k.tenant_id = ANY(?::uuid[])', s.tenantIds);
  if (s.organization !== undefined) add('t.organization = ?', s.organization);
  if (s.role !== undefined) add('k.role = ?', s.role);
  if (s.name !== undefined) add('k.name = ?', s.name);
  if (s.runtimeId !== undefined) add('k.runtime_id = ?', s.runtimeId);
  if (s.keyHash !== undefined) add('k.key_hash = ?', s.keyHash);
  const { rows } = await db.query<StoredKey>(
    `SELECT k.id, k.key_hash, k.role, k.name, k.tenant_id, k.runtime_id, k.created_by, k.revoked_at
       FROM api_keys k LEFT JOIN tenants t ON t.id = k.tenant_id
      ${where.length ? `WHERE ${where.join(' AND ')}` : ''} ORDER BY k.created_at, k.id`,
    values,
  );
  return rows;
}
