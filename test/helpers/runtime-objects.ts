/**
 * Test-data builders for what runtimes report: an Application stored through the reporter's own
 * write (the store's upsertObjects), and stored runtime objects and application history with their
 * times moved back instead of waited out (the store's writes stamp now(), so this module is the one
 * place of the tests and benchmarks that writes that SQL). It also reads them as stored
 * (storedObjects, historyBytes, counts, the store latency of a benchmark): columns and totals the
 * store's reads, per runtime and page, do not answer.
 */
import type { Queryable } from '../../provisioner/db/tx.ts';
import { hostedRuntimeId, upsertObjects } from '../../provisioner/store/runtime-objects.ts';

// SQL: time moved back (ageTombstones, ageHistoryEntry).

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
 * resource version `rv`, as reporter `r1` reports it (the store's upsertObjects: an existing row is
 * replaced only by a higher resource version).
 */
export async function putHostedApplication(
  db: Queryable,
  tenantId: string,
  name: string,
  health: string,
  rv: number,
): Promise<void> {
  const runtimeId = await hostedRuntimeId(db, tenantId);
  if (!runtimeId) throw new Error(`no hosted runtime of tenant ${tenantId}`);
  await upsertObjects(db, { tenantId, runtimeId }, 'r1', [
    {
      kind: 'Application',
      namespace: 'argocd',
      name,
      uid: name,
      rv: String(rv),
      generation: 0,
      health,
      sync: 'Synced',
      phase: null,
      summary: {},
      objectJson: null,
      truncated: false,
      deleted: false,
      observed_at: new Date().toISOString(),
    },
  ]);
}

// SQL: reads of columns and totals no store read answers (tombstones, reporters, sizes, the benchmark's latency).
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

/**
 * How many of the tenant's stored objects are live (not tombstones) and carry the annotation
 * `name` with `value` (an object without the annotation counts as `absentAs`, when told).
 */
export async function countLiveAnnotated(
  db: Queryable,
  tenantId: string,
  a: { name: string; value: string; absentAs?: string },
): Promise<number> {
  const { rows } = await db.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM runtime_objects
      WHERE tenant_id = $1 AND NOT deleted AND coalesce(object->'metadata'->'annotations'->>$2, $4) = $3`,
    [tenantId, a.name, a.value, a.absentAs ?? null],
  );
  return rows[0]!.n;
}

/**
 * The median and 99th percentile, in seconds, of how long after its observation each of the
 * tenant's objects stored since `since` was stored (the row's updated_at minus the reporter's
 * observedAt), over the rows updated since then; null when none was.
 */
export async function storeLatency(
  db: Queryable,
  tenantId: string,
  since: Date,
): Promise<{ p50: number; p99: number } | null> {
  const { rows } = await db.query<{ p50: number | null; p99: number | null }>(
    `SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM updated_at - observed_at)) AS p50,
            percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM updated_at - observed_at)) AS p99
       FROM runtime_objects WHERE tenant_id = $1 AND updated_at >= $2`,
    [tenantId, since],
  );
  const r = rows[0]!;
  return r.p50 === null || r.p99 === null ? null : { p50: Number(r.p50), p99: Number(r.p99) };
}
