/**
 * Seeds tenants straight into the database, the way the reconciler would have left them, for the
 * browser tests' fleet-sized pages (10,000 tenants in one statement).
 */
import type pg from 'pg';

const PHASE_MIX = ['Ready', 'Ready', 'Ready', 'Ready', 'Pending', 'Provisioning', 'Failed', 'Suspended', 'Updating'];
const VERSIONS = ['1.3.0', '1.4.0', '1.4.1', '1.5.0'];
const PLANS = ['free', 'team', 'enterprise'];

/**
 * `count` tenants named `<prefix>-00001`…, created a minute apart (the newest last), phases mixed;
 * every `staleEvery`-th one Ready with its last observation three days old (stale).
 */
export async function seedTenants(pool: pg.Pool, count: number, prefix = 'fleet', staleEvery = 1000): Promise<void> {
  await pool.query(
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
