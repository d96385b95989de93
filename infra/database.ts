/**
 * PlatformDatabase: the provisioner's Postgres. Either a CloudNativePG cluster (the operator
 * from its chart, then a postgresql.cnpg.io/v1 Cluster; CNPG writes the DSN into Secret
 * `<cluster>-app`, key `uri`) or an external DSN kept in a Secret.
 */
import * as k8s from '@pulumi/kubernetes';
import * as pulumi from '@pulumi/pulumi';
import { chartSource, type ChartRepositories } from '../runtime/component/chart-source.ts';
import { PLATFORM_CHARTS } from './charts.ts';
import type { DatabaseConfig } from './config.ts';
import { chartNamespace } from './namespaces.ts';

export const DATABASE_TYPE = 'hosted:infra:PlatformDatabase';
const CLUSTER = 'provisioner-db';

export interface PlatformDatabaseArgs {
  /** Platform namespace. */
  readonly namespace: pulumi.Input<string>;
  /** cnpg (operator-managed) or external. */
  readonly database: DatabaseConfig;
  /** DSN when external (secret). */
  readonly databaseUrl?: pulumi.Input<string>;
  /** Chart repository overrides. */
  readonly chartRepositories?: ChartRepositories;
}

export class PlatformDatabase extends pulumi.ComponentResource {
  /** Secret name and key holding the DSN. */
  public readonly secret: { name: pulumi.Output<string>; key: pulumi.Output<string> };

  constructor(name: string, args: PlatformDatabaseArgs, opts?: pulumi.ComponentResourceOptions) {
    super(DATABASE_TYPE, name, {}, opts);
    const child = { parent: this };
    if (args.database.mode === 'external') {
      if (args.databaseUrl === undefined)
        throw new pulumi.ResourceError(
          `PlatformDatabase ${name}: databaseUrl is required for an external database`,
          this,
        );
      const secret = new k8s.core.v1.Secret(
        `${name}-dsn`,
        {
          metadata: { name: 'provisioner-database', namespace: args.namespace },
          type: 'Opaque',
          stringData: { uri: pulumi.secret(args.databaseUrl) },
        },
        { ...child, additionalSecretOutputs: ['stringData', 'data'] },
      );
      this.secret = { name: secret.metadata.name, key: pulumi.output('uri') };
    } else {
      const instances = args.database.instances ?? 2;
      if (!Number.isInteger(instances) || instances < 1)
        throw new pulumi.ResourceError(`PlatformDatabase ${name}: instances must be a positive whole number`, this);
      const { cnpg } = PLATFORM_CHARTS;
      const operatorNamespace = chartNamespace(`${name}-operator`, cnpg.namespace, child);
      const operator = new k8s.helm.v3.Release(
        `${name}-operator`,
        {
          name: 'cnpg',
          namespace: cnpg.namespace,
          ...chartSource(cnpg.repository, cnpg.chart, cnpg.version, args.chartRepositories),
          values: { crds: { create: true } },
          timeout: 600,
        },
        { ...child, dependsOn: [operatorNamespace] },
      );
      const cluster = new k8s.apiextensions.CustomResource(
        `${name}-cluster`,
        {
          apiVersion: 'postgresql.cnpg.io/v1',
          kind: 'Cluster',
          metadata: { name: CLUSTER, namespace: args.namespace },
          spec: {
            instances,
            storage: { size: args.database.storage ?? '20Gi' },
            bootstrap: { initdb: { database: 'provisioner', owner: 'provisioner' } },
          },
        },
        { ...child, dependsOn: [operator] },
      );
      this.secret = { name: cluster.metadata.name.apply((n) => `${n}-app`), key: pulumi.output('uri') };
    }
    this.registerOutputs({ secretName: this.secret.name });
  }
}
