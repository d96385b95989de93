/**
 * Reconnect delays: exponential with a low cap and "full jitter" (a uniformly random delay between
 * 0 and the capped exponential), so that a fleet of runtimes that lost the same control plane
 * spreads its redials over the whole window instead of reconnecting in lock-step, and every
 * runtime redials within `maxMs` of the control plane coming back, however long it was gone.
 */
export interface BackoffOptions {
  initialMs: number;
  maxMs: number;
  factor: number;
}

/** The cap of 4 s keeps a runtime's reconnect within 5 s of the control plane listening again. */
export const DEFAULT_BACKOFF: Readonly<BackoffOptions> = { initialMs: 200, maxMs: 4_000, factor: 2 };

/** Delay before reconnect attempt `attempt` (0 for the first retry): uniform in [0, min(max, initial × factor^attempt)]. */
export function backoffDelay(
  attempt: number,
  opts: BackoffOptions = DEFAULT_BACKOFF,
  random: () => number = Math.random,
): number {
  const ceiling = Math.min(opts.maxMs, opts.initialMs * opts.factor ** Math.min(attempt, 30));
  return Math.round(random() * ceiling);
}

/**
 * Delay after the control plane refused the runtime for a reason that waiting will not fix soon
 * (token refused, tunnel replaced by another instance, key revoked): 15 to 30 s, so that two
 * instances sharing a token do not fight over the tunnel and a bad token does not hammer the server.
 */
export function slowRetryDelay(random: () => number = Math.random): number {
  return Math.round(15_000 + random() * 15_000);
}
