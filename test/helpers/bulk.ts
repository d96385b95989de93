/**
 * Test-data builders for seeds at scale (benchmarks, the browser tier's fleet): set-based writes of
 * thousands of rows in one statement, where the store writes one row at a time (and wakes waiters,
 * notifies, audits). This module is the one place of the tests and benchmarks that writes that SQL.
 * Every statement here is a seed at scale: states no production path writes in one statement
 * (thousands of tenants made Ready, waiting, with windows), some with their times moved back
 * (scattered last reconciles).
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

/**
 * Inserts `count` tenants as the reconciler leaves them Ready on `runtimeVersion` (generation
 * observed, Ready=True, reconciled now), spread over the root clusters in name order, created a
 * microsecond apart; organizations `<prefix><n>`. Answers their ids in creation order.
 */
export async function insertReadyTenantsBulk(
  db: Queryable,
  count: number,
  o: { prefix: string; email: string; plan: string; runtimeVersion: string },
): Promise<string[]> {
  const { rows } = await db.query<{ id: string }>(
    `INSERT INTO tenants (organization, email, plan, runtime_version, phase, observed_generation, actual_runtime_version,
                          cluster_id, conditions, last_reconciled_at, created_at)
     SELECT $2 || g, $3, $4, $5, 'Ready', 1, $5,
            (SELECT id FROM root_clusters ORDER BY name OFFSET (g % (SELECT count(*) FROM root_clusters)) LIMIT 1),
            '[{"type":"Ready","status":"True","reason":"Reconciled","message":"","lastTransitionTime":"2026-01-01T00:00:00Z"}]',
            now(), now() + g * interval '1 microsecond'
       FROM generate_series(1, $1) g RETURNING id`,
    [count, o.prefix, o.email, o.plan, o.runtimeVersion],
  );
  return rows.map((r) => r.id);
}

/**
 * Gives every tenant one of `distinct` maintenance windows (2 h, at 6-minute steps of the day in
 * five time zones, daily or at weekends), by creation order.
 */
export async function spreadMaintenanceWindows(db: Queryable, distinct: number): Promise<void> {
  await db.query(
    `UPDATE tenants t SET maintenance_windows = jsonb_build_array(jsonb_build_object(
        'rrule', CASE WHEN w.n % 2 = 0 THEN 'FREQ=DAILY' ELSE 'FREQ=WEEKLY;BYDAY=SA,SU' END
                 || ';BYHOUR=' || (w.n / 50 % 24) || ';BYMINUTE=' || (w.n / 5 % 10 * 6),
        'timeZone', (ARRAY['Europe/Berlin', 'America/New_York', 'Asia/Tokyo', 'UTC', 'Australia/Sydney'])[w.n % 5 + 1],
        'durationMinutes', 120))
       FROM (SELECT id, (row_number() OVER (ORDER BY created_at) - 1) % $1 AS n FROM tenants) w
      WHERE w.id = t.id`,
    [distinct],
  );
}

/** Takes every tenant's maintenance windows away. */
export async function clearMaintenanceWindows(db: Queryable): Promise<void> {
  await db.query(`UPDATE tenants SET maintenance_windows = '[]'`);
}

/**
 * Spreads every tenant's last reconcile below its own jittered resync period (`resyncMs`, each
 * tenant's period stretched by up to ±`jitter`/2 by a hash of its id, as the reconciler's
 * selectResyncDue does): a fleet at rest, each tenant somewhere in its period.
 */
export async function scatterLastReconciledJittered(db: Queryable, resyncMs: number, jitter: number): Promise<void> {
  await db.query(
    `UPDATE tenants SET last_reconciled_at = now() - random() * make_interval(secs => $1::float8 / 1000 *
       (1 - $2::float8 / 2 + $2::float8 * ((hashtext(id::text) & 65535) / 65535.0)))`,
    [resyncMs, jitter],
  );
}

/**
 * Makes every tenant look waiting for `reason` since a day (its Ready condition's reason and time),
 * its next try at a random time within `capMs`.
 */
export async function markAllWaitingLong(
  db: Queryable,
  reason: 'NoCapacity' | 'EngineUnavailable',
  capMs: number,
): Promise<void> {
  await db.query(
    `UPDATE tenants SET
       conditions = (SELECT jsonb_agg(CASE WHEN c->>'type' = 'Ready'
                                           THEN c || jsonb_build_object('reason', $1::text, 'lastTransitionTime', to_jsonb(now() - interval '1 day'))
                                           ELSE c END)
                       FROM jsonb_array_elements(conditions) c),
       next_attempt_at = now() + random() * make_interval(secs => $2::float8 / 1000)`,
    [reason, capMs],
  );
}
