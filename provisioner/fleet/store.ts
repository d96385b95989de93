/**
 * Fleet upgrade rows (migration 013): the fleet upgrade, its waves and one row per selected
 * tenant. Reads shape them for the API; writes are the service's and the driver's.
 */
import type { Queryable } from '../db/tx.ts';
import type { Candidate, Plan, Selector } from './plan.ts';
import type { GateCheck } from './gate.ts';
import type { MaintenanceWindow } from '../store/tenants.ts';

export const FLEET_STATES = ['running', 'paused', 'halted', 'aborting', 'completed', 'aborted'] as const;
export type FleetState = (typeof FLEET_STATES)[number];
/** States in which the fleet upgrade holds its tenants (an individual upgrade of one is refused). */
export const ACTIVE_FLEET_STATES: readonly FleetState[] = ['running', 'paused', 'halted', 'aborting'];

export const FLEET_TENANT_STATES = [
  'excluded',
  'pending',
  'upgrading',
  'succeeded',
  'rolling_back',
  'quarantined',
  'interrupted',
  'cancelled',
  'reverting',
  'reverted',
  'left',
  'skipped',
] as const;
export type FleetTenantState = (typeof FLEET_TENANT_STATES)[number];
/** A step of the driver is under way for the tenant (its spec was changed; the gate decides). */
export const IN_FLIGHT: readonly FleetTenantState[] = ['upgrading', 'rolling_back', 'reverting'];

export const WAVE_STATES = ['pending', 'running', 'soaking', 'completed'] as const;

/** The NOTIFY channel that wakes the fleet drivers (payload: the fleet upgrade id). */
export const FLEET_CHANNEL = 'fleet_upgrade';

export interface FleetRow {
  id: string;
  target_version: string;
  state: FleetState;
  selector: Selector;
  options: Record<string, unknown>;
  current_wave: number;
  state_reason: string | null;
  abort_rollback: boolean;
  created_by: string;
  created_at: Date;
  updated_at: Date;
  finished_at: Date | null;
  lease_owner: string | null;
  lease_expires_at: Date | null;
  /** The operator's override of the maintenance windows (migration 015): {by, reason, at}; null: none. */
  windows_override: WindowsOverride | null;
}

export interface WindowsOverride {
  by: string;
  reason: string;
  at: string;
}

export interface WaveRow {
  wave: number;
  size: number;
  max_concurrency: number;
  max_unavailable: number;
  soak_seconds: number;
  max_failures: number | null;
  max_failure_percent: number | null;
  forgiven: number;
  state: (typeof WAVE_STATES)[number];
  started_at: Date | null;
  settled_at: Date | null;
  completed_at: Date | null;
}

export interface FleetTenantRow {
  tenant_id: string;
  organization: string;
  wave: number | null;
  position: number;
  state: FleetTenantState;
  from_version: string;
  path: string[];
  hop: number;
  generation: number | null;
  operation_id: string | null;
  step_from: string | null;
  step_to: string | null;
  step_started_at: Date | null;
  gate: { passed: boolean; checks: GateCheck[]; at: string } | null;
  rolled_back: boolean;
  reason: string | null;
  started_at: Date | null;
  finished_at: Date | null;
  /** A pending tenant whose window is closed: when the next window that fits opens. */
  deferred_until: Date | null;
}

/** The live tenants a selector takes, oldest first (the canary is the oldest upgradeable one). */
export async function selectCandidates(
  db: Queryable,
  s: Selector,
): Promise<{ candidates: Candidate[]; unknownIds: string[] }> {
  const where = ['NOT t.deleted'];
  const args: unknown[] = [];
  const add = (sql: string, v: unknown): void => {
    args.push(v);
    where.push(sql.replaceAll('?', `$${args.length}`));
  };
  if (s.versions?.length) add('t.runtime_version = ANY(?::text[])', s.versions);
  if (s.plans?.length) add('t.plan = ANY(?::text[])', s.plans);
  if (s.regions?.length) add('coalesce(c.region, t.region) = ANY(?::text[])', s.regions);
  if (s.clusters?.length) add('c.name = ANY(?::text[])', s.clusters);
  if (s.tenantIds?.length) add('t.id = ANY(?::uuid[])', s.tenantIds);
  const { rows } = await db.query<{
    id: string;
    organization: string;
    version: string;
    actual: string | null;
    phase: string;
    suspended: boolean;
    stalled: boolean;
    cluster: string | null;
    in_fleet: string | null;
    windows: MaintenanceWindow[];
  }>(
    `SELECT t.id, t.organization, t.runtime_version AS version, t.actual_runtime_version AS actual, t.phase,
            t.suspended, t.stalled, c.name AS cluster, ft.fleet_upgrade_id AS in_fleet, t.maintenance_windows AS windows
       FROM tenants t LEFT JOIN root_clusters c ON c.id = t.cluster_id
       LEFT JOIN fleet_upgrade_tenants ft ON ft.tenant_id = t.id AND ft.active
      WHERE ${where.join(' AND ')}
      ORDER BY t.created_at, t.id`,
    args,
  );
  const found = new Set(rows.map((r) => r.id));
  return {
    candidates: rows.map((r) => ({
      id: r.id,
      organization: r.organization,
      version: r.version,
      actualVersion: r.actual,
      phase: r.phase,
      suspended: r.suspended,
      stalled: r.stalled,
      cluster: r.cluster,
      inFleetUpgrade: r.in_fleet,
      windows: r.windows,
    })),
    unknownIds: (s.tenantIds ?? []).filter((id) => !found.has(id.toLowerCase())),
  };
}

/** Writes a new fleet upgrade with its waves and tenants (planned and excluded). */
export async function insertFleetUpgrade(
  db: Queryable,
  f: { id: string; selector: Selector; options: unknown; createdBy: string; plan: Plan },
): Promise<void> {
  const { plan } = f;
  await db.query(
    `INSERT INTO fleet_upgrades (id, target_version, selector, options, created_by) VALUES ($1, $2, $3, $4, $5)`,
    [f.id, plan.targetVersion, JSON.stringify(f.selector), JSON.stringify(f.options), f.createdBy],
  );
  await db.query(
    `INSERT INTO fleet_upgrade_waves (fleet_upgrade_id, wave, size, max_concurrency, max_unavailable, soak_seconds, max_failures, max_failure_percent)
     SELECT $1, * FROM unnest($2::int[], $3::int[], $4::int[], $5::int[], $6::int[], $7::int[], $8::float8[])`,
    [
      f.id,
      plan.waves.map((w) => w.wave),
      plan.waves.map((w) => w.size),
      plan.waves.map((w) => w.maxConcurrency),
      plan.waves.map((w) => w.maxUnavailable),
      plan.waves.map((w) => w.soakSeconds),
      plan.waves.map((w) => w.maxFailures),
      plan.waves.map((w) => w.maxFailurePercent),
    ],
  );
  // Paths go in as one text each ('1.5.0 1.6.0'): unnest cannot take an array of arrays of differing lengths.
  await db.query(
    `INSERT INTO fleet_upgrade_tenants (fleet_upgrade_id, tenant_id, wave, position, state, active, from_version, path)
     SELECT $1, u.tenant_id, u.wave, u.position, 'pending', true, u.from_version, string_to_array(u.path, ' ')
       FROM unnest($2::uuid[], $3::int[], $4::int[], $5::text[], $6::text[]) AS u(tenant_id, wave, position, from_version, path)`,
    [
      f.id,
      plan.tenants.map((t) => t.tenantId),
      plan.tenants.map((t) => t.wave),
      plan.tenants.map((t) => t.position),
      plan.tenants.map((t) => t.fromVersion),
      plan.tenants.map((t) => t.path.join(' ')),
    ],
  );
  // Excluded tenants that exist are listed with the reason (unknown ids only in the answer).
  const known = plan.excluded.filter((e) => e.version !== '');
  await db.query(
    `INSERT INTO fleet_upgrade_tenants (fleet_upgrade_id, tenant_id, wave, position, state, active, from_version, reason, path)
     SELECT $1, u.tenant_id, u.wave, u.position, 'excluded', false, u.version, u.reason, string_to_array(u.path, ' ')
       FROM unnest($2::uuid[], $3::int[], $4::text[], $5::text[], $6::int[], $7::text[])
            AS u(tenant_id, position, version, reason, wave, path)`,
    [
      f.id,
      known.map((e) => e.tenantId),
      known.map((_, i) => plan.tenants.length + i),
      known.map((e) => e.version),
      known.map((e) => e.reason),
      // Excluded for its windows only: the wave it may be taken back in, and its path.
      known.map((e) => e.wave ?? null),
      known.map((e) => (e.path ?? []).join(' ')),
    ],
  );
}

export async function getFleetRow(db: Queryable, id: string, forUpdate = false): Promise<FleetRow | undefined> {
  const { rows } = await db.query<FleetRow>(
    `SELECT * FROM fleet_upgrades WHERE id = $1${forUpdate ? ' FOR UPDATE' : ''}`,
    [id],
  );
  return rows[0];
}

export async function listFleetRows(db: Queryable, limit: number, state?: FleetState): Promise<FleetRow[]> {
  const { rows } = await db.query<FleetRow>(
    `SELECT * FROM fleet_upgrades ${state ? 'WHERE state = $2' : ''} ORDER BY created_at DESC, id DESC LIMIT $1`,
    state ? [limit, state] : [limit],
  );
  return rows;
}

export async function waveRows(db: Queryable, id: string): Promise<WaveRow[]> {
  const { rows } = await db.query<WaveRow>(
    'SELECT * FROM fleet_upgrade_waves WHERE fleet_upgrade_id = $1 ORDER BY wave',
    [id],
  );
  return rows;
}

export async function fleetTenantRows(db: Queryable, id: string): Promise<FleetTenantRow[]> {
  const { rows } = await db.query<FleetTenantRow>(
    `SELECT ft.*, t.organization FROM fleet_upgrade_tenants ft JOIN tenants t ON t.id = ft.tenant_id
      WHERE ft.fleet_upgrade_id = $1 ORDER BY ft.position`,
    [id],
  );
  return rows;
}

/** Tenant counts by wave and state: [{wave, state, n}]. */
export async function stateCounts(
  db: Queryable,
  ids: readonly string[],
): Promise<Array<{ fleet_upgrade_id: string; wave: number | null; state: FleetTenantState; n: number }>> {
  const { rows } = await db.query<{
    fleet_upgrade_id: string;
    wave: number | null;
    state: FleetTenantState;
    n: number;
  }>(
    `SELECT fleet_upgrade_id, wave, state, count(*)::int AS n FROM fleet_upgrade_tenants
      WHERE fleet_upgrade_id = ANY($1::uuid[]) GROUP BY 1, 2, 3`,
    [ids],
  );
  return rows;
}

/** The running fleet upgrade that holds the tenant, if any. */
export async function fleetUpgradeOf(db: Queryable, tenantId: string): Promise<string | undefined> {
  const { rows } = await db.query<{ id: string }>(
    `SELECT ft.fleet_upgrade_id AS id FROM fleet_upgrade_tenants ft WHERE ft.tenant_id = $1 AND ft.active`,
    [tenantId],
  );
  return rows[0]?.id;
}

export interface FleetEvent {
  seq: number;
  at: string;
  /** The audit action without its `fleet_upgrade.` prefix: start, pause, wave_start, tenant_upgrade, halt, … */
  action: string;
  tenantId: string | null;
  data: Record<string, unknown>;
}

/** Records a decision as an event of the fleet upgrade (in the caller's transaction, which holds the fleet upgrade's row). */
export async function recordEvent(
  db: Queryable,
  fleetUpgradeId: string,
  action: string,
  tenantId: string | null,
  data: unknown,
): Promise<void> {
  await db.query(
    'INSERT INTO fleet_upgrade_events (fleet_upgrade_id, action, tenant_id, data) VALUES ($1, $2, $3, $4)',
    [fleetUpgradeId, action, tenantId, JSON.stringify(data ?? {})],
  );
}

/** Several events of the fleet upgrade in one statement; their seqs follow the order given. */
export async function recordEvents(
  db: Queryable,
  fleetUpgradeId: string,
  events: ReadonlyArray<{ action: string; tenantId: string | null; data: unknown }>,
): Promise<void> {
  if (events.length === 0) return;
  await db.query(
    `INSERT INTO fleet_upgrade_events (fleet_upgrade_id, action, tenant_id, data)
     SELECT $1, u.action, u.tenant_id, u.data
       FROM unnest($2::text[], $3::uuid[], $4::jsonb[]) WITH ORDINALITY AS u(action, tenant_id, data, n)
      ORDER BY u.n`,
    [
      fleetUpgradeId,
      events.map((e) => e.action),
      events.map((e) => e.tenantId),
      events.map((e) => JSON.stringify(e.data ?? {})),
    ],
  );
}

/** Events after `afterSeq`, oldest first. */
export async function fleetEvents(db: Queryable, id: string, afterSeq: number, limit: number): Promise<FleetEvent[]> {
  const { rows } = await db.query<{
    seq: string;
    at: Date;
    action: string;
    tenant_id: string | null;
    data: Record<string, unknown>;
  }>(
    `SELECT seq, at, action, tenant_id, data FROM fleet_upgrade_events
      WHERE fleet_upgrade_id = $1 AND seq > $2 ORDER BY seq LIMIT $3`,
    [id, afterSeq, limit],
  );
  return rows.map((r) => ({
    seq: Number(r.seq),
    at: r.at.toISOString(),
    action: r.action,
    tenantId: r.tenant_id,
    data: r.data,
  }));
}

/** The key of a version edge in edgeDurations' answer. */
export const edgeKey = (from: string, to: string): string => `${from} -> ${to}`;

/** How many of an edge's latest successful upgrades its p95 is taken over. */
export const EDGE_SAMPLES = 200;

/**
 * The p95 of each edge's past upgrade durations (seconds from the engine run's start, else the
 * operation's creation, to its end), over its EDGE_SAMPLES latest successful upgrade operations;
 * an edge with no history is absent.
 */
export async function edgeDurations(
  db: Queryable,
  edges: ReadonlyArray<readonly [string, string]>,
): Promise<Map<string, { p95Seconds: number; samples: number }>> {
  if (edges.length === 0) return new Map();
  const { rows } = await db.query<{ f: string; t: string; p95: number | null; n: number }>(
    `SELECT e.f, e.t, x.p95, x.n FROM unnest($1::text[], $2::text[]) AS e(f, t)
       CROSS JOIN LATERAL (
         SELECT percentile_cont(0.95) WITHIN GROUP (ORDER BY s.d)::float8 AS p95, count(*)::int AS n
           FROM (SELECT extract(epoch FROM o.finished_at - coalesce(o.started_at, o.created_at))::float8 AS d
                   FROM operations o
                  WHERE o.kind = 'upgrade' AND o.state = 'succeeded' AND o.from_version = e.f AND o.to_version = e.t
                    AND o.finished_at IS NOT NULL
                  ORDER BY o.finished_at DESC LIMIT $3) s) x`,
    [edges.map((e) => e[0]), edges.map((e) => e[1]), EDGE_SAMPLES],
  );
  return new Map(
    rows.filter((r) => r.n > 0 && r.p95 !== null).map((r) => [edgeKey(r.f, r.t), { p95Seconds: r.p95!, samples: r.n }]),
  );
}
