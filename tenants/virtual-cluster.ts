/**
 * VirtualCluster: the tenant's vcluster Helm release in its namespace on the root cluster, the
 * kubeconfig it exports (Secret `vc-<release>`, key `config`) read as a Pulumi secret after a
 * bounded wait, and a kubernetes Provider for the virtual cluster built from it.
 *
 * Suspended, the release runs no control plane, and once it is applied the pods the vcluster had
 * synced onto the namespace are deleted (synced-pods.ts, as `vcluster pause` does): without the
 * syncer they would keep running. Never in a preview.
 */
import * as k8s from '@pulumi/kubernetes';
import * as pulumi from '@pulumi/pulumi';
import { catalog as defaultCatalog, type Catalog } from '../runtime/catalog.ts';
import { chartSource, type ChartRepositories } from '../runtime/component/chart-source.ts';
import { waitForSecretKey, type SecretWaiter } from './kubeconfig-wait.ts';
import type { KubeconfigPolicy } from '../kubeconfig-policy/policy.ts';
import { planOf } from './plans.ts';
import { deleteSyncedPods, syncedPodSelector, type SyncedPodsEvictor } from './synced-pods.ts';
import { vclusterValues } from './vcluster-values.ts';
import { VCLUSTER_RELEASE } from './names.ts';

export const VIRTUAL_CLUSTER_TYPE = 'hosted:tenant:VirtualCluster';
/** Helm release name of every tenant's vcluster (the namespace tells tenants apart). */
export { VCLUSTER_RELEASE } from './names.ts';
export const KUBECONFIG_KEY = 'config';

export interface VirtualClusterArgs {
  /** Namespace on the root cluster (created by TenantNamespace). */
  readonly namespace: pulumi.Input<string>;
  /** Runtime version: pins the chart and the Kubernetes version. */
  readonly runtimeVersion: string;
  /** Catalog to resolve the version in. */
  readonly catalog?: Catalog;
  /** Plan name: control plane resources and volume size. */
  readonly plan: string;
  /** Scale the control plane to zero replicas and delete the pods the vcluster synced. */
  readonly suspended: boolean;
  /** Server URL template for the exported kubeconfig ({release}, {namespace}). */
  readonly serverTemplate: string;
  /** PriorityClass of the control plane ('' for none). */
  readonly priorityClassName: string;
  /** Kubeconfig of the root cluster (secret), for the bounded wait. */
  readonly rootKubeconfig: pulumi.Input<string>;
  /** Policy the root kubeconfig is checked against before the wait uses it (default strict). */
  readonly kubeconfigPolicy?: KubeconfigPolicy;
  /** Seconds to wait for the exported kubeconfig Secret. */
  readonly kubeconfigTimeoutSeconds: number;
  /** Chart repository overrides. */
  readonly chartRepositories?: ChartRepositories;
  /** How to wait for the Secret (the default polls the root cluster's API). */
  readonly waitForSecret?: SecretWaiter;
  /** How to delete the synced pods when suspended (the default deletes them through the root cluster's API). */
  readonly evictSyncedPods?: SyncedPodsEvictor;
}

export function exportServer(template: string, release: string, namespace: string): string {
  return template.replaceAll('{release}', release).replaceAll('{namespace}', namespace);
}

export class VirtualCluster extends pulumi.ComponentResource {
  /** URL the exported kubeconfig points to. */
  public readonly endpoint: pulumi.Output<string>;
  /** The exported kubeconfig (secret). */
  public readonly kubeconfig: pulumi.Output<string>;
  /** Provider for the virtual cluster. */
  public readonly provider: k8s.Provider;
  public readonly release: k8s.helm.v3.Release;
  /** How many synced pods this run deleted (suspended only; 0 otherwise and in a preview). */
  public readonly evictedPods: pulumi.Output<number>;

  constructor(name: string, args: VirtualClusterArgs, opts?: pulumi.ComponentResourceOptions) {
    super(VIRTUAL_CLUSTER_TYPE, name, {}, opts);
    const catalog = args.catalog ?? defaultCatalog;
    const version = catalog.get(args.runtimeVersion);
    if (!version)
      throw new pulumi.ResourceError(
        `VirtualCluster ${name}: runtime version '${args.runtimeVersion}' is not in the catalog`,
        this,
      );
    const plan = planOf(args.plan);
    if (!plan) throw new pulumi.ResourceError(`VirtualCluster ${name}: unknown plan '${args.plan}'`, this);
    if (!Number.isFinite(args.kubeconfigTimeoutSeconds) || args.kubeconfigTimeoutSeconds <= 0) {
      throw new pulumi.ResourceError(`VirtualCluster ${name}: kubeconfigTimeoutSeconds must be positive`, this);
    }
    const { vcluster, kubernetes } = version.components;
    const waiter = args.waitForSecret ?? waitForSecretKey;
    const evict = args.evictSyncedPods ?? deleteSyncedPods;

    this.endpoint = pulumi
      .output(args.namespace)
      .apply((ns) => exportServer(args.serverTemplate, VCLUSTER_RELEASE, ns));
    this.release = new k8s.helm.v3.Release(
      `${name}-release`,
      {
        name: VCLUSTER_RELEASE,
        namespace: args.namespace,
        ...chartSource('vcluster', 'vcluster', vcluster, args.chartRepositories),
        values: pulumi.all([args.namespace, this.endpoint]).apply(([ns, server]) =>
          vclusterValues({
            chartVersion: vcluster,
            kubernetes,
            plan,
            suspended: args.suspended,
            exportServer: server,
            context: ns,
            priorityClassName: args.priorityClassName,
          }),
        ),
        // A suspended control plane has no ready pods to wait for.
        skipAwait: args.suspended,
        cleanupOnFail: true,
        maxHistory: 5,
        timeout: 900,
        // No client-side schema check (docs/decisions.md, "Helm's OpenAPI validation off").
        disableOpenapiValidation: true,
      },
      { parent: this },
    );

    // Suspended: once the release has scaled the control plane to zero, nothing stops the pods
    // its syncer made; they go as with `vcluster pause`, and the syncer recreates them on resume.
    // A count, not a secret (it only comes through the root kubeconfig's secrecy).
    this.evictedPods = args.suspended
      ? pulumi.unsecret(
          pulumi
            .all([this.release.status, args.namespace, args.rootKubeconfig])
            .apply(async ([status, ns, kubeconfig]) => {
              void status;
              // A preview changes nothing on the cluster.
              if (pulumi.runtime.isDryRun()) return 0;
              try {
                return await evict({
                  kubeconfig,
                  namespace: ns,
                  labelSelector: syncedPodSelector(VCLUSTER_RELEASE),
                  ...(args.kubeconfigPolicy ? { policy: args.kubeconfigPolicy } : {}),
                });
              } catch (err) {
                throw new pulumi.ResourceError(
                  `VirtualCluster ${name}: ${err instanceof Error ? err.message : String(err)}`,
                  this,
                  true,
                );
              }
            }),
        )
      : pulumi.output(0);

    const secretName = `vc-${VCLUSTER_RELEASE}`;
    // The read waits for the eviction too, so that a failed one fails the run.
    const secretId = pulumi
      .all([this.release.status, args.namespace, args.rootKubeconfig, this.evictedPods])
      .apply(async ([status, ns, kubeconfig]) => {
        if (!args.suspended) {
          await waiter({
            kubeconfig,
            namespace: ns,
            name: secretName,
            key: KUBECONFIG_KEY,
            timeoutMs: args.kubeconfigTimeoutSeconds * 1000,
            ...(args.kubeconfigPolicy ? { policy: args.kubeconfigPolicy } : {}),
          });
        }
        void status;
        return `${ns}/${secretName}`;
      });
    const exported = k8s.core.v1.Secret.get(`${name}-kubeconfig`, secretId, {
      parent: this,
      dependsOn: [this.release],
    });
    this.kubeconfig = pulumi.secret(
      exported.data.apply((data) => {
        const encoded = data[KUBECONFIG_KEY];
        if (!encoded)
          throw new pulumi.ResourceError(
            `VirtualCluster ${name}: Secret ${secretName} has no '${KUBECONFIG_KEY}' key`,
            this,
          );
        return Buffer.from(encoded, 'base64').toString('utf8');
      }),
    );
    this.provider = new k8s.Provider(
      `${name}-provider`,
      {
        kubeconfig: this.kubeconfig,
        enableServerSideApply: true,
      },
      { parent: this },
    );
    this.registerOutputs({ endpoint: this.endpoint, kubeconfig: this.kubeconfig, evictedPods: this.evictedPods });
  }
}
