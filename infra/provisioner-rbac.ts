/**
 * What the provisioner may do on a root cluster, in two ClusterRoles (docs/decisions.md,
 * "Least privilege for reads"):
 *
 *  - PROVISIONER_CLUSTER_RULES, bound cluster-wide: tenant namespaces themselves (create, delete;
 *    list and watch for the root-cluster watch), reads of the kinds the root-cluster watch follows
 *    across all namespaces (quotas, limit ranges, network policies, StatefulSets: no Secrets, no
 *    ConfigMaps, no Pods), creating the RoleBinding of PROVISIONER_TENANT_RULES in a tenant namespace
 *    and `bind` on that one ClusterRole (resourceNames), so it can bind it without holding its
 *    permissions beforehand (RBAC's escalation check), and reading that ClusterRole (the
 *    registration probe checks what it grants).
 *  - PROVISIONER_TENANT_RULES (ClusterRole TENANT_CLUSTER_ROLE), never bound cluster-wide: what the
 *    tenants program and the vcluster chart do inside a tenant namespace, Secrets and ConfigMaps
 *    included. The tenants program binds it in each tenant namespace right after creating the
 *    namespace (tenants/tenant-namespace.ts); it holds every permission the vcluster's own Role
 *    grants, since RBAC forbids granting what one does not hold (no `escalate`).
 *
 * Not granted anywhere: nodes, cluster-scoped RBAC, CRDs, webhooks, Secrets, ConfigMaps or Pods
 * outside tenant namespaces (nor in the platform namespace: the provisioner reads nothing there
 * through the API). Creating RoleBindings cannot be limited by name in RBAC (a create has no name
 * when it is authorized), and namespaces come and go: what the cluster-wide grants would still
 * allow outside tenant namespaces — deleting or relabelling kube-system, binding the tenant role
 * in `default` — a ValidatingAdmissionPolicy refuses for the provisioner's ServiceAccount
 * (provisionerGuardSpec): it writes only in namespaces named `tenant-…` and only such namespaces
 * themselves.
 */
import type * as k8s from '@pulumi/kubernetes';
import { TENANT_CLUSTER_ROLE, TENANT_ROLE_BINDING } from '../tenants/root-permissions.ts';

export { TENANT_CLUSTER_ROLE, TENANT_ROLE_BINDING };

const manage = ['get', 'list', 'watch', 'create', 'update', 'patch', 'delete'];
const read = ['get', 'list', 'watch'];
const RBAC = 'rbac.authorization.k8s.io';

export const PROVISIONER_CLUSTER_RULES: k8s.types.input.rbac.v1.PolicyRule[] = [
  { apiGroups: [''], resources: ['namespaces'], verbs: manage },
  // The root-cluster watch (provisioner/drift-watch/objects.ts): across all namespaces, by label.
  { apiGroups: [''], resources: ['resourcequotas', 'limitranges'], verbs: read },
  { apiGroups: ['networking.k8s.io'], resources: ['networkpolicies'], verbs: read },
  { apiGroups: ['apps'], resources: ['statefulsets'], verbs: read },
  { apiGroups: ['scheduling.k8s.io'], resources: ['priorityclasses'], verbs: read },
  // The RoleBinding of the tenant role in each tenant namespace, made before anything else there.
  { apiGroups: [RBAC], resources: ['rolebindings'], verbs: ['create'] },
  {
    apiGroups: [RBAC],
    resources: ['rolebindings'],
    resourceNames: [TENANT_ROLE_BINDING],
    verbs: ['get', 'update', 'patch', 'delete'],
  },
  { apiGroups: [RBAC], resources: ['clusterroles'], resourceNames: [TENANT_CLUSTER_ROLE], verbs: ['bind', 'get'] },
];

export const PROVISIONER_TENANT_RULES: k8s.types.input.rbac.v1.PolicyRule[] = [
  {
    apiGroups: [''],
    resources: [
      'configmaps',
      'secrets',
      'services',
      'endpoints',
      'serviceaccounts',
      'persistentvolumeclaims',
      'pods',
      'pods/attach',
      'pods/exec',
      'pods/portforward',
      'pods/log',
      'pods/status',
      'resourcequotas',
      'limitranges',
      'events',
    ],
    verbs: manage,
  },
  // The vcluster chart's Role grants its syncer these (every pinned chart version): the syncer
  // adds ephemeral containers (`kubectl debug` inside the vcluster) to the pods it synced.
  { apiGroups: [''], resources: ['pods/ephemeralcontainers'], verbs: ['patch', 'update'] },
  // …and on a root cluster of Kubernetes 1.35 or newer, in-place resizes of those pods (the chart's
  // Role adds `pods/resize` from that minor on; the conformance check renders it for the newest
  // root version, NEWEST_ROOT_KUBERNETES).
  { apiGroups: [''], resources: ['pods/resize'], verbs: ['patch', 'update'] },
  { apiGroups: ['apps'], resources: ['statefulsets', 'deployments', 'replicasets'], verbs: manage },
  { apiGroups: [RBAC], resources: ['roles', 'rolebindings'], verbs: manage },
  { apiGroups: ['networking.k8s.io'], resources: ['networkpolicies', 'ingresses'], verbs: manage },
  { apiGroups: ['policy'], resources: ['poddisruptionbudgets'], verbs: manage },
  { apiGroups: ['coordination.k8s.io'], resources: ['leases'], verbs: manage },
  { apiGroups: ['discovery.k8s.io'], resources: ['endpointslices'], verbs: manage },
  { apiGroups: ['events.k8s.io'], resources: ['events'], verbs: ['get', 'list', 'watch', 'create', 'patch'] },
];

/** The provisioner's ServiceAccount (infra/provisioner.ts creates it in the platform namespace). */
export const PROVISIONER_SERVICE_ACCOUNT = { namespace: 'hosted-platform', name: 'provisioner' } as const;
/** Namespaces the provisioner may write in (tenants/tenant-namespace.ts names them so). */
export const TENANT_NAMESPACE_PREFIX = 'tenant-';

/**
 * The CEL rule of the guard: a namespace's own name, or the namespace of a namespaced object,
 * starts with `tenant-`.
 */
export const PROVISIONER_GUARD_EXPRESSION =
  `request.resource.group == '' && request.resource.resource == 'namespaces' ` +
  `? request.name.startsWith('${TENANT_NAMESPACE_PREFIX}') ` +
  `: request.namespace.startsWith('${TENANT_NAMESPACE_PREFIX}')`;

/** The ValidatingAdmissionPolicy spec for the ServiceAccount `user` (system:serviceaccount:<ns>:<name>). */
export function provisionerGuardSpec(
  user: string,
): k8s.types.input.admissionregistration.v1.ValidatingAdmissionPolicySpec {
  return {
    failurePolicy: 'Fail',
    matchConstraints: {
      resourceRules: [
        {
          apiGroups: ['*'],
          apiVersions: ['*'],
          resources: ['*/*'],
          operations: ['CREATE', 'UPDATE', 'DELETE', 'CONNECT'],
        },
      ],
      // Reviews (who am I, may I) are questions, not changes.
      excludeResourceRules: [
        {
          apiGroups: ['authentication.k8s.io', 'authorization.k8s.io'],
          apiVersions: ['*'],
          resources: ['*'],
          operations: ['CREATE'],
        },
      ],
    },
    matchConditions: [{ name: 'the-provisioner', expression: `request.userInfo.username == '${user}'` }],
    validations: [
      {
        expression: PROVISIONER_GUARD_EXPRESSION,
        messageExpression: `'the provisioner may only change tenant namespaces (${TENANT_NAMESPACE_PREFIX}*) and what is in them, not ' + (request.namespace != '' ? 'namespace ' + request.namespace : request.resource.resource + ' ' + request.name)`,
        reason: 'Forbidden',
      },
    ],
  };
}
