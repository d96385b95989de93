/**
 * Stack config of the root-infra project (Pulumi.yaml at the repository root). See
 * Pulumi.example.yaml and docs/pulumi.md.
 *
 *   clusters            list of root clusters: name, region, labels, capacity, apiServer,
 *                       ingressHost, and either `context` (a context of the ambient kubeconfig)
 *                       or a kubeconfig in the secret `kubeconfigs` map under the cluster's name
 *   kubeconfigs         (secret) { <cluster name>: <kubeconfig contents> }
 *   provisionerImage    image of the provisioner
 *   database            { mode: cnpg | external, instances?, storage? }
 *   databaseUrl         (secret) Postgres DSN, when database.mode is external
 *   encryptionKey       (secret) PROVISIONER_ENCRYPTION_KEY (kubeconfigs at rest)
 *   requestSigningKey   (secret) PROVISIONER_REQUEST_SIGNING_KEY: the Ed25519 private key (PEM) every
 *                       replica signs requests to runtimes with; one key, or a runtime would refuse
 *                       the requests of replicas whose key it was not given
 *   pulumiPassphrase    (secret) PULUMI_CONFIG_PASSPHRASE of the provisioner's engine: the tenant stacks'
 *                       secrets are encrypted with it, so every replica needs the same one
 *   clusterIssuer       cert-manager ClusterIssuer for the provisioner's Ingress (default letsencrypt)
 *   chartRepositories   overrides per chart repository (mirror URL, oci:// or local directory)
 */
import * as pulumi from '@pulumi/pulumi';
import type { ChartRepositories } from '../runtime/component/chart-source.ts';

export interface RootClusterConfig {
  /** Registry name of the cluster (DNS label). */
  name: string;
  region: string;
  labels?: Record<string, string>;
  /** Tenants the cluster may hold. */
  capacity: number;
  /** Context of the ambient kubeconfig; when absent, `kubeconfigs[name]` is used. */
  context?: string;
  /** API server URL the provisioner uses to reach this cluster. */
  apiServer: string;
  /** Host name of the provisioner's Ingress on this cluster. */
  ingressHost: string;
}

export interface DatabaseConfig {
  mode: 'cnpg' | 'external';
  /** Postgres instances of the operator-managed cluster (default 2). */
  instances?: number;
  /** Volume size per instance (default 20Gi). */
  storage?: string;
}

export interface InfraConfig {
  clusters: RootClusterConfig[];
  kubeconfigs: pulumi.Output<Record<string, string>>;
  provisionerImage: string;
  database: DatabaseConfig;
  databaseUrl?: pulumi.Output<string>;
  encryptionKey: pulumi.Output<string>;
  requestSigningKey: pulumi.Output<string>;
  pulumiPassphrase: pulumi.Output<string>;
  clusterIssuer: string;
  chartRepositories: ChartRepositories;
}

const DNS_LABEL = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/;

export class InfraConfigError extends Error {
  override name = 'InfraConfigError';
}

/** Checks the plain part of the config; throws naming the first bad field. */
export function validateClusters(
  clusters: RootClusterConfig[],
  database: DatabaseConfig,
  hasDatabaseUrl: boolean,
): void {
  if (clusters.length === 0) throw new InfraConfigError("config 'clusters': at least one root cluster is required");
  const names = new Set<string>();
  clusters.forEach((c, i) => {
    const at = `config 'clusters[${i}]'`;
    if (!DNS_LABEL.test(c.name ?? '')) throw new InfraConfigError(`${at}.name: '${c.name}' must be a DNS label`);
    if (names.has(c.name)) throw new InfraConfigError(`${at}.name: '${c.name}' is listed twice`);
    names.add(c.name);
    if (!c.region) throw new InfraConfigError(`${at}.region is required`);
    if (!Number.isInteger(c.capacity) || c.capacity < 1)
      throw new InfraConfigError(`${at}.capacity must be a positive whole number`);
    if (!/^https:\/\//.test(c.apiServer ?? '')) throw new InfraConfigError(`${at}.apiServer must be an https URL`);
    if (!c.ingressHost) throw new InfraConfigError(`${at}.ingressHost is required`);
  });
  if (database.mode !== 'cnpg' && database.mode !== 'external')
    throw new InfraConfigError(`config 'database.mode': '${String(database.mode)}' must be cnpg or external`);
  if (database.mode === 'external' && !hasDatabaseUrl)
    throw new InfraConfigError("config 'databaseUrl' (secret) is required when database.mode is external");
}

export function readInfraConfig(): InfraConfig {
  const config = new pulumi.Config();
  const clusters = config.requireObject<RootClusterConfig[]>('clusters');
  const database = config.getObject<DatabaseConfig>('database') ?? { mode: 'cnpg' };
  const databaseUrl = config.getSecret('databaseUrl');
  validateClusters(clusters, database, databaseUrl !== undefined);
  const needKubeconfigs = clusters.some((c) => c.context === undefined);
  return {
    clusters,
    kubeconfigs: needKubeconfigs
      ? config.requireSecretObject<Record<string, string>>('kubeconfigs')
      : pulumi.secret<Record<string, string>>({}),
    provisionerImage: config.require('provisionerImage'),
    database,
    databaseUrl,
    encryptionKey: config.requireSecret('encryptionKey'),
    requestSigningKey: config.requireSecret('requestSigningKey'),
    pulumiPassphrase: config.requireSecret('pulumiPassphrase'),
    clusterIssuer: config.get('clusterIssuer') ?? 'letsencrypt',
    chartRepositories: config.getObject<ChartRepositories>('chartRepositories') ?? {},
  };
}
