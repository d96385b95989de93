/**
 * Long-lived answers (Server-Sent Events, http/streams.ts serves them) counted by the API key that
 * opened them: a key holds at most so many at once, and a revoked key's streams end at once
 * (services.ts closes them on the key-revoked notice every replica hears).
 */
import { errors } from '../errors.ts';

/**
 * A place for one event stream, taken under an API key before the route awaits anything (so a
 * burst of opens cannot all pass the limit), released exactly once on every way out: the stream
 * ends, the route fails before it starts, or the key is revoked (which also aborts `signal`).
 */
export interface StreamSlot {
  /** Aborted when the key is revoked (serveEventStream also aborts it when the client goes away). */
  readonly signal: AbortSignal;
  /** True once the key was revoked. */
  readonly revoked: boolean;
  /** Gives the place back; later calls do nothing. */
  release(): void;
}

/**
 * Long-lived answers (Server-Sent Events) by the API key that opened them: a revoked key's
 * streams end at once (the key-revoked notice reaches every replica), and a key may hold only so
 * many at a time.
 */
export class KeyStreams {
  readonly #byKey = new Map<string, Set<() => void>>();
  readonly #revoked: (keyId: string) => boolean;

  /**
   * `revoked`: whether a key was revoked lately (keys/cache.ts): a request authenticated just
   * before its key's revocation reaches `reserve` after closeKey, and must open no stream then.
   */
  constructor(opts: { revoked?: (keyId: string) => boolean } = {}) {
    this.#revoked = opts.revoked ?? (() => false);
  }

  /** Streams open (or reserved) with this key now. */
  count(keyId: string): number {
    return this.#byKey.get(keyId)?.size ?? 0;
  }

  /**
   * Takes a place for a stream under the key, synchronously: throws TOO_MANY_STREAMS when the key
   * already holds `limit`, INVALID_API_KEY when the key was revoked since the request was
   * authenticated. A request without a key (none of today's stream routes) is not counted.
   * Call it before the route's first await and release the slot in a `finally`.
   */
  reserve(keyId: string | undefined, limit: number): StreamSlot {
    const abort = new AbortController();
    let revoked = false;
    let released = false;
    let unregister = (): void => {};
    if (keyId !== undefined) {
      if (this.#revoked(keyId)) throw errors.invalidKey();
      if (this.count(keyId) >= limit) throw errors.tooManyStreams(limit);
      unregister = this.#add(keyId, () => {
        revoked = true;
        abort.abort();
      });
    }
    return {
      signal: abort.signal,
      get revoked() {
        return revoked;
      },
      release() {
        if (released) return;
        released = true;
        unregister();
      },
    };
  }

  #add(keyId: string, close: () => void): () => void {
    let set = this.#byKey.get(keyId);
    if (!set) this.#byKey.set(keyId, (set = new Set()));
    set.add(close);
    return () => {
      set.delete(close);
      if (set.size === 0 && this.#byKey.get(keyId) === set) this.#byKey.delete(keyId);
    };
  }

  /** Ends every stream opened with the key (it was revoked). */
  closeKey(keyId: string): void {
    const set = this.#byKey.get(keyId);
    if (!set) return;
    this.#byKey.delete(keyId);
    for (const close of set) close();
  }
}
