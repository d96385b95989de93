/**
 * The root-infra program: one provider and one RootCluster per cluster in stack config, and the
 * cluster registry as the stack output `clusters` (kubeconfigs are secrets).
 */
import * as k8s from '@pulumi/kubernetes';
import * as pulumi from '@pulumi/pulumi';
import { readInfraConfig } from './config.ts';
import { RootCluster } from './root-cluster.ts';
import type { TokenWaiter } from './token-wait.ts';

export interface InfraProgramOptions {
  /** How to wait for the provisioner's ServiceAccount token (tests inject one). */
  waitForToken?: TokenWaiter;
}

export function infraProgram(options: InfraProgramOptions = {}): Promise<Record<string, unknown>> {
  const config = readInfraConfig();
  const clusters = config.clusters.map((cluster) => {
    const kubeconfig =
      cluster.context !== undefined
        ? undefined
        : config.kubeconfigs.apply((all) => {
            const kc = all[cluster.name];
            if (!kc)
              throw new Error(
                `config 'kubeconfigs' has no entry for cluster '${cluster.name}' (and it has no context)`,
              );
            return kc;
          });
    const provider = new k8s.Provider(
      `cluster-${cluster.name}`,
      kubeconfig === undefined
        ? { context: cluster.context, enableServerSideApply: true }
        : { kubeconfig, enableServerSideApply: true },
    );
    return new RootCluster(
      cluster.name,
      {
        cluster,
        provisionerImage: config.provisionerImage,
        database: config.database,
        databaseUrl: config.databaseUrl,
        encryptionKey: config.encryptionKey,
        requestSigningKey: config.requestSigningKey,
        pulumiPassphrase: config.pulumiPassphrase,
        adminCredentials: kubeconfig === undefined ? { context: cluster.context } : { kubeconfig },
        ...(options.waitForToken ? { waitForToken: options.waitForToken } : {}),
        clusterIssuer: config.clusterIssuer,
        chartRepositories: config.chartRepositories,
      },
      { provider },
    );
  });
  return Promise.resolve({ clusters: pulumi.output(clusters.map((c) => c.registry)) });
}
