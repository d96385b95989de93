/**
 * Placement of a tenant on its first provision: the least-loaded eligible root cluster. A cluster
 * is eligible when it is not cordoned, is in the tenant's region (when the tenant asked for one),
 * allows the tenant's plan (an empty plan list allows all) and has room (live tenants <
 * capacity). Load is live tenants / capacity; ties go to the cluster with fewer tenants, then by
 * name. Placement is sticky: once a tenant has a cluster it stays there (the claim query only
 * places tenants without one).
 */
import type { ClusterRow } from '../store/leases.ts';

export interface ClusterLoad extends ClusterRow {
  /** Live (not Deleted) tenants placed on the cluster. */
  tenants: number;
  /** Unexpired reconcile leases on the cluster (all processes). */
  leases: number;
}

/** What the tenant asks of its cluster. */
export interface PlacementRequest {
  plan: string;
  /** null: any region. */
  region: string | null;
}

export type PlacementDecision =
  | { kind: 'placed'; clusterId: string }
  /** An eligible cluster exists but is at its reconcile parallelism: try again later. */
  | { kind: 'busy' }
  | { kind: 'no-capacity'; message: string };

/** Why a cluster cannot take the tenant, or undefined when it can. */
export function ineligibility(c: ClusterLoad, want: PlacementRequest): string | undefined {
  if (want.region !== null && c.region !== want.region) return `region ${c.region}`;
  if (c.cordoned) return 'cordoned';
  if (c.plans.length > 0 && !c.plans.includes(want.plan)) return `plan ${want.plan} not allowed`;
  if (c.tenants >= c.capacity) return `full (${c.tenants}/${c.capacity})`;
  return undefined;
}

export function eligibleClusters(clusters: ClusterLoad[], want: PlacementRequest): ClusterLoad[] {
  return clusters.filter((c) => ineligibility(c, want) === undefined);
}

/**
 * What would let the tenant be placed, most direct first: uncordoning a cluster that would take it
 * but for its cordon (the command to run), raising the capacity of one that is only full, and
 * registering another cluster.
 */
export function placementActions(clusters: ClusterLoad[], want: PlacementRequest): string[] {
  const uncordon = clusters
    .filter((c) => c.cordoned && ineligibility({ ...c, cordoned: false }, want) === undefined)
    .map((c) => `uncordon ${c.name} (provisioner clusters uncordon ${c.name})`);
  const raise = clusters
    .filter(
      (c) =>
        !c.cordoned && c.tenants >= c.capacity && ineligibility({ ...c, capacity: c.tenants + 1 }, want) === undefined,
    )
    .map((c) => `raise the capacity of ${c.name} (${c.capacity} now)`);
  const register = `register ${clusters.length === 0 ? 'a' : 'another'} cluster${want.region === null ? '' : ` in region ${want.region}`}`;
  return [...uncordon, ...raise, register];
}

export function choosePlacement(
  clusters: ClusterLoad[],
  want: PlacementRequest,
  clusterParallelism: number,
): PlacementDecision {
  const eligible = eligibleClusters(clusters, want);
  if (eligible.length === 0) {
    const reasons =
      clusters.length === 0
        ? 'no root cluster is registered'
        : clusters.map((c) => `${c.name}: ${ineligibility(c, want)!}`).join('; ');
    const what = want.region === null ? `a ${want.plan} tenant` : `a ${want.plan} tenant in region ${want.region}`;
    return {
      kind: 'no-capacity',
      message: `no root cluster can take ${what} (${reasons}); ${placementActions(clusters, want).join(', or ')}`,
    };
  }
  const free = eligible.filter((c) => c.leases < clusterParallelism);
  if (free.length === 0) return { kind: 'busy' };
  free.sort(
    (a, b) =>
      a.tenants / Math.max(1, a.capacity) - b.tenants / Math.max(1, b.capacity) ||
      a.tenants - b.tenants ||
      a.name.localeCompare(b.name),
  );
  return { kind: 'placed', clusterId: free[0]!.id };
}
