/**
 * Applications' history (migration 031): one entry per (runtime, application, change revision),
 * written from the reports of an event batch in the transaction that stores the batch, under the
 * tenant's ingest lock (store/runtime-objects.ts lockTenantObjects), and read newest first or as a
 * change stream in `seq` order. What an entry says and when its result moves: app-history/rules.ts.
 */
import type { Queryable } from '../db/tx.ts';
import type { ImageChange, ResourceChange } from '../../runtime/protocol/sources.ts';
import type { RuntimeRef } from './runtime-objects.ts';

export const APPLICATION_HISTORY_CHANNEL = 'application_history';

export type HistoryResult = 'pending' | 'running' | 'succeeded' | 'failed';

/** One report's entry (app-history/rules.ts), as the store writes it (the application's key and the item's resourceVersion with it). */
export interface HistoryWrite {
  namespace: string;
  name: string;
  /** The report's resourceVersion: the entry is written only while it is the application's stored state. */
  rv: string;
  change_revision: string;
  revision: string;
  previous_change_revision: string | null;
  author: string | null;
  date: string | null;
  message: string | null;
  tags: string[];
  images: ImageChange[];
  resources: ResourceChange[];
  truncated: boolean;
  result: HistoryResult;
  result_message: string | null;
  started_at: string | null;
  finished_at: string | null;
  duration_ms: number | null;
}

/** An application of a runtime, by its namespace and name. */
export interface ApplicationRef extends RuntimeRef {
  namespace: string;
  name: string;
}

export interface HistoryRow {
  id: string;
  namespace: string;
  name: string;
  change_revision: string;
  revision: string;
  previous_change_revision: string | null;
  author: string | null;
  date: Date | null;
  message: string | null;
  tags: string[];
  images: ImageChange[];
  resources: ResourceChange[];
  truncated: boolean;
  result: HistoryResult;
  result_message: string | null;
  started_at: Date | null;
  finished_at: Date | null;
  duration_ms: string | null;
  recorded_at: Date;
  updated_at: Date;
  seq: string;
  /** recorded_at at full precision, for the listing's keyset. */
  recorded_key: string;
}

const COLUMNS = `id, namespace, name, change_revision, revision, previous_change_revision, author, date, message,
  tags, images, resources, truncated, result, result_message, started_at, finished_at, duration_ms::text,
  recorded_at, updated_at, seq::text, recorded_at::text AS recorded_key`;

/**
 * Writes the entries of a batch's reports: each only while its report is the application's stored
 * state (its resourceVersion is the stored one: an older report, refused by the upsert, writes
 * nothing; the same state sent again, now with its change, does). A new change revision inserts an
 * entry; a known one moves its result forward only (pending → running → succeeded or failed; a
 * final result stays until a later sync of the same change, or a success after a failure no sync
 * ran for) and fills commit metadata it lacked. `writes` holds each application once.
 * Returns how many entries were inserted and how many were written in all.
 */
export async function writeHistory(
  db: Queryable,
  ref: RuntimeRef,
  writes: readonly HistoryWrite[],
): Promise<{ inserted: number; written: number }> {
  if (writes.length === 0) return { inserted: 0, written: 0 };
  const { rows } = await db.query<{ inserted: boolean }>({
    name: 'application-history-write',
    text: `INSERT INTO application_history AS h (tenant_id, runtime_id, namespace, name, change_revision, revision,
             previous_change_revision, author, date, message, tags, images, resources, truncated, result,
             result_message, started_at, finished_at, duration_ms)
           SELECT $1::uuid, $2::uuid, x.namespace, x.name, x.change_revision, x.revision, x.previous_change_revision,
                  x.author, x.date, x.message, x.tags, x.images, x.resources, x.truncated, x.result,
                  x.result_message, x.started_at, x.finished_at, x.duration_ms
             FROM jsonb_to_recordset($3::jsonb) AS x(namespace text, name text, rv bigint, change_revision text,
                  revision text, previous_change_revision text, author text, date timestamptz, message text,
                  tags jsonb, images jsonb, resources jsonb, truncated boolean, result text, result_message text,
                  started_at timestamptz, finished_at timestamptz, duration_ms bigint)
             JOIN runtime_objects o ON o.tenant_id = $1::uuid AND o.runtime_id = $2::uuid AND o.kind = 'Application'
                  AND o.namespace = x.namespace AND o.name = x.name AND o.resource_version = x.rv AND NOT o.deleted
            ORDER BY x.namespace, x.name
           ON CONFLICT ON CONSTRAINT application_history_change DO UPDATE SET
             result = excluded.result,
             result_message = excluded.result_message,
             started_at = coalesce(excluded.started_at, h.started_at),
             finished_at = coalesce(excluded.finished_at, h.finished_at),
             duration_ms = coalesce(excluded.duration_ms, h.duration_ms),
             author = coalesce(h.author, excluded.author),
             date = coalesce(h.date, excluded.date),
             message = coalesce(h.message, excluded.message),
             updated_at = now(),
             seq = nextval('application_history_seq')
           WHERE ((h.result IN ('pending', 'running') AND NOT (h.result = 'running' AND excluded.result = 'pending'))
                  -- a later sync of the same change (a retry, or a sync once a passing error cleared)
               OR (excluded.result <> 'pending' AND excluded.started_at IS NOT NULL
                   AND (h.started_at IS NULL OR excluded.started_at > h.started_at))
                  -- Argo CD could not compare at first (no sync ran), and then found it synced
               OR (h.result = 'failed' AND h.started_at IS NULL AND excluded.result = 'succeeded'))
             AND (excluded.result, excluded.result_message, coalesce(excluded.started_at, h.started_at),
                  coalesce(excluded.finished_at, h.finished_at), coalesce(h.author, excluded.author),
                  coalesce(h.date, excluded.date), coalesce(h.message, excluded.message))
                 IS DISTINCT FROM (h.result, h.result_message, h.started_at, h.finished_at, h.author, h.date, h.message)
           RETURNING (h.xmax = 0) AS inserted`,
    values: [ref.tenantId, ref.runtimeId, JSON.stringify(writes)],
  });
  return { inserted: rows.filter((r) => r.inserted).length, written: rows.length };
}

/**
 * Deletes the tenant's oldest entries (all its runtimes' together) beyond `max` entries, and beyond
 * `maxBytes` of them (`size_bytes`, migration 032: the newest entries that fit stay). The caller
 * holds the tenant's ingest lock. Returns how many went.
 */
export async function trimTenantHistory(
  db: Queryable,
  tenantId: string,
  max: number,
  maxBytes: number = Number.MAX_SAFE_INTEGER,
): Promise<number> {
  const { rowCount } = await db.query({
    name: 'application-history-trim',
    text: `DELETE FROM application_history WHERE id IN (
             SELECT id FROM (
               SELECT id, row_number() OVER w AS n, sum(size_bytes) OVER w AS bytes
                 FROM application_history WHERE tenant_id = $1
               WINDOW w AS (ORDER BY recorded_at DESC, id DESC)) newest_first
              WHERE n > $2 OR bytes > $3)`,
    values: [tenantId, max, maxBytes],
  });
  return rowCount ?? 0;
}

/**
 * Deletes up to `limit` entries recorded more than `retentionDays` ago, skipping rows another
 * transaction holds (loops/pruner.ts). Returns how many went.
 */
export async function pruneHistory(db: Queryable, retentionDays: number, limit: number): Promise<number> {
  const { rowCount } = await db.query({
    name: 'application-history-prune',
    text: `DELETE FROM application_history WHERE id IN (
             SELECT id FROM application_history WHERE recorded_at < now() - make_interval(days => $1)
              ORDER BY recorded_at LIMIT $2 FOR UPDATE SKIP LOCKED)`,
    values: [retentionDays, limit],
  });
  return rowCount ?? 0;
}

/** Wakes the history streams of the runtime's applications on every replica (payload: the runtime id). */
export async function notifyHistory(db: Queryable, runtimeId: string): Promise<void> {
  await db.query({
    name: 'application-history-notify',
    text: 'SELECT pg_notify($1, $2)',
    values: [APPLICATION_HISTORY_CHANNEL, runtimeId],
  });
}

/** A timestamptz column as JSON: ISO 8601 in UTC with milliseconds, as Date.toISOString() writes it (null stays null). */
const isoJson = (column: string) => `to_char(${column} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')`;

/**
 * An entry as the API answers it (api/schemas.ts ApplicationHistoryEntry), built by Postgres as
 * JSON text: a history page is sent as Postgres wrote it, without parsing its jsonb columns and
 * timestamps into objects and serializing them again (docs/benchmarks.md "Change revisions and
 * application history"). `$runtime` is the parameter holding the runtime's name.
 */
const entryJson = (runtime: string) => `json_build_object(
    'id', id, 'runtime', ${runtime}::text, 'application', json_build_object('namespace', namespace, 'name', name),
    'changeRevision', change_revision, 'revision', revision, 'previousChangeRevision', previous_change_revision,
    'author', author, 'date', ${isoJson('date')}, 'message', message, 'tags', tags, 'images', images,
    'resources', resources, 'truncated', truncated, 'result', result, 'resultMessage', result_message,
    'startedAt', ${isoJson('started_at')}, 'finishedAt', ${isoJson('finished_at')}, 'durationMs', duration_ms,
    'recordedAt', ${isoJson('recorded_at')}, 'updatedAt', ${isoJson('updated_at')})::text`;

/** A page's entry as JSON text, with its keyset position. */
export interface HistoryJsonRow {
  id: string;
  /** recorded_at at full precision, for the listing's keyset. */
  recorded_key: string;
  /** The entry as the API answers it (ApplicationHistoryEntry), JSON. */
  entry: string;
}

/**
 * An application's entries newest first, after the keyset position `after` (recorded_key, id), each as the API's JSON
 * (the runtime named `runtimeName`), ready to send.
 */
export async function listHistoryJson(
  db: Queryable,
  app: ApplicationRef,
  runtimeName: string,
  limit: number,
  after?: { recordedKey: string; id: string },
): Promise<HistoryJsonRow[]> {
  const values: unknown[] = [app.runtimeId, app.namespace, app.name, limit, runtimeName];
  if (after) values.push(after.recordedKey, after.id);
  const { rows } = await db.query<HistoryJsonRow>({
    name: after ? 'application-history-page-json' : 'application-history-first-json',
    text: `SELECT id, recorded_at::text AS recorded_key, ${entryJson('$5')} AS entry FROM application_history
            WHERE runtime_id = $1 AND namespace = $2 AND name = $3
              ${after ? 'AND (recorded_at, id) < ($6::timestamptz, $7::uuid)' : ''}
            ORDER BY recorded_at DESC, id DESC LIMIT $4`,
    values,
  });
  return rows;
}

/** An application's entries written after `afterSeq`, oldest write first. */
export async function readHistoryChanges(
  db: Queryable,
  app: ApplicationRef,
  afterSeq: string,
  limit: number,
): Promise<HistoryRow[]> {
  const { rows } = await db.query<HistoryRow>({
    name: 'application-history-changes',
    // ORDER BY the table's seq (bigint), not the output column seq::text.
    text: `SELECT ${COLUMNS} FROM application_history h
            WHERE h.runtime_id = $1 AND h.namespace = $2 AND h.name = $3 AND h.seq > $4::bigint
            ORDER BY h.seq LIMIT $5`,
    values: [app.runtimeId, app.namespace, app.name, afterSeq, limit],
  });
  return rows;
}

/** The application's newest write (0 when none): where a stream that asks for new entries only starts. */
export async function latestHistorySeq(db: Queryable, app: ApplicationRef): Promise<string> {
  const { rows } = await db.query<{ seq: string | null }>({
    name: 'application-history-latest-seq',
    text: `SELECT max(seq)::text AS seq FROM application_history WHERE runtime_id = $1 AND namespace = $2 AND name = $3`,
    values: [app.runtimeId, app.namespace, app.name],
  });
  return rows[0]?.seq ?? '0';
}

/** Whether the runtime ever reported the Application (a stored state or tombstone, or a history entry). */
export async function applicationReported(db: Queryable, app: ApplicationRef): Promise<boolean> {
  const { rows } = await db.query<{ known: boolean }>({
    name: 'application-history-known',
    text: `SELECT EXISTS (SELECT 1 FROM runtime_objects WHERE tenant_id = $1 AND runtime_id = $2
                            AND kind = 'Application' AND namespace = $3 AND name = $4)
               OR EXISTS (SELECT 1 FROM application_history WHERE runtime_id = $2 AND namespace = $3 AND name = $4)
               AS known`,
    values: [app.tenantId, app.runtimeId, app.namespace, app.name],
  });
  return rows[0]?.known === true;
}
