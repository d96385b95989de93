/**
 * The Source Server's memory: a least-recently-used cache bounded by the bytes its values hold,
 * not by their number, so that one application with very large manifests cannot push the pod past
 * its memory limit and a thousand small ones still fit. A value larger than the whole bound is
 * not kept at all.
 *
 * What it holds: Argo CD's manifests by (repository, revision, path, source spec) — immutable for
 * a full commit SHA — and computed change answers by (application, revision, path, repository).
 * Sizes are the caller's estimate (the JSON length of what it stores).
 */

export interface CacheStats {
  hits: number;
  misses: number;
  evictions: number;
  entries: number;
  bytes: number;
  maxBytes: number;
}

export class ByteLruCache<V> {
  readonly maxBytes: number;
  /** Map iteration order is insertion order: the first entry is the least recently used. */
  readonly #entries = new Map<string, { value: V; bytes: number }>();
  #bytes = 0;
  #hits = 0;
  #misses = 0;
  #evictions = 0;

  constructor(maxBytes: number) {
    if (!(maxBytes > 0)) throw new RangeError('maxBytes must be positive');
    this.maxBytes = maxBytes;
  }

  get(key: string): V | undefined {
    const entry = this.#entries.get(key);
    if (entry === undefined) {
      this.#misses++;
      return undefined;
    }
    this.#hits++;
    this.#entries.delete(key);
    this.#entries.set(key, entry);
    return entry.value;
  }

  /** Keeps `value` (of about `bytes` bytes), evicting the least recently used until it fits. */
  set(key: string, value: V, bytes: number): void {
    const size = Math.max(1, Math.ceil(bytes)) + key.length;
    this.delete(key);
    if (size > this.maxBytes) return;
    while (this.#bytes + size > this.maxBytes) {
      const oldest = this.#entries.keys().next();
      if (oldest.done) break;
      this.delete(oldest.value);
      this.#evictions++;
    }
    this.#entries.set(key, { value, bytes: size });
    this.#bytes += size;
  }

  delete(key: string): void {
    const entry = this.#entries.get(key);
    if (entry === undefined) return;
    this.#entries.delete(key);
    this.#bytes -= entry.bytes;
  }

  has(key: string): boolean {
    return this.#entries.has(key);
  }

  stats(): CacheStats {
    return {
      hits: this.#hits,
      misses: this.#misses,
      evictions: this.#evictions,
      entries: this.#entries.size,
      bytes: this.#bytes,
      maxBytes: this.maxBytes,
    };
  }
}

/** A cache key from its parts (NUL cannot occur in any of them: URLs, SHAs, paths, names). */
export function cacheKey(...parts: string[]): string {
  return parts.join('\u0000');
}
