/**
 * Fleet upgrade rows (migration 013): the fleet upgrade, its waves, one row per selected tenant
 * and its events. Reads shape them for the API; the statements the service (fleet/service.ts) and
 * the driver (fleet/driver.ts) compose, each named after what it does. Every write runs in the
 * caller's transaction.
 */
import { pgCode, type Queryable } from '../db/tx.ts';
import type { MaintenanceWindow } from './tenants.ts';
import { liveTunnel } from './tunnels.ts';
import { WAVE_STATES, type FleetState, type FleetTenantState, type SkippableGateCheck } from './states.ts';

/**
 * Which tenants a fleet upgrade takes: every field given must match (AND); `all` takes every live
 * tenant. A type, not an interface, so that it is a JSON object (`Record<string, unknown>`) as the
 * API's FleetUpgrade schema types it.
 */
export type Selector = {
  all?: boolean | undefined;
  versions?: string[] | undefined;
  plans?: string[] | undefined;
  regions?: string[] | undefined;
  clusters?: string[] | undefined;
  tenantIds?: string[] | undefined;
};

/** A selected tenant as the plan needs it. */
export interface Candidate {
  id: string;
  organization: string;
  /** The spec's version. */
  version: string;
  /** The version it runs (null: never provisioned). */
  actualVersion: string | null;
  phase: string;
  suspended: boolean;
  stalled: boolean;
  cluster: string | null;
  /** A fleet upgrade not finished that already holds the tenant. */
  inFleetUpgrade: string | null;
  /** Its maintenance windows (none or empty: any time). */
  windows?: MaintenanceWindow[] | undefined;
}

export interface GateCheck {
  name: 'operation' | 'observedGeneration' | 'version' | 'ready' | 'tunnel' | 'applications';
  ok: boolean;
  detail: string;
  /** It did not pass and counts as passed: an operator skipped it for this step (GateSkip). */
  skipped?: boolean;
}

/**
 * An operator's skip of health-gate checks for one step of a tenant (fleet_upgrade_tenants.gate_skips,
 * migration 029): it holds for the step whose spec change made `generation` only.
 */
export interface GateSkip {
  generation: number;
  step: 'upgrade' | 'rollback' | 'revert';
  from: string;
  to: string;
  checks: SkippableGateCheck[];
  reason: string;
  /** The actor: the API key's id. */
  by: string;
  at: string;
}

/** What the tenant looked like just before the step (fleet_upgrade_tenants.snapshot). */
export interface Snapshot {
  /** Healthy and Synced Applications, when an event reporter reported within the stale window; null: not reporting. */
  applications: { good: number; total: number } | null;
  tunnelConnected: boolean;
}

/** One wave of a fleet plan (fleet/plan.ts makes them). */
export interface PlannedWave {
  wave: number;
  size: number;
  maxConcurrency: number;
  maxUnavailable: number;
  soakSeconds: number;
  maxFailures: number | null;
  maxFailurePercent: number | null;
}

/** What insertFleetUpgrade writes: a plan's waves, its planned tenants and the excluded ones (fleet/plan.ts). */
export interface NewFleetPlan {
  targetVersion: string;
  waves: ReadonlyArray<PlannedWave>;
  tenants: ReadonlyArray<{ tenantId: string; wave: number; position: number; fromVersion: string; path: string[] }>;
  excluded: ReadonlyArray<{
    tenantId: string;
    version: string;
    reason: string;
    wave?: number | undefined;
    path?: string[] | undefined;
  }>;
}

/** States in which the fleet upgrade holds its tenants (an individual upgrade of one is refused). */
export const ACTIVE_FLEET_STATES: readonly FleetState[] = ['running', 'paused', 'halted', 'aborting'];

/** A step of the driver is under way for the tenant (its spec was changed; the gate decides). */
export const IN_FLIGHT: readonly FleetTenantState[] = ['upgrading', 'rolling_back', 'reverting'];

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
  /** Every skip of gate checks made for this tenant in this fleet upgrade, oldest first. */
  gate_skips: GateSkip[];
}

/** The live tenants a selector takes, oldest first (the canary is the oldest upgradeable one). */
export async function selectCandidates(
  db: Queryable,
  s: Selector,
): Promise<{ candidates: Candidate[]; unknownIds: string[] }> {
  // Unclaimed warm pool entries are not upgraded: the pool recycles those of another version.
  const where = ['NOT t.deleted', 't.pool_state IS NULL'];
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
  f: { id: string; selector: Selector; options: unknown; createdBy: string; plan: NewFleetPlan },
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

// ---- The driver's statements (fleet/driver.ts): leases, its rounds' reads and decisions ----

/** Hands back every lease the owner holds: another replica takes over at once, not after the TTL. */
export async function releaseFleetLeases(db: Queryable, owner: string): Promise<void> {
  await db.query(`UPDATE fleet_upgrades SET lease_owner = NULL, lease_expires_at = NULL WHERE lease_owner = $1`, [
    owner,
  ]);
}

/** Takes (or renews) the leases of the active fleet upgrades no live lease of another owner holds; answers their ids, oldest first. */
export async function leaseActiveFleetUpgrades(db: Queryable, owner: string, ttlMs: number): Promise<string[]> {
  const { rows } = await db.query<{ id: string }>(
    `UPDATE fleet_upgrades SET lease_owner = $1, lease_expires_at = now() + $2 * interval '1 millisecond'
      WHERE id IN (SELECT id FROM fleet_upgrades
                    WHERE state = ANY($3::text[])
                      AND (lease_owner IS NULL OR lease_owner = $1 OR lease_expires_at < now())
                    ORDER BY created_at FOR UPDATE SKIP LOCKED)
      RETURNING id`,
    [owner, ttlMs, ACTIVE_FLEET_STATES],
  );
  return rows.map((r) => r.id);
}

/** The fleet upgrade's row, locked, while the owner's lease on it is live; undefined when not held. */
export async function lockLeasedFleetUpgrade(db: Queryable, id: string, owner: string): Promise<FleetRow | undefined> {
  const { rows } = await db.query<FleetRow>(
    `SELECT * FROM fleet_upgrades WHERE id = $1 AND lease_owner = $2 AND lease_expires_at > now() FOR UPDATE`,
    [id, owner],
  );
  return rows[0];
}

export async function renewFleetLease(db: Queryable, id: string, ttlMs: number): Promise<void> {
  await db.query(`UPDATE fleet_upgrades SET lease_expires_at = now() + $2 * interval '1 millisecond' WHERE id = $1`, [
    id,
    ttlMs,
  ]);
}

/** Wakes the fleet drivers and the progress streams of the fleet upgrade (at the caller's commit). */
export async function notifyFleetUpgrade(db: Queryable, id: string): Promise<void> {
  await db.query('SELECT pg_notify($1, $2)', [FLEET_CHANNEL, id]);
}

/** Columns of a fleet upgrade's tenant row the driver sets. */
export type FleetTenantFields = Partial<{
  state: FleetTenantState;
  active: boolean;
  wave: number;
  path: string[];
  hop: number;
  from_version: string;
  generation: number | string;
  operation_id: string;
  step_from: string;
  step_to: string;
  step_started_at: Date;
  snapshot: string | null;
  gate: string | null;
  rolled_back: boolean;
  reason: string | null;
  started_at: Date;
  finished_at: Date | null;
  deferred_until: Date | null;
}>;

/** Sets the given columns of one tenant's row of the fleet upgrade (column names come from FleetTenantFields, never from a caller). */
export async function updateFleetTenant(
  db: Queryable,
  fleetUpgradeId: string,
  tenantId: string,
  fields: FleetTenantFields,
): Promise<void> {
  const keys = Object.keys(fields) as Array<keyof FleetTenantFields>;
  await db.query(
    `UPDATE fleet_upgrade_tenants SET ${keys.map((k, i) => `${k} = $${i + 3}`).join(', ')}
      WHERE fleet_upgrade_id = $1 AND tenant_id = $2`,
    [fleetUpgradeId, tenantId, ...keys.map((k) => fields[k])],
  );
}

/** What the gate compares with: the tenant's live tunnel and its Healthy/Synced Applications now. */
export async function readTenantSnapshot(
  db: Queryable,
  tenantId: string,
  staleAfterSeconds: number,
): Promise<Snapshot> {
  const { rows } = await db.query<{ reporting: boolean; good: number; total: number; tunnel: boolean }>(
    `WITH hosted AS (SELECT h.id FROM runtimes h WHERE h.tenant_id = $1 AND h.mode = 'hosted')
     SELECT EXISTS (SELECT 1 FROM runtime_reporters r WHERE r.tenant_id = $1 AND r.runtime_id = (SELECT id FROM hosted)
                      AND r.last_seen > now() - $2 * interval '1 second') AS reporting,
            (SELECT count(*)::int FROM runtime_objects ro WHERE ro.tenant_id = $1
               AND ro.runtime_id = (SELECT id FROM hosted) AND ro.kind = 'Application'
               AND NOT ro.deleted AND ro.health = 'Healthy' AND ro.sync = 'Synced') AS good,
            (SELECT count(*)::int FROM runtime_objects ro WHERE ro.tenant_id = $1
               AND ro.runtime_id = (SELECT id FROM hosted) AND ro.kind = 'Application'
               AND NOT ro.deleted) AS total,
            EXISTS (SELECT 1 FROM runtime_tunnels rt WHERE rt.tenant_id = $1 AND ${liveTunnel('rt')}) AS tunnel`,
    [tenantId, staleAfterSeconds],
  );
  const r = rows[0]!;
  return { applications: r.reporting ? { good: r.good, total: r.total } : null, tunnelConnected: r.tunnel };
}

/** A step under way with what the gate judges it by: the tenant, its operation, tunnel, reporter and Applications. */
export interface InFlightRow {
  tenant_id: string;
  wave: number | null;
  state: FleetTenantState;
  path: string[];
  hop: number;
  from_version: string;
  generation: string;
  operation_id: string | null;
  step_from: string;
  step_to: string;
  step_started_at: Date;
  snapshot: Snapshot | null;
  gate: { checks: GateCheck[] } | null;
  gate_skips: GateSkip[];
  reason: string | null;
  observed_generation: string;
  actual_runtime_version: string | null;
  phase: string;
  stalled: boolean;
  deleted: boolean;
  ready: boolean;
  op_state: string | null;
  op_error: { code: string; message: string } | null;
  op_created_at: Date | null;
  op_finished_at: Date | null;
  tunnel_connected_at: Date | null;
  reporter_last_seen: Date | null;
  apps_good: number;
}

/** Every step of the fleet upgrade under way (upgrading, rolling back, reverting), in plan order. */
export async function inFlightSteps(db: Queryable, fleetUpgradeId: string): Promise<InFlightRow[]> {
  const { rows } = await db.query<InFlightRow>(
    `SELECT ft.tenant_id, ft.wave, ft.state, ft.path, ft.hop, ft.from_version, ft.generation, ft.operation_id,
            ft.step_from, ft.step_to, ft.step_started_at, ft.snapshot, ft.gate, ft.gate_skips, ft.reason,
            t.observed_generation, t.actual_runtime_version, t.phase, t.stalled, t.deleted,
            t.conditions @> '[{"type": "Ready", "status": "True"}]' AS ready,
            o.state AS op_state, o.error AS op_error, o.created_at AS op_created_at, o.finished_at AS op_finished_at,
            rt.connected_at AS tunnel_connected_at,
            (SELECT max(r.last_seen) FROM runtime_reporters r
              WHERE r.tenant_id = t.id AND r.runtime_id = hr.id) AS reporter_last_seen,
            (SELECT count(*)::int FROM runtime_objects ro
              WHERE ro.tenant_id = t.id AND ro.runtime_id = hr.id AND ro.kind = 'Application' AND NOT ro.deleted
                AND ro.health = 'Healthy' AND ro.sync = 'Synced') AS apps_good
       FROM fleet_upgrade_tenants ft
       JOIN tenants t ON t.id = ft.tenant_id
       LEFT JOIN runtimes hr ON hr.tenant_id = t.id AND hr.mode = 'hosted'
       LEFT JOIN operations o ON o.id = ft.operation_id
       LEFT JOIN runtime_tunnels rt ON rt.tenant_id = t.id AND ${liveTunnel('rt')}
      WHERE ft.fleet_upgrade_id = $1 AND ft.state IN ('upgrading', 'rolling_back', 'reverting')
      ORDER BY ft.position`,
    [fleetUpgradeId],
  );
  return rows;
}

/** Counts of a wave's tenants: steps under way, pending, quarantined, and not healthy (pending, succeeded or quarantined and not Ready). */
export async function waveCounts(
  db: Queryable,
  fleetUpgradeId: string,
  wave: number,
): Promise<{ inFlight: number; pending: number; failed: number; unhealthy: number }> {
  const { rows } = await db.query<{ in_flight: number; pending: number; failed: number; unhealthy: number }>(
    `SELECT count(*) FILTER (WHERE ft.state IN ('upgrading', 'rolling_back', 'reverting'))::int AS in_flight,
            count(*) FILTER (WHERE ft.state = 'pending')::int AS pending,
            count(*) FILTER (WHERE ft.state = 'quarantined')::int AS failed,
            count(*) FILTER (WHERE ft.state IN ('pending', 'succeeded', 'quarantined') AND NOT t.deleted
                             AND NOT (t.phase = 'Ready' AND t.conditions @> '[{"type": "Ready", "status": "True"}]'))::int AS unhealthy
       FROM fleet_upgrade_tenants ft JOIN tenants t ON t.id = ft.tenant_id
      WHERE ft.fleet_upgrade_id = $1 AND ft.wave = $2`,
    [fleetUpgradeId, wave],
  );
  const r = rows[0]!;
  return { inFlight: r.in_flight, pending: r.pending, failed: r.failed, unhealthy: r.unhealthy };
}

/** Steps whose engine run is pending or running, per root cluster ('' for none), across every fleet upgrade. */
export async function stepsPerCluster(db: Queryable): Promise<Map<string, number>> {
  const { rows } = await db.query<{ cluster_id: string | null; n: number }>(
    `SELECT t.cluster_id, count(*)::int AS n
       FROM fleet_upgrade_tenants ft JOIN tenants t ON t.id = ft.tenant_id
      WHERE ft.state IN ('upgrading', 'rolling_back', 'reverting') AND t.generation <> t.observed_generation
      GROUP BY t.cluster_id`,
  );
  return new Map(rows.map((r) => [r.cluster_id ?? '', r.n]));
}

export async function startWave(db: Queryable, fleetUpgradeId: string, wave: number, at: Date): Promise<void> {
  await db.query(
    `UPDATE fleet_upgrade_waves SET state = 'running', started_at = $3 WHERE fleet_upgrade_id = $1 AND wave = $2`,
    [fleetUpgradeId, wave, at],
  );
}

/** A soaking wave runs again (tenants were taken back into it). */
export async function reopenWave(db: Queryable, fleetUpgradeId: string, wave: number): Promise<void> {
  await db.query(
    `UPDATE fleet_upgrade_waves SET state = 'running', settled_at = NULL WHERE fleet_upgrade_id = $1 AND wave = $2`,
    [fleetUpgradeId, wave],
  );
}

export async function soakWave(db: Queryable, fleetUpgradeId: string, wave: number, at: Date): Promise<void> {
  await db.query(
    `UPDATE fleet_upgrade_waves SET state = 'soaking', settled_at = $3 WHERE fleet_upgrade_id = $1 AND wave = $2`,
    [fleetUpgradeId, wave, at],
  );
}

export async function completeWave(db: Queryable, fleetUpgradeId: string, wave: number, at: Date): Promise<void> {
  await db.query(
    `UPDATE fleet_upgrade_waves SET state = 'completed', completed_at = $3 WHERE fleet_upgrade_id = $1 AND wave = $2`,
    [fleetUpgradeId, wave, at],
  );
}

/** Tenants taken back into a wave the plan had excluded: the wave grows by them. */
export async function growWave(db: Queryable, fleetUpgradeId: string, wave: number, added: number): Promise<void> {
  await db.query(`UPDATE fleet_upgrade_waves SET size = size + $3 WHERE fleet_upgrade_id = $1 AND wave = $2`, [
    fleetUpgradeId,
    wave,
    added,
  ]);
}

export async function setCurrentWave(db: Queryable, id: string, wave: number): Promise<void> {
  await db.query(`UPDATE fleet_upgrades SET current_wave = $2, updated_at = now() WHERE id = $1`, [id, wave]);
}

export async function haltFleetUpgrade(db: Queryable, id: string, reason: string): Promise<void> {
  await db.query(`UPDATE fleet_upgrades SET state = 'halted', state_reason = $2, updated_at = now() WHERE id = $1`, [
    id,
    reason,
  ]);
}

/** Completes the fleet upgrade, lets go of its tenants, and answers its tenants' counts by state. */
export async function completeFleetUpgrade(db: Queryable, id: string): Promise<Record<string, number>> {
  await db.query(
    `UPDATE fleet_upgrades SET state = 'completed', finished_at = now(), updated_at = now() WHERE id = $1`,
    [id],
  );
  await db.query('UPDATE fleet_upgrade_tenants SET active = false WHERE fleet_upgrade_id = $1 AND active', [id]);
  const { rows } = await db.query<{ state: string; n: number }>(
    `SELECT state, count(*)::int AS n FROM fleet_upgrade_tenants WHERE fleet_upgrade_id = $1 GROUP BY state`,
    [id],
  );
  return Object.fromEntries(rows.map((r) => [r.state, r.n]));
}

/** A pending tenant of a wave with what its start needs. */
export interface PendingTenantRow {
  tenant_id: string;
  position: number;
  path: string[];
  from_version: string;
  cluster_id: string | null;
  deferred_until: Date | null;
  windows: MaintenanceWindow[];
}

/** A page of the wave's pending tenants after plan position `afterPosition`, in plan order. */
export async function pendingTenantsPage(
  db: Queryable,
  fleetUpgradeId: string,
  wave: number,
  afterPosition: number,
  limit: number,
): Promise<PendingTenantRow[]> {
  const { rows } = await db.query<PendingTenantRow>(
    `SELECT ft.tenant_id, ft.position, ft.path, ft.from_version, t.cluster_id, ft.deferred_until,
            t.maintenance_windows AS windows
       FROM fleet_upgrade_tenants ft JOIN tenants t ON t.id = ft.tenant_id
      WHERE ft.fleet_upgrade_id = $1 AND ft.wave = $2 AND ft.state = 'pending' AND ft.position > $4
      ORDER BY ft.position LIMIT $3`,
    [fleetUpgradeId, wave, limit, afterPosition],
  );
  return rows;
}

/** A tenant left out of a wave for its windows only, that may be taken back. */
export interface LeftOutTenantRow {
  tenant_id: string;
  state: 'excluded' | 'skipped';
  from_version: string;
  path: string[];
  windows: MaintenanceWindow[];
}

/**
 * The wave's tenants excluded or skipped for the reason starting with `reasonPrefix` before any
 * step, still live and held by no fleet upgrade now, in plan order.
 */
export async function leftOutTenants(
  db: Queryable,
  fleetUpgradeId: string,
  wave: number,
  reasonPrefix: string,
): Promise<LeftOutTenantRow[]> {
  const { rows } = await db.query<LeftOutTenantRow>(
    `SELECT ft.tenant_id, ft.state, ft.from_version, ft.path, t.maintenance_windows AS windows
       FROM fleet_upgrade_tenants ft JOIN tenants t ON t.id = ft.tenant_id
      WHERE ft.fleet_upgrade_id = $1 AND ft.wave = $2 AND ft.state IN ('excluded', 'skipped')
        AND ft.started_at IS NULL AND starts_with(ft.reason, $3) AND NOT t.deleted
        AND NOT EXISTS (SELECT 1 FROM fleet_upgrade_tenants o WHERE o.tenant_id = ft.tenant_id AND o.active)
      ORDER BY ft.position`,
    [fleetUpgradeId, wave, reasonPrefix],
  );
  return rows;
}

/**
 * Makes the tenants pending (and held) again. Another fleet upgrade may have taken one of them
 * meanwhile: then nothing changes (the savepoint keeps the caller's transaction usable) and the
 * answer is false.
 */
export async function requeueTenants(db: Queryable, fleetUpgradeId: string, tenantIds: string[]): Promise<boolean> {
  await db.query('SAVEPOINT requeue');
  try {
    await db.query(
      `UPDATE fleet_upgrade_tenants SET state = 'pending', active = true, reason = NULL, finished_at = NULL, deferred_until = NULL
        WHERE fleet_upgrade_id = $1 AND tenant_id = ANY($2::uuid[])`,
      [fleetUpgradeId, tenantIds],
    );
  } catch (err) {
    if (pgCode(err) !== '23505') throw err;
    await db.query('ROLLBACK TO SAVEPOINT requeue');
    return false;
  }
  await db.query('RELEASE SAVEPOINT requeue');
  return true;
}

/** Upgrades or automatic rollbacks of the fleet upgrade under way (not reverts). */
export async function countForwardSteps(db: Queryable, fleetUpgradeId: string): Promise<number> {
  const { rows } = await db.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM fleet_upgrade_tenants WHERE fleet_upgrade_id = $1 AND state IN ('upgrading', 'rolling_back')`,
    [fleetUpgradeId],
  );
  return rows[0]!.n;
}

/** A tenant to roll back after an abort (or being rolled back). */
export interface RevertRow {
  tenant_id: string;
  state: string;
  path: string[];
  hop: number;
  from_version: string;
  wave: number;
}

/** The tenants of the highest wave with tenants still to roll back (or being rolled back), last planned first. */
export async function tenantsToRevert(db: Queryable, fleetUpgradeId: string): Promise<RevertRow[]> {
  const { rows } = await db.query<RevertRow>(
    `SELECT tenant_id, state, path, hop, from_version, wave FROM fleet_upgrade_tenants
      WHERE fleet_upgrade_id = $1 AND state IN ('succeeded', 'interrupted', 'reverting')
        AND wave = (SELECT max(wave) FROM fleet_upgrade_tenants WHERE fleet_upgrade_id = $1
                     AND state IN ('succeeded', 'interrupted', 'reverting'))
      ORDER BY position DESC`,
    [fleetUpgradeId],
  );
  return rows;
}

// ---- The operator's changes (fleet/service.ts) ----

/** Records the override of the windows on the fleet upgrade; tenants waiting for a window wait no longer. */
export async function setWindowsOverride(db: Queryable, id: string, override: WindowsOverride): Promise<void> {
  await db.query('UPDATE fleet_upgrades SET windows_override = $2, updated_at = now() WHERE id = $1', [
    id,
    JSON.stringify(override),
  ]);
  await db.query(
    `UPDATE fleet_upgrade_tenants SET deferred_until = NULL, reason = NULL
      WHERE fleet_upgrade_id = $1 AND state = 'pending' AND deferred_until IS NOT NULL`,
    [id],
  );
}

/** One tenant's row of the fleet upgrade, with its organization; undefined: not part of it. */
export async function fleetTenantRow(
  db: Queryable,
  fleetUpgradeId: string,
  tenantId: string,
): Promise<FleetTenantRow | undefined> {
  const { rows } = await db.query<FleetTenantRow>(
    `SELECT ft.*, t.organization FROM fleet_upgrade_tenants ft JOIN tenants t ON t.id = ft.tenant_id
      WHERE ft.fleet_upgrade_id = $1 AND ft.tenant_id = $2`,
    [fleetUpgradeId, tenantId],
  );
  return rows[0];
}

/** Records an operator's skip of gate checks on the tenant's row (the driver's next judgment reads it). */
export async function addGateSkip(
  db: Queryable,
  fleetUpgradeId: string,
  tenantId: string,
  skip: GateSkip,
): Promise<void> {
  await db.query(
    `UPDATE fleet_upgrade_tenants SET gate_skips = gate_skips || jsonb_build_array($3::jsonb)
      WHERE fleet_upgrade_id = $1 AND tenant_id = $2`,
    [fleetUpgradeId, tenantId, JSON.stringify(skip)],
  );
}

export async function pauseFleetUpgrade(db: Queryable, id: string, reason: string | null): Promise<void> {
  await db.query(`UPDATE fleet_upgrades SET state = 'paused', state_reason = $2, updated_at = now() WHERE id = $1`, [
    id,
    reason,
  ]);
}

/** Runs the fleet upgrade again; `forgiveWave`: that wave's quarantined tenants no longer count against its failure budget. */
export async function resumeFleetUpgrade(db: Queryable, id: string, forgiveWave: number | null): Promise<void> {
  if (forgiveWave !== null)
    await db.query(
      `UPDATE fleet_upgrade_waves w SET forgiven = (SELECT count(*) FROM fleet_upgrade_tenants ft
          WHERE ft.fleet_upgrade_id = w.fleet_upgrade_id AND ft.wave = w.wave AND ft.state = 'quarantined')
        WHERE w.fleet_upgrade_id = $1 AND w.wave = $2`,
      [id, forgiveWave],
    );
  await db.query(`UPDATE fleet_upgrades SET state = 'running', state_reason = NULL, updated_at = now() WHERE id = $1`, [
    id,
  ]);
}

/** Starts the abort: tenants not started are cancelled; the fleet upgrade is aborting. */
export async function startAbort(db: Queryable, id: string, rollback: boolean, reason: string | null): Promise<void> {
  await db.query(
    `UPDATE fleet_upgrade_tenants SET state = 'cancelled', active = false, reason = 'the fleet upgrade was aborted before this tenant started', finished_at = now()
      WHERE fleet_upgrade_id = $1 AND state = 'pending'`,
    [id],
  );
  await db.query(
    `UPDATE fleet_upgrades SET state = 'aborting', abort_rollback = $2, state_reason = $3, updated_at = now() WHERE id = $1`,
    [id, rollback, reason],
  );
}

/** Ends an aborting fleet upgrade with no step under way and nothing (more) to roll back. Returns whether it did. */
export async function finishAbortIfIdle(db: Queryable, id: string, rollback: boolean): Promise<boolean> {
  const { rows } = await db.query<{ busy: boolean }>(
    `SELECT EXISTS (SELECT 1 FROM fleet_upgrade_tenants WHERE fleet_upgrade_id = $1
                     AND (state IN ('upgrading', 'rolling_back', 'reverting')
                          OR ($2 AND state IN ('succeeded', 'interrupted')))) AS busy`,
    [id, rollback],
  );
  if (rows[0]!.busy) return false;
  await db.query(`UPDATE fleet_upgrades SET state = 'aborted', finished_at = now(), updated_at = now() WHERE id = $1`, [
    id,
  ]);
  await db.query('UPDATE fleet_upgrade_tenants SET active = false WHERE fleet_upgrade_id = $1 AND active', [id]);
  return true;
}

/**
 * The fleet upgrades a tenant is part of, newest first: the one that holds it (pending or under
 * way), and any other still running, paused, halted or aborting in which it finished (a
 * quarantined tenant of a halted fleet upgrade), each with the tenant's own row.
 */
export async function fleetUpgradesOfTenant(
  db: Queryable,
  tenantId: string,
  limit: number,
): Promise<Array<{ fleet: FleetRow; tenant: FleetTenantRow }>> {
  const { rows } = await db.query<FleetTenantRow & { fleet_upgrade_id: string }>(
    `SELECT ft.*, t.organization
       FROM fleet_upgrade_tenants ft
       JOIN fleet_upgrades f ON f.id = ft.fleet_upgrade_id
       JOIN tenants t ON t.id = ft.tenant_id
      WHERE ft.tenant_id = $1
        AND (ft.active OR ft.fleet_upgrade_id IN (SELECT id FROM fleet_upgrades WHERE state = ANY($2::text[])))
      ORDER BY f.created_at DESC, f.id DESC
      LIMIT $3`,
    [tenantId, ACTIVE_FLEET_STATES, limit],
  );
  const out: Array<{ fleet: FleetRow; tenant: FleetTenantRow }> = [];
  for (const tenant of rows) {
    const fleet = await getFleetRow(db, tenant.fleet_upgrade_id);
    if (fleet) out.push({ fleet, tenant });
  }
  return out;
}
