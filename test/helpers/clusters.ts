/**
 * Test-data builders for root clusters. Registering and cordoning (one cluster or all) go through
 * the store; a kubeconfig swapped alone, which no production path writes (the store's update also
 * stamps the row and wakes waiting tenants), is SQL here (the one place of the tests).
 */
import type { Queryable } from '../../provisioner/db/tx.ts';
import { insertCluster, listClusters, setCordoned, type RootCluster } from '../../provisioner/store/clusters.ts';

/**
 * Registers a root cluster through the store: region `eu-test-1`, capacity 10, every plan, no
 * labels and a placeholder kubeconfig unless told.
 */
export async function addRootCluster(
  db: Queryable,
  name: string,
  o: {
    region?: string;
    capacity?: number;
    plans?: string[];
    labels?: Record<string, string>;
    kubeconfigEnc?: Buffer;
  } = {},
): Promise<RootCluster> {
  return insertCluster(db, {
    name,
    region: o.region ?? 'eu-test-1',
    labels: o.labels ?? {},
    capacity: o.capacity ?? 10,
    plans: o.plans ?? [],
    kubeconfigEnc: o.kubeconfigEnc ?? Buffer.from([0]),
  });
}

/** Cordons (or uncordons) every root cluster, each through the store's setCordoned (an uncordon wakes waiting tenants). */
export async function setAllClustersCordoned(db: Queryable, cordoned: boolean): Promise<void> {
  for (const c of await listClusters(db)) await setCordoned(db, c.name, cordoned);
}

// SQL: a state no production path writes.
/** Replaces a root cluster's encrypted kubeconfig, nothing else (no waiters woken, updated_at kept). */
export async function replaceClusterKubeconfig(db: Queryable, name: string, kubeconfigEnc: Buffer): Promise<void> {
  await db.query('UPDATE root_clusters SET kubeconfig_enc = $2 WHERE name = $1', [name, kubeconfigEnc]);
}
