/**
 * Opens the provisioner's database: DATABASE_URL when given, otherwise an embedded PostgreSQL
 * under the data dir. Migrations run before the pool is handed out.
 */
import { once } from 'node:events';
import { join } from 'node:path';
import { setTimeout } from 'node:timers/promises';
import pg from 'pg';
import { CONNECT_TIMEOUT_MS, DatabaseHealth, guardPool } from './availability.ts';
import { startEmbeddedPostgres, type EmbeddedLog, type EmbeddedServer } from './embedded.ts';
import { migrate } from './migrate.ts';

// int8 (bigint) columns hold generations and counters well below 2^53: read them as numbers.
pg.types.setTypeParser(pg.types.builtins.INT8, (v) => Number(v));

export interface Database {
  pool: pg.Pool;
  url: string;
  embedded: boolean;
  /** Whether the database answers (shared by every pool of this database). */
  health: DatabaseHealth;
  close(): Promise<void>;
}

/**
 * A pool whose clients' errors are handled, idle or checked out (db/availability.ts). `extra`
 * adds connection settings (the write pool's session options).
 */
export function createPool(url: string, max = 20, health?: DatabaseHealth, extra: pg.PoolConfig = {}): pg.Pool {
  const pool = new pg.Pool({
    connectionString: url,
    max,
    idleTimeoutMillis: 30_000,
    connectionTimeoutMillis: CONNECT_TIMEOUT_MS,
    ...extra,
  });
  return guardPool(pool, health);
}

/** Longest wait at close for the pool's connections to close before the embedded server stops. */
const CLIENTS_END_MS = 5000;

export async function openDatabase(opts: {
  databaseUrl: string | undefined;
  dataDir: string;
  log?: (msg: string) => void;
  poolSize?: number;
  health?: DatabaseHealth;
  /** Lines about the embedded server by level (its death, restarts, a left-over server stopped). */
  embeddedLog?: EmbeddedLog;
}): Promise<Database> {
  const health = opts.health ?? new DatabaseHealth();
  let embedded: EmbeddedServer | undefined;
  let url = opts.databaseUrl;
  if (url === undefined) {
    // Supervised: a server that dies is restarted on the same port; the pool reconnects to it.
    embedded = await startEmbeddedPostgres(join(opts.dataDir, 'postgres'), opts.log, {
      supervise: true,
      ...(opts.embeddedLog ? { logger: opts.embeddedLog } : {}),
    });
    url = embedded.url;
  }
  const pool = createPool(url, opts.poolSize, health);
  // The pool's connections still open: pg-pool's end() resolves once it has asked each client to
  // end, not once its connection has closed, and an embedded server stopped before then
  // terminates them ("terminating connection due to administrator command"), which reads as an
  // outage at every shutdown.
  const open = new Set<pg.PoolClient>();
  pool.on('connect', (client) => {
    open.add(client);
    client.once('end', () => open.delete(client));
  });
  try {
    await migrate(pool);
  } catch (err) {
    await pool.end();
    await embedded?.stop();
    throw err;
  }
  return {
    pool,
    url,
    embedded: embedded !== undefined,
    health,
    async close() {
      await pool.end();
      if (embedded) {
        const ended = Promise.all([...open].map((client) => once(client, 'end')));
        await Promise.race([ended, setTimeout(CLIENTS_END_MS, undefined, { ref: false })]);
        await embedded.stop();
      }
    },
  };
}
