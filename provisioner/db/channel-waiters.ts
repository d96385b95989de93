/**
 * Followers of a NOTIFY channel whose payload is a key (a runtime id): each follower arms a wait
 * before it reads, so a notification that arrives between its read and its wait is never lost,
 * and the wait ends on a notification for its key, after a poll interval (polling is the truth),
 * or when its request aborts. One subscription per channel and process, made when the first
 * follower arms; after a lost connection every follower reads again. The runtime objects' and the
 * application history's change streams follow their channels with it.
 */
import { armWait } from '../../runtime/loops/wait.ts';
import type { Notifications, Unsubscribe } from './notifications.ts';

export interface ArmedWait {
  /** Resolves on a notification for the key, after the interval, or on abort. */
  done: Promise<void>;
  /** Ends the wait now (the read found something). */
  cancel: () => void;
}

export class ChannelWaiters {
  readonly #notifications: Notifications | undefined;
  readonly #channel: string;
  readonly #waiters = new Map<string, Set<() => void>>();
  #unsubscribe: Unsubscribe | undefined;

  /** Without `notifications`, waits end after their interval only. */
  constructor(notifications: Notifications | undefined, channel: string) {
    this.#notifications = notifications;
    this.#channel = channel;
  }

  /** A wait armed before reading: resolves on a notification for `key`, after `ms`, or on abort. */
  arm(key: string, ms: number, signal: AbortSignal): ArmedWait {
    this.#ensureListening();
    let set = this.#waiters.get(key);
    if (!set) this.#waiters.set(key, (set = new Set()));
    const waiters = set;
    const wait = armWait(ms, signal);
    waiters.add(wait.wake);
    const done = wait.done.then(() => {
      waiters.delete(wait.wake);
      if (waiters.size === 0 && this.#waiters.get(key) === waiters) this.#waiters.delete(key);
    });
    return { done, cancel: wait.wake };
  }

  /** Wakes every follower (they see their signal) and stops listening. */
  close(): void {
    for (const key of [...this.#waiters.keys()]) this.#wake(key);
    this.#unsubscribe?.();
    this.#unsubscribe = undefined;
  }

  #ensureListening(): void {
    if (this.#unsubscribe || !this.#notifications) return;
    this.#unsubscribe = this.#notifications.subscribe(
      this.#channel,
      (key) => this.#wake(key),
      // After a reconnect anything may have been missed: every follower reads again.
      () => {
        for (const key of [...this.#waiters.keys()]) this.#wake(key);
      },
    );
  }

  #wake(key: string): void {
    for (const fn of [...(this.#waiters.get(key) ?? [])]) fn();
  }
}
