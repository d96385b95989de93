/**
 * Placement of a tenant on its first provision: the least-loaded eligible root cluster. A cluster
 * is eligible when it is not cordoned, allows the tenant's plan (an empty plan list allows all)
 * and has room (live tenants < capacity). Load is live tenants / capacity; ties go to the
 * cluster with fewer tenants, then by name. Placement is sticky: once a tenant has a cluster it
 * stays there (the claim query only places tenants without one).
 */
export interface ClusterLoad {
  id: string;
  name: string;
  capacity: number;
  plans: string[];
  cordoned: boolean;
  /** Live (not Deleted) tenants placed on the cluster. */
  tenants: number;
  /** Unexpired reconcile leases on the cluster (all processes). */
  leases: number;
}

export type PlacementDecision =
  | { kind: 'placed'; clusterId: string }
  /** An eligible cluster exists but is at its reconcile parallelism: try again later. */
  | { kind: 'busy' }
  | { kind: 'no-capacity'; message: string };

export function eligibleClusters(clusters: ClusterLoad[], plan: string): ClusterLoad[] {
  return clusters.filter((c) => !c.cordoned && (c.plans.length === 0 || c.plans.includes(plan)) && c.tenants < c.capacity);
}

export function choosePlacement(clusters: ClusterLoad[], plan: string, clusterParallelism: number): PlacementDecision {
  const eligible = eligibleClusters(clusters, plan);
  if (eligible.length === 0) {
    const reasons = clusters.length === 0
      ? 'no root cluster is registered'
      : clusters.map((c) => `${c.name}: ${c.cordoned ? 'cordoned' : c.plans.length > 0 && !c.plans.includes(plan) ? `plan ${plan} not allowed` : `full (${c.tenants}/${c.capacity})`}`).join('; ');
    return { kind: 'no-capacity', message: `no root cluster can take a ${plan} tenant (${reasons}); register a cluster or raise a capacity` };
  }
  const free = eligible.filter((c) => c.leases < clusterParallelism);
  if (free.length === 0) return { kind: 'busy' };
  free.sort((a, b) => a.tenants / Math.max(1, a.capacity) - b.tenants / Math.max(1, b.capacity) || a.tenants - b.tenants || a.name.localeCompare(b.name));
  return { kind: 'placed', clusterId: free[0]!.id };
}
