/**
 * A reader of the Pulumi state backend's table (`pulumi_state`, the one the Pulumi CLI's Postgres
 * backend creates and owns): which objects a stack has in it. The store only deletes from it
 * (provisioner/store/pulumi-state.ts), so this module is the one place of the tests that reads it.
 */
import type { Queryable } from '../../provisioner/db/tx.ts';
import { STATE_TABLE } from '../../provisioner/engine/pulumi-plan.ts';

// SQL: a read no store read answers (the store only deletes from the Pulumi CLI's table).
/** Which keys to read: those that hold a text, those under a folder of the backend (`stacks`, `locks`, …). */
export interface StateKeySelector {
  containing?: string;
  under?: string;
}

/** The keys of the state backend's objects (ordered), by what they hold and the folder they are under. */
export async function stateKeys(db: Queryable, s: StateKeySelector = {}): Promise<string[]> {
  const { rows } = await db.query<{ key: string }>(
    `SELECT key::text AS key FROM ${STATE_TABLE}
      WHERE ($1::text IS NULL OR position($1 in key::text) > 0)
        AND ($2::text IS NULL OR key::text LIKE '%/' || $2 || '/%')
      ORDER BY key`,
    [s.containing ?? null, s.under ?? null],
  );
  return rows.map((r) => r.key);
}
