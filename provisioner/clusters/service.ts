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
  listClusterKubeconfigs,
  listClusters,
  listRegions,
  lockClusterKubeconfig,
  readClusterKubeconfig,
  setCordoned,
  updateCluster,
  type Region,
  type RootCluster,
} from '../store/clusters.ts';
import { PLAN_NAMES } from '../../tenants/plans.ts';
import { admitKubeconfig } from './admit-kubeconfig.ts';
import { describeRefusal, type KubeconfigPolicy } from '../../kubeconfig-policy/policy.ts';
import { probeCluster, type ProbeResult } from './probe.ts';
import { AppError } from '../errors.ts';
import { ROOT_CLUSTER_PERMISSIONS, describePermission, describeScope } from '../../tenants/root-permissions.ts';

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
  /** Store it even when the cluster is unreachable or the credentials fall short. */
  force?: boolean | undefined;
}

/** A registered cluster as `provisioner doctor` sees it. */
export interface ClusterProbe {
  name: string;
  region: string;
  cordoned: boolean;
  result: ProbeResult | { outcome: 'refused'; server: string; error: string };
}

/** The refusal of a registration whose cluster failed the probe (see register). */
export function probeRefusal(result: Exclude<ProbeResult, { outcome: 'ok' }>): AppError {
  const force = ' (register it anyway with force: true, `provisioner clusters add --force`)';
  switch (result.outcome) {
    case 'unreachable':
      return new AppError('CLUSTER_UNREACHABLE', result.error + force, {
        field: 'kubeconfig',
        details: { server: result.server },
      });
    case 'unauthorized':
      return new AppError('CLUSTER_UNAUTHORIZED', result.error + force, {
        field: 'kubeconfig',
        details: { server: result.server },
      });
    case 'forbidden':
      return new AppError('CLUSTER_PERMISSIONS_MISSING', result.error + force, {
        field: 'kubeconfig',
        details: {
          server: result.server,
          missing: result.missing.map((p) => ({
            permission: describePermission(p),
            where: describeScope(p.scope),
            why: p.why,
          })),
        },
      });
  }
}

/** What `put` did: the cluster as it is now, whether it was new, and which fields changed. */
export interface ClusterPutResult {
  cluster: RootCluster;
  created: boolean;
  /** Fields whose value changed (`kubeconfig` when it was replaced); empty when nothing did. */
  changed: Array<'region' | 'capacity' | 'labels' | 'plans' | 'kubeconfig'>;
}

const sameRecord = (a: Record<string, string>, b: Record<string, string>) =>
  JSON.stringify(Object.entries(a).sort()) === JSON.stringify(Object.entries(b).sort());
const sameSet = (a: string[], b: string[]) => JSON.stringify([...a].sort()) === JSON.stringify([...b].sort());

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

  /**
   * Registers a cluster. Unless `force`, its API server must answer, take the kubeconfig's
   * credentials and grant every permission the tenants program needs
   * (tenants/root-permissions.ts): otherwise 422 naming what is wrong, and nothing is stored.
   */
  async register(input: ClusterRegistration, by: Requester): Promise<RootCluster> {
    await admitKubeconfig(input.kubeconfig, this.#kubeconfigPolicy);
    for (const p of input.plans ?? []) if (!PLAN_NAMES.includes(p)) throw errors.unknownPlan(p, PLAN_NAMES);
    if (await getClusterByName(this.#pool, input.name)) throw errors.clusterExists(input.name);
    if (!input.force) await this.#probe(input.kubeconfig);
    return withTx(this.#pool, (tx) => this.#insert(tx, input, by));
  }

  /**
   * The probe of a registration (see register): 422 naming what is wrong when the cluster does not
   * answer, refuses the credentials or lacks a permission.
   */
  async #probe(kubeconfig: string): Promise<void> {
    const result = await probeCluster(kubeconfig, this.#kubeconfigPolicy, { permissions: ROOT_CLUSTER_PERMISSIONS });
    if (result.outcome !== 'ok') throw probeRefusal(result);
  }

  /**
   * Registers a cluster, or brings an existing registration to `input` (idempotent: an unchanged
   * cluster is not written and gets no audit row). Labels and plans left out keep their value on
   * an existing cluster; the cordon is never touched. A cluster holding tenants keeps its region.
   * A new cluster or a new kubeconfig is probed first as in register, unless `force`.
   */
  async put(input: ClusterRegistration, by: Requester): Promise<ClusterPutResult> {
    await admitKubeconfig(input.kubeconfig, this.#kubeconfigPolicy);
    for (const p of input.plans ?? []) if (!PLAN_NAMES.includes(p)) throw errors.unknownPlan(p, PLAN_NAMES);
    if (!input.force) {
      const stored = await readClusterKubeconfig(this.#pool, input.name);
      const same =
        stored !== undefined &&
        this.#box.decrypt(stored, `cluster/${input.name}`).toString('utf8') === input.kubeconfig;
      if (!same) await this.#probe(input.kubeconfig);
    }
    return withTx(this.#pool, async (tx) => {
      const enc = await lockClusterKubeconfig(tx, input.name);
      const before = enc ? await getClusterByName(tx, input.name) : undefined;
      if (!enc || !before) return { cluster: await this.#insert(tx, input, by), created: true, changed: [] };
      const next = {
        region: input.region,
        capacity: input.capacity,
        labels: input.labels ?? before.labels,
        plans: input.plans ?? before.plans,
      };
      const changed: ClusterPutResult['changed'] = [];
      if (next.region !== before.region) changed.push('region');
      if (next.capacity !== before.capacity) changed.push('capacity');
      if (!sameRecord(next.labels, before.labels)) changed.push('labels');
      if (!sameSet(next.plans, before.plans)) changed.push('plans');
      const aad = `cluster/${input.name}`;
      const kubeconfigChanged = this.#box.decrypt(enc, aad).toString('utf8') !== input.kubeconfig;
      if (kubeconfigChanged) changed.push('kubeconfig');
      if (changed.length === 0) return { cluster: before, created: false, changed };
      if (changed.includes('region') && before.tenants > 0) throw errors.clusterInUse(input.name, before.tenants);
      const after = (await updateCluster(tx, input.name, {
        ...next,
        kubeconfigEnc: kubeconfigChanged ? this.#box.encrypt(input.kubeconfig, aad) : undefined,
      }))!;
      await writeAudit(tx, by.actor, {
        action: 'cluster.update',
        targetType: 'cluster',
        targetId: after.name,
        // The kubeconfig is never recorded, only that it was replaced.
        before: { region: before.region, capacity: before.capacity, labels: before.labels, plans: before.plans },
        after: { ...next, ...(kubeconfigChanged ? { kubeconfig: 'replaced' } : {}) },
        requestId: by.requestId,
      });
      return { cluster: after, created: false, changed };
    });
  }

  async #insert(tx: pg.PoolClient, input: ClusterRegistration, by: Requester): Promise<RootCluster> {
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
  }

  /** Every registered cluster probed as at registration, at most `parallel` at a time. */
  async probeAll(opts: { timeoutMs?: number; parallel?: number } = {}): Promise<ClusterProbe[]> {
    const rows = await listClusterKubeconfigs(this.#pool);
    const out = new Array<ClusterProbe>(rows.length);
    let next = 0;
    const worker = async (): Promise<void> => {
      for (let i = next++; i < rows.length; i = next++) {
        const row = rows[i]!;
        let result: ClusterProbe['result'];
        try {
          const kubeconfig = this.#box.decrypt(row.enc, `cluster/${row.name}`).toString('utf8');
          result = await probeCluster(kubeconfig, this.#kubeconfigPolicy, {
            permissions: ROOT_CLUSTER_PERMISSIONS,
            ...(opts.timeoutMs ? { timeoutMs: opts.timeoutMs } : {}),
          });
        } catch (err) {
          result = { outcome: 'refused', server: '', error: describeRefusal(err) };
        }
        out[i] = { name: row.name, region: row.region, cordoned: row.cordoned, result };
      }
    };
    await Promise.all(Array.from({ length: Math.min(opts.parallel ?? 8, rows.length) }, () => worker()));
    return out;
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
