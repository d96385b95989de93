/**
 * Following an operation's log live: an async iterator over log lines that first returns what is
 * stored, then new lines as the engine writes them, and ends once the operation has finished and
 * every line has been read. New lines are announced by NOTIFY on `operation_log` (payload: the
 * operation id) through the process's notifications hub; polling (`pollMs`) covers lost
 * notifications and a hub that cannot listen.
 */
import type pg from 'pg';
import { OPERATION_LOG_CHANNEL, operationState, readLog, type LogLine } from '../store/operations.ts';
import type { Notifications, Unsubscribe } from '../db/notifications.ts';

const FINISHED = new Set(['succeeded', 'failed', 'cancelled', 'superseded']);

export class OperationNotFoundError extends Error {
  override name = 'OperationNotFoundError';
}

export interface FollowOptions {
  /** Start after this sequence number (0: from the beginning; SSE Last-Event-ID). */
  afterSeq?: number;
  /** Ends the iteration (client went away). */
  signal?: AbortSignal;
  /** Polling interval when no notification arrives (default 1000 ms). */
  pollMs?: number;
  /** Lines read per query (default 500). */
  batch?: number;
}

/** Wakes the followers of a process on `operation_log` notifications (one subscription to the hub). */
export class OperationLogHub {
  readonly #pool: pg.Pool;
  readonly #notifications: Notifications | undefined;
  readonly #waiters = new Map<string, Set<() => void>>();
  #unsubscribe: Unsubscribe | undefined;

  /** Without `notifications` followers only poll. */
  constructor(pool: pg.Pool, notifications?: Notifications) {
    this.#pool = pool;
    this.#notifications = notifications;
  }

  #ensureListening(): void {
    if (this.#unsubscribe) return;
    // After a reconnect anything may have been missed: wake everyone to read.
    this.#unsubscribe = this.#notifications?.subscribe(
      OPERATION_LOG_CHANNEL,
      (id) => this.#wake(id),
      () => {
        for (const id of [...this.#waiters.keys()]) this.#wake(id);
      },
    );
  }

  #wake(id: string): void {
    const set = this.#waiters.get(id);
    if (!set) return;
    for (const fn of [...set]) fn();
  }

  /**
   * Arms a wait for `id` before the caller reads: `done` resolves on a notification, after `ms`,
   * or when `signal` aborts; `cancel()` drops it when the caller has no need to wait.
   */
  arm(id: string, ms: number, signal?: AbortSignal): { done: Promise<void>; cancel: () => void } {
    this.#ensureListening();
    let set = this.#waiters.get(id);
    if (!set) this.#waiters.set(id, (set = new Set()));
    const waiters = set;
    let finish: () => void = () => {};
    const timers: NodeJS.Timeout[] = [];
    const done = new Promise<void>((resolve) => {
      finish = () => {
        for (const t of timers) clearTimeout(t);
        signal?.removeEventListener('abort', finish);
        waiters.delete(finish);
        if (waiters.size === 0 && this.#waiters.get(id) === waiters) this.#waiters.delete(id);
        resolve();
      };
    });
    timers.push(setTimeout(finish, ms));
    signal?.addEventListener('abort', finish, { once: true });
    waiters.add(finish);
    return { done, cancel: finish };
  }

  follow(operationId: string, opts: FollowOptions = {}): AsyncGenerator<LogLine> {
    return followOperationLog(this.#pool, operationId, { ...opts, hub: this });
  }

  async close(): Promise<void> {
    for (const id of [...this.#waiters.keys()]) this.#wake(id);
    this.#unsubscribe?.();
    this.#unsubscribe = undefined;
  }
}

/**
 * Yields the operation's log lines, following new ones until the operation finishes. Throws
 * OperationNotFoundError for an unknown id. Without a hub it only polls.
 */
export async function* followOperationLog(
  pool: pg.Pool,
  operationId: string,
  opts: FollowOptions & { hub?: OperationLogHub } = {},
): AsyncGenerator<LogLine> {
  let after = opts.afterSeq ?? 0;
  const batch = opts.batch ?? 500;
  const pollMs = opts.pollMs ?? 1000;
  if ((await operationState(pool, operationId)) === undefined)
    throw new OperationNotFoundError(`operation ${operationId} does not exist`);
  while (!opts.signal?.aborted) {
    const armed = opts.hub?.arm(operationId, pollMs, opts.signal);
    // Read the state first: lines are stored before an operation finishes, so a finished state
    // followed by an empty read means the log is complete.
    const state = await operationState(pool, operationId);
    const lines = await readLog(pool, operationId, after, batch);
    const finished = state === undefined || FINISHED.has(state);
    if (lines.length > 0 || finished) armed?.cancel();
    for (const line of lines) {
      if (opts.signal?.aborted) return;
      after = line.seq;
      yield line;
    }
    if (lines.length > 0) continue;
    if (finished) return;
    if (armed) await armed.done;
    else await sleep(pollMs, opts.signal);
  }
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(t);
      signal?.removeEventListener('abort', done);
      resolve();
    };
    const t = setTimeout(done, ms);
    signal?.addEventListener('abort', done, { once: true });
  });
}
