/**
 * Test-data builders for runtimes and their reporters: a runtime installed and an upgrade rolled
 * back by its in-cluster upgrader (through the store's writes), times moved back instead of waited
 * out (the store's writes stamp now(), so this module is the one place of the tests that writes
 * that SQL), and the rows as stored, where the store's reads leave them out.
 */
import type { Queryable } from '../../provisioner/db/tx.ts';
import {
  claimRuntimeBootstrap,
  insertHybridRuntime,
  recordUpgraderReport,
  setHybridRuntimeVersion,
  type NewHybridRuntime,
  type RuntimeRow,
} from '../../provisioner/store/runtimes.ts';

// SQL: time moved back (expireBootstrap, setHeartbeatAgo, markRemovedAgo, setReportersSeenAgo).
/** Makes a runtime's bootstrap token expired `seconds` ago (1 unless told). */
export async function expireBootstrap(db: Queryable, runtimeId: string, seconds = 1): Promise<void> {
  await db.query('UPDATE runtimes SET bootstrap_expires_at = now() - make_interval(secs => $2::float8) WHERE id = $1', [
    runtimeId,
    seconds,
  ]);
}

/** Makes a hybrid runtime's last heartbeat `seconds` ago. */
export async function setHeartbeatAgo(db: Queryable, runtimeId: string, seconds: number): Promise<void> {
  await db.query('UPDATE runtimes SET last_heartbeat_at = now() - make_interval(secs => $2::float8) WHERE id = $1', [
    runtimeId,
    seconds,
  ]);
}

// SQL: a read of a column as Postgres stores it (to the microsecond; the store answers a Date).
/** A runtime's last heartbeat as stored (Postgres' text, to the microsecond: equal only if unchanged), or undefined. */
export async function storedHeartbeatAt(db: Queryable, runtimeId: string): Promise<string | undefined> {
  const { rows } = await db.query<{ at: string | null }>(
    'SELECT last_heartbeat_at::text AS at FROM runtimes WHERE id = $1',
    [runtimeId],
  );
  return rows[0]?.at ?? undefined;
}

/** Moves a removed runtime's removal `seconds` back (instead of waiting out the purge's retention). */
export async function markRemovedAgo(db: Queryable, runtimeId: string, seconds: number): Promise<void> {
  await db.query('UPDATE runtimes SET removed_at = now() - make_interval(secs => $2::float8) WHERE id = $1', [
    runtimeId,
    seconds,
  ]);
}

// SQL: a state no production path writes any more (an older API's ingress URL).
/** Sets the ingress URL stored for a runtime (as an older version of the API stored it). */
export async function setIngressUrl(db: Queryable, runtimeId: string, url: string | null): Promise<void> {
  await db.query('UPDATE runtimes SET ingress_url = $2 WHERE id = $1', [runtimeId, url]);
}

/**
 * Makes a hybrid runtime look as after its in-cluster upgrader rolled an upgrade to `to` back,
 * through the store's writes: the upgrade to `to` asked of its upgrader (the runtime's upgrades
 * must be `agent`), then the upgrader's `rolled-back` report with `message` (its version back to
 * the one it came from).
 */
export async function markUpgradeRolledBack(
  db: Queryable,
  runtimeId: string,
  to: string,
  message: string,
): Promise<void> {
  if (!(await setHybridRuntimeVersion(db, runtimeId, to, true))) throw new Error(`no hybrid runtime ${runtimeId}`);
  if (!(await recordUpgraderReport(db, runtimeId, to, 'rolled-back', message)))
    throw new Error(`runtime ${runtimeId}: the rolled-back report was not recorded (are its upgrades 'agent'?)`);
}

/** Makes the tenant's runtime reporters last seen `seconds` ago (a reporter fallen silent). */
export async function setReportersSeenAgo(db: Queryable, tenantId: string, seconds: number): Promise<void> {
  await db.query(
    'UPDATE runtime_reporters SET last_seen = now() - make_interval(secs => $2::float8) WHERE tenant_id = $1',
    [tenantId, seconds],
  );
}

/**
 * Registers a hybrid runtime and redeems its bootstrap token through the store, so that it is
 * `installed` (as after its customer applied the bundle); no agent has reported yet.
 */
export async function addInstalledHybridRuntime(
  db: Queryable,
  r: Omit<NewHybridRuntime, 'ingressUrl' | 'ttlSeconds' | 'createdBy'> & { createdBy?: string },
): Promise<RuntimeRow> {
  await insertHybridRuntime(db, { ...r, ingressUrl: undefined, ttlSeconds: 3600, createdBy: r.createdBy ?? 'test' });
  const claimed = await claimRuntimeBootstrap(db, r.tokenHash);
  if (!claimed) throw new Error(`the bootstrap token of runtime ${r.name} could not be redeemed`);
  return claimed;
}

// SQL: reads no store read answers (removed runtimes not yet purged; the reporters' own rows).
/** The ids of every runtime row of the tenant, removed ones not yet purged included. */
export async function runtimeRowIds(db: Queryable, tenantId: string): Promise<string[]> {
  const { rows } = await db.query<{ id: string }>('SELECT id FROM runtimes WHERE tenant_id = $1 ORDER BY created_at', [
    tenantId,
  ]);
  return rows.map((r) => r.id);
}

/** One event reporter replica's row as stored: its queue's depth and the oldest age of what it has pending. */
export interface ReporterRow {
  replica: string;
  queue_depth: number;
  oldest_pending_seconds: number | null;
}

/** The tenant's event reporters' rows as stored, by replica. */
export async function reporterRows(db: Queryable, tenantId: string): Promise<ReporterRow[]> {
  const { rows } = await db.query<ReporterRow>(
    'SELECT replica, queue_depth, oldest_pending_seconds FROM runtime_reporters WHERE tenant_id = $1 ORDER BY replica',
    [tenantId],
  );
  return rows;
}
