/**
 * Test-data builders for root clusters. Registering and cordoning go through the store; only the
 * fleet-wide cordon, which the store has no write for, is SQL here (the one place of the tests).
 */
import type { Queryable } from '../../provisioner/db/tx.ts';
import { insertCluster, type RootCluster } from '../../provisioner/store/clusters.ts';

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

/** Cordons (or uncordons) every root cluster (one cluster: the store's setCordoned). */
export async function setAllClustersCordoned(db: Queryable, cordoned: boolean): Promise<void> {
  await db.query('UPDATE root_clusters SET cordoned = $1', [cordoned]);
}
