/**
 * Test databases. Each test file gets its own freshly migrated database on one server:
 * DATABASE_URL when set (it must allow CREATE DATABASE), else TEST_PG_URL (the embedded server
 * scripts/test.sh starts for a whole run), else an embedded server started for this file.
 *
 * Every statement here is a database-level fact or act, not a product's row: databases made and
 * dropped, the clock, locks, sessions, settings, statistics and migrations as Postgres shows them,
 * a schema emptied, and the bare job queue that is a benchmark's baseline.
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

/** Creates an empty database `name` on the server at `serverUrl` (a maintenance database's URL); answers its URL. */
export async function createDatabase(serverUrl: string, name: string): Promise<string> {
  const admin = new pg.Client({ connectionString: serverUrl });
  await admin.connect();
  try {
    await admin.query(`CREATE DATABASE ${pg.escapeIdentifier(name)}`);
  } finally {
    await admin.end();
  }
  const url = new URL(serverUrl);
  url.pathname = `/${name}`;
  return url.toString();
}

/** Drops the database `name` of the server at `serverUrl`, its sessions ended first; nothing when there is none. */
export async function dropDatabase(serverUrl: string, name: string): Promise<void> {
  const admin = new pg.Client({ connectionString: serverUrl });
  await admin.connect();
  try {
    await admin.query(`DROP DATABASE IF EXISTS ${pg.escapeIdentifier(name)} WITH (FORCE)`);
  } finally {
    await admin.end();
  }
}

/**
 * A database of its own for a test file or a benchmark, migrated unless told (`migrate: false`),
 * with a pool of `poolSize` connections (the product's default unless told).
 */
export async function createTestDatabase(opts: { migrate?: boolean; poolSize?: number } = {}): Promise<TestDatabase> {
  const server = await serverUrl();
  const name = `test_${process.pid}_${randomBytes(4).toString('hex')}`;
  const url = await createDatabase(server.url, name);
  const pool = opts.poolSize === undefined ? createPool(url) : createPool(url, opts.poolSize);
  if (opts.migrate !== false) await migrate(pool);
  return {
    url,
    pool,
    adminUrl: server.url,
    async drop() {
      await pool.end();
      await dropDatabase(server.url, name);
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

/** Writes every dirty buffer out now (CHECKPOINT): a benchmark's measure then starts without a pending one. */
export async function checkpoint(db: Queryable): Promise<void> {
  await db.query('CHECKPOINT');
}

/** A database's transactions so far, committed and rolled back, as the server's statistics count them. */
export interface TransactionCounts {
  commits: number;
  rollbacks: number;
}

/**
 * The transactions of database `name` so far (pg_stat_database), from a fresh statistics snapshot.
 * Read over a connection to another database (the server's maintenance one), the read commits
 * nothing in `name`.
 */
export async function databaseTransactions(db: Queryable, name: string): Promise<TransactionCounts> {
  await db.query('SELECT pg_stat_clear_snapshot()');
  const { rows } = await db.query<{ c: string; r: string }>(
    'SELECT xact_commit AS c, xact_rollback AS r FROM pg_stat_database WHERE datname = $1',
    [name],
  );
  return { commits: Number(rows[0]!.c), rollbacks: Number(rows[0]!.r) };
}

/** How a table of the database was read so far: sequential scans, the rows they read, index scans (pg_stat_user_tables). */
export interface TableScans {
  seqScans: number;
  seqTupRead: number;
  idxScans: number;
}

/** The scans of `table` so far (read in the database itself: the read is one transaction there). */
export async function tableScans(db: Queryable, table: string): Promise<TableScans> {
  const { rows } = await db.query<{ s: string; t: string; i: string }>(
    'SELECT seq_scan AS s, seq_tup_read AS t, coalesce(idx_scan, 0) AS i FROM pg_stat_user_tables WHERE relname = $1',
    [table],
  );
  return { seqScans: Number(rows[0]!.s), seqTupRead: Number(rows[0]!.t), idxScans: Number(rows[0]!.i) };
}

/**
 * The plans of the statements `run` sends through the Queryable it is given: each statement is
 * EXPLAINed (not run) in a transaction of its own connection, rolled back at the end. Each plan is
 * answered as `label: <its scans>` (`Seq Scan on tenants`, `Index Scan using … on …`), under the
 * label `run` last set; `run` reads real rows through `read` (in the same transaction).
 */
export async function explainedPlans(
  pool: pg.Pool,
  run: (explaining: Queryable, label: (name: string) => void, read: Queryable) => Promise<void>,
): Promise<string[]> {
  const client = await pool.connect();
  const out: string[] = [];
  let current = '';
  const explaining: Queryable = {
    query: (async (sql: string, params?: unknown[]) => {
      const { rows } = await client.query<{ 'QUERY PLAN': string }>(`EXPLAIN ${sql}`, params);
      const nodes = rows
        .map((r) =>
          /(Seq Scan|Index Only Scan|Bitmap Index Scan|Index Scan)(?: using (\S+))? on (\w+)/.exec(r['QUERY PLAN']),
        )
        .filter((m): m is RegExpExecArray => m !== null)
        .map((m) => `${m[1]}${m[2] ? ` using ${m[2]}` : ''} on ${m[3]}`);
      out.push(`${current}: ${nodes.join(', ') || rows[0]!['QUERY PLAN']}`);
      return { rows: [], rowCount: 0 };
    }) as unknown as Queryable['query'],
  };
  try {
    await client.query('BEGIN');
    await run(explaining, (name) => (current = name), client);
    await client.query('ROLLBACK');
  } finally {
    client.release();
  }
  return out;
}

/**
 * A bare job queue (a table `bench_jobs` of `n` rows, not the product's): a benchmark's baseline
 * for what a Postgres-backed loop can reach on the machine. `claimOne` claims and completes one job
 * in one statement (FOR UPDATE SKIP LOCKED), false when none is left.
 */
export async function bareJobQueue(db: Queryable, n: number): Promise<{ claimOne(): Promise<boolean> }> {
  await db.query('CREATE TABLE bench_jobs (id int PRIMARY KEY, done boolean NOT NULL DEFAULT false)');
  await db.query('INSERT INTO bench_jobs SELECT g FROM generate_series(1, $1) g', [n]);
  return {
    async claimOne() {
      const { rowCount } = await db.query(
        `UPDATE bench_jobs SET done = true WHERE id = (SELECT id FROM bench_jobs WHERE NOT done LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING id`,
      );
      return (rowCount ?? 0) > 0;
    },
  };
}
