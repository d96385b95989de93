/**
 * Reconnect delays: exponential, capped, with "equal jitter" (half the delay fixed, half random),
 * so a fleet of runtimes that lost the same control plane does not reconnect in lock-step.
 */
export interface BackoffOptions {
  initialMs: number;
  maxMs: number;
  factor: number;
}

export const DEFAULT_BACKOFF: Readonly<BackoffOptions> = { initialMs: 200, maxMs: 30_000, factor: 2 };

/** Delay before reconnect attempt `attempt` (0 for the first retry). */
export function backoffDelay(attempt: number, opts: BackoffOptions = DEFAULT_BACKOFF, random: () => number = Math.random): number {
  const base = Math.min(opts.maxMs, opts.initialMs * opts.factor ** Math.min(attempt, 30));
  return Math.round(base / 2 + random() * (base / 2));
}
