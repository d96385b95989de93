/**
 * The runtime objects a runtime's event reporter sends (migration 007, keyed by runtime since 025):
 * one row per object with its latest state, tombstones for deletions, and each reporter replica's
 * heartbeat. Every statement names the runtime with its tenant (RuntimeRef): the hosted runtime's
 * rows are under the tenant's hosted runtime row, a hybrid runtime's under its own.
 *
 * Writes of one tenant take a transaction-level advisory lock of that tenant first (all its
 * runtimes: they share its usage row and budgets): two batches never interleave (no deadlock
 * between multi-row upserts, a digest sees a stable set), and the change sequence (`seq`) of a
 * runtime's rows commits in increasing order, so a change stream that has read up to seq N never
 * finds a smaller seq committed later.
 */
import type { Queryable } from '../db/tx.ts';
import { STALE_AFTER_SECONDS } from '../../runtime/protocol/events.ts';
import type { ReportedKind } from '../../runtime/protocol/kinds.ts';

export const RUNTIME_OBJECT_CHANNEL = 'runtime_object';

/** A runtime, named by its tenant and its row in `runtimes` (the hosted one or a hybrid one). */
export interface RuntimeRef {
  tenantId: string;
  runtimeId: string;
}

/** The id of the tenant's hosted runtime row (made with the tenant, migration 022), or undefined for an unknown tenant. */
export async function hostedRuntimeId(db: Queryable, tenantId: string): Promise<string | undefined> {
  const { rows } = await db.query<{ id: string }>({
    name: 'runtime-hosted-id',
    text: `SELECT id FROM runtimes WHERE tenant_id = $1 AND mode = 'hosted'`,
    values: [tenantId],
  });
  return rows[0]?.id;
}

/** The tenant's runtime of that name that is not removed (`hosted`: its hosted runtime), or undefined. */
export async function runtimeByName(db: Queryable, tenantId: string, name: string): Promise<RuntimeRef | undefined> {
  const { rows } = await db.query<RuntimeRef>({
    name: 'runtime-by-name',
    text: `SELECT tenant_id AS "tenantId", id AS "runtimeId" FROM runtimes
            WHERE tenant_id = $1 AND name = $2 AND removed_at IS NULL`,
    values: [tenantId, name],
  });
  return rows[0];
}

/** One state to store, normalized from an upsert or delete item (runtime-objects/ingest.ts). */
export interface ObjectWrite {
  kind: ReportedKind;
  namespace: string;
  name: string;
  uid: string;
  /** Decimal resourceVersion (the etcd revision). */
  rv: string;
  generation: number;
  health: string | null;
  sync: string | null;
  phase: string | null;
  summary: Record<string, unknown>;
  /** The object's JSON text (serialized once, when its size was checked); null for a deletion. */
  objectJson: string | null;
  truncated: boolean;
  deleted: boolean;
  observed_at: string;
}

/**
 * The rows as one JSON array for jsonb_to_recordset, each object's text spliced in as it is (the
 * objects are most of a batch's bytes: serializing them a second time would double that cost).
 */
export function writesJson(writes: readonly ObjectWrite[]): string {
  const parts = writes.map(
    ({ objectJson, ...row }) => `${JSON.stringify(row).slice(0, -1)},"object":${objectJson ?? 'null'}}`,
  );
  return `[${parts.join(',')}]`;
}

export interface HeartbeatWrite {
  ownedObjects: number;
  queueDepth: number;
  oldestPendingSeconds: number;
}

/** The lock every write of a tenant's runtime objects takes first (key space of hashtextextended). */
export async function lockTenantObjects(db: Queryable, tenantId: string): Promise<void> {
  await db.query({
    name: 'runtime-objects-lock',
    text: `SELECT pg_advisory_xact_lock(hashtextextended('runtime_objects:' || $1::text, 0))`,
    values: [tenantId],
  });
}

/**
 * Stores each state that is newer than the stored one (or the first of its key), in one statement;
 * also the same state again when it now carries an Application's change revision.
 * `writes` must hold each key once. Returns how many were stored.
 */
export async function upsertObjects(
  db: Queryable,
  ref: RuntimeRef,
  replica: string,
  writes: readonly ObjectWrite[],
): Promise<number> {
  if (writes.length === 0) return 0;
  const { rowCount } = await db.query({
    name: 'runtime-objects-upsert',
    text: `INSERT INTO runtime_objects AS o (tenant_id, runtime_id, kind, namespace, name, uid, resource_version,
             generation, health, sync, phase, summary, object, truncated, deleted, reported_by, observed_at, updated_at, seq)
           SELECT $1::uuid, $4::uuid, x.kind, x.namespace, x.name, x.uid, x.rv, x.generation, x.health, x.sync, x.phase,
                  x.summary, x.object, x.truncated, x.deleted, $2, x.observed_at, now(), nextval('runtime_object_seq')
             FROM jsonb_to_recordset($3::jsonb) AS x(kind text, namespace text, name text, uid text, rv bigint,
                  generation bigint, health text, sync text, phase text, summary jsonb, object jsonb,
                  truncated boolean, deleted boolean, observed_at timestamptz)
            LEFT JOIN runtime_object_horizons h ON h.tenant_id = $1::uuid AND h.runtime_id = $4::uuid
            -- Below the purge horizon: a state not newer than a purged deletion and seen before it was
            -- stored may be that deleted object's late state; it is stored only over a row of its own.
           WHERE h.tenant_id IS NULL OR x.rv > h.purged_rv OR x.observed_at > h.purged_through
              OR EXISTS (SELECT 1 FROM runtime_objects e WHERE e.tenant_id = $1::uuid AND e.runtime_id = $4::uuid
                           AND e.kind = x.kind AND e.namespace = x.namespace AND e.name = x.name)
            ORDER BY x.kind, x.namespace, x.name
           ON CONFLICT (tenant_id, runtime_id, kind, namespace, name) DO UPDATE SET
             uid = excluded.uid, resource_version = excluded.resource_version, generation = excluded.generation,
             health = excluded.health, sync = excluded.sync, phase = excluded.phase, summary = excluded.summary,
             object = excluded.object, truncated = excluded.truncated, deleted = excluded.deleted,
             reported_by = excluded.reported_by, observed_at = excluded.observed_at, updated_at = now(),
             seq = excluded.seq
           WHERE o.resource_version < excluded.resource_version
              -- The same state sent again with the change revision the Source Server had not answered
              -- in time for the first send (runtime/agents/event-reporter/changes.ts).
              OR (o.resource_version = excluded.resource_version AND NOT o.deleted AND NOT excluded.deleted
                  AND excluded.summary->>'changeRevision' IS NOT NULL
                  AND o.summary->>'changeRevision' IS DISTINCT FROM excluded.summary->>'changeRevision')`,
    values: [ref.tenantId, replica, writesJson(writes), ref.runtimeId],
  });
  return rowCount ?? 0;
}

/** What a runtime's purged tombstones leave (migration 016), or undefined when none was purged. */
export interface PurgeHorizon {
  purgedRv: string;
  purgedSeq: string;
  purgedThrough: Date;
}

export async function readHorizon(db: Queryable, ref: RuntimeRef): Promise<PurgeHorizon | undefined> {
  const { rows } = await db.query<PurgeHorizon>({
    name: 'runtime-object-horizon',
    text: `SELECT purged_rv::text AS "purgedRv", purged_seq::text AS "purgedSeq", purged_through AS "purgedThrough"
             FROM runtime_object_horizons WHERE tenant_id = $1 AND runtime_id = $2`,
    values: [ref.tenantId, ref.runtimeId],
  });
  return rows[0];
}

/** The runtime with the oldest tombstone stored before `olderThanSeconds` ago, if any. */
export async function oldestTombstoneRuntime(db: Queryable, olderThanSeconds: number): Promise<RuntimeRef | undefined> {
  const { rows } = await db.query<RuntimeRef>({
    name: 'runtime-objects-oldest-tombstone',
    text: `SELECT tenant_id AS "tenantId", runtime_id AS "runtimeId" FROM runtime_objects
            WHERE deleted AND updated_at < now() - make_interval(secs => $1)
            ORDER BY updated_at LIMIT 1`,
    values: [olderThanSeconds],
  });
  return rows[0];
}

/**
 * Deletes up to `limit` of the runtime's tombstones stored before `olderThanSeconds` ago and raises
 * the runtime's horizon over them, in one statement. The caller holds the tenant's lock
 * (lockTenantObjects). Returns how many went.
 */
export async function purgeTombstones(
  db: Queryable,
  ref: RuntimeRef,
  olderThanSeconds: number,
  limit: number,
): Promise<number> {
  const { rows } = await db.query<{ n: number }>({
    name: 'runtime-objects-purge',
    text: `WITH gone AS (
             DELETE FROM runtime_objects o
              WHERE (o.tenant_id, o.runtime_id, o.kind, o.namespace, o.name) IN (
                      SELECT tenant_id, runtime_id, kind, namespace, name FROM runtime_objects
                       WHERE tenant_id = $1 AND runtime_id = $4 AND deleted
                         AND updated_at < now() - make_interval(secs => $2)
                       ORDER BY updated_at LIMIT $3)
                AND o.deleted
             RETURNING o.resource_version, o.seq, o.updated_at),
           horizon AS (
             INSERT INTO runtime_object_horizons AS h (tenant_id, runtime_id, purged_rv, purged_seq, purged_through)
             SELECT $1, $4, max(resource_version), max(seq), max(updated_at) FROM gone HAVING count(*) > 0
             ON CONFLICT (tenant_id, runtime_id) DO UPDATE SET
               purged_rv = greatest(h.purged_rv, excluded.purged_rv),
               purged_seq = greatest(h.purged_seq, excluded.purged_seq),
               purged_through = greatest(h.purged_through, excluded.purged_through),
               updated_at = now())
           SELECT count(*)::int AS n FROM gone`,
    values: [ref.tenantId, olderThanSeconds, limit, ref.runtimeId],
  });
  return rows[0]?.n ?? 0;
}

/** What a tenant's stored runtime objects take, all its runtimes' together (migration 021): live objects, and bytes of all its rows. */
export interface ObjectUsage {
  objects: number;
  bytes: number;
}

export async function readUsage(db: Queryable, tenantId: string): Promise<ObjectUsage> {
  const { rows } = await db.query<{ objects: string; bytes: string }>({
    name: 'runtime-object-usage',
    text: 'SELECT objects::text, bytes::text FROM runtime_object_usage WHERE tenant_id = $1',
    values: [tenantId],
  });
  return { objects: Number(rows[0]?.objects ?? 0), bytes: Number(rows[0]?.bytes ?? 0) };
}

/** Keys (namespace, name) with their stored resourceVersion: the live objects of a kind a digest may remove. */
export async function digestCandidates(
  db: Queryable,
  ref: RuntimeRef,
  kind: ReportedKind,
  listRv: string,
  present: readonly { namespace: string; name: string }[],
): Promise<{ namespace: string; name: string }[]> {
  const { rows } = await db.query<{ namespace: string; name: string }>({
    name: 'runtime-objects-digest-candidates',
    text: `SELECT o.namespace, o.name FROM runtime_objects o
            WHERE o.tenant_id = $1 AND o.runtime_id = $6 AND o.kind = $2 AND NOT o.deleted
              AND o.resource_version < $3::bigint
              AND NOT EXISTS (SELECT 1 FROM unnest($4::text[], $5::text[]) AS p(namespace, name)
                               WHERE p.namespace = o.namespace AND p.name = o.name)`,
    values: [ref.tenantId, kind, listRv, present.map((p) => p.namespace), present.map((p) => p.name), ref.runtimeId],
  });
  return rows;
}

/**
 * Tombstones the given objects as deleted at `listRv` (still only those older than it). Returns how
 * many were removed.
 */
export async function removeObjects(
  db: Queryable,
  ref: RuntimeRef,
  kind: ReportedKind,
  listRv: string,
  replica: string,
  keys: readonly { namespace: string; name: string }[],
): Promise<number> {
  if (keys.length === 0) return 0;
  const { rowCount } = await db.query({
    name: 'runtime-objects-remove',
    text: `UPDATE runtime_objects o SET deleted = true, object = NULL, resource_version = $3::bigint,
                  reported_by = $4, observed_at = now(), updated_at = now(), seq = nextval('runtime_object_seq')
             FROM unnest($5::text[], $6::text[]) AS k(namespace, name)
            WHERE o.tenant_id = $1 AND o.runtime_id = $7 AND o.kind = $2 AND o.namespace = k.namespace
              AND o.name = k.name AND NOT o.deleted AND o.resource_version < $3::bigint`,
    values: [ref.tenantId, kind, listRv, replica, keys.map((k) => k.namespace), keys.map((k) => k.name), ref.runtimeId],
  });
  return rowCount ?? 0;
}

/**
 * Records that `replica` reported now (with its heartbeat's figures when it sent one); a replica
 * that had gone stale starts a new run (`since`). With a heartbeat, rows of this runtime's replicas
 * not heard of for an hour are removed (reporter pods get new names when they restart).
 */
export async function recordReporter(
  db: Queryable,
  ref: RuntimeRef,
  replica: string,
  hb: HeartbeatWrite | undefined,
): Promise<void> {
  await db.query({
    name: 'runtime-reporters-upsert',
    text: `INSERT INTO runtime_reporters AS r (tenant_id, runtime_id, replica, owned_objects, queue_depth,
             oldest_pending_seconds)
           VALUES ($1, $7, $2, coalesce($3, 0), coalesce($4, 0), coalesce($5::double precision, 0))
           ON CONFLICT (tenant_id, runtime_id, replica) DO UPDATE SET
             since = CASE WHEN r.last_seen < now() - make_interval(secs => $6) THEN now() ELSE r.since END,
             last_seen = now(),
             owned_objects = coalesce($3, r.owned_objects),
             queue_depth = coalesce($4, r.queue_depth),
             oldest_pending_seconds = coalesce($5, r.oldest_pending_seconds)`,
    values: [
      ref.tenantId,
      replica,
      hb?.ownedObjects ?? null,
      hb?.queueDepth ?? null,
      hb?.oldestPendingSeconds ?? null,
      STALE_AFTER_SECONDS,
      ref.runtimeId,
    ],
  });
  if (hb)
    await db.query({
      name: 'runtime-reporters-prune',
      text: `DELETE FROM runtime_reporters WHERE tenant_id = $1 AND runtime_id = $3 AND replica <> $2
               AND last_seen < now() - interval '1 hour'`,
      values: [ref.tenantId, replica, ref.runtimeId],
    });
}

/** Wakes the change streams of the runtime on every replica (payload: the runtime id). */
export async function notifyObjectChanges(db: Queryable, runtimeId: string): Promise<void> {
  await db.query({
    name: 'runtime-objects-notify',
    text: 'SELECT pg_notify($1, $2)',
    values: [RUNTIME_OBJECT_CHANNEL, runtimeId],
  });
}

/**
 * Deletes everything a runtime reported (its objects, tombstones, reporters and horizon): a removed
 * runtime's state no longer counts against its tenant's budgets. The caller holds the tenant's
 * lock. Returns how many objects and tombstones went (at most the tenant's object budget, and its
 * tombstones).
 */
export async function deleteRuntimeObjects(db: Queryable, ref: RuntimeRef): Promise<number> {
  const values = [ref.tenantId, ref.runtimeId];
  const { rowCount } = await db.query({
    name: 'runtime-objects-delete-runtime',
    text: 'DELETE FROM runtime_objects WHERE tenant_id = $1 AND runtime_id = $2',
    values,
  });
  await db.query({
    name: 'runtime-reporters-delete-runtime',
    text: 'DELETE FROM runtime_reporters WHERE tenant_id = $1 AND runtime_id = $2',
    values,
  });
  await db.query({
    name: 'runtime-horizon-delete-runtime',
    text: 'DELETE FROM runtime_object_horizons WHERE tenant_id = $1 AND runtime_id = $2',
    values,
  });
  return rowCount ?? 0;
}

/** A stored object as the API shows it (without `object` unless asked for). */
export interface RuntimeObjectRow {
  kind: ReportedKind;
  namespace: string;
  name: string;
  uid: string;
  resource_version: string;
  generation: string;
  health: string | null;
  sync: string | null;
  phase: string | null;
  summary: Record<string, unknown>;
  object?: Record<string, unknown> | null;
  truncated: boolean;
  deleted: boolean;
  reported_by: string;
  observed_at: Date;
  updated_at: Date;
  seq: string;
  age_seconds: number;
}

const COLUMNS = `kind, namespace, name, uid, resource_version::text, generation::text, health, sync, phase, summary,
  truncated, deleted, reported_by, observed_at, updated_at, seq::text,
  extract(epoch FROM now() - updated_at)::float8 AS age_seconds`;

export interface ObjectFilter {
  kind: ReportedKind;
  health?: string;
  sync?: string;
  phase?: string;
  namespace?: string;
  namePrefix?: string;
  /** Keyset position: the listing continues after (namespace, name). */
  after?: { namespace: string; name: string };
  limit: number;
}

/** A runtime's live objects of one kind in (namespace, name) order, filtered. */
export async function listObjects(db: Queryable, ref: RuntimeRef, f: ObjectFilter): Promise<RuntimeObjectRow[]> {
  const args: unknown[] = [ref.tenantId, f.kind, ref.runtimeId];
  const where = ['tenant_id = $1', 'runtime_id = $3', 'kind = $2', 'NOT deleted'];
  const add = (sql: string, v: unknown) => {
    args.push(v);
    where.push(sql.replaceAll('?', `$${args.length}`));
  };
  if (f.health !== undefined) add('health = ?', f.health);
  if (f.sync !== undefined) add('sync = ?', f.sync);
  if (f.phase !== undefined) add('phase = ?', f.phase);
  if (f.namespace !== undefined) add('namespace = ?', f.namespace);
  // A prefix match on the name as a range (no LIKE: no escaping of % and _ needed).
  if (f.namePrefix !== undefined) add(`(name >= ? AND left(name, length(?)) = ?)`, f.namePrefix);
  if (f.after) {
    args.push(f.after.namespace, f.after.name);
    where.push(`(namespace, name) > ($${args.length - 1}, $${args.length})`);
  }
  args.push(f.limit);
  const { rows } = await db.query<RuntimeObjectRow>(
    `SELECT ${COLUMNS} FROM runtime_objects WHERE ${where.join(' AND ')}
      ORDER BY namespace, name LIMIT $${args.length}`,
    args,
  );
  return rows;
}

/** One live object with its stored `object`, or undefined (unknown or deleted). */
export async function getObject(
  db: Queryable,
  ref: RuntimeRef,
  kind: ReportedKind,
  namespace: string,
  name: string,
): Promise<RuntimeObjectRow | undefined> {
  const { rows } = await db.query<RuntimeObjectRow>({
    name: 'runtime-object-get',
    text: `SELECT ${COLUMNS}, object FROM runtime_objects
            WHERE tenant_id = $1 AND runtime_id = $5 AND kind = $2 AND namespace = $3 AND name = $4 AND NOT deleted`,
    values: [ref.tenantId, kind, namespace, name, ref.runtimeId],
  });
  return rows[0];
}

/** A runtime's changes after `afterSeq` (tombstones included), oldest first. */
export async function readChanges(
  db: Queryable,
  ref: RuntimeRef,
  afterSeq: string,
  limit: number,
  kind?: ReportedKind,
): Promise<RuntimeObjectRow[]> {
  const { rows } = await db.query<RuntimeObjectRow>({
    name: kind ? 'runtime-object-changes-kind' : 'runtime-object-changes',
    // ORDER BY the table's seq (bigint): a bare `seq` would be the output column, seq::text, and
    // order 10 before 9.
    text: `SELECT ${COLUMNS} FROM runtime_objects o
            WHERE o.runtime_id = $1 AND o.seq > $2::bigint ${kind ? 'AND kind = $4' : ''}
            ORDER BY o.seq LIMIT $3`,
    values: kind ? [ref.runtimeId, afterSeq, limit, kind] : [ref.runtimeId, afterSeq, limit],
  });
  return rows;
}

/** The runtime's newest change (0 when none): where a stream that asks for new changes only starts. */
export async function latestSeq(db: Queryable, ref: RuntimeRef): Promise<string> {
  const { rows } = await db.query<{ seq: string | null }>({
    name: 'runtime-object-latest-seq',
    text: 'SELECT max(seq)::text AS seq FROM runtime_objects WHERE runtime_id = $1',
    values: [ref.runtimeId],
  });
  return rows[0]?.seq ?? '0';
}
