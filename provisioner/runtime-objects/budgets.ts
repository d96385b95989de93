/**
 * What one runtime may ask of the shared control plane per unit of time (docs/security.md "Tenant
 * against tenant through shared resources"): event batches per second and digests per minute, per
 * tenant, counted in this process (each replica counts what it serves; a runtime's batches reach
 * the replica its connection lands on). A fixed window per tenant: simple, and a runtime over it
 * learns from Retry-After when the window ends.
 */
export class WindowBudget {
  readonly #windows = new Map<string, { start: number; used: number }>();
  readonly #limit: number;
  readonly #windowMs: number;
  readonly #now: () => number;

  constructor(limit: number, windowMs: number, now: () => number = () => performance.now()) {
    this.#limit = limit;
    this.#windowMs = windowMs;
    this.#now = now;
  }

  /**
   * Takes `n` of `key`'s budget in the current window: undefined when taken, else the seconds until
   * the window ends (nothing taken). A request of more than the whole budget is never taken.
   */
  take(key: string, n = 1): number | undefined {
    const now = this.#now();
    if (this.#windows.size > 1000)
      for (const [k, w] of this.#windows) if (now - w.start >= this.#windowMs) this.#windows.delete(k);
    let w = this.#windows.get(key);
    if (!w || now - w.start >= this.#windowMs) this.#windows.set(key, (w = { start: now, used: 0 }));
    if (w.used + n > this.#limit) return Math.max(1, Math.ceil((w.start + this.#windowMs - now) / 1000));
    w.used += n;
    return undefined;
  }
}
