/**
 * Tenant: everything one tenant owns, from its settings. On the root cluster (the provider in
 * `rootProvider`): TenantNamespace and VirtualCluster. Into the vcluster (its own provider): the
 * GitOpsRuntime.
 *
 * Suspension scales the vcluster control plane to zero and then deletes the pods the vcluster had
 * synced onto the tenant namespace (label `vcluster.loft.sh/managed-by=vcluster`), as `vcluster
 * pause` does: without the syncer they would keep running and keep the runtime's whole footprint
 * on the root cluster. It leaves the runtime's desired state exactly as it was, so an update
 * while suspended changes only the vcluster release (the runtime objects are unchanged and Pulumi
 * does not touch the stopped vcluster). Resuming scales the control plane back, and its syncer
 * recreates the pods from the vcluster's store (kept on its volume); the runtime needs no change.
 */
import type * as k8s from '@pulumi/kubernetes';
import * as pulumi from '@pulumi/pulumi';
import { catalog as defaultCatalog, type Catalog } from '../runtime/catalog.ts';
import type { ComponentPins } from '../runtime/versions.ts';
import { GitOpsRuntime } from '../runtime/component/gitops-runtime.ts';
import type { TenantSettings } from './config.ts';
import { planOf } from './plans.ts';
import type { SecretWaiter } from './kubeconfig-wait.ts';
import type { SyncedPodsEvictor } from './synced-pods.ts';
import type { RootAccess } from './root-access.ts';
import { TenantNamespace, tenantNamespaceName } from './tenant-namespace.ts';
import { VirtualCluster } from './virtual-cluster.ts';

export const TENANT_TYPE = 'hosted:tenant:Tenant';

export interface TenantArgs {
  /** The tenant's settings (tenants/config.ts). */
  readonly settings: TenantSettings;
  /** Provider of the tenant's root cluster. */
  readonly rootProvider: k8s.Provider;
  /** Catalog (built-in by default). */
  readonly catalog?: Catalog;
  /** How to wait for the exported kubeconfig (the default polls the root cluster). */
  readonly waitForSecret?: SecretWaiter;
  /** How to delete the vcluster's synced pods when suspended (the default deletes them on the root cluster). */
  readonly evictSyncedPods?: SyncedPodsEvictor;
  /** How to ask the root cluster who the program is and whether its namespace binding is in effect. */
  readonly rootAccess?: RootAccess;
}

/** The stack outputs the provisioner records as tenant status. */
export interface TenantOutputs {
  namespace: pulumi.Output<string>;
  vclusterEndpoint: pulumi.Output<string>;
  argoCdUrl: pulumi.Output<string>;
  runtimeVersion: pulumi.Output<string>;
  componentVersions: pulumi.Output<ComponentPins>;
  suspended: pulumi.Output<boolean>;
}

export class Tenant extends pulumi.ComponentResource {
  public readonly outputs: TenantOutputs;
  public readonly virtualCluster: VirtualCluster;
  public readonly runtime: GitOpsRuntime;

  constructor(name: string, args: TenantArgs, opts?: pulumi.ComponentResourceOptions) {
    super(TENANT_TYPE, name, {}, opts);
    const s = args.settings;
    const catalog = args.catalog ?? defaultCatalog;
    const root = { parent: this, provider: args.rootProvider };
    const plan = planOf(s.plan);
    if (!plan) throw new pulumi.ResourceError(`Tenant ${name}: unknown plan '${s.plan}'`, this);

    const ns = new TenantNamespace(
      `${name}-ns`,
      {
        tenantId: s.tenantId,
        organization: s.organization,
        plan: s.plan,
        ingressNamespaces: s.ingressNamespaces,
        egressAllowedCidrs: s.egressAllowedCidrs,
        kubernetesApiCidrs: s.kubernetesApiCidrs,
        rootKubeconfig: s.rootKubeconfig,
        kubeconfigPolicy: s.kubeconfigPolicy,
        ...(args.rootAccess ? { rootAccess: args.rootAccess } : {}),
      },
      root,
    );

    this.virtualCluster = new VirtualCluster(
      `${name}-vcluster`,
      {
        namespace: ns.namespace,
        runtimeVersion: s.runtimeVersion,
        catalog,
        plan: s.plan,
        suspended: s.suspended,
        serverTemplate: s.vclusterServerTemplate,
        priorityClassName: s.priorityClassName,
        rootKubeconfig: s.rootKubeconfig,
        kubeconfigPolicy: s.kubeconfigPolicy,
        kubeconfigTimeoutSeconds: s.kubeconfigTimeoutSeconds,
        chartRepositories: s.chartRepositories,
        waitForSecret: args.waitForSecret,
        evictSyncedPods: args.evictSyncedPods,
      },
      { ...root, dependsOn: [ns] },
    );

    this.runtime = new GitOpsRuntime(
      `${name}-runtime`,
      {
        version: s.runtimeVersion,
        tenantId: s.tenantId,
        catalog,
        runtimeToken: s.runtimeToken,
        controlPlaneUrl: s.controlPlaneUrl,
        controlPlanePublicKey: s.controlPlanePublicKey,
        chartRepositories: s.chartRepositories,
        agentImageRepository: s.agentImageRepository,
        managedClusters: s.managedClusters,
        resources: plan.runtime,
        releaseTimeoutSeconds: s.runtimeReleaseTimeoutSeconds,
      },
      { parent: this, provider: this.virtualCluster.provider },
    );

    const nsName = tenantNamespaceName(s.tenantId);
    this.outputs = {
      namespace: ns.namespace,
      vclusterEndpoint: this.virtualCluster.endpoint,
      argoCdUrl: pulumi.output(
        s.argoCdUrlTemplate
          .replaceAll('{controlPlaneUrl}', s.controlPlaneUrl.replace(/\/+$/, ''))
          .replaceAll('{tenantId}', s.tenantId)
          .replaceAll('{namespace}', nsName),
      ),
      runtimeVersion: this.runtime.runtimeVersion,
      componentVersions: this.runtime.componentVersions,
      suspended: pulumi.output(s.suspended),
    };
    this.registerOutputs({ ...this.outputs });
  }
}
