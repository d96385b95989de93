/**
 * Test-data builders for what runtimes report: stored runtime objects and application history,
 * their times moved back instead of waited out. The store has no write for these (its writes stamp
 * now()), so this module is the one place of the tests that writes their SQL; it also reads them
 * as stored (storedObjects, historyBytes), which the store's reads answer per runtime and page.
 */
import type { Queryable } from '../../provisioner/db/tx.ts';

/** Makes the tenant's tombstones (deleted objects) stored `seconds` ago, but those named in `except`. */
export async function ageTombstones(
  db: Queryable,
  tenantId: string,
  seconds: number,
  except: readonly string[] = [],
): Promise<void> {
  await db.query(
    `UPDATE runtime_objects SET updated_at = now() - make_interval(secs => $2::float8)
      WHERE tenant_id = $1 AND deleted AND NOT (name = ANY($3::text[]))`,
    [tenantId, seconds, except],
  );
}

/** Makes the tenant's application-history entry of a change revision recorded `seconds` ago. */
export async function ageHistoryEntry(
  db: Queryable,
  tenantId: string,
  revision: string,
  seconds: number,
): Promise<void> {
  await db.query(
    `UPDATE application_history SET recorded_at = now() - make_interval(secs => $3::float8)
      WHERE tenant_id = $1 AND change_revision = $2`,
    [tenantId, revision, seconds],
  );
}

/**
 * Stores (or updates) an Application of the tenant's hosted runtime with `health`, Synced, at
 * resource version `rv`, as reporter `r1` last reported it; an existing row changes its health and
 * resource version only.
 */
export async function putHostedApplication(
  db: Queryable,
  tenantId: string,
  name: string,
  health: string,
  rv: number,
): Promise<void> {
  await db.query(
    `INSERT INTO runtime_objects (tenant_id, runtime_id, kind, namespace, name, uid, resource_version, health, sync,
                                 reported_by, observed_at)
     VALUES ($1, (SELECT id FROM runtimes WHERE tenant_id = $1 AND mode = 'hosted'), 'Application', 'argocd', $2, $2, $4, $3,
             'Synced', 'r1', now())
     ON CONFLICT (tenant_id, runtime_id, kind, namespace, name) DO UPDATE SET health = $3, resource_version = $4`,
    [tenantId, name, health, rv],
  );
}

/** A stored runtime object as tests read it (tombstones included). */
export interface StoredObject {
  kind: string;
  namespace: string;
  name: string;
  deleted: boolean;
  /** The resource version as text (a bigint). */
  resourceVersion: string;
  /** Its number in the change stream, as text (a bigint). */
  seq: string;
  /** The reporter replica that stored its current state. */
  reportedBy: string;
  /** The object as stored (null for a tombstone). */
  object: Record<string, unknown> | null;
}

/** The tenant's stored runtime objects, tombstones included, by name. */
export async function storedObjects(db: Queryable, tenantId: string): Promise<StoredObject[]> {
  const { rows } = await db.query<StoredObject>(
    `SELECT kind, namespace, name, deleted, resource_version::text AS "resourceVersion", seq::text AS seq,
            reported_by AS "reportedBy", object
       FROM runtime_objects WHERE tenant_id = $1 ORDER BY name, kind, namespace`,
    [tenantId],
  );
  return rows;
}

/** The bytes the tenant's application history holds (its entries' sizes summed). */
export async function historyBytes(db: Queryable, tenantId: string): Promise<number> {
  const { rows } = await db.query<{ b: string }>(
    'SELECT coalesce(sum(size_bytes), 0)::text AS b FROM application_history WHERE tenant_id = $1',
    [tenantId],
  );
  return Number(rows[0]!.b);
}

/** How many runtime objects are stored, every tenant's (tombstones included). */
export async function storedObjectCount(db: Queryable): Promise<number> {
  const { rows } = await db.query<{ n: number }>('SELECT count(*)::int AS n FROM runtime_objects');
  return rows[0]!.n;
}

/** How many entries the tenant's application history holds. */
export async function historyEntryCount(db: Queryable, tenantId: string): Promise<number> {
  const { rows } = await db.query<{ n: number }>(
    'SELECT count(*)::int AS n FROM application_history WHERE tenant_id = $1',
    [tenantId],
  );
  return rows[0]!.n;
}
