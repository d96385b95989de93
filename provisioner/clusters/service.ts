/**
 * Root clusters on the API side: registration (the kubeconfig checked, then stored encrypted,
 * never returned), cordoning, reads. Each change is written with its audit row in one
 * transaction.
 */
import type pg from 'pg';
import type { SecretBox } from '../crypto.ts';
import { pgCode, withTx } from '../db/tx.ts';
import { errors } from '../errors.ts';
import { writeAudit, type Requester } from '../store/audit.ts';
import {
  getClusterByName,
  insertCluster,
  listClusters,
  listRegions,
  setCordoned,
  type Region,
  type RootCluster,
} from '../store/clusters.ts';
import { PLAN_NAMES } from '../../tenants/plans.ts';
import { admitKubeconfig } from '../kubeconfig/admit.ts';
import type { KubeconfigPolicy } from '../kubeconfig/policy.ts';

export interface ClusterServiceDeps {
  pool: pg.Pool;
  box: SecretBox;
  /** What a registered kubeconfig may hold (config.kubeconfig; docs/api.md). */
  kubeconfigPolicy: KubeconfigPolicy;
}

export interface ClusterRegistration {
  name: string;
  region: string;
  /** Maximum tenants placed on the cluster. */
  capacity: number;
  labels?: Record<string, string> | undefined;
  /** Plans allowed on the cluster; none means all. */
  plans?: string[] | undefined;
  /** Kubeconfig contents (YAML or JSON). */
  kubeconfig: string;
}

export class ClusterService {
  readonly #pool: pg.Pool;
  readonly #box: SecretBox;
  readonly #kubeconfigPolicy: KubeconfigPolicy;

  constructor(deps: ClusterServiceDeps) {
    this.#pool = deps.pool;
    this.#box = deps.box;
    this.#kubeconfigPolicy = deps.kubeconfigPolicy;
  }

  list(): Promise<RootCluster[]> {
    return listClusters(this.#pool);
  }

  /** The regions of the registered clusters, each saying whether a new tenant can be placed there. */
  regions(): Promise<Region[]> {
    return listRegions(this.#pool);
  }

  async get(name: string): Promise<RootCluster> {
    const cluster = await getClusterByName(this.#pool, name);
    if (!cluster) throw errors.notFound('cluster', name);
    return cluster;
  }

  async register(input: ClusterRegistration, by: Requester): Promise<RootCluster> {
    await admitKubeconfig(input.kubeconfig, this.#kubeconfigPolicy);
    for (const p of input.plans ?? []) if (!PLAN_NAMES.includes(p)) throw errors.unknownPlan(p, PLAN_NAMES);
    return withTx(this.#pool, async (tx) => {
      let cluster;
      try {
        cluster = await insertCluster(tx, {
          name: input.name,
          region: input.region,
          capacity: input.capacity,
          labels: input.labels ?? {},
          plans: input.plans ?? [],
          kubeconfigEnc: this.#box.encrypt(input.kubeconfig, `cluster/${input.name}`),
        });
      } catch (err) {
        if (pgCode(err) === '23505') throw errors.clusterExists(input.name);
        throw err;
      }
      await writeAudit(tx, by.actor, {
        action: 'cluster.register',
        targetType: 'cluster',
        targetId: cluster.name,
        after: cluster,
        requestId: by.requestId,
      });
      return cluster;
    });
  }

  /** Cordons (no new tenants are placed there) or uncordons a cluster. */
  setCordoned(name: string, cordoned: boolean, by: Requester): Promise<RootCluster> {
    return withTx(this.#pool, async (tx) => {
      const before = await getClusterByName(tx, name);
      if (!before) throw errors.notFound('cluster', name);
      const after = (await setCordoned(tx, name, cordoned))!;
      await writeAudit(tx, by.actor, {
        action: cordoned ? 'cluster.cordon' : 'cluster.uncordon',
        targetType: 'cluster',
        targetId: after.name,
        before: { cordoned: before.cordoned },
        after: { cordoned: after.cordoned },
        requestId: by.requestId,
      });
      return after;
    });
  }
}
