/**
 * Retry delays after a failed reconcile: base × 3^(failures-1), capped, with up to +20% jitter
 * (the jitter spreads tenants that failed together; it never exceeds the cap).
 * With the defaults: 10 s, 30 s, 90 s, 270 s, then 600 s.
 */
export interface BackoffOptions {
  baseMs: number;
  capMs: number;
  /** Fraction of the delay added at random (default 0.2). */
  jitter?: number;
  factor?: number;
}

export function backoffMs(failures: number, o: BackoffOptions, random: () => number = Math.random): number {
  const n = Math.max(1, failures);
  const raw = Math.min(o.capMs, o.baseMs * (o.factor ?? 3) ** (n - 1));
  const withJitter = raw * (1 + (o.jitter ?? 0.2) * random());
  return Math.round(Math.min(o.capMs, withJitter));
}
