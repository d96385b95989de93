/**
 * The process's notifications hub: one dedicated LISTEN connection shared by everything in the
 * process that waits on Postgres NOTIFY (the reconciler's `tenant_due`, the tunnel directory's
 * `runtime_tunnel`, key revocations, live operation logs).
 *
 * - `subscribe(channel, onNotify, onResync?)` returns the function that unsubscribes. The hub
 *   LISTENs on a channel while it has subscribers and UNLISTENs when the last one leaves.
 * - Notifications are hints: one sent while the connection is down is lost. So whenever a
 *   subscriber's channel starts being listened on a connection (its first LISTEN, and again after
 *   every reconnect), its `onResync` is called so it can catch up by reading the database.
 * - A lost connection (error, end, a failed LISTEN) is replaced with backoff: 100 ms doubling to
 *   `maxBackoffMs` (10 s), with jitter. Errors on the connection are handled here, never left as an
 *   unhandled 'error' event.
 * - The connecting is the `notifications` loop (runtime/loops/periodic.ts, under the loop
 *   manager): a round connects and LISTENs when there is no connection (a loss is a failed round,
 *   then the backoff), and does nothing while the connection is up; a lost connection wakes it.
 *   One attempt at a time; a stop ends the attempt in flight without waiting on the database.
 *
 * The connection announces itself as application_name `provisioner-notifications`, so an operator
 * (or a test) can find it in pg_stat_activity.
 */
import type pg from 'pg';
import pino, { type BaseLogger } from 'pino';
import type { LoopHealth } from '../../runtime/loops/health.ts';
import { PeriodicLoop } from '../../runtime/loops/periodic.ts';

export const NOTIFICATIONS_APPLICATION_NAME = 'provisioner-notifications';

export type Unsubscribe = () => void;

/** A round while the connection is up does nothing; a loss wakes the loop at once. */
const CONNECTED_ROUND_MS = 3_600_000;

interface Subscriber {
  onNotify: (payload: string) => void;
  onResync: (() => void) | undefined;
}

export interface NotificationsOptions {
  /** The LISTEN connection is taken from this pool and never given back (destroyed on loss). */
  pool: pg.Pool;
  logger?: BaseLogger;
  maxBackoffMs?: number;
}

export class Notifications {
  readonly #pool: pg.Pool;
  readonly #log: BaseLogger;
  readonly #maxBackoffMs: number;
  readonly #subscribers = new Map<string, Set<Subscriber>>();
  /** Channels LISTENed on the current connection. */
  readonly #listening = new Set<string>();
  #client: pg.PoolClient | undefined;
  /** LISTEN/UNLISTEN statements on the current connection, one after the other. */
  #commands: Promise<void> = Promise.resolve();
  /** Why the connection was lost, until the next round counts it as a failure. */
  #lostBy: { err: unknown } | undefined;
  /**
   * Its connection attempts as rounds: a connection made, or lost or refused (the loop manager
   * starts, stops and reports it). start() resolves after the first attempt.
   */
  readonly loop: PeriodicLoop;

  constructor(opts: NotificationsOptions) {
    this.#pool = opts.pool;
    this.#log = opts.logger ?? pino({ enabled: false });
    this.#maxBackoffMs = opts.maxBackoffMs ?? 10_000;
    this.loop = new PeriodicLoop({
      name: 'notifications',
      round: (signal) => this.#round(signal),
      intervalMs: () => CONNECTED_ROUND_MS,
      retryMs: (failures) => Math.min(this.#maxBackoffMs, 100 * 2 ** (failures - 1)) * (0.8 + 0.4 * Math.random()),
      onFailure: (err, retryInMs, failures) => {
        // Said when the connection is lost, then every tenth failed attempt: an outage is not a line per retry.
        if (failures === 1 || failures % 10 === 0)
          this.#log.warn(
            { err: message(err), retryInMs: Math.round(retryInMs), attempts: failures },
            'notifications: the LISTEN connection was lost; reconnecting',
          );
      },
      startAfterFirstRound: true,
      tearDown: () => this.#close(),
    });
  }

  /** The loop's health record (rounds: connection attempts). */
  get health(): LoopHealth {
    return this.loop.health;
  }

  get #stopped(): boolean {
    return this.loop.stopping;
  }

  /** The LISTEN connection is up. */
  get connected(): boolean {
    return this.#client !== undefined;
  }

  /** `channel` is being listened on the current connection. */
  listening(channel: string): boolean {
    return this.#client !== undefined && this.#listening.has(channel);
  }

  /**
   * Calls `onNotify(payload)` for every notification on `channel`, and `onResync()` whenever the
   * channel starts being listened on a connection (notifications may have been missed before).
   */
  subscribe(channel: string, onNotify: (payload: string) => void, onResync?: () => void): Unsubscribe {
    const sub: Subscriber = { onNotify, onResync };
    let set = this.#subscribers.get(channel);
    if (!set) this.#subscribers.set(channel, (set = new Set()));
    set.add(sub);
    const c = this.#client;
    if (c) {
      if (this.#listening.has(channel)) queueMicrotask(() => this.#call(sub.onResync));
      else this.#command(c, channel, 'LISTEN');
    }
    return () => {
      const current = this.#subscribers.get(channel);
      if (!current?.delete(sub) || current.size > 0) return;
      this.#subscribers.delete(channel);
      const client = this.#client;
      if (client && this.#listening.has(channel)) this.#command(client, channel, 'UNLISTEN');
    };
  }

  /** Connects and LISTENs on the channels subscribed so far; resolves after the first attempt (a failed one is retried). */
  start(): Promise<void> {
    return this.loop.start();
  }

  /**
   * Stops reconnecting and closes the connection (its LISTENs end with the session). Never waits
   * on the database, which may be gone: the attempt in flight ends its round at once and releases
   * its client itself when it sees the stop.
   */
  stop(): Promise<void> {
    return this.loop.stop();
  }

  /** A round of the loop: a loss since the last one is its failure; without a connection, connects. */
  async #round(signal: AbortSignal): Promise<void> {
    const lost = this.#lostBy;
    this.#lostBy = undefined;
    if (lost) throw lost.err;
    if (this.#client || signal.aborted) return;
    await new Promise<void>((resolve, reject) => {
      signal.addEventListener('abort', () => resolve(), { once: true });
      this.#connect().then(resolve, reject);
    });
  }

  /** After the last round: the connection closes (its LISTENs end with the session). */
  #close(): void {
    const c = this.#client;
    this.#client = undefined;
    this.#listening.clear();
    if (c) this.#destroy(c);
  }

  /** Drops the connection as if the network failed. For tests of reconnects and missed notifications only. */
  simulateDisconnect(): void {
    const c = this.#client;
    if (c) this.#lost(c, new Error('simulated disconnect'));
  }

  async #connect(): Promise<void> {
    if (this.#stopped) return;
    let client: pg.PoolClient | undefined;
    try {
      client = await this.#pool.connect();
      const c = client;
      if (this.#stopped) {
        this.#destroy(c);
        return;
      }
      c.on('notification', (n) => this.#notify(n.channel, n.payload ?? ''));
      c.on('error', (err) => this.#lost(c, err));
      c.on('end', () => this.#lost(c, new Error('notifications connection ended')));
      await c.query(`SET application_name = '${NOTIFICATIONS_APPLICATION_NAME}'`);
      const channels = [...this.#subscribers.keys()];
      for (const ch of channels) await c.query(`LISTEN ${quoteIdent(ch)}`);
      if (this.#stopped) {
        this.#destroy(c);
        return;
      }
      this.#client = c;
      this.#commands = Promise.resolve();
      this.#listening.clear();
      for (const ch of channels) this.#listening.add(ch);
      // Subscribed while the LISTENs above ran: listen now.
      for (const ch of this.#subscribers.keys()) if (!this.#listening.has(ch)) this.#command(c, ch, 'LISTEN');
      // Unsubscribed meanwhile: stop listening.
      for (const ch of channels) if (!this.#subscribers.has(ch)) this.#command(c, ch, 'UNLISTEN');
      for (const ch of channels) this.#resync(ch);
    } catch (err) {
      if (client) this.#destroy(client);
      throw err;
    }
  }

  /** Runs LISTEN or UNLISTEN of `channel` on `c` after the statements before it; a failure drops the connection. */
  #command(c: pg.PoolClient, channel: string, verb: 'LISTEN' | 'UNLISTEN'): void {
    if (verb === 'UNLISTEN') this.#listening.delete(channel);
    this.#commands = this.#commands.then(async () => {
      if (this.#client !== c) return;
      if (verb === 'LISTEN' && (this.#listening.has(channel) || !this.#subscribers.has(channel))) return;
      if (verb === 'UNLISTEN' && this.#subscribers.has(channel)) return;
      try {
        await c.query(`${verb} ${quoteIdent(channel)}`);
      } catch (err) {
        this.#lost(c, err);
        return;
      }
      if (verb === 'LISTEN' && this.#client === c) {
        this.#listening.add(channel);
        this.#resync(channel);
      }
    });
  }

  #notify(channel: string, payload: string): void {
    for (const sub of [...(this.#subscribers.get(channel) ?? [])]) this.#call(() => sub.onNotify(payload));
  }

  #resync(channel: string): void {
    for (const sub of [...(this.#subscribers.get(channel) ?? [])]) this.#call(sub.onResync);
  }

  /** A subscriber's failure is logged and stays its own. */
  #call(fn: (() => void) | undefined): void {
    if (!fn) return;
    try {
      fn();
    } catch (err) {
      this.#log.error({ err: message(err) }, 'a notification subscriber failed');
    }
  }

  #lost(c: pg.PoolClient, err: unknown): void {
    if (this.#client !== c) return;
    this.#client = undefined;
    this.#listening.clear();
    this.#destroy(c);
    if (this.#stopped) return;
    // The next round (now) counts the loss as a failure; the one after it reconnects after the backoff.
    this.#lostBy = { err };
    this.loop.kick();
  }

  #destroy(c: pg.PoolClient): void {
    try {
      c.release(true);
    } catch {
      // already released
    }
  }
}

function quoteIdent(name: string): string {
  return '"' + name.replaceAll('"', '""') + '"';
}

function message(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
