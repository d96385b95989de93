/**
 * What the tenants program (and the engine's Helm recovery, and the root-cluster watch) does on a
 * root cluster, as the Kubernetes permissions a registered kubeconfig needs: checked with
 * SelfSubjectAccessReviews when a cluster is registered (provisioner/clusters/service.ts), by
 * `provisioner doctor`, and in each tenant namespace by the program itself (root-access.ts).
 *
 * Three scopes, from infra/'s least-privilege grants (infra/provisioner-rbac.ts, docs/decisions.md):
 *  - `cluster`: cluster-scoped objects, or reads across all namespaces (the root-cluster watch);
 *  - `tenant`: in tenant namespaces, held before the namespace's RoleBinding exists (creating that
 *    RoleBinding), so granted cluster-wide (the admission policy keeps the writes in `tenant-…`);
 *  - `bound`: in each tenant namespace, through the RoleBinding the program creates there right
 *    after the Namespace (binding TENANT_CLUSTER_ROLE), or through a cluster-wide grant.
 * Keep this list in step with what tenant.ts, tenant-namespace.ts, quota.ts, network-policies.ts,
 * virtual-cluster.ts and synced-pods.ts create or delete and with what provisioner/drift-watch/objects.ts
 * watches.
 */

/** The ClusterRole infra/ defines and the program binds in each tenant namespace (never cluster-wide). */
export const TENANT_CLUSTER_ROLE = 'hosted-platform:provisioner-tenant';
/** The RoleBinding of TENANT_CLUSTER_ROLE in each tenant namespace. */
export const TENANT_ROLE_BINDING = 'hosted-platform-provisioner';
/**
 * The newest root-cluster Kubernetes the provisioner is tested against (the toolchain's API
 * servers). Charts grant more on newer roots (the vcluster chart's Role adds `pods/resize` from
 * 1.35), so the conformance check renders the root releases for this version, and the
 * provisioner's grants (infra/provisioner-rbac.ts, ROOT_CLUSTER_PERMISSIONS) must cover it.
 */
export const NEWEST_ROOT_KUBERNETES = 'v1.35.0';

/**
 * A tenant namespace's name no tenant has: reviews of `tenant` and `bound` permissions are asked
 * in it (a cluster-wide grant answers for every namespace, existing or not).
 */
export const REVIEW_NAMESPACE = 'tenant-00000000-0000-0000-0000-000000000000';

export type PermissionScope = 'cluster' | 'tenant' | 'bound';

export interface RootPermission {
  verb: 'create' | 'get' | 'list' | 'watch' | 'patch' | 'update' | 'delete' | 'bind';
  /** API group ('' for the core group). */
  group: string;
  resource: string;
  /** Only this object (RBAC `resourceNames`). */
  name?: string;
  scope: PermissionScope;
  /** Why the program needs it. */
  why: string;
}

const MANAGED = ['create', 'get', 'patch', 'delete'] as const;

function managed(group: string, resource: string, why: string): RootPermission[] {
  return MANAGED.map((verb) => ({ verb, group, resource, scope: 'bound', why }));
}

const RBAC = 'rbac.authorization.k8s.io';

export const ROOT_CLUSTER_PERMISSIONS: readonly RootPermission[] = Object.freeze([
  ...MANAGED.map((verb): RootPermission => ({
    verb,
    group: '',
    resource: 'namespaces',
    scope: 'cluster',
    why: "the tenant's namespace (tenant-namespace.ts)",
  })),
  // The RoleBinding that gives the program its namespaced permissions in a new tenant namespace.
  {
    verb: 'create',
    group: RBAC,
    resource: 'rolebindings',
    scope: 'tenant',
    why: `the RoleBinding of ${TENANT_CLUSTER_ROLE} in a new tenant namespace (tenant-namespace.ts)`,
  },
  ...(['get', 'patch', 'delete'] as const).map((verb): RootPermission => ({
    verb,
    group: RBAC,
    resource: 'rolebindings',
    name: TENANT_ROLE_BINDING,
    scope: 'tenant',
    why: `the RoleBinding of ${TENANT_CLUSTER_ROLE} in each tenant namespace (tenant-namespace.ts)`,
  })),
  {
    verb: 'bind',
    group: RBAC,
    resource: 'clusterroles',
    name: TENANT_CLUSTER_ROLE,
    scope: 'cluster',
    why: 'binding the ClusterRole of tenant namespaces without holding its permissions beforehand',
  },
  // What the root-cluster watch lists and watches across all namespaces (provisioner/drift-watch/objects.ts).
  ...(['list', 'watch'] as const).flatMap((verb) =>
    (
      [
        ['', 'namespaces'],
        ['', 'resourcequotas'],
        ['', 'limitranges'],
        ['networking.k8s.io', 'networkpolicies'],
        ['apps', 'statefulsets'],
      ] as const
    ).map(([group, resource]): RootPermission => ({
      verb,
      group,
      resource,
      scope: 'cluster',
      why: 'the root-cluster watch (drift corrected in seconds)',
    })),
  ),
  ...managed('', 'resourcequotas', "the plan's ResourceQuota (quota.ts)"),
  ...managed('', 'limitranges', "the plan's LimitRange (quota.ts)"),
  ...managed('networking.k8s.io', 'networkpolicies', "the tenant's NetworkPolicies (network-policies.ts)"),
  // Helm keeps a release's records in Secrets; the vcluster exports its kubeconfig in one, and
  // Helm recovery lists and deletes the records an interrupted operation left.
  ...managed('', 'secrets', 'Helm release records and the exported vcluster kubeconfig (virtual-cluster.ts)'),
  {
    verb: 'list',
    group: '',
    resource: 'secrets',
    scope: 'bound',
    why: 'Helm release records (Helm and the engine list them)',
  },
  {
    verb: 'update',
    group: '',
    resource: 'secrets',
    scope: 'bound',
    why: 'Helm release records (Helm updates their status)',
  },
  // The objects of the vcluster chart, installed by the Helm release in the tenant namespace.
  ...managed('apps', 'statefulsets', "the vcluster's control plane (the vcluster chart)"),
  ...managed('', 'services', "the vcluster's API Service (the vcluster chart)"),
  ...managed('', 'serviceaccounts', "the vcluster's ServiceAccount (the vcluster chart)"),
  ...managed('', 'configmaps', "the vcluster's configuration (the vcluster chart)"),
  ...managed(RBAC, 'roles', "the vcluster's Role (the vcluster chart)"),
  ...managed(RBAC, 'rolebindings', "the vcluster's RoleBinding (the vcluster chart)"),
  { verb: 'list', group: '', resource: 'pods', scope: 'bound', why: "Helm waits for the vcluster's pods to be ready" },
  // Suspending a tenant deletes the pods its vcluster synced, as `vcluster pause` does (synced-pods.ts).
  {
    verb: 'delete',
    group: '',
    resource: 'pods',
    scope: 'bound',
    why: "a suspended tenant's pods synced by its vcluster are deleted (synced-pods.ts)",
  },
  // RBAC refuses to create a Role granting what its creator does not hold (no `escalate`): the
  // vcluster's Role grants these to its syncer on every pinned chart version.
  ...(['patch', 'update'] as const).map((verb): RootPermission => ({
    verb,
    group: '',
    resource: 'pods/ephemeralcontainers',
    scope: 'bound',
    why: "the vcluster's Role grants it (the vcluster chart): a Role may grant only what its creator holds",
  })),
  // On a root cluster of Kubernetes 1.35 or newer the chart's Role also grants in-place resizes.
  ...(['patch', 'update'] as const).map((verb): RootPermission => ({
    verb,
    group: '',
    resource: 'pods/resize',
    scope: 'bound',
    why: "the vcluster's Role grants it on Kubernetes 1.35 and newer (the vcluster chart): a Role may grant only what its creator holds",
  })),
]);

/** The permissions the program needs in each tenant namespace once its RoleBinding is there. */
export const BOUND_PERMISSIONS: readonly RootPermission[] = ROOT_CLUSTER_PERMISSIONS.filter((p) => p.scope === 'bound');

/** `create namespaces`, `bind clusterroles.rbac.authorization.k8s.io/<name>`: as kubectl auth can-i names it. */
export function describePermission(p: Pick<RootPermission, 'verb' | 'group' | 'resource' | 'name'>): string {
  return `${p.verb} ${p.group ? `${p.resource}.${p.group}` : p.resource}${p.name ? `/${p.name}` : ''}`;
}

/** Where a permission is needed, in words. */
export function describeScope(scope: PermissionScope): string {
  switch (scope) {
    case 'cluster':
      return 'cluster-wide';
    case 'tenant':
      return 'in every tenant namespace (bound cluster-wide: held before the namespace exists)';
    case 'bound':
      return `in each tenant namespace (granted cluster-wide or by ClusterRole ${TENANT_CLUSTER_ROLE}, which the program binds there)`;
  }
}

/** The missing permissions grouped by scope: `cluster-wide: a, b; in every tenant namespace …: c`. */
export function describeMissing(missing: readonly RootPermission[]): string {
  const scopes: PermissionScope[] = ['cluster', 'tenant', 'bound'];
  return scopes
    .map((s) => [s, missing.filter((p) => p.scope === s)] as const)
    .filter(([, ps]) => ps.length > 0)
    .map(([s, ps]) => `${describeScope(s)}: ${ps.map(describePermission).join(', ')}`)
    .join('; ');
}

/** A PolicyRule as the API server returns it. */
export interface PolicyRule {
  apiGroups?: string[];
  resources?: string[];
  verbs?: string[];
  resourceNames?: string[];
}

/**
 * Whether `rules` (a ClusterRole's) grant `p` as RBAC would: group, resource and verb match (or
 * `*`), and the rule names no objects or names the one `p` is about.
 */
export function grantedByRules(rules: readonly PolicyRule[], p: RootPermission): boolean {
  const has = (list: string[] | undefined, value: string) => !!list && (list.includes('*') || list.includes(value));
  return rules.some(
    (r) =>
      has(r.apiGroups, p.group) &&
      has(r.resources, p.resource) &&
      has(r.verbs, p.verb) &&
      (!r.resourceNames?.length || (p.name !== undefined && r.resourceNames.includes(p.name))),
  );
}
