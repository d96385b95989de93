/**
 * Runtime tunnel rows: which replica holds each runtime's tunnel — a tenant's hosted runtime's in
 * table runtime_tunnels (keyed by tenant), a hybrid runtime's in hybrid_runtime_tunnels (keyed by
 * runtime). Both have the same lease. The tunnel directory (provisioner/tunnel/directory.ts)
 * writes and renews them with these statements.
 */
import type pg from 'pg';

/** The NOTIFY channel of runtime_tunnels; the payload is the tenant id whose row was written. */
export const TUNNEL_CHANNEL = 'runtime_tunnel';
/** The NOTIFY channel of hybrid_runtime_tunnels; the payload is the runtime id whose row was written. */
export const HYBRID_TUNNEL_CHANNEL = 'hybrid_runtime_tunnel';

/** Which tunnels: a tenant's hosted runtime's (keyed by tenant id) or a hybrid runtime's (keyed by runtime id). */
export type TunnelKind = 'hosted' | 'hybrid';

const TABLES: Record<TunnelKind, { table: string; key: string; channel: string }> = {
  hosted: { table: 'runtime_tunnels', key: 'tenant_id', channel: TUNNEL_CHANNEL },
  hybrid: { table: 'hybrid_runtime_tunnels', key: 'runtime_id', channel: HYBRID_TUNNEL_CHANNEL },
};
export const TUNNEL_KINDS: readonly TunnelKind[] = ['hosted', 'hybrid'];
export const channelOf = (kind: TunnelKind): string => TABLES[kind].channel;

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

/** Deletes every row of the replica, of both kinds. */
export async function deleteReplicaTunnels(pool: pg.Pool, replicaId: string): Promise<void> {
  for (const kind of TUNNEL_KINDS)
    await pool.query(`DELETE FROM ${TABLES[kind].table} WHERE replica_id = $1`, [replicaId]);
}

/** The replica holding the tunnel (`id`: the tenant's for a hosted runtime, the runtime's for a hybrid one) within the lease, if any. */
export async function liveTunnelOwner(
  pool: pg.Pool,
  kind: TunnelKind,
  id: string,
): Promise<{ replica_id: string; replica_url: string; connected_at: Date } | undefined> {
  const { table, key } = TABLES[kind];
  const { rows } = await pool.query<{ replica_id: string; replica_url: string; connected_at: Date }>({
    name: `${kind}-runtime-tunnel-owner`,
    text: `SELECT replica_id, replica_url, connected_at FROM ${table} t WHERE ${key} = $1 AND ${liveTunnel('t')}`,
    values: [id],
  });
  return rows[0];
}

/** Writes a replica's row for a connection (replacing any other) and announces it on the kind's channel. */
export async function writeTunnel(
  pool: pg.Pool,
  kind: TunnelKind,
  t: { id: string; tenantId: string; connectionId: string; replicaId: string; replicaUrl: string; since: Date },
): Promise<void> {
  const { table, key, channel } = TABLES[kind];
  // runtime_tunnels' key is the tenant: its tenant_id is given once.
  const columns = kind === 'hosted' ? 'tenant_id' : 'runtime_id, tenant_id';
  const values = kind === 'hosted' ? '$1' : '$1, $6';
  await pool.query({
    name: `${kind}-runtime-tunnel-write`,
    text: `WITH w AS (
             INSERT INTO ${table} (${columns}, connection_id, replica_id, replica_url, connected_at, seen_at)
             VALUES (${values}, $2, $3, $4, $5, now())
             ON CONFLICT (${key}) DO UPDATE SET connection_id = EXCLUDED.connection_id, replica_id = EXCLUDED.replica_id,
               replica_url = EXCLUDED.replica_url, connected_at = EXCLUDED.connected_at, seen_at = now()
             RETURNING ${key})
           SELECT pg_notify('${channel}', ${key}::text) FROM w`,
    values: [t.id, t.connectionId, t.replicaId, t.replicaUrl, t.since, ...(kind === 'hosted' ? [] : [t.tenantId])],
  });
}

export async function deleteTunnel(pool: pg.Pool, kind: TunnelKind, id: string, connectionId: string): Promise<void> {
  const { table, key } = TABLES[kind];
  await pool.query({
    name: `${kind}-runtime-tunnel-remove`,
    text: `DELETE FROM ${table} WHERE ${key} = $1 AND connection_id = $2`,
    values: [id, connectionId],
  });
}

/** The row of one tunnel, live or not. */
export async function tunnelRow(
  pool: pg.Pool,
  kind: TunnelKind,
  id: string,
): Promise<(TunnelRow & { fresh: boolean }) | undefined> {
  const { table, key } = TABLES[kind];
  const { rows } = await pool.query<TunnelRow & { fresh: boolean }>(
    `SELECT connection_id, replica_id, ${liveTunnel('t')} AS fresh FROM ${table} t WHERE ${key} = $1`,
    [id],
  );
  return rows[0];
}

/** Renews every row of the replica of that kind; answers them (tenant or runtime id → connection id). */
export async function renewReplicaTunnels(
  pool: pg.Pool,
  kind: TunnelKind,
  replicaId: string,
): Promise<Map<string, string>> {
  const { table, key } = TABLES[kind];
  const { rows } = await pool.query<{ id: string; connection_id: string }>({
    name: `${kind}-runtime-tunnel-renew`,
    text: `UPDATE ${table} SET seen_at = now() WHERE replica_id = $1 RETURNING ${key} AS id, connection_id`,
    values: [replicaId],
  });
  return new Map(rows.map((r) => [r.id, r.connection_id]));
}

/** Deletes rows of both kinds no replica renewed for SWEEP_AFTER_SECONDS (their replicas died). */
export async function sweepTunnels(pool: pg.Pool): Promise<void> {
  for (const kind of TUNNEL_KINDS)
    await pool.query(
      `DELETE FROM ${TABLES[kind].table} WHERE seen_at < now() - interval '${SWEEP_AFTER_SECONDS} seconds'`,
    );
}
