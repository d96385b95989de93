/**
 * LISTEN on Postgres channels with one dedicated connection that reconnects with backoff
 * (100 ms doubling to 10 s, with jitter). Notifications are hints: after every (re)connect the
 * owner is told (`onConnect`) so it can poll, since anything sent while disconnected is lost.
 */
import type pg from 'pg';

export interface ListenerOptions {
  pool: pg.Pool;
  channels: string[];
  onNotify: (channel: string, payload: string) => void;
  onConnect?: () => void;
  onError?: (err: unknown, retryInMs: number) => void;
  maxBackoffMs?: number;
}

export class Listener {
  readonly #o: ListenerOptions;
  #client: pg.PoolClient | undefined;
  #stopped = false;
  #attempt = 0;
  #timer: NodeJS.Timeout | undefined;

  constructor(opts: ListenerOptions) {
    this.#o = opts;
  }

  get connected(): boolean {
    return this.#client !== undefined;
  }

  start(): Promise<void> {
    this.#stopped = false;
    return this.#connect();
  }

  async #connect(): Promise<void> {
    if (this.#stopped) return;
    let client: pg.PoolClient | undefined;
    try {
      client = await this.#o.pool.connect();
      const c = client;
      c.on('notification', (n) => this.#o.onNotify(n.channel, n.payload ?? ''));
      c.on('error', (err) => this.#lost(c, err));
      c.on('end', () => this.#lost(c, new Error('listener connection ended')));
      for (const ch of this.#o.channels) await c.query(`LISTEN ${quoteIdent(ch)}`);
      if (this.#stopped) {
        c.release(true);
        return;
      }
      this.#client = c;
      this.#attempt = 0;
      this.#o.onConnect?.();
    } catch (err) {
      client?.release(true);
      this.#retry(err);
    }
  }

  #lost(c: pg.PoolClient, err: unknown): void {
    if (this.#client !== c) return;
    this.#client = undefined;
    try {
      c.release(true);
    } catch {
      // already released
    }
    this.#retry(err);
  }

  #retry(err: unknown): void {
    if (this.#stopped) return;
    this.#attempt += 1;
    const cap = this.#o.maxBackoffMs ?? 10_000;
    const delay = Math.min(cap, 100 * 2 ** (this.#attempt - 1)) * (0.8 + 0.4 * Math.random());
    this.#o.onError?.(err, Math.round(delay));
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      void this.#connect();
    }, delay);
  }

  /** Drops the connection as if the network failed (tests). */
  simulateDisconnect(): void {
    const c = this.#client;
    if (c) this.#lost(c, new Error('simulated disconnect'));
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    if (this.#timer) clearTimeout(this.#timer);
    // A connection attempt still under way is not waited for (the database may be gone): it
    // releases its client itself when it sees the stop.
    const c = this.#client;
    this.#client = undefined;
    if (c) {
      try {
        await c.query('UNLISTEN *');
      } catch {
        // the connection is going away anyway
      }
      c.release(true);
    }
  }
}

function quoteIdent(name: string): string {
  return '"' + name.replaceAll('"', '""') + '"';
}
