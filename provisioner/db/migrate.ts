/**
 * Numbered SQL migrations (provisioner/db/migrations/NNN_name.sql), applied in order, each in its
 * own transaction, under a session advisory lock so that several processes starting together
 * apply each migration exactly once. The applied versions are stored in schema_migrations.
 */
import { readdir, readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import type pg from 'pg';

const MIGRATIONS_DIR = fileURLToPath(new URL('./migrations/', import.meta.url));
/** Advisory lock key: any constant unique to this application ("hrtmigr" in ASCII). */
const LOCK_KEY = 0x6872746d69677200n;

export interface Migration {
  version: number;
  name: string;
  sql: string;
}

export async function loadMigrations(dir = MIGRATIONS_DIR): Promise<Migration[]> {
  const files = (await readdir(dir)).filter((f) => f.endsWith('.sql')).sort();
  const out: Migration[] = [];
  for (const file of files) {
    const m = /^(\d+)_([\w-]+)\.sql$/.exec(file);
    if (!m) throw new Error(`migration file '${file}' must be named NNN_name.sql`);
    const version = Number(m[1]);
    if (out.some((x) => x.version === version)) throw new Error(`migration version ${version} appears twice`);
    out.push({ version, name: m[2]!, sql: await readFile(dir + file, 'utf8') });
  }
  return out;
}

/** Applies pending migrations; returns the versions it applied. */
export async function migrate(pool: pg.Pool, migrations?: Migration[]): Promise<number[]> {
  const all = migrations ?? (await loadMigrations());
  const client = await pool.connect();
  const applied: number[] = [];
  try {
    await client.query('SELECT pg_advisory_lock($1)', [LOCK_KEY.toString()]);
    try {
      await client.query(`CREATE TABLE IF NOT EXISTS schema_migrations (
        version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`);
      const { rows } = await client.query<{ version: number }>('SELECT version FROM schema_migrations');
      const done = new Set(rows.map((r) => r.version));
      for (const m of all) {
        if (done.has(m.version)) continue;
        await client.query('BEGIN');
        try {
          await client.query(m.sql);
          await client.query('INSERT INTO schema_migrations (version, name) VALUES ($1, $2)', [m.version, m.name]);
          await client.query('COMMIT');
        } catch (err) {
          await client.query('ROLLBACK');
          throw new Error(`migration ${m.version}_${m.name} failed: ${(err as Error).message}`, { cause: err });
        }
        applied.push(m.version);
      }
    } finally {
      await client.query('SELECT pg_advisory_unlock($1)', [LOCK_KEY.toString()]);
    }
  } finally {
    client.release();
  }
  return applied;
}

/** True when every known migration has been applied (used by /readyz). */
export async function migrationsApplied(pool: pg.Pool, migrations?: Migration[]): Promise<boolean> {
  const all = migrations ?? (await loadMigrations());
  const latest = all.at(-1)?.version ?? 0;
  try {
    const { rows } = await pool.query<{ max: number | null }>('SELECT max(version) AS max FROM schema_migrations');
    return (rows[0]?.max ?? 0) >= latest;
  } catch {
    return false;
  }
}
