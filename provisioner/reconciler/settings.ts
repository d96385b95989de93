/**
 * Defaults of the reconciler's settings, in one place: the Reconciler falls back to them, and the
 * provisioner's configuration (PROVISIONER_WORKERS, …; the table in docs/reconciler.md) starts
 * from them, in seconds where its variables are.
 */
export const DEFAULT_RECONCILER_SETTINGS = Object.freeze({
  /** Concurrent attempts in this process. */
  workers: 2,
  /** Concurrent attempts per root cluster across all processes. */
  clusterParallelism: 4,
  leaseTtlMs: 30_000,
  /** Polling interval, the safety net under LISTEN/NOTIFY. */
  pollMs: 2000,
  /** Resync (drift detection) of Ready/Suspended tenants; 0 turns it off. */
  resyncMs: 86_400_000,
  /** Consecutive failures before a tenant is Stalled. */
  maxFailures: 5,
  /** Retry delays: the first, growing ×3 per failure up to the cap (backoff.ts). */
  backoff: Object.freeze({ baseMs: 10_000, capMs: 600_000 }),
  /** Retry delay of a tenant no cluster can take. */
  noCapacityRetryMs: 30_000,
  /** Retry delay while the engine is unavailable, and how often the engine is re-checked. */
  engineRetryMs: 60_000,
  /**
   * Waiting tenants (NoCapacity, EngineUnavailable) retry after the delays above, then after as
   * long as they have waited, up to this cap; the event that frees them (a cluster registered or
   * uncordoned, the engine found) makes them due at once. 10,000 tenants waiting at the cap cost
   * about 3 claims a second.
   */
  waitCapMs: 3_600_000,
  /** How often an attempt's log lines are written out. */
  logFlushMs: 100,
  /** How long a stop waits for running attempts before handing their leases back. */
  shutdownGraceMs: 20_000,
});
