/**
 * Long-lived answers (Server-Sent Events) by the API key that opened them: a revoked key's
 * streams end at once (the key-revoked notice reaches every replica), and a key may hold only so
 * many at a time.
 */
export class KeyStreams {
  readonly #byKey = new Map<string, Set<() => void>>();

  /** Streams open with this key now. */
  count(keyId: string): number {
    return this.#byKey.get(keyId)?.size ?? 0;
  }

  /** Registers a stream's closer; returns the function that unregisters it. */
  add(keyId: string, close: () => void): () => void {
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
