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
 *
 * The connection announces itself as application_name `provisioner-notifications`, so an operator
 * (or a test) can find it in pg_stat_activity.
 */
import type pg from 'pg';
import pino, { type BaseLogger } from 'pino';
import { LoopHealth } from '../../runtime/loops/health.ts';

export const NOTIFICATIONS_APPLICATION_NAME = 'provisioner-notifications';

export type Unsubscribe = () => void;

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
  #started = false;
  #stopped = false;
  #attempt = 0;
  #timer: NodeJS.Timeout | undefined;
  /** Its connection attempts as rounds: a connection made, or lost or refused (the loop manager reports them). */
  readonly health = new LoopHealth('notifications');
  /** The first connection attempt (start() resolves after it). */
  #first: Promise<void> | undefined;

  constructor(opts: NotificationsOptions) {
    this.#pool = opts.pool;
    this.#log = opts.logger ?? pino({ enabled: false });
    this.#maxBackoffMs = opts.maxBackoffMs ?? 10_000;
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
    if (!this.#started) {
      this.#started = true;
      this.#first = this.#connect();
    }
    return this.#first ?? Promise.resolve();
  }

  /**
   * Stops reconnecting and closes the connection (its LISTENs end with the session). Never waits
   * on the database, which may be gone: a connection attempt still under way releases its client
   * itself when it sees the stop.
   */
  stop(): Promise<void> {
    this.#stopped = true;
    if (this.#timer) clearTimeout(this.#timer);
    const c = this.#client;
    this.#client = undefined;
    this.#listening.clear();
    if (c) this.#destroy(c);
    return Promise.resolve();
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
      this.#attempt = 0;
      this.health.succeed();
      // Subscribed while the LISTENs above ran: listen now.
      for (const ch of this.#subscribers.keys()) if (!this.#listening.has(ch)) this.#command(c, ch, 'LISTEN');
      // Unsubscribed meanwhile: stop listening.
      for (const ch of channels) if (!this.#subscribers.has(ch)) this.#command(c, ch, 'UNLISTEN');
      for (const ch of channels) this.#resync(ch);
    } catch (err) {
      if (client) this.#destroy(client);
      this.#retry(err);
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
    this.#retry(err);
  }

  #destroy(c: pg.PoolClient): void {
    try {
      c.release(true);
    } catch {
      // already released
    }
  }

  #retry(err: unknown): void {
    if (this.#stopped) return;
    this.health.fail(err);
    this.#attempt += 1;
    const delay = Math.min(this.#maxBackoffMs, 100 * 2 ** (this.#attempt - 1)) * (0.8 + 0.4 * Math.random());
    // Said when the connection is lost, then every tenth failed attempt: an outage is not a line per retry.
    if (this.#attempt === 1 || this.#attempt % 10 === 0) {
      this.#log.warn(
        { err: message(err), retryInMs: Math.round(delay), attempts: this.#attempt },
        'notifications: the LISTEN connection was lost; reconnecting',
      );
    }
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      void this.#connect();
    }, delay);
  }
}

function quoteIdent(name: string): string {
  return '"' + name.replaceAll('"', '""') + '"';
}

function message(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
