/**
 * The fleet's change stream (GET /v1/tenants/events): tenants in the order of their latest change
 * (migration 012 numbers every change from tenant_change_seq), woken through the notifications hub
 * on `tenant_changed` by whichever replica or reconciler wrote the change, with a poll as a
 * safety net.
 *
 * Numbers are taken when a row is written and transactions commit in any order, so a change may
 * become visible after a higher-numbered one was sent. A follower therefore reads back LOOKBACK
 * numbers behind the highest it sent and skips the (tenant, number) pairs it already sent: a late
 * commit within that window is still delivered, and nothing is sent twice.
 */
import type pg from 'pg';
import type { Notifications, Unsubscribe } from '../db/notifications.ts';
import { latestTenantChange, readTenantChanges, type TenantRow } from '../store/tenants.ts';
import { armWait } from '../../runtime/loops/wait.ts';

export const TENANT_CHANGE_CHANNEL = 'tenant_changed';
const LOOKBACK = 256n;

export interface FollowTenantsOptions {
  /** Start after this change number. */
  afterSeq: string;
  /** Only this tenant's changes. */
  onlyId?: string;
  signal: AbortSignal;
  /** Polling interval when no notification arrives (default 2000 ms). */
  pollMs?: number;
}

export class TenantChangeService {
  readonly #pool: pg.Pool;
  readonly #notifications: Notifications | undefined;
  readonly #waiters = new Set<() => void>();
  #unsubscribe: Unsubscribe | undefined;

  constructor(opts: { pool: pg.Pool; notifications?: Notifications }) {
    this.#pool = opts.pool;
    this.#notifications = opts.notifications;
  }

  latestSeq(): Promise<string> {
    return latestTenantChange(this.#pool);
  }

  /** Tenants changed after `afterSeq`, then as they change (on any replica), until `signal` aborts. */
  async *follow(opts: FollowTenantsOptions): AsyncGenerator<TenantRow & { change_seq: string }> {
    let high = BigInt(opts.afterSeq);
    const floor = high;
    const pollMs = opts.pollMs ?? 2000;
    /** (tenant id, number) pairs sent within the lookback window. */
    const sent = new Map<string, bigint>();
    while (!opts.signal.aborted) {
      const armed = this.#arm(pollMs, opts.signal);
      let from = high - LOOKBACK;
      if (from < floor) from = floor;
      const rows = await readTenantChanges(this.#pool, from.toString(), 500, opts.onlyId);
      let fresh = 0;
      for (const row of rows) {
        if (opts.signal.aborted) return;
        const seq = BigInt(row.change_seq!);
        const key = `${row.id}:${seq}`;
        if (sent.has(key)) continue;
        sent.set(key, seq);
        fresh += 1;
        if (seq > high) high = seq;
        yield row as TenantRow & { change_seq: string };
      }
      for (const [key, seq] of sent) if (seq <= high - LOOKBACK) sent.delete(key);
      if (fresh > 0 && rows.length === 500) armed.cancel();
      else await armed.done;
    }
  }

  #ensureListening(): void {
    if (this.#unsubscribe || !this.#notifications) return;
    const wakeAll = () => {
      for (const fn of [...this.#waiters]) fn();
    };
    // After a reconnect anything may have been missed: every follower reads again.
    this.#unsubscribe = this.#notifications.subscribe(TENANT_CHANGE_CHANNEL, wakeAll, wakeAll);
  }

  /** A wait armed before reading: resolves on a notification, after `ms`, or on abort. */
  #arm(ms: number, signal: AbortSignal): { done: Promise<void>; cancel: () => void } {
    this.#ensureListening();
    const wait = armWait(ms, signal);
    this.#waiters.add(wait.wake);
    const done = wait.done.then(() => void this.#waiters.delete(wait.wake));
    return { done, cancel: wait.wake };
  }

  /** Wakes every follower (they see their signal) and stops listening. */
  close(): void {
    for (const fn of [...this.#waiters]) fn();
    this.#unsubscribe?.();
    this.#unsubscribe = undefined;
  }
}
