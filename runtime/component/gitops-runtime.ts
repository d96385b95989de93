/**
 * GitOpsRuntime: installs a tenant's GitOps runtime into its vcluster. Argo CD, Argo Workflows,
 * Argo Rollouts and Argo Events from their upstream charts at the catalog's versions, the
 * runtime-versions ConfigMap, the agents with their credentials Secret, and Argo CD cluster
 * Secrets for the tenant's managed clusters.
 *
 * Every child goes through the vcluster provider given in `opts.provider` (children inherit
 * their parent's provider). Values do not depend on the runtime version except the pinned chart
 * versions, the agent image tag and the agents a version adds (agentsAt: from 1.7.0 the Source
 * Server, its Secret, the reporter's and app-proxy's SOURCE_SERVER_URL and Argo CD's account for
 * it; from 1.8.0 the GitOps Operator and the promotion CRDs), so a version change touches only what
 * the version changes.
 */
import * as k8s from '@pulumi/kubernetes';
import * as pulumi from '@pulumi/pulumi';
import { catalog as defaultCatalog, type Catalog } from '../catalog.ts';
import type { ComponentPins } from '../versions.ts';
import {
  agentsAt,
  CREDENTIAL_KEYS,
  CREDENTIALS_SECRET,
  DEFAULT_AGENT_IMAGE_REPOSITORY,
  productsUrl as productsUrlOf,
  RUNTIME_NAMESPACE,
  SOURCE_SERVER_ARGOCD_SECRET,
} from './agents.ts';
import { sourceServerArgoCdValues, sourceServerPassword, sourceServerPasswordHash } from './source-server-account.ts';
import { createAgentWorkload } from './agent-workload.ts';
import { promotionCrds } from './promotion-crds.ts';
import { runtimeNamespace, versionsConfigMap } from './runtime-objects.ts';
import {
  ARGO_CD_NAMESPACE,
  ARGO_CD_SERVER,
  ARGO_RELEASES,
  argoReleaseValues,
  mergeValues,
  type ArgoComponent,
} from './argo-releases.ts';
import { chartSource, type ChartRepositories } from './chart-source.ts';
import {
  CLUSTER_SECRET_LABEL,
  clusterSecretName,
  managedClustersProblem,
  type ManagedCluster,
} from './cluster-secret.ts';
import { TUNNEL_PATH } from '../protocol/frames.ts';
import type { RuntimeResources } from './resources.ts';

export { runtimeNamespace, versionsConfigMap } from './runtime-objects.ts';

export const GITOPS_RUNTIME_TYPE = 'hosted:runtime:GitOpsRuntime';

export interface GitOpsRuntimeArgs {
  /**
   * Runtime version from the catalog. A plain string, not an Input: it selects what is
   * installed, and an unknown version must fail before anything is registered.
   */
  readonly version: string;
  /** The tenant the runtime belongs to (the app-proxy serves only requests signed for it). */
  readonly tenantId: pulumi.Input<string>;
  /** Catalog to resolve `version` in (the built-in catalog by default). */
  readonly catalog?: Catalog;
  /** Token the agents present to the control plane (tunnel and event reports). Kept secret. */
  readonly runtimeToken: pulumi.Input<string>;
  /** Base https URL of the control plane (event reports go there). */
  readonly controlPlaneUrl: pulumi.Input<string>;
  /** WebSocket URL of the tunnel server; derived from controlPlaneUrl by default (wss://…/v1/tunnel). */
  readonly tunnelUrl?: pulumi.Input<string>;
  /** PEM public key of the control plane; the app-proxy verifies forwarded requests with it. */
  readonly controlPlanePublicKey: pulumi.Input<string>;
  /** Chart repository overrides (mirror URL, oci:// or local directory); upstream when absent. */
  readonly chartRepositories?: ChartRepositories;
  /** Image repository prefix of the agents: images are `<prefix>/<agent>:<tag>`. */
  readonly agentImageRepository?: pulumi.Input<string>;
  /** Clusters the tenant's Argo CD deploys to (written as Argo CD cluster Secrets). */
  readonly managedClusters?: readonly ManagedCluster[];
  /** Requests and limits of every container of the Argo releases and agents (the plan's, tenants/plans.ts). */
  readonly resources: RuntimeResources;
  /** How long each Argo chart's release may take to become ready before the run fails (seconds, default 600). */
  readonly releaseTimeoutSeconds?: number;
}

export class GitOpsRuntime extends pulumi.ComponentResource {
  /** The runtime version installed. */
  public readonly runtimeVersion: pulumi.Output<string>;
  /** Every component version the runtime version pins. */
  public readonly componentVersions: pulumi.Output<ComponentPins>;
  /** Namespace of the agents inside the vcluster. */
  public readonly namespace: pulumi.Output<string>;
  /** In-vcluster address of the Argo CD API server. */
  public readonly argoCdServer: pulumi.Output<string>;
  /** The Helm releases, by component. */
  public readonly releases: Readonly<Record<ArgoComponent, k8s.helm.v3.Release>>;

  constructor(name: string, args: GitOpsRuntimeArgs, opts?: pulumi.ComponentResourceOptions) {
    super(GITOPS_RUNTIME_TYPE, name, {}, opts);
    const catalog = args.catalog ?? defaultCatalog;
    const entry = catalog.get(args.version);
    if (!entry) {
      throw new pulumi.ResourceError(
        `GitOpsRuntime ${name}: runtime version '${args.version}' is not in the catalog (known: ${catalog.versions.map((v) => v.version).join(', ')})`,
        this,
      );
    }
    const problem = managedClustersProblem(args.managedClusters ?? []);
    if (problem) throw new pulumi.ResourceError(`GitOpsRuntime ${name}: ${problem}`, this);
    const pins = entry.components;
    const child = { parent: this };
    const agents = agentsAt(entry.version);
    const sourceServer = agents.some((a) => a.name === 'source-server');

    // Argo components: one release each, CRDs installed and kept by their own chart.
    const releases = {} as Record<ArgoComponent, k8s.helm.v3.Release>;
    for (const spec of ARGO_RELEASES) {
      releases[spec.component] = new k8s.helm.v3.Release(
        `${name}-${spec.chart}`,
        {
          name: spec.releaseName,
          namespace: spec.namespace,
          createNamespace: true,
          ...chartSource('argo', spec.chart, pins[spec.component], args.chartRepositories),
          // With a Source Server, Argo CD gets its read-only account (source-server-account.ts).
          values:
            sourceServer && spec.component === 'argoCd'
              ? pulumi
                  .output(args.runtimeToken)
                  .apply((token) =>
                    mergeValues(
                      argoReleaseValues(spec, args.resources),
                      sourceServerArgoCdValues(sourceServerPasswordHash(token)),
                    ),
                  )
              : argoReleaseValues(spec, args.resources),
          skipCrds: false,
          // A failed install or upgrade is undone by Helm itself: an upgrade that does not become
          // ready is rolled back to the last deployed revision, with the failed revision as the
          // original of the merge, so fields only the failed chart added are removed too (an
          // upgrade back to the old chart would merge against the last deployed revision and leave
          // them). The release is then what Pulumi's state says it is, and a tenant rollback
          // that follows finds it there. A failed first install is uninstalled, and the next run
          // installs it again.
          atomic: true,
          cleanupOnFail: true,
          maxHistory: 5,
          // An install checks nothing client-side that the API server does not (docs/decisions.md,
          // "Helm's OpenAPI validation off"), and fetching the schemas cost every install CPU.
          disableOpenapiValidation: true,
          timeout: args.releaseTimeoutSeconds ?? 600,
        },
        child,
      );
    }
    this.releases = releases;

    const namespace = new k8s.core.v1.Namespace(`${name}-namespace`, runtimeNamespace(), child);

    const versions = new k8s.core.v1.ConfigMap(`${name}-versions`, versionsConfigMap(entry), {
      ...child,
      dependsOn: [namespace],
    });

    const tunnelUrl =
      args.tunnelUrl ??
      pulumi.output(args.controlPlaneUrl).apply((url) => {
        const u = new URL(url);
        u.protocol = u.protocol === 'http:' ? 'ws:' : 'wss:';
        u.pathname = `${u.pathname.replace(/\/+$/, '')}${TUNNEL_PATH}`;
        return u.toString();
      });
    const credentials = new k8s.core.v1.Secret(
      `${name}-credentials`,
      {
        metadata: {
          name: CREDENTIALS_SECRET,
          namespace: RUNTIME_NAMESPACE,
          labels: { 'app.kubernetes.io/part-of': 'hosted-runtime' },
        },
        type: 'Opaque',
        stringData: {
          [CREDENTIAL_KEYS.token]: pulumi.secret(args.runtimeToken),
          [CREDENTIAL_KEYS.tunnelUrl]: tunnelUrl,
          [CREDENTIAL_KEYS.controlPlaneUrl]: args.controlPlaneUrl,
          [CREDENTIAL_KEYS.publicKey]: args.controlPlanePublicKey,
        },
      },
      { ...child, dependsOn: [namespace], additionalSecretOutputs: ['stringData', 'data'] },
    );

    const sourceServerSecret = sourceServer
      ? new k8s.core.v1.Secret(
          `${name}-source-server-argocd`,
          {
            metadata: {
              name: SOURCE_SERVER_ARGOCD_SECRET,
              namespace: RUNTIME_NAMESPACE,
              labels: { 'app.kubernetes.io/part-of': 'hosted-runtime' },
            },
            type: 'Opaque',
            stringData: { password: pulumi.secret(pulumi.output(args.runtimeToken).apply(sourceServerPassword)) },
          },
          { ...child, dependsOn: [namespace], additionalSecretOutputs: ['stringData', 'data'] },
        )
      : undefined;

    // With the GitOps Operator, the promotion CRDs it reads (promotion-crds.ts), before it starts.
    const promotionCrdResources = agents.some((a) => a.name === 'gitops-operator')
      ? promotionCrds().map(
          (crd) =>
            new k8s.apiextensions.v1.CustomResourceDefinition(
              `${name}-crd-${(crd.metadata as { name: string }).name.split('.')[0]}`,
              crd as unknown as k8s.apiextensions.v1.CustomResourceDefinitionArgs,
              child,
            ),
        )
      : [];

    // The console's products page, which the GitOps Operator's pull requests link back to.
    const productsUrl = pulumi
      .all([args.controlPlaneUrl, args.tenantId])
      .apply(([url, tenantId]) => productsUrlOf(url, tenantId, ARGO_CD_NAMESPACE));
    for (const agent of agents) {
      createAgentWorkload({
        name,
        agent,
        tenantId: args.tenantId,
        imageRepository: args.agentImageRepository ?? DEFAULT_AGENT_IMAGE_REPOSITORY,
        imageTag: pins.agents,
        resources: args.resources.agents[agent.name],
        parent: this,
        dependsOn:
          agent.name === 'event-reporter'
            ? [namespace, credentials, versions, releases.argoCd, releases.argoRollouts, releases.argoWorkflows]
            : agent.name === 'source-server'
              ? // Its Role is in Argo CD's namespace, and it logs in to Argo CD with this password.
                [namespace, credentials, versions, releases.argoCd, sourceServerSecret!]
              : agent.name === 'gitops-operator'
                ? // Its Role is in Argo CD's namespace; it reads the promotion resources and Workflows.
                  [namespace, credentials, versions, releases.argoCd, releases.argoWorkflows, ...promotionCrdResources]
                : [namespace, credentials, versions],
        peers: { sourceServer, productsUrl },
      });
    }

    for (const cluster of args.managedClusters ?? []) {
      new k8s.core.v1.Secret(
        `${name}-cluster-${cluster.name}`,
        {
          metadata: {
            name: clusterSecretName(cluster),
            namespace: ARGO_CD_NAMESPACE,
            labels: { [CLUSTER_SECRET_LABEL]: 'cluster', 'app.kubernetes.io/part-of': 'hosted-runtime' },
          },
          type: 'Opaque',
          stringData: {
            name: cluster.name,
            server: cluster.server,
            ...(cluster.namespaces?.length ? { namespaces: cluster.namespaces.join(',') } : {}),
            config: pulumi.secret(pulumi.output(cluster.config).apply((c) => JSON.stringify(c))),
          },
        },
        { ...child, dependsOn: [releases.argoCd], additionalSecretOutputs: ['stringData', 'data'] },
      );
    }

    this.runtimeVersion = pulumi.output(entry.version);
    this.componentVersions = pulumi.output({ ...pins });
    this.namespace = pulumi.output(RUNTIME_NAMESPACE);
    this.argoCdServer = pulumi.output(ARGO_CD_SERVER);
    this.registerOutputs({
      runtimeVersion: this.runtimeVersion,
      componentVersions: this.componentVersions,
      namespace: this.namespace,
      argoCdServer: this.argoCdServer,
    });
  }
}
