/**
 * What the provisioner may do on a root cluster: create and delete tenant namespaces and, in
 * them, everything the tenants/ program and the vcluster chart create. Kubernetes RBAC cannot
 * scope a grant to "namespaces labelled tenant", and tenant namespaces come and go, so these
 * rules are bound cluster-wide; the provisioner holds every permission the vcluster's own Role
 * grants because RBAC forbids granting what one does not hold (no `escalate`/`bind`).
 * Not granted: nodes, cluster-scoped RBAC, CRDs, webhooks, anything in kube-system beyond reads.
 *
 * What the cluster-wide grant would still allow outside tenant namespaces — deleting or
 * relabelling kube-system, writing in any namespace — a ValidatingAdmissionPolicy refuses for the
 * provisioner's ServiceAccount (provisionerGuardSpec): it writes only in namespaces named
 * `tenant-…` and only such namespaces themselves. Reads are not admission's to refuse: the grant
 * still reaches Secrets in every namespace (issue 20; docs/decisions.md).
 */
import type * as k8s from '@pulumi/kubernetes';

const manage = ['get', 'list', 'watch', 'create', 'update', 'patch', 'delete'];

export const PROVISIONER_RULES: k8s.types.input.rbac.v1.PolicyRule[] = [
  { apiGroups: [''], resources: ['namespaces'], verbs: manage },
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
  { apiGroups: ['apps'], resources: ['statefulsets', 'deployments', 'replicasets'], verbs: manage },
  { apiGroups: ['rbac.authorization.k8s.io'], resources: ['roles', 'rolebindings'], verbs: manage },
  { apiGroups: ['networking.k8s.io'], resources: ['networkpolicies', 'ingresses'], verbs: manage },
  { apiGroups: ['policy'], resources: ['poddisruptionbudgets'], verbs: manage },
  { apiGroups: ['coordination.k8s.io'], resources: ['leases'], verbs: manage },
  { apiGroups: ['discovery.k8s.io'], resources: ['endpointslices'], verbs: manage },
  { apiGroups: ['events.k8s.io'], resources: ['events'], verbs: ['get', 'list', 'watch', 'create', 'patch'] },
  { apiGroups: ['scheduling.k8s.io'], resources: ['priorityclasses'], verbs: ['get', 'list', 'watch'] },
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
