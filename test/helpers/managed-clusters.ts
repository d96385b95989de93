/**
 * Test-data builders for tenants' managed clusters. A registration goes through the store
 * (insertManagedCluster, recordProbe); what the store has no write for (a probe made due now, a row
 * as an older version stored it) is SQL here, the one place of the tests that writes it, and so is
 * the read of the prober's bookkeeping (managedClusterProbes).
 */
import type { Queryable } from '../../provisioner/db/tx.ts';
import { insertManagedCluster, type ManagedCluster } from '../../provisioner/store/managed-clusters.ts';
import type { Condition } from '../../provisioner/store/states.ts';

/**
 * Registers a managed cluster as the prober leaves a reachable one: token auth, Reachable=True
 * (probed now), its next probe a day away; `server` https://`name`.example:6443 unless told.
 */
export async function addReachableManagedCluster(
  db: Queryable,
  tenantId: string,
  name: string,
  o: { server?: string; serverKey?: string; serverVersion?: string } = {},
): Promise<ManagedCluster> {
  const reachable: Condition = {
    type: 'Reachable',
    status: 'True',
    reason: 'Probed',
    message: 'answers',
    lastTransitionTime: new Date().toISOString(),
  };
  return insertManagedCluster(db, {
    tenantId,
    name,
    server: o.server ?? `https://${name}.example:6443`,
    serverKey: o.serverKey ?? `${name}.example:6443`,
    namespaces: [],
    authMethod: 'token',
    credentialsEnc: Buffer.from([0]),
    serverVersion: o.serverVersion ?? 'v1.30.2',
    conditions: [reachable],
    probeInMs: 86_400_000,
  });
}

// SQL: a state no production path writes any more (a row as an older version stored it).
/**
 * Inserts a managed cluster row as a version before storedServerVersion stored it: its reported
 * version kept as the cluster answered (terminal controls and all), probed now, due in an hour.
 */
export async function insertRawVersionManagedCluster(
  db: Queryable,
  m: { tenantId: string; name: string; server: string; credentialsEnc: Buffer; serverVersion: string },
): Promise<void> {
  await db.query(
    `INSERT INTO managed_clusters (tenant_id, name, server, server_key, namespaces, auth_method, credentials_enc,
            server_version, conditions, last_probe_at, probe_due_at)
     VALUES ($1, $2, $3, $3, '{}', 'token', $4, $5, '[]', now(), now() + interval '1 hour')`,
    [m.tenantId, m.name, m.server, m.credentialsEnc, m.serverVersion],
  );
}

// SQL: time moved back (a probe made due, a bootstrap expired).
/** Makes the tenant's managed clusters due for a probe now; `clearConditions`: as never probed. */
export async function makeProbeDue(
  db: Queryable,
  tenantId: string,
  o: { clearConditions?: boolean } = {},
): Promise<void> {
  await db.query(
    `UPDATE managed_clusters SET probe_due_at = now(), conditions = CASE WHEN $2 THEN '[]'::jsonb ELSE conditions END
      WHERE tenant_id = $1`,
    [tenantId, o.clearConditions ?? false],
  );
}

/** Makes the managed-cluster bootstrap named `name` expired a second ago (instead of waiting out its TTL). */
export async function expireManagedClusterBootstrap(db: Queryable, name: string): Promise<void> {
  await db.query(`UPDATE managed_cluster_bootstraps SET expires_at = now() - interval '1 second' WHERE name = $1`, [
    name,
  ]);
}

// SQL: reads of columns no store read answers (the next probe; a bootstrap row as a whole).
/** A managed cluster's probe state as stored: its conditions, last probe and next one. */
export interface ManagedClusterProbe {
  name: string;
  conditions: Condition[];
  last_probe_at: Date | null;
  probe_due_at: Date | null;
}

/** The tenant's managed clusters' probe state (of one cluster when told), by name. */
export async function managedClusterProbes(
  db: Queryable,
  tenantId: string,
  name?: string,
): Promise<ManagedClusterProbe[]> {
  const { rows } = await db.query<ManagedClusterProbe>(
    `SELECT name, conditions, last_probe_at, probe_due_at FROM managed_clusters
      WHERE tenant_id = $1 AND ($2::text IS NULL OR name = $2) ORDER BY name`,
    [tenantId, name ?? null],
  );
  return rows;
}

/** Every stored managed-cluster bootstrap row, each as its JSON text (to check what a row holds, whatever the column). */
export async function storedBootstraps(db: Queryable): Promise<string[]> {
  const { rows } = await db.query<{ row: string }>(
    'SELECT row_to_json(b)::text AS row FROM managed_cluster_bootstraps b ORDER BY b.created_at',
  );
  return rows.map((r) => r.row);
}
