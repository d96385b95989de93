/**
 * RootCluster: the platform on one root cluster. Platform namespace, ingress-nginx and
 * cert-manager from their charts, the provisioner's database, the provisioner itself, baseline
 * NetworkPolicies for the platform namespace and the PriorityClass of tenant control planes.
 * Children use the cluster's provider from opts.provider.
 */
import * as k8s from '@pulumi/kubernetes';
import * as pulumi from '@pulumi/pulumi';
import { chartSource, type ChartRepositories } from '../runtime/component/chart-source.ts';
import { PLATFORM_CHARTS, PLATFORM_NAMESPACE, TENANT_PRIORITY_CLASS } from './charts.ts';
import type { DatabaseConfig, RootClusterConfig } from './config.ts';
import { PlatformDatabase } from './database.ts';
import { chartNamespace } from './namespaces.ts';
import { Provisioner } from './provisioner.ts';
import type { TokenWaiter } from './token-wait.ts';

export const ROOT_CLUSTER_TYPE = 'hosted:infra:RootCluster';

export interface RootClusterArgs {
  /** The cluster's registry entry and addresses. */
  readonly cluster: RootClusterConfig;
  /** Provisioner image. */
  readonly provisionerImage: pulumi.Input<string>;
  /** Database mode. */
  readonly database: DatabaseConfig;
  /** External DSN (secret), when database.mode is external. */
  readonly databaseUrl?: pulumi.Input<string>;
  /** PROVISIONER_ENCRYPTION_KEY (secret). */
  readonly encryptionKey: pulumi.Input<string>;
  /** PROVISIONER_REQUEST_SIGNING_KEY (secret, Ed25519 PEM), the same for every replica. */
  readonly requestSigningKey: pulumi.Input<string>;
  /** PULUMI_CONFIG_PASSPHRASE of the provisioner's engine (secret), the same for every replica. */
  readonly pulumiPassphrase: pulumi.Input<string>;
  /** What `pulumi up` reaches this cluster with: kubeconfig contents or a context of the ambient kubeconfig. */
  readonly adminCredentials: { kubeconfig?: pulumi.Input<string>; context?: string };
  /** How to wait for the provisioner's ServiceAccount token (tests inject one). */
  readonly waitForToken?: TokenWaiter;
  /** cert-manager ClusterIssuer for the provisioner's Ingress. */
  readonly clusterIssuer: pulumi.Input<string>;
  /** Chart repository overrides. */
  readonly chartRepositories?: ChartRepositories;
}

/** What the provisioner registers for a root cluster. */
export interface ClusterRegistryEntry {
  name: string;
  region: string;
  labels: Record<string, string>;
  capacity: number;
  apiServer: string;
  /** Kubeconfig of the provisioner's ServiceAccount on this cluster (secret). */
  kubeconfig: pulumi.Output<string>;
}

export class RootCluster extends pulumi.ComponentResource {
  public readonly registry: ClusterRegistryEntry;

  constructor(name: string, args: RootClusterArgs, opts?: pulumi.ComponentResourceOptions) {
    super(ROOT_CLUSTER_TYPE, name, {}, opts);
    const child = { parent: this };
    const { cluster } = args;

    const namespace = new k8s.core.v1.Namespace(
      `${name}-namespace`,
      {
        metadata: {
          name: PLATFORM_NAMESPACE,
          labels: {
            'app.kubernetes.io/part-of': 'hosted-platform',
            // The operator-managed Postgres is held to baseline; restricted is audited and warned.
            'pod-security.kubernetes.io/enforce': 'baseline',
            'pod-security.kubernetes.io/audit': 'restricted',
            'pod-security.kubernetes.io/warn': 'restricted',
          },
        },
      },
      child,
    );
    const inNs = { ...child, dependsOn: [namespace] };

    const { ingressNginx, certManager } = PLATFORM_CHARTS;
    // The charts' namespaces are the program's, not Helm's (`createNamespace` would leave them
    // behind on `pulumi destroy`: Helm never deletes a namespace).
    const ingressNamespace = chartNamespace(`${name}-ingress-nginx`, ingressNginx.namespace, child);
    const certManagerNamespace = chartNamespace(`${name}-cert-manager`, certManager.namespace, child);
    new k8s.helm.v3.Release(
      `${name}-ingress-nginx`,
      {
        name: 'ingress-nginx',
        namespace: ingressNginx.namespace,
        ...chartSource(ingressNginx.repository, ingressNginx.chart, ingressNginx.version, args.chartRepositories),
        values: {
          controller: {
            ingressClassResource: { name: 'nginx', default: true },
            allowSnippetAnnotations: false,
            replicaCount: 2,
          },
        },
        timeout: 600,
      },
      { ...child, dependsOn: [ingressNamespace] },
    );
    new k8s.helm.v3.Release(
      `${name}-cert-manager`,
      {
        name: 'cert-manager',
        namespace: certManager.namespace,
        ...chartSource(certManager.repository, certManager.chart, certManager.version, args.chartRepositories),
        values: { crds: { enabled: true, keep: true } },
        timeout: 600,
      },
      { ...child, dependsOn: [certManagerNamespace] },
    );

    new k8s.scheduling.v1.PriorityClass(
      `${name}-tenant-priority`,
      {
        metadata: { name: TENANT_PRIORITY_CLASS, labels: { 'app.kubernetes.io/part-of': 'hosted-platform' } },
        value: 100_000,
        globalDefault: false,
        preemptionPolicy: 'PreemptLowerPriority',
        description: 'vcluster control planes of tenants: scheduled before tenant workloads, never before system pods.',
      },
      child,
    );

    const policy = (suffix: string, spec: k8s.types.input.networking.v1.NetworkPolicySpec) =>
      new k8s.networking.v1.NetworkPolicy(
        `${name}-netpol-${suffix}`,
        { metadata: { name: suffix, namespace: PLATFORM_NAMESPACE }, spec },
        inNs,
      );
    policy('default-deny-ingress', { podSelector: {}, policyTypes: ['Ingress'] });
    policy('allow-same-namespace', {
      podSelector: {},
      policyTypes: ['Ingress'],
      ingress: [{ from: [{ podSelector: {} }] }],
    });
    policy('allow-ingress-controller', {
      podSelector: { matchLabels: { 'app.kubernetes.io/name': 'provisioner' } },
      policyTypes: ['Ingress'],
      ingress: [
        {
          from: [{ namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': ingressNginx.namespace } } }],
          ports: [{ protocol: 'TCP', port: 8080 }],
        },
      ],
    });
    policy('allow-cnpg-operator', {
      podSelector: { matchLabels: { 'cnpg.io/cluster': 'provisioner-db' } },
      policyTypes: ['Ingress'],
      ingress: [
        {
          from: [
            { namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': PLATFORM_CHARTS.cnpg.namespace } } },
          ],
          ports: [
            { protocol: 'TCP', port: 8000 },
            { protocol: 'TCP', port: 5432 },
          ],
        },
      ],
    });

    const database = new PlatformDatabase(
      `${name}-database`,
      {
        namespace: PLATFORM_NAMESPACE,
        database: args.database,
        databaseUrl: args.databaseUrl,
        chartRepositories: args.chartRepositories,
      },
      inNs,
    );

    const provisioner = new Provisioner(
      `${name}-provisioner`,
      {
        namespace: PLATFORM_NAMESPACE,
        image: args.provisionerImage,
        host: cluster.ingressHost,
        clusterIssuer: args.clusterIssuer,
        databaseSecret: database.secret,
        encryptionKey: args.encryptionKey,
        requestSigningKey: args.requestSigningKey,
        pulumiPassphrase: args.pulumiPassphrase,
        adminCredentials: args.adminCredentials,
        ...(args.waitForToken ? { waitForToken: args.waitForToken } : {}),
        apiServer: cluster.apiServer,
        clusterName: cluster.name,
      },
      { ...child, dependsOn: [namespace, database] },
    );

    this.registry = {
      name: cluster.name,
      region: cluster.region,
      labels: cluster.labels ?? {},
      capacity: cluster.capacity,
      apiServer: cluster.apiServer,
      kubeconfig: provisioner.kubeconfig,
    };
    this.registerOutputs({ registry: this.registry });
  }
}
