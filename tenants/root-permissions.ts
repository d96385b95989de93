/**
 * What the tenants program (and the engine's Helm recovery) does on a root cluster, as the
 * Kubernetes permissions a registered kubeconfig needs: checked with SelfSubjectAccessReviews
 * when a cluster is registered (provisioner/clusters/service.ts) and by `provisioner doctor`.
 * Tenant namespaces are created per tenant, so every namespaced permission is needed in all
 * namespaces (a ClusterRole bound cluster-wide). Keep this list in step with what tenant.ts,
 * tenant-namespace.ts, quota.ts, network-policies.ts and virtual-cluster.ts create.
 */

export interface RootPermission {
  verb: 'create' | 'get' | 'list' | 'patch' | 'update' | 'delete';
  /** API group ('' for the core group). */
  group: string;
  resource: string;
  /** Why the program needs it. */
  why: string;
}

const MANAGED = ['create', 'get', 'patch', 'delete'] as const;

function managed(group: string, resource: string, why: string): RootPermission[] {
  return MANAGED.map((verb) => ({ verb, group, resource, why }));
}

export const ROOT_CLUSTER_PERMISSIONS: readonly RootPermission[] = Object.freeze([
  ...managed('', 'namespaces', "the tenant's namespace (tenant-namespace.ts)"),
  ...managed('', 'resourcequotas', "the plan's ResourceQuota (quota.ts)"),
  ...managed('', 'limitranges', "the plan's LimitRange (quota.ts)"),
  ...managed('networking.k8s.io', 'networkpolicies', "the tenant's NetworkPolicies (network-policies.ts)"),
  // Helm keeps a release's records in Secrets; the vcluster exports its kubeconfig in one, and
  // Helm recovery lists and deletes the records an interrupted operation left.
  ...managed('', 'secrets', 'Helm release records and the exported vcluster kubeconfig (virtual-cluster.ts)'),
  { verb: 'list', group: '', resource: 'secrets', why: 'Helm release records (Helm and the engine list them)' },
  { verb: 'update', group: '', resource: 'secrets', why: 'Helm release records (Helm updates their status)' },
  // The objects of the vcluster chart, installed by the Helm release in the tenant namespace.
  ...managed('apps', 'statefulsets', "the vcluster's control plane (the vcluster chart)"),
  ...managed('', 'services', "the vcluster's API Service (the vcluster chart)"),
  ...managed('', 'serviceaccounts', "the vcluster's ServiceAccount (the vcluster chart)"),
  ...managed('', 'configmaps', "the vcluster's configuration (the vcluster chart)"),
  ...managed('rbac.authorization.k8s.io', 'roles', "the vcluster's Role (the vcluster chart)"),
  ...managed('rbac.authorization.k8s.io', 'rolebindings', "the vcluster's RoleBinding (the vcluster chart)"),
  { verb: 'list', group: '', resource: 'pods', why: "Helm waits for the vcluster's pods to be ready" },
]);

/** `create namespaces`, `patch statefulsets.apps`: a permission as kubectl auth can-i names it. */
export function describePermission(p: Pick<RootPermission, 'verb' | 'group' | 'resource'>): string {
  return `${p.verb} ${p.group ? `${p.resource}.${p.group}` : p.resource}`;
}
