/**
 * The root-infra program: one provider and one RootCluster per cluster in stack config, and the
 * cluster registry as the stack output `clusters` (kubeconfigs are secrets).
 */
import * as k8s from '@pulumi/kubernetes';
import * as pulumi from '@pulumi/pulumi';
import { readInfraConfig } from './config.ts';
import { RootCluster } from './root-cluster.ts';

export function infraProgram(): Promise<Record<string, unknown>> {
  const config = readInfraConfig();
  const clusters = config.clusters.map((cluster) => {
    const provider = new k8s.Provider(
      `cluster-${cluster.name}`,
      cluster.context !== undefined
        ? { context: cluster.context, enableServerSideApply: true }
        : {
            kubeconfig: config.kubeconfigs.apply((all) => {
              const kc = all[cluster.name];
              if (!kc)
                throw new Error(
                  `config 'kubeconfigs' has no entry for cluster '${cluster.name}' (and it has no context)`,
                );
              return kc;
            }),
            enableServerSideApply: true,
          },
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
        clusterIssuer: config.clusterIssuer,
        chartRepositories: config.chartRepositories,
      },
      { provider },
    );
  });
  return Promise.resolve({ clusters: pulumi.output(clusters.map((c) => c.registry)) });
}
