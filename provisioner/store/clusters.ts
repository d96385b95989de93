import type { Queryable } from '../db/tx.ts';
import { wakeWaiters } from './tenants.ts';

export interface RootCluster {
  id: string;
  name: string;
  region: string;
  labels: Record<string, string>;
  capacity: number;
  plans: string[];
  cordoned: boolean;
  /** Live (not deleted) tenants placed on this cluster. */
  tenants: number;
  createdAt: string;
  updatedAt: string;
}

interface ClusterRow {
  id: string;
  name: string;
  region: string;
  labels: Record<string, string>;
  capacity: number;
  plans: string[];
  cordoned: boolean;
  tenants: number;
  created_at: Date;
  updated_at: Date;
}

const SELECT = `SELECT c.id, c.name, c.region, c.labels, c.capacity, c.plans, c.cordoned, c.created_at, c.updated_at,
  (SELECT count(*)::int FROM tenants t WHERE t.cluster_id = c.id AND t.phase <> 'Deleted') AS tenants
  FROM root_clusters c`;

function toCluster(r: ClusterRow): RootCluster {
  return {
    id: r.id,
    name: r.name,
    region: r.region,
    labels: r.labels,
    capacity: r.capacity,
    plans: r.plans,
    cordoned: r.cordoned,
    tenants: r.tenants,
    createdAt: r.created_at.toISOString(),
    updatedAt: r.updated_at.toISOString(),
  };
}

export async function listClusters(db: Queryable): Promise<RootCluster[]> {
  const { rows } = await db.query<ClusterRow>(`${SELECT} ORDER BY c.name`);
  return rows.map(toCluster);
}

export async function getClusterByName(db: Queryable, name: string): Promise<RootCluster | undefined> {
  const { rows } = await db.query<ClusterRow>(`${SELECT} WHERE c.name = $1`, [name]);
  return rows[0] ? toCluster(rows[0]) : undefined;
}

export async function insertCluster(
  db: Queryable,
  c: {
    name: string;
    region: string;
    labels: Record<string, string>;
    capacity: number;
    plans: string[];
    kubeconfigEnc: Buffer;
  },
): Promise<RootCluster> {
  await db.query(
    `INSERT INTO root_clusters (name, region, labels, capacity, plans, kubeconfig_enc) VALUES ($1, $2, $3, $4, $5, $6)`,
    [c.name, c.region, JSON.stringify(c.labels), c.capacity, c.plans, c.kubeconfigEnc],
  );
  // A new cluster may take the tenants waiting for capacity: they are due now, not at their backoff.
  await wakeWaiters(db, 'NoCapacity');
  return (await getClusterByName(db, c.name))!;
}

/** Changes a cluster's registration (the kubeconfig only when given). */
export async function updateCluster(
  db: Queryable,
  name: string,
  c: {
    region: string;
    labels: Record<string, string>;
    capacity: number;
    plans: string[];
    kubeconfigEnc?: Buffer | undefined;
  },
): Promise<RootCluster | undefined> {
  const { rowCount } = await db.query(
    `UPDATE root_clusters SET region = $2, labels = $3, capacity = $4, plans = $5,
       kubeconfig_enc = coalesce($6, kubeconfig_enc), updated_at = now() WHERE name = $1`,
    [name, c.region, JSON.stringify(c.labels), c.capacity, c.plans, c.kubeconfigEnc ?? null],
  );
  // More capacity, other plans or another region may take the tenants waiting for capacity.
  if (rowCount) await wakeWaiters(db, 'NoCapacity');
  return rowCount ? getClusterByName(db, name) : undefined;
}

/** The encrypted kubeconfig of a cluster by name, the row locked until the transaction ends. */
/** A cluster's encrypted kubeconfig by name, without a lock; undefined when there is no such cluster. */
export async function readClusterKubeconfig(db: Queryable, name: string): Promise<Buffer | undefined> {
  const { rows } = await db.query<{ kubeconfig_enc: Buffer }>(
    'SELECT kubeconfig_enc FROM root_clusters WHERE name = $1',
    [name],
  );
  return rows[0]?.kubeconfig_enc;
}

export async function lockClusterKubeconfig(db: Queryable, name: string): Promise<Buffer | undefined> {
  const { rows } = await db.query<{ kubeconfig_enc: Buffer }>(
    'SELECT kubeconfig_enc FROM root_clusters WHERE name = $1 FOR UPDATE',
    [name],
  );
  return rows[0]?.kubeconfig_enc;
}

export async function setCordoned(db: Queryable, name: string, cordoned: boolean): Promise<RootCluster | undefined> {
  const { rowCount } = await db.query('UPDATE root_clusters SET cordoned = $2, updated_at = now() WHERE name = $1', [
    name,
    cordoned,
  ]);
  if (rowCount && !cordoned) await wakeWaiters(db, 'NoCapacity');
  return rowCount ? getClusterByName(db, name) : undefined;
}

export async function getClusterKubeconfig(
  db: Queryable,
  id: string,
): Promise<{ name: string; enc: Buffer } | undefined> {
  const { rows } = await db.query<{ name: string; kubeconfig_enc: Buffer }>(
    'SELECT name, kubeconfig_enc FROM root_clusters WHERE id = $1',
    [id],
  );
  return rows[0] ? { name: rows[0].name, enc: rows[0].kubeconfig_enc } : undefined;
}

export interface Region {
  name: string;
  /** Some cluster of the region is not cordoned and has room for a new tenant. */
  accepting: boolean;
}

/** Regions of the registered root clusters, by name. */
export async function listRegions(db: Queryable): Promise<Region[]> {
  const { rows } = await db.query<Region>(
    `SELECT c.region AS name,
            bool_or(NOT c.cordoned AND (SELECT count(*) FROM tenants t WHERE t.cluster_id = c.id AND t.phase <> 'Deleted') < c.capacity) AS accepting
       FROM root_clusters c GROUP BY c.region ORDER BY c.region`,
  );
  return rows;
}

/** Every cluster's name, region, cordon and encrypted kubeconfig, by name (`provisioner doctor`). */
export async function listClusterKubeconfigs(
  db: Queryable,
): Promise<Array<{ name: string; region: string; cordoned: boolean; enc: Buffer }>> {
  const { rows } = await db.query<{ name: string; region: string; cordoned: boolean; kubeconfig_enc: Buffer }>(
    'SELECT name, region, cordoned, kubeconfig_enc FROM root_clusters ORDER BY name',
  );
  return rows.map((r) => ({ name: r.name, region: r.region, cordoned: r.cordoned, enc: r.kubeconfig_enc }));
}

/** Every registered root cluster's id and name with its sealed kubeconfig (the root-cluster watch, the managed-cluster isolation check). */
export async function sealedClusterKubeconfigs(
  db: Queryable,
): Promise<Array<{ id: string; name: string; kubeconfig_enc: Buffer }>> {
  const { rows } = await db.query<{ id: string; name: string; kubeconfig_enc: Buffer }>(
    'SELECT id, name, kubeconfig_enc FROM root_clusters',
  );
  return rows;
}
