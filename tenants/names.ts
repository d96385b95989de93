/**
 * Names a tenant's objects carry on its root cluster, in a module that imports nothing, so the
 * control plane (the reconciler's wake head start, the root-cluster watch) can use them without
 * loading the Pulumi program.
 */

/** The program's Kubernetes provider for the root cluster (every other one is a tenant's vcluster's). */
export const ROOT_PROVIDER = 'root';

/** The vcluster's Helm release, and with it its StatefulSet, Service and Secret names (`vc-<release>`). */
export const VCLUSTER_RELEASE = 'vcluster';

/** The tenant's namespace on its root cluster, which holds its vcluster. */
export function tenantNamespaceName(tenantId: string): string {
  return `tenant-${tenantId}`;
}
