/**
 * Test-data builders for the tunnel directory's rows (runtime_tunnels, hybrid_runtime_tunnels).
 * The store's writeTunnel announces each write on the kind's channel; the tests here need rows
 * written behind the replicas' backs (a row another replica wrote, aged, lost), so these builders
 * write without a NOTIFY, and this module is the one place of the tests that writes that SQL. It
 * also reads the rows as stored (tunnelRows), live or not, which the store's reads leave out.
 */
import { randomUUID } from 'node:crypto';
import type { Queryable } from '../../provisioner/db/tx.ts';
import type pg from 'pg';
import { deleteTunnel, tunnelRow, type TunnelKind } from '../../provisioner/store/tunnels.ts';

const TABLES: Record<TunnelKind, { table: string; key: string }> = {
  hosted: { table: 'runtime_tunnels', key: 'tenant_id' },
  hybrid: { table: 'hybrid_runtime_tunnels', key: 'runtime_id' },
};

export interface TunnelRow {
  replicaId: string;
  replicaUrl: string;
  /** Connected this many seconds ago (0 unless told). */
  connectedSecondsAgo?: number;
  /** Last renewed this many seconds ago (0 unless told). */
  seenSecondsAgo?: number;
}

// SQL: states no production path writes (rows written, moved or aged behind the replicas' backs: no NOTIFY).
/**
 * Writes a hosted runtime's tunnel row (keyed by tenant) as if `replicaId` held its tunnel, with a
 * new connection id; a row already there is replaced. No replica is told.
 */
export async function putTunnelRow(db: Queryable, tenantId: string, r: TunnelRow): Promise<void> {
  await db.query(
    `INSERT INTO runtime_tunnels (tenant_id, connection_id, replica_id, replica_url, connected_at, seen_at)
     VALUES ($1, $2, $3, $4, now() - make_interval(secs => $5::float8), now() - make_interval(secs => $6::float8))
     ON CONFLICT (tenant_id) DO UPDATE SET connection_id = EXCLUDED.connection_id, replica_id = EXCLUDED.replica_id,
       replica_url = EXCLUDED.replica_url, connected_at = EXCLUDED.connected_at, seen_at = EXCLUDED.seen_at`,
    [tenantId, randomUUID(), r.replicaId, r.replicaUrl, r.connectedSecondsAgo ?? 0, r.seenSecondsAgo ?? 0],
  );
}

/** Writes a hybrid runtime's tunnel row (keyed by runtime) as if `replicaId` held it. No replica is told. */
export async function putHybridTunnelRow(
  db: Queryable,
  runtimeId: string,
  tenantId: string,
  r: TunnelRow,
): Promise<void> {
  await db.query(
    `INSERT INTO hybrid_runtime_tunnels (runtime_id, tenant_id, connection_id, replica_id, replica_url, connected_at, seen_at)
     VALUES ($1, $2, $3, $4, $5, now() - make_interval(secs => $6::float8), now() - make_interval(secs => $7::float8))`,
    [runtimeId, tenantId, randomUUID(), r.replicaId, r.replicaUrl, r.connectedSecondsAgo ?? 0, r.seenSecondsAgo ?? 0],
  );
}

/**
 * Moves a hosted runtime's tunnel row to another replica (a new connection, connected now; its URL
 * and last renewal as they were), as when the runtime reconnected elsewhere. No replica is told.
 */
export async function moveTunnelRow(db: Queryable, tenantId: string, replicaId: string): Promise<void> {
  await db.query(
    'UPDATE runtime_tunnels SET connection_id = $2, replica_id = $3, connected_at = now() WHERE tenant_id = $1',
    [tenantId, randomUUID(), replicaId],
  );
}

/** Makes a tunnel row last renewed `seconds` ago; answers how many rows it aged (0 or 1). */
export async function ageTunnelRow(db: Queryable, kind: TunnelKind, id: string, seconds: number): Promise<number> {
  const { table, key } = TABLES[kind];
  const { rowCount } = await db.query(
    `UPDATE ${table} SET seen_at = now() - make_interval(secs => $2::float8) WHERE ${key} = $1`,
    [id, seconds],
  );
  return rowCount ?? 0;
}

/**
 * Deletes a hosted runtime's tunnel row (a lost directory row), through the store's deleteTunnel of
 * the connection it holds. No replica is told.
 */
export async function dropTunnelRow(pool: pg.Pool, tenantId: string): Promise<void> {
  const row = await tunnelRow(pool, 'hosted', tenantId);
  if (row) await deleteTunnel(pool, 'hosted', tenantId, row.connection_id);
}

// SQL: a read no store read answers (every row, live or not, with its age).
/** A tunnel directory row as tests read it, live or not. */
export interface StoredTunnel {
  /** The tenant (hosted) or the runtime (hybrid) whose tunnel it is. */
  id: string;
  replicaId: string;
  /** Seconds since its last renewal, by the database's clock. */
  seenSecondsAgo: number;
}

/** The kind's tunnel rows (of one tenant or runtime when told), live or not, as stored. */
export async function tunnelRows(db: Queryable, kind: TunnelKind, id?: string): Promise<StoredTunnel[]> {
  const { table, key } = TABLES[kind];
  const { rows } = await db.query<StoredTunnel>(
    `SELECT ${key}::text AS id, replica_id AS "replicaId", extract(epoch FROM now() - seen_at)::float8 AS "seenSecondsAgo"
       FROM ${table} ${id === undefined ? '' : `WHERE ${key} = $1`} ORDER BY connected_at`,
    id === undefined ? [] : [id],
  );
  return rows;
}
