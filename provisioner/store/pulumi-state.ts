/**
 * The Pulumi state backend's table when the backend is Postgres (PULUMI_BACKEND_URL postgres://…,
 * table `pulumi_state` unless the URL names another): the engine (engine/state-purge.ts) deletes a
 * removed stack's leftovers from it, on its own connection to that database.
 */
import type { Queryable } from '../db/tx.ts';

/** Deletes the state objects whose keys match any of the LIKE patterns; answers how many went. */
export async function deleteStateObjects(db: Queryable, table: string, patterns: string[]): Promise<number> {
  if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(table)) throw new Error(`not a table name: ${table}`);
  const res = await db.query(`DELETE FROM "${table}" WHERE key LIKE ANY($1::text[])`, [patterns]);
  return res.rowCount ?? 0;
}
