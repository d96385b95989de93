/**
 * Managed-cluster registrations: clusters a tenant's Argo CD deploys to, written as Argo CD
 * declarative cluster Secrets (label argocd.argoproj.io/secret-type=cluster; keys name, server,
 * config, optionally namespaces).
 */
import type * as pulumi from '@pulumi/pulumi';

/** Connection settings Argo CD reads from the `config` key (a subset of Argo CD's ClusterConfig). */
export interface ManagedClusterConfig {
  bearerToken?: string;
  username?: string;
  password?: string;
  tlsClientConfig?: { insecure?: boolean; caData?: string; certData?: string; keyData?: string; serverName?: string };
}

export interface ManagedCluster {
  /** Name shown in Argo CD; unique per tenant, DNS-label shaped. */
  name: string;
  /** API server URL of the managed cluster. */
  server: string;
  /** Namespaces Argo CD may manage there (all when empty). */
  namespaces?: string[];
  /** Credentials; kept secret. */
  config: pulumi.Input<ManagedClusterConfig>;
}

export const CLUSTER_SECRET_LABEL = 'argocd.argoproj.io/secret-type';

export function clusterSecretName(cluster: Pick<ManagedCluster, 'name'>): string {
  return `cluster-${cluster.name}`;
}

const NAME = /^[a-z0-9]([-a-z0-9]{0,40}[a-z0-9])?$/;

/** Returns a problem with a registration, or undefined when it is well formed. */
export function managedClusterProblem(cluster: Pick<ManagedCluster, 'name' | 'server'>): string | undefined {
  if (!NAME.test(cluster.name))
    return `managed cluster name '${cluster.name}' must be a DNS label of at most 42 characters`;
  if (!/^https:\/\/[^\s/]+/.test(cluster.server))
    return `managed cluster '${cluster.name}': server '${cluster.server}' must be an https URL`;
  return undefined;
}

/** The first problem with a tenant's list of registrations (each well formed, no name twice), or undefined. */
export function managedClustersProblem(
  clusters: ReadonlyArray<Pick<ManagedCluster, 'name' | 'server'>>,
): string | undefined {
  const names = new Set<string>();
  for (const cluster of clusters) {
    const problem = managedClusterProblem(cluster);
    if (problem) return problem;
    if (names.has(cluster.name)) return `managed cluster '${cluster.name}' is listed twice`;
    names.add(cluster.name);
  }
  return undefined;
}
