/**
 * A short-lived cache of resolved API keys, so that a busy client does not cost a database round
 * trip per request. Entries live `ttlMs` (2 s by default) and are dropped at once when a key is
 * revoked (through this process, or another replica's NOTIFY `api_key_revoked`: http/app.ts); if
 * that notification is missed, a revoked key stops working within `ttlMs`.
 * Unknown keys are not cached (a flood of bad keys cannot evict good ones), and the cache is
 * bounded: when full, the oldest entries go first.
 *
 * A revoked key (or a deleted tenant's keys) is also remembered for `revokedMs` (5 min): a lookup
 * that read the key before the revocation and answers after it does not cache the key again (it
 * would work for another `ttlMs`), and the event streams ask before they take a place
 * (keys/streams.ts: a request authenticated just before the revocation opens no stream after it).
 */
import type { KeyIdentity } from '../store/keys.ts';

export class KeyCache {
  readonly #entries = new Map<string, { identity: KeyIdentity; expires: number }>();
  readonly #ttlMs: number;
  readonly #max: number;
  readonly #now: () => number;
  /** `key:<id>` and `tenant:<id>` revoked lately, with when they are forgotten (oldest first). */
  readonly #revoked = new Map<string, number>();
  readonly #revokedMs: number;

  constructor(opts: { ttlMs?: number; max?: number; now?: () => number; revokedMs?: number } = {}) {
    this.#ttlMs = opts.ttlMs ?? 2000;
    this.#max = opts.max ?? 10_000;
    this.#now = opts.now ?? Date.now;
    this.#revokedMs = opts.revokedMs ?? 5 * 60_000;
  }

  /** Cache key: the key's SHA-256 (the clear key is never kept). */
  get(hash: string): KeyIdentity | undefined {
    const e = this.#entries.get(hash);
    if (!e) return undefined;
    if (e.expires <= this.#now()) {
      this.#entries.delete(hash);
      return undefined;
    }
    return e.identity;
  }

  set(hash: string, identity: KeyIdentity): void {
    if (this.#ttlMs <= 0 || this.revoked(identity)) return;
    if (this.#entries.size >= this.#max) {
      const oldest = this.#entries.keys().next();
      if (!oldest.done) this.#entries.delete(oldest.value);
    }
    this.#entries.set(hash, { identity, expires: this.#now() + this.#ttlMs });
  }

  /** Drops every entry of a key id (after a revocation). */
  revoke(keyId: string): void {
    this.#remember(`key:${keyId}`);
    for (const [hash, e] of this.#entries) if (e.identity.keyId === keyId) this.#entries.delete(hash);
  }

  /** Drops the entries of a tenant's keys (after the tenant is deleted). */
  revokeTenant(tenantId: string): void {
    this.#remember(`tenant:${tenantId}`);
    for (const [hash, e] of this.#entries) if (e.identity.tenantId === tenantId) this.#entries.delete(hash);
  }

  /** True when the key, or its tenant, was revoked in the last `revokedMs`. */
  revoked(identity: { keyId: string; tenantId?: string | null }): boolean {
    const now = this.#now();
    const live = (k: string) => (this.#revoked.get(k) ?? 0) > now;
    return live(`key:${identity.keyId}`) || (identity.tenantId != null && live(`tenant:${identity.tenantId}`));
  }

  #remember(k: string): void {
    const now = this.#now();
    for (const [old, until] of this.#revoked) {
      if (until > now) break; // oldest first: the rest are newer
      this.#revoked.delete(old);
    }
    this.#revoked.delete(k);
    this.#revoked.set(k, now + this.#revokedMs);
  }
}
