/**
 * The bundles the control plane generates for hybrid runtimes, each built once per (runtime
 * settings, versions) and kept in a bounded in-process cache. An upgrade bundle is two install
 * bundles and a diff of them: 15 to 20 ms of synchronous work, over 100 ms while the code is
 * cold; the bundle route, the upgrade route and the in-cluster upgrader's poll would otherwise
 * rebuild it on every request and hold the event loop from every other client meanwhile.
 *
 * Builds that many requests may ask for at once (upgrade bundles: one per pair of versions) wait
 * in a build queue (`getQueued`): one build at a time, and after a build the queue rests as long
 * as the build took before the next, so queued builds take at most half of the event loop's time
 * and every other request (a read needs several turns of the event loop: its queries, its answer)
 * runs in the other half; the tenants whose builds wait are served in turn, one build each, as
 * Kubernetes' API Priority and Fairness serves its flows. A burst of one tenant's requests then
 * slows other tenants' requests by about half, not by the whole burst; its own requests wait for
 * their builds. Concurrent requests for one key share one build.
 *
 * The key is a digest of everything that determines the output (the caller's parts: the runtime's
 * settings, the control plane's URL and public key, the versions), so an entry is never served
 * for other settings, and a change of settings (a new version) is another key. Nothing per
 * install is cached: the install bundle with its single-use bootstrap token is built at
 * registration only, outside this cache.
 *
 * Bounded by entries and by bytes (the caller estimates an entry's size from its text), the least
 * recently used first out. Entries are frozen, since every request that hits one shares it.
 */
import { createHash } from 'node:crypto';

export interface BundleCacheOptions {
  /** Most entries kept (default 1,000). */
  maxEntries?: number;
  /** Most bytes kept, as the entries' sizes estimate them (default 64 MiB; 0 keeps nothing). */
  maxBytes?: number;
}

/** What the cache did since start: builds are cache misses (what the cache saves is hits). */
export interface BundleCacheStats {
  hits: number;
  builds: number;
  evictions: number;
  entries: number;
  bytes: number;
}

/** The cache key of `parts`: the SHA-256 of their JSON (fixed size, whatever the parts hold). */
export function bundleCacheKey(...parts: unknown[]): string {
  return createHash('sha256').update(JSON.stringify(parts)).digest('base64url');
}

/** Freezes a value and everything it holds (iteratively: the generated objects nest deeply). */
function deepFreeze<T>(value: T): T {
  const stack: unknown[] = [value];
  while (stack.length > 0) {
    const v = stack.pop();
    if (v === null || typeof v !== 'object' || Object.isFrozen(v)) continue;
    Object.freeze(v);
    for (const child of Object.values(v)) stack.push(child);
  }
  return value;
}

/**
 * Runs synchronous builds one at a time, resting after each as long as it took (at most half of
 * the event loop for builds), taking the queued tenants in turn (round robin: a tenant with many
 * builds waiting does not delay another's first by more than one build).
 */
export class BuildQueue {
  /** Waiting builds by tenant; the Map's order is the turn order. */
  readonly #waiting = new Map<string, Array<() => void>>();
  #scheduled = false;
  /** A build that finds the queue empty still rests after the last build. */
  #restUntil = 0;

  run<T>(tenant: string, build: () => T): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const job = () => {
        try {
          resolve(build());
        } catch (err) {
          reject(err instanceof Error ? err : new Error(String(err)));
        }
      };
      const queue = this.#waiting.get(tenant);
      if (queue) queue.push(job);
      else this.#waiting.set(tenant, [job]);
      this.#schedule(Math.max(0, this.#restUntil - performance.now()));
    });
  }

  #schedule(restMs = 0): void {
    if (this.#scheduled) return;
    this.#scheduled = true;
    if (restMs > 0) setTimeout(() => this.#next(), restMs);
    else setImmediate(() => this.#next());
  }

  #next(): void {
    this.#scheduled = false;
    const first = this.#waiting.entries().next();
    if (first.done) return;
    const [tenant, queue] = first.value;
    const job = queue.shift()!;
    // The tenant goes to the end of the turn order (or leaves it with nothing left).
    this.#waiting.delete(tenant);
    if (queue.length > 0) this.#waiting.set(tenant, queue);
    const started = performance.now();
    job();
    const took = performance.now() - started;
    if (this.#waiting.size > 0) this.#schedule(took);
    else this.#restUntil = performance.now() + took;
  }
}

export class BundleCache {
  readonly #entries = new Map<string, { value: unknown; bytes: number }>();
  readonly #building = new Map<string, Promise<unknown>>();
  readonly #queue = new BuildQueue();
  readonly #maxEntries: number;
  readonly #maxBytes: number;
  #bytes = 0;
  #hits = 0;
  #builds = 0;
  #evictions = 0;

  constructor(opts: BundleCacheOptions = {}) {
    this.#maxEntries = opts.maxEntries ?? 1000;
    this.#maxBytes = opts.maxBytes ?? 64 * 1024 * 1024;
  }

  /**
   * The entry of `key`, built by `build` when absent (then kept if it fits). `sizeOf` estimates an
   * entry's bytes. A build that throws keeps nothing.
   */
  get<T>(key: string, build: () => T, sizeOf: (value: T) => number): T {
    const hit = this.#lookup(key);
    if (hit) return hit.value as T;
    return this.#store(key, build(), sizeOf);
  }

  /**
   * Like `get`, with a build that waits its turn in the build queue (`tenant`'s turn) and is shared
   * by every request for the same key meanwhile.
   */
  async getQueued<T>(key: string, tenant: string, build: () => T, sizeOf: (value: T) => number): Promise<T> {
    const hit = this.#lookup(key);
    if (hit) return hit.value as T;
    let pending = this.#building.get(key) as Promise<T> | undefined;
    if (!pending) {
      pending = this.#queue.run(tenant, () => {
        const done = this.#entries.get(key);
        return done ? (done.value as T) : this.#store(key, build(), sizeOf);
      });
      this.#building.set(key, pending);
      const forget = () => void this.#building.delete(key);
      pending.then(forget, forget);
    } else {
      this.#hits++;
    }
    return pending;
  }

  #lookup(key: string): { value: unknown; bytes: number } | undefined {
    const hit = this.#entries.get(key);
    if (!hit) return undefined;
    this.#hits++;
    // Most recently used last: the Map's order is the eviction order.
    this.#entries.delete(key);
    this.#entries.set(key, hit);
    return hit;
  }

  #store<T>(key: string, built: T, sizeOf: (value: T) => number): T {
    const value = deepFreeze(built);
    this.#builds++;
    const bytes = sizeOf(value);
    if (bytes > this.#maxBytes) return value;
    while (this.#entries.size >= this.#maxEntries || this.#bytes + bytes > this.#maxBytes) {
      const oldest = this.#entries.entries().next();
      if (oldest.done) break;
      this.#entries.delete(oldest.value[0]);
      this.#bytes -= oldest.value[1].bytes;
      this.#evictions++;
    }
    this.#entries.set(key, { value, bytes });
    this.#bytes += bytes;
    return value;
  }

  stats(): BundleCacheStats {
    return {
      hits: this.#hits,
      builds: this.#builds,
      evictions: this.#evictions,
      entries: this.#entries.size,
      bytes: this.#bytes,
    };
  }
}
