/**
 * Test databases. Each test file gets its own freshly migrated database on one server:
 * DATABASE_URL when set (it must allow CREATE DATABASE), else TEST_PG_URL (the embedded server
 * scripts/test.sh starts for a whole run), else an embedded server started for this file.
 */
import type { Queryable } from '../../provisioner/db/tx.ts';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { createPool } from '../../provisioner/db/database.ts';
import { startEmbeddedPostgres } from '../../provisioner/db/embedded.ts';
import { migrate } from '../../provisioner/db/migrate.ts';

export interface TestDatabase {
  url: string;
  pool: pg.Pool;
  /** Connection string of the server's maintenance database (for CREATE DATABASE). */
  adminUrl: string;
  drop(): Promise<void>;
}

async function serverUrl(): Promise<{ url: string; stop: () => Promise<void> }> {
  const given = process.env.DATABASE_URL || process.env.TEST_PG_URL;
  if (given) return { url: given, stop: async () => {} };
  const dir = await mkdtemp(join(tmpdir(), 'hrt-pg-'));
  const server = await startEmbeddedPostgres(dir);
  return {
    url: server.url,
    stop: async () => {
      await server.stop();
      await rm(dir, { recursive: true, force: true });
    },
  };
}

export async function createTestDatabase(opts: { migrate?: boolean } = {}): Promise<TestDatabase> {
  const server = await serverUrl();
  const name = `test_${process.pid}_${randomBytes(4).toString('hex')}`;
  const admin = new pg.Client({ connectionString: server.url });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${name}`);
  await admin.end();
  const url = new URL(server.url);
  url.pathname = `/${name}`;
  const pool = createPool(url.toString());
  if (opts.migrate !== false) await migrate(pool);
  return {
    url: url.toString(),
    pool,
    adminUrl: server.url,
    async drop() {
      await pool.end();
      const c = new pg.Client({ connectionString: server.url });
      await c.connect();
      await c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      await c.end();
      await server.stop();
    },
  };
}

/** A connection of its own that LISTENs on a channel: what the product NOTIFYs there, seen by a test. */
export interface Listener {
  /** Resolves with the payload once a notification carrying it has come (since the listener started). */
  notified(payload: string): Promise<string>;
  end(): Promise<void>;
}

/** LISTENs on `channel` of the database at `url` on a connection of its own (answers once it listens). */
export async function listenTo(url: string, channel: string): Promise<Listener> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  const seen = new Set<string>();
  const waiting = new Map<string, Array<(payload: string) => void>>();
  client.on('notification', (n) => {
    const payload = n.payload ?? '';
    seen.add(payload);
    for (const resolve of waiting.get(payload) ?? []) resolve(payload);
    waiting.delete(payload);
  });
  await client.query(`LISTEN ${pg.escapeIdentifier(channel)}`);
  return {
    notified: (payload) =>
      seen.has(payload)
        ? Promise.resolve(payload)
        : new Promise((resolve) => waiting.set(payload, [...(waiting.get(payload) ?? []), resolve])),
    end: () => client.end(),
  };
}

/** The database's clock (what its leases and timestamps are compared with). */
export async function databaseNow(db: pg.Pool | pg.PoolClient): Promise<Date> {
  const { rows } = await db.query<{ now: Date }>('SELECT now() AS now');
  return rows[0]!.now;
}

/** A transaction held open on a connection of its own, with the locks it took, until released. */
export interface HeldTransaction {
  /** Ends the transaction (rolled back: it only held locks) and gives the connection back. */
  release(): Promise<void>;
}

/**
 * Opens a transaction on a connection of its own, lets `take` take its locks in it (the store's or
 * db/'s lock functions, as another replica would), and holds them until `release()`.
 */
export async function holdTransaction(
  pool: pg.Pool,
  take: (c: pg.PoolClient) => Promise<unknown>,
): Promise<HeldTransaction> {
  const c = await pool.connect();
  try {
    await c.query('BEGIN');
    await take(c);
  } catch (err) {
    await c.query('ROLLBACK').catch(() => {});
    c.release();
    throw err;
  }
  return {
    release: async () => {
      try {
        await c.query('ROLLBACK');
      } finally {
        c.release();
      }
    },
  };
}

/** How many advisory lock requests of this database (not the server's others) are waiting. */
export async function waitingAdvisoryLocks(db: pg.Pool | pg.PoolClient): Promise<number> {
  const { rows } = await db.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM pg_locks
      WHERE locktype = 'advisory' AND NOT granted
        AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`,
  );
  return rows[0]!.n;
}

/**
 * The sessions of this database (the caller's own left out) whose connection is named
 * `applicationName` and whose statement holds `statementPart` (pg_stat_activity cuts the text
 * at track_activity_query_size, 1 KiB: give a part near its start).
 */
export async function sessionCount(
  db: Queryable,
  s: { applicationName: string; statementPart: string },
): Promise<number> {
  const { rows } = await db.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()
        AND application_name = $1 AND position($2 in query) > 0`,
    [s.applicationName, s.statementPart],
  );
  return rows[0]!.n;
}

/** A run-time setting's value on the connection that runs the query (`plan_cache_mode`, …). */
export async function sessionSetting(db: Queryable, name: string): Promise<string> {
  const { rows } = await db.query<{ value: string }>('SELECT current_setting($1) AS value', [name]);
  return rows[0]!.value;
}

/**
 * The migrations applied to a database, as its schema_migrations table records them (ascending);
 * undefined when it has no such table (never migrated). For a database the test reaches from
 * outside, as a provisioner pointed at it leaves it.
 */
export async function appliedMigrations(db: Queryable): Promise<number[] | undefined> {
  const { rows: table } = await db.query<{ t: string | null }>("SELECT to_regclass('public.schema_migrations') AS t");
  if (!table[0]?.t) return undefined;
  const { rows } = await db.query<{ version: number }>('SELECT version FROM schema_migrations ORDER BY version');
  return rows.map((r) => Number(r.version));
}

/** Empties a database a benchmark was given (DATABASE_URL) or started: its public schema dropped and made again, for migrate. */
export async function emptyPublicSchema(db: Queryable): Promise<void> {
  await db.query('DROP SCHEMA public CASCADE; CREATE SCHEMA public');
}

/** Refreshes the planner's statistics after a seed (ANALYZE; with `vacuum`, VACUUM ANALYZE: the dead rows of the seed's updates reclaimed too). */
export async function refreshStatistics(db: Queryable, o: { vacuum?: boolean } = {}): Promise<void> {
  await db.query(o.vacuum ? 'VACUUM ANALYZE' : 'ANALYZE');
}
