/**
 * The one "wait up to N ms, or until woken" of the code base: a polling loop's sleep between
 * rounds (waker.ts), a follower's wait for its NOTIFY channel (provisioner/db/channel-waiters.ts,
 * the tenants' change stream), a watch's reconnect delay (runtime/kube/reflector.ts), the event
 * reporter's idle sender, the wake-on-request poll. The wait is armed before the caller looks, so
 * a wake-up between its look and its wait is never lost; it ends on `wake()`, after `ms`, or when
 * `signal` aborts, whichever comes first, and leaves no timer or listener behind.
 */

export interface ArmedWait {
  /** Resolves once the wait ended (woken, timed out or aborted); never rejects. */
  readonly done: Promise<void>;
  /** Ends the wait now (idempotent; a plain function, to hand on as it is). */
  readonly wake: () => void;
}

/** A wait of at most `ms` (negative: none), ended early by `wake()` or by `signal` aborting. */
export function armWait(ms: number, signal?: AbortSignal): ArmedWait {
  let wake: () => void = () => {};
  const done = new Promise<void>((resolve) => {
    const timer = setTimeout(() => wake(), Math.max(0, ms));
    wake = () => {
      clearTimeout(timer);
      signal?.removeEventListener('abort', wake);
      resolve();
    };
  });
  if (signal?.aborted) wake();
  else signal?.addEventListener('abort', wake, { once: true });
  return { done, wake: () => wake() };
}

/** Waits `ms`, or less when `signal` aborts. */
export function wait(ms: number, signal?: AbortSignal): Promise<void> {
  return armWait(ms, signal).done;
}
