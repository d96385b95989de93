/**
 * What the provisioner may do on a root cluster: create and delete tenant namespaces and, in
 * them, everything the tenants/ program and the vcluster chart create. Kubernetes RBAC cannot
 * scope a grant to "namespaces labelled tenant", and tenant namespaces come and go, so these
 * rules are bound cluster-wide; the provisioner holds every permission the vcluster's own Role
 * grants because RBAC forbids granting what one does not hold (no `escalate`/`bind`).
 * Not granted: nodes, cluster-scoped RBAC, CRDs, webhooks, anything in kube-system beyond reads.
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
