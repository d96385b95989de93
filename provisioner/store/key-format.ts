/**
 * API keys: 32 random bytes, base64url, with a readable role prefix (`hrt_admin_…`). Only the
 * SHA-256 of the whole key is stored; the key itself is shown once, when it is created.
 */
import { createHash, randomBytes } from 'node:crypto';

export type Role = 'admin' | 'operator' | 'tenant' | 'runtime';
export const ROLES: readonly Role[] = ['admin', 'operator', 'tenant', 'runtime'];

/** Generated keys match hrt_<role>_<43 chars>; a configured bootstrap admin token may be any 24+ safe characters. */
const KEY_RE = /^[\w.~+/=-]{24,256}$/;

export function generateKey(role: Role): string {
  return `hrt_${role}_${randomBytes(32).toString('base64url')}`;
}

export function hashKey(key: string): Buffer {
  return createHash('sha256').update(key).digest();
}

/** hashKey() as base64, computed in one step (the key cache's key). */
export function hashKeyBase64(key: string): string {
  return createHash('sha256').update(key).digest('base64');
}

/** The first characters of a key, safe to show in listings and logs. */
export function keyPrefix(key: string): string {
  return key.slice(0, key.indexOf('_', 4) + 7);
}

export function looksLikeKey(key: string): boolean {
  return KEY_RE.test(key);
}
