/**
 * Runtime tunnel rows (table runtime_tunnels; written by provisioner/tunnel/directory.ts).
 */

/** A row counts while its replica renewed it within this many seconds. */
export const TUNNEL_LEASE_SECONDS = 30;

/** SQL condition: row `alias` is live (renewed within the lease). */
export function liveTunnel(alias: string): string {
  return `${alias}.seen_at > now() - interval '${TUNNEL_LEASE_SECONDS} seconds'`;
}
