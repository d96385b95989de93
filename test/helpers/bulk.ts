/**
 * Test-data builders for seeds at scale (benchmarks, the browser tier's fleet): set-based writes of
 * thousands of rows in one statement, where the store writes one row at a time (and wakes waiters,
 * notifies, audits). This module is the one place of the tests and benchmarks that writes that SQL.
 */
import type { Queryable } from '../../provisioner/db/tx.ts';
import type { Condition } from '../../provisioner/store/states.ts';

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
 * Signs `count` tenants up in one statement: organizations `<prefix>-1` … `<prefix>-<count>` (with
 * `randomSuffix`, each followed by `-<32 hex>`, so that a second seed does not collide), `{n}` in
 * `email` replaced by the number, `conditions` (the column's default unless given), the columns'
 * defaults otherwise (Pending, generation 1); with `createOperations`, each with its queued create
 * operation (generation 1, to `runtimeVersion`), as the API writes a signup. Answers how many.
 */
export async function insertTenantsBulk(
  db: Queryable,
  count: number,
  o: {
    prefix: string;
    email: string;
    plan: string;
    runtimeVersion: string;
    createOperations?: boolean;
    randomSuffix?: boolean;
    conditions?: Condition[];
  },
): Promise<number> {
  const { rowCount } = await db.query(
    `INSERT INTO tenants (organization, email, plan, runtime_version, conditions)
     SELECT $2 || '-' || g || CASE WHEN $6 THEN '-' || md5(random()::text) ELSE '' END, replace($3, '{n}', g::text), $4, $5,
            coalesce($7::jsonb, '[]'::jsonb)
       FROM generate_series(1, $1) g`,
    [
      count,
      o.prefix,
      o.email,
      o.plan,
      o.runtimeVersion,
      o.randomSuffix ?? false,
      o.conditions ? JSON.stringify(o.conditions) : null,
    ],
  );
  if (o.createOperations)
    await db.query(
      `INSERT INTO operations (tenant_id, kind, generation, to_version)
       SELECT id, 'create', 1, $2 FROM tenants WHERE organization LIKE $1 || '-%'`,
      [o.prefix, o.runtimeVersion],
    );
  return rowCount ?? 0;
}

/** Spreads every tenant's last reconcile evenly over the last `seconds` (a fleet at rest, resyncs staggered). */
export async function scatterLastReconciled(db: Queryable, seconds: number): Promise<void> {
  await db.query('UPDATE tenants SET last_reconciled_at = now() - random() * make_interval(secs => $1::float8)', [
    seconds,
  ]);
}

const PHASE_MIX = ['Ready', 'Ready', 'Ready', 'Ready', 'Pending', 'Provisioning', 'Failed', 'Suspended', 'Updating'];
const VERSIONS = ['1.3.0', '1.4.0', '1.4.1', '1.5.0'];
const PLANS = ['free', 'team', 'enterprise'];

/**
 * The ops console's fleet (browser tier): `count` tenants named `<prefix>-00001`…, created a
 * minute apart (the newest last), as the reconciler would have left them, phases mixed; every
 * `staleEvery`-th one Ready with its last observation three days old (stale).
 */
export async function seedConsoleFleet(
  db: Queryable,
  count: number,
  prefix = 'fleet',
  staleEvery = 1000,
): Promise<void> {
  await db.query(
    `INSERT INTO tenants (organization, email, plan, runtime_version, actual_runtime_version, suspended, generation,
                          phase, observed_generation, conditions, last_reconciled_at, created_at, updated_at)
     SELECT $1 || '-' || lpad(i::text, 5, '0'), 'ops+' || i || '@example.com',
            ($3::text[])[1 + i % 3], ($4::text[])[1 + i % 4], ($4::text[])[1 + i % 4],
            ph = 'Suspended', 1, ph, 1,
            jsonb_build_array(jsonb_build_object('type', 'Ready', 'status', CASE WHEN ph = 'Ready' THEN 'True' ELSE 'False' END,
              'reason', ph, 'message', 'seeded', 'lastTransitionTime', now())),
            CASE WHEN i % $5 = 0 THEN now() - interval '3 days' ELSE now() END,
            now() - (($2 - i) * interval '1 minute'),
            CASE WHEN i % $5 = 0 THEN now() - interval '3 days' ELSE now() END
       FROM generate_series(1, $2::int) AS i,
            LATERAL (SELECT CASE WHEN i % $5 = 0 THEN 'Ready' ELSE ($6::text[])[1 + i % 9] END AS ph) AS p`,
    [prefix, count, PLANS, VERSIONS, staleEvery, PHASE_MIX],
  );
}

/**
 * Inserts Ready tenants with the ids given (organization `org-<id>`), placed on `clusterId`, running
 * 1.4.1, last reconciled an hour ago (the e2e tier's fleet of tenants whose objects it writes).
 */
export async function insertReadyTenantsWithIds(
  db: Queryable,
  ids: readonly string[],
  clusterId: string,
): Promise<void> {
  await db.query(
    `INSERT INTO tenants (id, organization, email, plan, runtime_version, phase, generation, observed_generation,
                          actual_runtime_version, cluster_id, last_reconciled_at)
     SELECT id, 'org-' || id::text, 'ops@example.test', 'starter', '1.4.1', 'Ready', 1, 1, '1.4.1', $2,
            now() - interval '1 hour'
       FROM unnest($1::uuid[]) AS id`,
    [ids, clusterId],
  );
}

/**
 * Stores `count` Applications of the tenant's hosted runtime in one statement (`app-0`…, spread
 * over 20 namespaces `team-<n>`, Healthy and Synced, each object padded to about 1.5 KB), as if its
 * reporter `seed` had reported them: a tenant at its object budget without sending the reports.
 */
export async function insertApplicationsBulk(db: Queryable, tenantId: string, count: number): Promise<void> {
  await db.query(
    `INSERT INTO runtime_objects (tenant_id, runtime_id, kind, namespace, name, uid, resource_version, reported_by,
                                 observed_at, summary, object)
     SELECT $1, (SELECT id FROM runtimes WHERE tenant_id = $1 AND mode = 'hosted'), 'Application', 'team-' || (i % 20),
            'app-' || i, 'uid-' || i, 1000 + i, 'seed', now(),
            '{"healthStatus":"Healthy","syncStatus":"Synced"}', jsonb_build_object('pad', repeat('x', 1500))
       FROM generate_series(0, $2::int - 1) i`,
    [tenantId, count],
  );
}
