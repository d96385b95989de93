/**
 * Runtime tunnel rows (table runtime_tunnels): which replica holds each runtime's tunnel. The
 * tunnel directory (provisioner/tunnel/directory.ts) writes and renews them with these statements.
 */
import type pg from 'pg';

/** The NOTIFY channel; the payload is the tenant id whose row was written. */
export const TUNNEL_CHANNEL = 'runtime_tunnel';

/** A row counts while its replica renewed it within this many seconds. */
export const TUNNEL_LEASE_SECONDS = 30;

/** SQL condition: row `alias` is live (renewed within the lease). */
export function liveTunnel(alias: string): string {
  return `${alias}.seen_at > now() - interval '${TUNNEL_LEASE_SECONDS} seconds'`;
}

/** Rows this much older than the lease are deleted by any replica's renewal. */
export const SWEEP_AFTER_SECONDS = TUNNEL_LEASE_SECONDS * 4;

/** The directory's row of one tunnel. */
export interface TunnelRow {
  connection_id: string;
  replica_id: string;
}

export async function deleteReplicaTunnels(pool: pg.Pool, replicaId: string): Promise<void> {
  await pool.query('DELETE FROM runtime_tunnels WHERE replica_id = $1', [replicaId]);
}

/** The replica holding the tenant's tunnel within the lease, if any. */
export async function liveTunnelOwner(
  pool: pg.Pool,
  tenantId: string,
): Promise<{ replica_id: string; replica_url: string; connected_at: Date } | undefined> {
  const { rows } = await pool.query<{ replica_id: string; replica_url: string; connected_at: Date }>({
    name: 'runtime-tunnel-owner',
    text: `SELECT replica_id, replica_url, connected_at FROM runtime_tunnels
           WHERE tenant_id = $1 AND ${liveTunnel('runtime_tunnels')}`,
    values: [tenantId],
  });
  return rows[0];
}

/** Writes a replica's row for a connection (replacing any other) and announces it on TUNNEL_CHANNEL. */
export async function writeTunnel(
  pool: pg.Pool,
  t: { tenantId: string; connectionId: string; replicaId: string; replicaUrl: string; since: Date },
): Promise<void> {
  await pool.query({
    name: 'runtime-tunnel-write',
    text: `WITH w AS (
             INSERT INTO runtime_tunnels (tenant_id, connection_id, replica_id, replica_url, connected_at, seen_at)
             VALUES ($1, $2, $3, $4, $5, now())
             ON CONFLICT (tenant_id) DO UPDATE SET connection_id = EXCLUDED.connection_id, replica_id = EXCLUDED.replica_id,
               replica_url = EXCLUDED.replica_url, connected_at = EXCLUDED.connected_at, seen_at = now()
             RETURNING tenant_id)
           SELECT pg_notify('${TUNNEL_CHANNEL}', tenant_id::text) FROM w`,
    values: [t.tenantId, t.connectionId, t.replicaId, t.replicaUrl, t.since],
  });
}

export async function deleteTunnel(pool: pg.Pool, tenantId: string, connectionId: string): Promise<void> {
  await pool.query({
    name: 'runtime-tunnel-remove',
    text: 'DELETE FROM runtime_tunnels WHERE tenant_id = $1 AND connection_id = $2',
    values: [tenantId, connectionId],
  });
}

/** The tenant's row, live or not. */
export async function tunnelRow(
  pool: pg.Pool,
  tenantId: string,
): Promise<(TunnelRow & { fresh: boolean }) | undefined> {
  const { rows } = await pool.query<TunnelRow & { fresh: boolean }>(
    `SELECT connection_id, replica_id, ${liveTunnel('runtime_tunnels')} AS fresh FROM runtime_tunnels WHERE tenant_id = $1`,
    [tenantId],
  );
  return rows[0];
}

/** Renews every row of the replica; answers them (tenant id → connection id). */
export async function renewReplicaTunnels(pool: pg.Pool, replicaId: string): Promise<Map<string, string>> {
  const { rows } = await pool.query<{ tenant_id: string; connection_id: string }>({
    name: 'runtime-tunnel-renew',
    text: 'UPDATE runtime_tunnels SET seen_at = now() WHERE replica_id = $1 RETURNING tenant_id, connection_id',
    values: [replicaId],
  });
  return new Map(rows.map((r) => [r.tenant_id, r.connection_id]));
}

/** Deletes rows no replica renewed for SWEEP_AFTER_SECONDS (their replicas died). */
export async function sweepTunnels(pool: pg.Pool): Promise<void> {
  await pool.query(`DELETE FROM runtime_tunnels WHERE seen_at < now() - interval '${SWEEP_AFTER_SECONDS} seconds'`);
}
