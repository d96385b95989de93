/**
 * From an Authorization header to the key's identity: the bearer token's form, then the key
 * through the cache (keys/cache.ts) or, on a miss, `lookup` by its SHA-256. http/auth.ts applies
 * it to every non-public route and adds the roles and the tenant access.
 */
import { errors } from '../errors.ts';
import { hashKeyBase64, looksLikeKey } from '../store/key-format.ts';
import type { KeyIdentity } from '../store/keys.ts';
import type { KeyCache } from './cache.ts';

/** The key of `Authorization: Bearer <key>`; 401 when the header is missing or malformed, or the key has not a key's form. */
export function bearerToken(header: string | undefined): string {
  if (header === undefined || header === '') throw errors.unauthenticated();
  const m = /^Bearer ([^\s]+)$/i.exec(header);
  if (!m) throw errors.unauthenticated();
  // The header is there and well-formed: what is wrong is the key itself.
  if (!looksLikeKey(m[1]!)) throw errors.invalidKey();
  return m[1]!;
}

/** `lookup` resolves a key's SHA-256 (base64) when the cache does not have it; an unknown key is a 401. */
export async function authenticate(
  header: string | undefined,
  lookup: (hashBase64: string) => Promise<KeyIdentity | undefined>,
  cache: KeyCache,
): Promise<KeyIdentity> {
  const cacheKey = hashKeyBase64(bearerToken(header));
  const cached = cache.get(cacheKey);
  if (cached) return cached;
  const identity = await lookup(cacheKey);
  // A lookup that read the key before its revocation and answers after it: refused like the
  // requests after it (and not cached).
  if (!identity || cache.revoked(identity)) throw errors.invalidKey();
  cache.set(cacheKey, identity);
  return identity;
}
