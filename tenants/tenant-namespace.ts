/**
 * TenantNamespace: the tenant's namespace on its root cluster with Pod Security `restricted`
 * labels and ownership labels, the plan's ResourceQuota and LimitRange, and the NetworkPolicies
 * (tenants/network-policies.ts). Children use the root-cluster provider given in opts.
 */
import * as k8s from '@pulumi/kubernetes';
import * as pulumi from '@pulumi/pulumi';
import { PLANS } from './plans.ts';
import { limitRangeSpec, quotaSpec } from './quota.ts';
import { tenantNetworkPolicies } from './network-policies.ts';

export const TENANT_NAMESPACE_TYPE = 'hosted:tenant:TenantNamespace';

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
}

export function tenantNamespaceName(tenantId: string): string {
  return `tenant-${tenantId}`;
}

export function ownershipLabels(tenantId: string, plan: string): Record<string, string> {
  return {
    'hosted.gitops/tenant-id': tenantId,
    'hosted.gitops/plan': plan,
    'app.kubernetes.io/managed-by': 'hosted-runtimes-provisioner',
  };
}

export class TenantNamespace extends pulumi.ComponentResource {
  public readonly namespace: pulumi.Output<string>;

  constructor(name: string, args: TenantNamespaceArgs, opts?: pulumi.ComponentResourceOptions) {
    super(TENANT_NAMESPACE_TYPE, name, {}, opts);
    const plan = PLANS[args.plan];
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
          labels: {
            ...labels,
            'pod-security.kubernetes.io/enforce': 'restricted',
            'pod-security.kubernetes.io/enforce-version': 'latest',
            'pod-security.kubernetes.io/audit': 'restricted',
            'pod-security.kubernetes.io/warn': 'restricted',
          },
          annotations: { 'hosted.gitops/organization': args.organization },
        },
      },
      child,
    );
    const inNs = { ...child, dependsOn: [ns] };
    const meta = (n: string) => ({ name: n, namespace: nsName, labels });

    new k8s.core.v1.ResourceQuota(`${name}-quota`, { metadata: meta('tenant-quota'), spec: quotaSpec(plan) }, inNs);
    new k8s.core.v1.LimitRange(`${name}-limits`, { metadata: meta('tenant-limits'), spec: limitRangeSpec(plan) }, inNs);
    for (const policy of tenantNetworkPolicies(args)) {
      new k8s.networking.v1.NetworkPolicy(
        `${name}-netpol-${policy.name}`,
        { metadata: meta(policy.name), spec: policy.spec },
        inNs,
      );
    }
    this.namespace = ns.metadata.name;
    this.registerOutputs({ namespace: this.namespace });
  }
}
