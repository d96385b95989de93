/**
 * TenantNamespace: the tenant's namespace on its root cluster with Pod Security `restricted`
 * labels and ownership labels; right after it, the RoleBinding that gives the program (whoever
 * the root kubeconfig is) its permissions inside the namespace (ClusterRole TENANT_CLUSTER_ROLE
 * of infra/; tenants/root-permissions.ts); then, once the API server applies that binding, the
 * plan's ResourceQuota and LimitRange and the NetworkPolicies (tenants/network-policies.ts).
 * `namespace` resolves only once the binding is in effect, so whatever is created in the
 * namespace (the vcluster release) waits for it too. Children use the root-cluster provider
 * given in opts.
 */
import * as k8s from '@pulumi/kubernetes';
import * as pulumi from '@pulumi/pulumi';
import type { KubeconfigPolicy } from '../kubeconfig-policy/policy.ts';
import { planOf } from './plans.ts';
import { limitRangeSpec, quotaSpec } from './quota.ts';
import { tenantNetworkPolicies } from './network-policies.ts';
import { kubeRootAccess, type RootAccess } from './root-access.ts';
import { TENANT_CLUSTER_ROLE, TENANT_ROLE_BINDING } from './root-permissions.ts';
import { tenantNamespaceName } from './names.ts';

/** How long the binding may take to be in effect (it takes milliseconds). */
const ACCESS_TIMEOUT_MS = 60_000;

export const TENANT_NAMESPACE_TYPE = 'hosted:tenant:TenantNamespace';
/** Names of the plan's ResourceQuota and LimitRange in a tenant namespace. */
export const QUOTA_NAME = 'tenant-quota';
export const LIMIT_RANGE_NAME = 'tenant-limits';

export interface TenantNamespaceArgs {
  /** Tenant id; the namespace is `tenant-<id>`. */
  readonly tenantId: string;
  /** Organization that owns the tenant (recorded as an annotation). */
  readonly organization: pulumi.Input<string>;
  /** Plan name: decides the quota and limit range. */
  readonly plan: string;
  /** Namespaces allowed to send traffic in (platform ingress controller, provisioner). */
  readonly ingressNamespaces: readonly string[];
  /** Private CIDRs egress may reach in addition to the public internet. */
  readonly egressAllowedCidrs: readonly string[];
  /** CIDRs of the root cluster's API server. */
  readonly kubernetesApiCidrs: readonly string[];
  /** Kubeconfig of the root cluster (secret): who to bind, and whether the binding is in effect. */
  readonly rootKubeconfig: pulumi.Input<string>;
  /** Policy the root kubeconfig is checked against before use (default strict). */
  readonly kubeconfigPolicy?: KubeconfigPolicy;
  /** How to ask the root cluster (tests inject one). */
  readonly rootAccess?: RootAccess;
}

export { tenantNamespaceName } from './names.ts';

export function ownershipLabels(tenantId: string, plan: string): Record<string, string> {
  return {
    'hosted.gitops/tenant-id': tenantId,
    'hosted.gitops/plan': plan,
    'app.kubernetes.io/managed-by': 'hosted-runtimes-provisioner',
  };
}

/** Labels of a tenant namespace: ownership, and Pod Security `restricted` enforced (audited, warned). */
export function tenantNamespaceLabels(tenantId: string, plan: string): Record<string, string> {
  return {
    ...ownershipLabels(tenantId, plan),
    'pod-security.kubernetes.io/enforce': 'restricted',
    'pod-security.kubernetes.io/enforce-version': 'latest',
    'pod-security.kubernetes.io/audit': 'restricted',
    'pod-security.kubernetes.io/warn': 'restricted',
  };
}

export class TenantNamespace extends pulumi.ComponentResource {
  public readonly namespace: pulumi.Output<string>;

  constructor(name: string, args: TenantNamespaceArgs, opts?: pulumi.ComponentResourceOptions) {
    super(TENANT_NAMESPACE_TYPE, name, {}, opts);
    const plan = planOf(args.plan);
    if (!plan) throw new pulumi.ResourceError(`TenantNamespace ${name}: unknown plan '${args.plan}'`, this);
    if (args.ingressNamespaces.length === 0)
      throw new pulumi.ResourceError(
        `TenantNamespace ${name}: ingressNamespaces must name at least the provisioner's namespace`,
        this,
      );
    const nsName = tenantNamespaceName(args.tenantId);
    const labels = ownershipLabels(args.tenantId, plan.name);
    const child = { parent: this };

    const ns = new k8s.core.v1.Namespace(
      `${name}-namespace`,
      {
        metadata: {
          name: nsName,
          labels: tenantNamespaceLabels(args.tenantId, plan.name),
          annotations: { 'hosted.gitops/organization': args.organization },
        },
      },
      child,
    );
    const access = args.rootAccess ?? kubeRootAccess;
    // Read with the kubeconfig (a secret), but neither the subject nor the namespace's name is one.
    const subject = pulumi.unsecret(
      pulumi.output(args.rootKubeconfig).apply((kubeconfig) => access.whoAmI(kubeconfig, args.kubeconfigPolicy)),
    );
    const binding = new k8s.rbac.v1.RoleBinding(
      `${name}-provisioner-binding`,
      {
        metadata: { name: TENANT_ROLE_BINDING, namespace: nsName, labels },
        roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: TENANT_CLUSTER_ROLE },
        subjects: [subject],
      },
      // Not deleted on its own when the namespace goes too: this binding is what lets the
      // provisioner read the namespace's objects, so once it is deleted the engine can no longer
      // confirm that the binding itself is gone (403 until the delete times out, as soon as the
      // API server's authorizer has seen the deletion). Everything else in the namespace depends
      // on it and is deleted first; the namespace's deletion then removes the binding.
      { ...child, dependsOn: [ns], deletedWith: ns },
    );
    // The namespace, once the binding is in effect: everything in it is created after that.
    const granted = pulumi.unsecret(
      pulumi.all([binding.metadata.name, args.rootKubeconfig]).apply(async ([, kubeconfig]) => {
        await access.waitForAccess({
          kubeconfig,
          namespace: nsName,
          timeoutMs: ACCESS_TIMEOUT_MS,
          ...(args.kubeconfigPolicy ? { policy: args.kubeconfigPolicy } : {}),
        });
        return nsName;
      }),
    );
    const inNs = { ...child, dependsOn: [binding] };
    const meta = (n: string) => ({ name: n, namespace: granted, labels });

    new k8s.core.v1.ResourceQuota(`${name}-quota`, { metadata: meta(QUOTA_NAME), spec: quotaSpec(plan) }, inNs);
    new k8s.core.v1.LimitRange(
      `${name}-limits`,
      { metadata: meta(LIMIT_RANGE_NAME), spec: limitRangeSpec(plan) },
      inNs,
    );
    for (const policy of tenantNetworkPolicies(args)) {
      new k8s.networking.v1.NetworkPolicy(
        `${name}-netpol-${policy.name}`,
        { metadata: meta(policy.name), spec: policy.spec },
        inNs,
      );
    }
    this.namespace = granted;
    this.registerOutputs({ namespace: this.namespace });
  }
}
