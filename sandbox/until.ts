/**
 * Bounded waiting: the one `until` of the repository, used by the sandbox, the tests of every tier
 * and the benchmarks (docs/testing.md, "Wait for events, not for time"). It imports nothing, so a
 * unit test can use it without starting anything.
 */

/** What `until` throws when its bound passes: what it waited for, the bound, the last value or error. */
export class TimeoutError extends Error {
  override name = 'TimeoutError';
}

/** Thrown by an `until` check to stop waiting at once (the awaited state can no longer come). */
export class StopWaiting extends Error {
  override name = 'StopWaiting';
}

/**
 * Polls `check` until it returns a truthy value, which it returns; past `timeoutMs` it throws a
 * TimeoutError naming `what`, the bound and the check's last value or error.
 *
 * - Done means truthy: `undefined`, `null`, `false`, `0`, `''` and `NaN` are "not yet". A check
 *   whose real answer may be 0 or '' wraps it (`() => (n === undefined ? undefined : { n })`).
 * - An error thrown by `check` is "not yet" too (a server not listening yet, a row not there yet);
 *   it is reported in the TimeoutError if it is still the last outcome. A check that finds the
 *   awaited state can no longer come throws StopWaiting, which ends the wait with that error.
 * - The check runs at once, then after pauses of an eighth of the time waited so far (at least
 *   10 ms, at most `intervalMs`): whatever it waits for is seen within an eighth of the time it
 *   took (a wait of a second is over by 1.125 s, not by 1.5 s as when the pause doubled), and a
 *   long wait polls gently.
 *
 * The bound is a wait, not a claim about speed: make it large enough for a loaded machine (a
 * duration worth asserting belongs in a benchmark).
 */
export async function until<T>(
  what: string,
  timeoutMs: number,
  check: () => Promise<T | undefined | null | false | 0 | ''> | T | undefined | null | false | 0 | '',
  intervalMs = 500,
): Promise<T> {
  const began = Date.now();
  const deadline = began + timeoutMs;
  let last: string;
  for (;;) {
    try {
      const value = await check();
      if (value) return value;
      last = `last value: ${JSON.stringify(value)?.slice(0, 300)}`;
    } catch (err) {
      if (err instanceof StopWaiting) throw err;
      last = `last error: ${err instanceof Error ? err.message.slice(0, 500) : String(err)}`;
    }
    if (Date.now() >= deadline) {
      const bound = timeoutMs % 1000 === 0 ? `${timeoutMs / 1000} s` : `${timeoutMs} ms`;
      throw new TimeoutError(`timed out after ${bound} waiting for ${what} (${last})`);
    }
    const pause = Math.min(intervalMs, Math.max(10, (Date.now() - began) / 8));
    await new Promise<void>((resolve) => setTimeout(resolve, Math.min(pause, Math.max(0, deadline - Date.now()))));
  }
}
