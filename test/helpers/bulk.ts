/**
 * Test-data builders for seeds at scale (benchmarks, the browser tier's fleet): set-based writes of
 * thousands of rows in one statement, where the store writes one row at a time (and wakes waiters,
 * notifies, audits). This module is the one place of the tests and benchmarks that writes that SQL.
 */
import type { Queryable } from '../../provisioner/db/tx.ts';

/**
 * Registers a root cluster without waking the tenants waiting for capacity (the store's
 * insertCluster wakes them; a seed that registers clusters beside its tenants must not change
 * when they are next tried). Every plan, no labels.
 */
export async function insertRootClusterQuietly(
  db: Queryable,
  c: { name: string; region: string; capacity: number; kubeconfigEnc: Buffer },
): Promise<void> {
  await db.query('INSERT INTO root_clusters (name, region, capacity, kubeconfig_enc) VALUES ($1, $2, $3, $4)', [
    c.name,
    c.region,
    c.capacity,
    c.kubeconfigEnc,
  ]);
}

/**
 * Signs `count` tenants up in one statement: organizations `<prefix>-1` … `<prefix>-<count>`, the
 * columns' defaults otherwise (Pending, generation 1); with `createOperations`, each with its
 * queued create operation (generation 1, to `runtimeVersion`), as the API writes a signup.
 */
export async function insertTenantsBulk(
  db: Queryable,
  count: number,
  o: { prefix: string; email: string; plan: string; runtimeVersion: string; createOperations?: boolean },
): Promise<void> {
  await db.query(
    `INSERT INTO tenants (organization, email, plan, runtime_version)
     SELECT $2 || '-' || g, $3, $4, $5 FROM generate_series(1, $1) g`,
    [count, o.prefix, o.email, o.plan, o.runtimeVersion],
  );
  if (o.createOperations)
    await db.query(
      `INSERT INTO operations (tenant_id, kind, generation, to_version)
       SELECT id, 'create', 1, $2 FROM tenants WHERE organization LIKE $1 || '-%'`,
      [o.prefix, o.runtimeVersion],
    );
}

/** Spreads every tenant's last reconcile evenly over the last `seconds` (a fleet at rest, resyncs staggered). */
export async function scatterLastReconciled(db: Queryable, seconds: number): Promise<void> {
  await db.query('UPDATE tenants SET last_reconciled_at = now() - random() * make_interval(secs => $1::float8)', [
    seconds,
  ]);
}
