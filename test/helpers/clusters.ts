/**
 * Test-data builders for root clusters. Registering and cordoning go through the store; the
 * fleet-wide cordon and a kubeconfig swapped alone, which the store has no write for, are SQL here
 * (the one place of the tests).
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

/** Replaces a root cluster's encrypted kubeconfig, nothing else (no waiters woken, updated_at kept). */
export async function replaceClusterKubeconfig(db: Queryable, name: string, kubeconfigEnc: Buffer): Promise<void> {
  await db.query('UPDATE root_clusters SET kubeconfig_enc = $2 WHERE name = $1', [name, kubeconfigEnc]);
}
