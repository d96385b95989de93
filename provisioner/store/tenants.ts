/**
 * Tenant rows: the desired spec (with its generation) and the observed status. Spec changes go
 * through changeSpec(), which bumps the generation, queues an operation and NOTIFYs workers in
 * the caller's transaction.
 */
import type { Queryable } from '../db/tx.ts';
import { liveTunnel } from './tunnels.ts';
import { reportingOf, type ReporterRow, type ReportingStatus } from './reporting.ts';

import { PHASES, type Condition, type OperationKind, type Phase, type TenantSort } from './states.ts';
import {
  TENANT_SETTINGS,
  type MaintenanceWindow,
  type TenantSettingColumns,
  type TenantSettings,
  type TenantSpec,
} from './tenant-shapes.ts';

/**
 * A tenant's spec, its settings, and a recurring maintenance window (when it opens, in the local
 * time of `timeZone`, and for how long): the types of the API's schemas (tenant-shapes.ts), one
 * definition.
 */
export type { MaintenanceWindow, TenantSettings, TenantSpec };

/** The channel workers LISTEN on; the payload is the tenant id. */
export const TENANT_CHANNEL = 'tenant_due';

/**
 * Makes the tenants waiting for something outside themselves (`reason`: NoCapacity or
 * EngineUnavailable) due at once, and wakes the reconcilers: called by the event that may free
 * them (a cluster registered or uncordoned; the engine found). Their backoff is otherwise long.
 */
export async function wakeWaiters(db: Queryable, reason: 'NoCapacity' | 'EngineUnavailable'): Promise<number> {
  const { rowCount } = await db.query(
    `UPDATE tenants SET next_attempt_at = now()
      WHERE next_attempt_at > now() AND NOT stalled AND phase <> 'Deleted'
        AND conditions @> jsonb_build_array(jsonb_build_object('type', 'Ready', 'reason', $1::text))`,
    [reason],
  );
  if (rowCount) await db.query('SELECT pg_notify($1, $2)', [TENANT_CHANNEL, '']);
  return rowCount ?? 0;
}

/** A tenant as the API answers it; its settings (maintenance windows, time zone) from tenant-shapes.ts. */
export interface Tenant extends TenantSettings {
  id: string;
  organization: string;
  email: string;
  generation: number;
  spec: TenantSpec;
  status: {
    phase: Phase;
    observedGeneration: number;
    runtimeVersion: string | null;
    previousRuntimeVersion: string | null;
    cluster: string | null;
    endpoints: Record<string, string>;
    conditions: Condition[];
    lastOperationId: string | null;
    /** While suspended: who suspended it (an operator's suspension only an operator lifts) and why. */
    suspension?: { by: 'operator' | 'tenant'; reason: string | null };
    /**
     * Idle sleep (provisioner/sleep/): whether the control plane put the runtime to sleep, since
     * when, and the last activity that counts (a request with the tenant's own key or one that
     * reached its runtime). Absent from rows read without it.
     */
    sleep?: { asleep: boolean; since: string | null; wokeAt: string | null; lastActivityAt: string };
    /** Once the runtime's event reporter has reported (store/reporting.ts). */
    reporting?: ReportingStatus;
    /** The tenant's managed clusters and whether each is reachable (their Reachable condition). */
    managedClusters?: ManagedClusterSummary[];
  };
  createdAt: string;
  updatedAt: string;
  deletedAt: string | null;
}

export interface ManagedClusterSummary {
  name: string;
  server: string;
  reachable: Condition['status'];
}

/** A row of `tenants` as read; its settings' columns (migrations 015, 037) from tenant-shapes.ts. */
export interface TenantRow extends TenantSettingColumns {
  id: string;
  organization: string;
  email: string;
  plan: string;
  region: string | null;
  runtime_version: string;
  suspended: boolean;
  /** Who suspended it (migration 005); null when not suspended. */
  suspended_by: 'operator' | 'tenant' | null;
  suspension_reason: string | null;
  /** Put to sleep by the control plane (migration 034): applied as a suspension; cleared by activity or a spec change. */
  sleeping: boolean;
  asleep_since: Date | null;
  /** When it was last woken (migration 034); absent from writes' RETURNING that do not name it. */
  woke_at?: Date | null;
  /** Absent from writes' RETURNING that do not name it. */
  last_activity_at?: Date;
  deleted: boolean;
  generation: number;
  phase: Phase;
  observed_generation: number;
  actual_runtime_version: string | null;
  previous_runtime_version: string | null;
  cluster_id: string | null;
  cluster_name: string | null;
  endpoints: Record<string, string>;
  conditions: Condition[];
  last_operation_id: string | null;
  created_at: Date;
  updated_at: Date;
  deleted_at: Date | null;
  cursor_ts: string;
  /** The last reconcile that ended well (the status was observed then); absent from writes' RETURNING. */
  last_reconciled_at?: Date | null;
  /** The tenant's latest change in the fleet's change stream (migration 012); read by readTenantChanges only. */
  change_seq?: string;
  /** Replica holding the runtime's tunnel, when a live row says so (runtime_tunnels); absent from writes' RETURNING. */
  tunnel_replica?: string | null;
  tunnel_since?: Date | null;
  /** The event reporter's replicas (runtime_reporters), null when none ever reported; absent from writes' RETURNING. */
  reporters?: ReporterRow[] | null;
  /** The tenant's managed clusters (name, server, conditions), null when none; absent from writes' RETURNING. */
  managed_clusters?: Array<{ name: string; server: string; conditions: Condition[] }> | null;
}

/** The settings' columns (tenant-shapes.ts TENANT_SETTINGS), in one order. */
const SETTING_KEYS = Object.keys(TENANT_SETTINGS) as Array<keyof TenantSettings>;
export const SETTING_COLUMNS = SETTING_KEYS.map((k) => TENANT_SETTINGS[k].column);

/** A setting's value as a query parameter: lists and objects as JSON (jsonb columns), the rest as they are. */
const settingParam = (v: unknown): unknown => (v !== null && typeof v === 'object' ? JSON.stringify(v) : v);

/** The tenant's settings from its row (a column the row was read without: its default). */
export function settingsOf(r: TenantSettingColumns): TenantSettings {
  const row = r as Record<string, unknown>;
  return Object.fromEntries(
    SETTING_KEYS.map((k) => [k, row[TENANT_SETTINGS[k].column] ?? TENANT_SETTINGS[k].unset]),
  ) as TenantSettings;
}

/**
 * The columns of a TenantRow, named (not `t.*`): the reconciler's bookkeeping columns (lease,
 * backoff) are not read, so the hot read parses and transfers only what toTenant() needs.
 */
export const TENANT_COLUMNS = `t.id, t.organization, t.email, t.plan, t.region, t.runtime_version, t.suspended, t.suspended_by, t.suspension_reason, t.sleeping, t.asleep_since, t.woke_at, t.last_activity_at, t.deleted, t.generation,
  t.phase, t.observed_generation, t.actual_runtime_version, t.previous_runtime_version, t.cluster_id, c.name AS cluster_name,
  t.endpoints, t.conditions, t.last_operation_id, t.created_at, t.updated_at, t.deleted_at, t.created_at::text AS cursor_ts,
  t.last_reconciled_at, ${SETTING_COLUMNS.map((c) => `t.${c}`).join(', ')},
  rt.replica_id AS tunnel_replica, rt.connected_at AS tunnel_since,
  (SELECT json_agg(json_build_object('replica', r.replica, 'lastSeen', r.last_seen, 'since', r.since,
          'ageSeconds', extract(epoch FROM now() - r.last_seen)::float8, 'owned', r.owned_objects))
     FROM runtime_reporters r WHERE r.tenant_id = t.id
      AND r.runtime_id = (SELECT h.id FROM runtimes h WHERE h.tenant_id = t.id AND h.mode = 'hosted')) AS reporters,
  managed_cluster_summary(t.id) AS managed_clusters`;
/** With the runtime's tunnel row while its replica renews it (store/tunnels.ts). */
export const TENANT_FROM = `tenants t LEFT JOIN root_clusters c ON c.id = t.cluster_id
  LEFT JOIN runtime_tunnels rt ON rt.tenant_id = t.id AND ${liveTunnel('rt')}`;

/**
 * What the tenant's managed clusters say in its status: each with its reachability, and while
 * none is reachable (or none is registered) an ActionRequired condition saying how to connect one:
 * a hosted runtime deploys nothing without one. Undefined for rows read without them.
 */
export function managedClusterStatus(
  r: Pick<TenantRow, 'id' | 'deleted' | 'created_at' | 'managed_clusters'>,
): { summary: ManagedClusterSummary[]; actionRequired?: Condition } | undefined {
  if (r.managed_clusters === undefined || r.deleted) return undefined;
  const clusters = r.managed_clusters ?? [];
  const summary = clusters.map((m) => ({
    name: m.name,
    server: m.server,
    reachable: m.conditions.find((c) => c.type === 'Reachable')?.status ?? 'Unknown',
  }));
  if (summary.some((m) => m.reachable === 'True')) return { summary };
  const how = `register one with POST /v1/tenants/${r.id}/managed-clusters or \`provisioner managed-clusters add ${r.id} NAME --kubeconfig FILE --namespace NS\` (a kubeconfig, or a server with a token, and the namespaces Argo CD may deploy to; docs/api.md "Managed clusters")`;
  if (clusters.length === 0)
    return {
      summary,
      actionRequired: condition(
        'ActionRequired',
        'True',
        'NoManagedCluster',
        `no cluster is connected, so Argo CD has nowhere to deploy: ${how}`,
        r.created_at,
      ),
    };
  const since = clusters
    .map((m) => m.conditions.find((c) => c.type === 'Reachable')?.lastTransitionTime ?? '')
    .sort()
    .at(-1);
  return {
    summary,
    actionRequired: condition(
      'ActionRequired',
      'True',
      'NoReachableManagedCluster',
      `none of the connected clusters (${summary.map((m) => m.name).join(', ')}) is reachable: check the servers and credentials (GET /v1/tenants/${r.id}/managed-clusters gives each one's Reachable condition), or ${how}`,
      since ? new Date(since) : r.created_at,
    ),
  };
}

export function toTenant(r: TenantRow): Tenant {
  // A deleted tenant's runtime is gone: its reporters' silence is not news.
  const reporting = r.deleted ? undefined : reportingOf(r.reporters);
  const managed = managedClusterStatus(r);
  const computed = [
    ...(reporting ? [reporting.condition] : []),
    ...(managed?.actionRequired ? [managed.actionRequired] : []),
  ];
  return {
    id: r.id,
    organization: r.organization,
    email: r.email,
    generation: r.generation,
    spec: {
      plan: r.plan,
      region: r.region,
      runtimeVersion: r.runtime_version,
      suspended: r.suspended,
      deleted: r.deleted,
    },
    status: {
      phase: r.phase,
      observedGeneration: r.observed_generation,
      runtimeVersion: r.actual_runtime_version,
      previousRuntimeVersion: r.previous_runtime_version,
      cluster: r.cluster_name,
      endpoints: r.endpoints,
      conditions: computed.length ? [...r.conditions, ...computed] : r.conditions,
      lastOperationId: r.last_operation_id,
      ...(r.suspended && r.suspended_by ? { suspension: { by: r.suspended_by, reason: r.suspension_reason } } : {}),
      ...(r.last_activity_at
        ? {
            sleep: {
              asleep: r.sleeping,
              since: r.asleep_since ? r.asleep_since.toISOString() : null,
              wokeAt: r.woke_at ? r.woke_at.toISOString() : null,
              lastActivityAt: r.last_activity_at.toISOString(),
            },
          }
        : {}),
      ...(reporting ? { reporting: reporting.status } : {}),
      ...(managed ? { managedClusters: managed.summary } : {}),
    },
    ...settingsOf(r),
    createdAt: r.created_at.toISOString(),
    updatedAt: r.updated_at.toISOString(),
    deletedAt: r.deleted_at ? r.deleted_at.toISOString() : null,
  };
}

export async function getTenantRow(db: Queryable, id: string, forUpdate = false): Promise<TenantRow | undefined> {
  // Named: the hottest read of the API is parsed and planned once per connection.
  const { rows } = await db.query<TenantRow>({
    name: forUpdate ? 'tenant-by-id-for-update' : 'tenant-by-id',
    text: `SELECT ${TENANT_COLUMNS} FROM ${TENANT_FROM} WHERE t.id = $1${forUpdate ? ' FOR UPDATE OF t' : ''}`,
    values: [id],
  });
  return rows[0];
}

/** Several tenant rows by id (lower-case UUIDs) in one statement, by id; unknown ids are absent. */
export async function getTenantRows(db: Queryable, ids: readonly string[]): Promise<Map<string, TenantRow>> {
  const { rows } = await db.query<TenantRow>({
    name: 'tenants-by-ids',
    text: `SELECT ${TENANT_COLUMNS} FROM ${TENANT_FROM} WHERE t.id = ANY($1::uuid[])`,
    values: [ids],
  });
  return new Map(rows.map((r) => [r.id, r]));
}

export function condition(
  type: string,
  status: Condition['status'],
  reason: string,
  message: string,
  now = new Date(),
): Condition {
  return { type, status, reason, message, lastTransitionTime: now.toISOString() };
}

/** Replaces conditions by type, keeping lastTransitionTime when the status did not change. */
export function mergeConditions(current: Condition[], updates: Condition[]): Condition[] {
  const out = current.filter((c) => !updates.some((u) => u.type === c.type));
  for (const u of updates) {
    const prev = current.find((c) => c.type === u.type);
    out.push(prev && prev.status === u.status ? { ...u, lastTransitionTime: prev.lastTransitionTime } : u);
  }
  const order = ['Ready', 'Reconciling', 'Stalled'];
  return out.sort((a, b) => (order.indexOf(a.type) + 1 || 99) - (order.indexOf(b.type) + 1 || 99));
}

/** A new tenant's conditions: not Ready yet, its first reconcile queued. */
export function initialConditions(now = new Date()): Condition[] {
  return [
    condition('Ready', 'False', 'Pending', 'waiting for the first reconcile', now),
    condition('Reconciling', 'True', 'SpecChanged', 'tenant created; provisioning is queued', now),
  ];
}

export interface InsertTenant {
  organization: string;
  email: string;
  plan: string;
  /** Region placement is restricted to (null: any). */
  region?: string | null;
  runtimeVersion: string;
  /** Settings given with the signup; the others keep their column's default. */
  settings?: Partial<TenantSettings>;
}

/** The settings' columns and their values for a new or claimed tenant (a setting not given: its default). */
export function settingValues(s: Partial<TenantSettings> | undefined): unknown[] {
  return SETTING_KEYS.map((k) => settingParam(s?.[k] ?? TENANT_SETTINGS[k].unset));
}

export async function insertTenant(db: Queryable, t: InsertTenant): Promise<string> {
  const conditions = initialConditions();
  const { rows } = await db.query<{ id: string }>(
    `INSERT INTO tenants (organization, email, plan, runtime_version, conditions, region)
     VALUES ($1, $2, $3, $4, $5, $6) RETURNING id`,
    [t.organization, t.email, t.plan, t.runtimeVersion, JSON.stringify(conditions), t.region ?? null],
  );
  return rows[0]!.id;
}

/**
 * A signup in one statement: the tenant, its queued create operation, its API key (hash only), the
 * audit row and the NOTIFY. Ids are made by the caller so the tenant can name its operation.
 */
export async function insertSignup(
  db: Queryable,
  s: InsertTenant & {
    tenantId: string;
    operationId: string;
    key: { id: string; hash: Buffer; prefix: string };
    audit: { after: unknown; requestId: string };
  },
): Promise<TenantRow> {
  const conditions = initialConditions();
  const settings = SETTING_COLUMNS.map((_, i) => `$${14 + i}`).join(', ');
  const { rows } = await db.query<TenantRow>(
    `WITH t AS (
       INSERT INTO tenants (id, organization, email, plan, runtime_version, conditions, last_operation_id, region,
                            ${SETTING_COLUMNS.join(', ')})
       VALUES ($1, $2, $3, $4, $5, $6, $7, $13, ${settings}) RETURNING *),
     op AS (INSERT INTO operations (id, tenant_id, kind, generation, to_version) SELECT $7, id, 'create', 1, runtime_version FROM t),
     k AS (INSERT INTO api_keys (id, key_hash, prefix, role, tenant_id, name, created_by)
           SELECT $8, $9, $10, 'tenant', id, 'signup', 'public' FROM t),
     a AS (INSERT INTO audit_log (actor, actor_role, action, target_type, target_id, after, request_id)
           SELECT 'public', 'public', 'tenant.signup', 'tenant', id::text, $11, $12 FROM t)
     SELECT t.*, NULL::text AS cluster_name, t.created_at::text AS cursor_ts, pg_notify('${TENANT_CHANNEL}', t.id::text) IS NULL AS _n FROM t`,
    [
      s.tenantId,
      s.organization,
      s.email,
      s.plan,
      s.runtimeVersion,
      JSON.stringify(conditions),
      s.operationId,
      s.key.id,
      s.key.hash,
      s.key.prefix,
      JSON.stringify(s.audit.after),
      s.audit.requestId,
      s.region ?? null,
      ...settingValues(s.settings),
    ],
  );
  return rows[0]!;
}

export interface QueuedOperation {
  id: string;
  kind: OperationKind;
  generation: number;
  fromVersion: string | null;
  toVersion: string | null;
}

/** A change of the spec fields an API call sets (`deleted` by a delete); the others keep their value. */
/**
 * `sleeping` is the control plane's half of the spec (provisioner/sleep/): only the sleep and wake
 * operations set it; any other change wakes a sleeping tenant, since the engine needs its virtual
 * cluster running to apply it.
 */
export type SpecChange = Partial<Pick<TenantSpec, 'plan' | 'runtimeVersion' | 'suspended' | 'deleted'>> & {
  sleeping?: boolean;
};

/**
 * Applies a spec change in the caller's transaction: bumps the generation, marks the tenant
 * Reconciling, clears a Stalled state and the retry timer, inserts a queued operation and
 * NOTIFYs the workers. Returns the operation.
 */
export async function changeSpec(
  db: Queryable,
  tenant: TenantRow,
  change: SpecChange,
  kind: OperationKind,
  message: string,
): Promise<QueuedOperation> {
  const spec = {
    plan: change.plan ?? tenant.plan,
    runtimeVersion: change.runtimeVersion ?? tenant.runtime_version,
    suspended: change.suspended ?? tenant.suspended,
    deleted: change.deleted ?? tenant.deleted,
    sleeping: change.sleeping ?? (kind === 'sleep' ? true : false),
  };
  const generation = tenant.generation + 1;
  const updates = [condition('Reconciling', 'True', 'SpecChanged', message)];
  if (tenant.conditions.some((c) => c.type === 'Stalled')) {
    updates.push(condition('Stalled', 'False', 'SpecChanged', 'spec changed; reconciling again'));
  }
  const conditions = mergeConditions(tenant.conditions, updates);
  // The version running before the operation; null when nothing was installed yet.
  const fromVersion = tenant.actual_runtime_version;
  // One statement (one round trip): the spec, the queued operation, the tenant's last operation
  // and the NOTIFY that wakes the workers (delivered at commit).
  const { rows } = await db.query<{ id: string }>(
    `WITH op AS (
       INSERT INTO operations (tenant_id, kind, generation, from_version, to_version)
       VALUES ($1, $8, $6, $9, $10) RETURNING id),
     upd AS (
       UPDATE tenants SET plan = $2, runtime_version = $3, suspended = $4, deleted = $5, generation = $6,
              sleeping = $13, asleep_since = CASE WHEN $13 THEN coalesce(asleep_since, now()) END,
              woke_at = CASE WHEN sleeping AND NOT $13 THEN now() ELSE woke_at END,
              conditions = $7, stalled = false, consecutive_failures = 0, next_attempt_at = NULL,
              phase = CASE WHEN $5 AND phase <> 'Deleted' THEN 'Deleting' ELSE phase END,
              deleted_at = CASE WHEN $5 THEN coalesce(deleted_at, now()) ELSE deleted_at END,
              last_operation_id = (SELECT id FROM op), updated_at = now()
        WHERE id = $1)
     SELECT op.id, pg_notify($11, $12) FROM op`,
    [
      tenant.id,
      spec.plan,
      spec.runtimeVersion,
      spec.suspended,
      spec.deleted,
      generation,
      JSON.stringify(conditions),
      kind,
      fromVersion,
      spec.runtimeVersion,
      TENANT_CHANNEL,
      tenant.id,
      spec.sleeping,
    ],
  );
  const opId = rows[0]!.id;
  return { id: opId, kind, generation, fromVersion, toVersion: spec.runtimeVersion };
}

/** Records who suspended a tenant and why (both null when it is resumed). */
export async function setSuspender(
  db: Queryable,
  tenantId: string,
  by: 'operator' | 'tenant' | null,
  reason: string | null,
): Promise<void> {
  await db.query('UPDATE tenants SET suspended_by = $2, suspension_reason = $3 WHERE id = $1', [tenantId, by, reason]);
}

/**
 * An operator's or tenant's explicit retry: clears Stalled and the backoff timer so that the
 * tenant is due at once, without changing the spec.
 */
export async function requestRetry(db: Queryable, tenant: TenantRow): Promise<QueuedOperation> {
  const conditions = mergeConditions(tenant.conditions, [
    condition('Reconciling', 'True', 'RetryRequested', 'retry requested'),
    ...(tenant.conditions.some((c) => c.type === 'Stalled')
      ? [condition('Stalled', 'False', 'RetryRequested', 'retry requested; reconciling again')]
      : []),
  ]);
  await db.query(
    `UPDATE tenants SET stalled = false, consecutive_failures = 0, next_attempt_at = now(), conditions = $2,
            updated_at = now() WHERE id = $1`,
    [tenant.id, JSON.stringify(conditions)],
  );
  // The version running before the operation; null when nothing was installed yet.
  const fromVersion = tenant.actual_runtime_version;
  const id = await insertOperation(db, tenant.id, 'retry', tenant.generation, fromVersion, tenant.runtime_version);
  await db.query('SELECT pg_notify($1, $2)', [TENANT_CHANNEL, tenant.id]);
  return { id, kind: 'retry', generation: tenant.generation, fromVersion, toVersion: tenant.runtime_version };
}

export async function insertOperation(
  db: Queryable,
  tenantId: string,
  kind: OperationKind,
  generation: number,
  fromVersion: string | null,
  toVersion: string | null,
): Promise<string> {
  const { rows } = await db.query<{ id: string }>(
    `INSERT INTO operations (tenant_id, kind, generation, from_version, to_version) VALUES ($1, $2, $3, $4, $5) RETURNING id`,
    [tenantId, kind, generation, fromVersion, toVersion],
  );
  const id = rows[0]!.id;
  await db.query('UPDATE tenants SET last_operation_id = $2 WHERE id = $1', [tenantId, id]);
  return id;
}

/** Orders a listing may take; each with the column it sorts on and how a cursor holds its value. */
export const TENANT_SORTS = {
  createdAt: { column: 't.created_at', text: 't.created_at::text', cast: 'timestamptz' },
  updatedAt: { column: 't.updated_at', text: 't.updated_at::text', cast: 'timestamptz' },
  organization: { column: 't.organization', text: 't.organization', cast: 'text' },
  phase: { column: 't.phase', text: 't.phase', cast: 'text' },
} as const satisfies Record<TenantSort, unknown>;
export type { TenantSort };

export interface TenantFilter {
  phase?: Phase;
  runtimeVersion?: string;
  cluster?: string;
  plan?: string;
  region?: string;
  /** Part of the organization (case-insensitive), or a whole tenant id. */
  search?: string;
  /** Restricts the listing to one tenant (tenant keys). */
  onlyId?: string;
}

export interface TenantPage extends TenantFilter {
  sort?: TenantSort;
  order?: 'asc' | 'desc';
  /** The sort value (as text) and id of the last row of the previous page. */
  after?: { ts: string; id: string };
  limit: number;
}

const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** The WHERE clauses of a filter; `withPhase` false leaves the phase out (counts per phase). */
function tenantWhere(f: TenantFilter, args: unknown[], withPhase = true): string[] {
  // Unclaimed warm pool entries (store/pool.ts) are nobody's tenants.
  const where: string[] = ['t.pool_state IS NULL'];
  const add = (sql: string, v: unknown) => {
    args.push(v);
    where.push(sql.replaceAll('?', `$${args.length}`));
  };
  if (withPhase) {
    if (f.phase) add('t.phase = ?', f.phase);
    else where.push(`t.phase <> 'Deleted'`);
  }
  if (f.runtimeVersion) add('t.runtime_version = ?', f.runtimeVersion);
  if (f.cluster) add('c.name = ?', f.cluster);
  if (f.plan) add('t.plan = ?', f.plan);
  if (f.region) add('t.region = ?', f.region);
  if (f.onlyId) add('t.id = ?', f.onlyId);
  if (f.search) {
    const pattern = `%${f.search.replace(/[\\%_]/g, (c) => `\\${c}`)}%`;
    if (UUID_RE.test(f.search)) {
      args.push(pattern, f.search.toLowerCase());
      where.push(`(t.organization ILIKE $${args.length - 1} OR t.id = $${args.length}::uuid)`);
    } else add('t.organization ILIKE ?', pattern);
  }
  return where;
}

export async function listTenants(db: Queryable, f: TenantPage): Promise<Array<TenantRow & { sort_key: string }>> {
  const args: unknown[] = [];
  const where = tenantWhere(f, args);
  const sort = TENANT_SORTS[f.sort ?? 'createdAt'];
  const dir = f.order === 'desc' ? 'DESC' : 'ASC';
  if (f.after) {
    args.push(f.after.ts, f.after.id);
    where.push(
      `(${sort.column}, t.id) ${dir === 'ASC' ? '>' : '<'} ($${args.length - 1}::${sort.cast}, $${args.length}::uuid)`,
    );
  }
  args.push(f.limit);
  const { rows } = await db.query<TenantRow & { sort_key: string }>(
    `SELECT ${TENANT_COLUMNS}, ${sort.text} AS sort_key FROM ${TENANT_FROM}
      ${where.length ? 'WHERE ' + where.join(' AND ') : ''}
      ORDER BY ${sort.column} ${dir}, t.id ${dir} LIMIT $${args.length}`,
    args,
  );
  return rows;
}

/** Tenants by phase among those the filter (its phase aside) selects; phases without any are 0. */
export interface TenantCounts {
  phases: Record<Phase, number>;
  /** Tenants not deleted whose spec says suspended, whatever their phase (Suspended once applied). */
  suspended: number;
  /** Tenants not deleted per runtime version: `tenants` whose spec names it, `running` it installed. */
  runtimeVersions: { version: string; tenants: number; running: number }[];
}

/** The tenants a filter selects (phase aside), counted by phase, suspension and runtime version, in one statement. */
export async function countTenants(db: Queryable, f: TenantFilter): Promise<TenantCounts> {
  const args: unknown[] = [];
  const where = tenantWhere(f, args, false);
  const { rows } = await db.query<{ kind: 'phase' | 'suspended' | 'spec' | 'running'; key: string | null; n: number }>(
    `WITH s AS (
       SELECT t.phase, t.suspended, t.deleted, t.runtime_version, t.actual_runtime_version
         FROM tenants t LEFT JOIN root_clusters c ON c.id = t.cluster_id
        ${where.length ? 'WHERE ' + where.join(' AND ') : ''})
     SELECT 'phase' AS kind, phase AS key, count(*)::int AS n FROM s GROUP BY phase
     UNION ALL SELECT 'suspended', NULL, count(*)::int FROM s WHERE suspended AND NOT deleted
     UNION ALL SELECT 'spec', runtime_version, count(*)::int FROM s WHERE NOT deleted GROUP BY runtime_version
     UNION ALL SELECT 'running', actual_runtime_version, count(*)::int FROM s
                WHERE NOT deleted AND actual_runtime_version IS NOT NULL GROUP BY actual_runtime_version`,
    args,
  );
  const phases = Object.fromEntries(PHASES.map((p) => [p, 0])) as Record<Phase, number>;
  let suspended = 0;
  const versions = new Map<string, { version: string; tenants: number; running: number }>();
  const version = (v: string) => versions.get(v) ?? versions.set(v, { version: v, tenants: 0, running: 0 }).get(v)!;
  for (const r of rows) {
    if (r.kind === 'phase') phases[r.key as Phase] = r.n;
    else if (r.kind === 'suspended') suspended = r.n;
    else if (r.kind === 'spec') version(r.key!).tenants = r.n;
    else version(r.key!).running = r.n;
  }
  const runtimeVersions = [...versions.values()].sort((a, b) =>
    a.version.localeCompare(b.version, 'en', { numeric: true }),
  );
  return { phases, suspended, runtimeVersions };
}

/** The newest number of the fleet's change stream (where a stream asking for new changes starts). */
export async function latestTenantChange(db: Queryable): Promise<string> {
  const { rows } = await db.query<{ seq: string }>(`SELECT coalesce(max(change_seq), 0)::text AS seq FROM tenants`);
  return rows[0]!.seq;
}

/**
 * Tenants whose latest change is numbered above `after`, in change order:
 * each tenant appears once, at its latest change. `onlyId` restricts it to one tenant.
 */
export async function readTenantChanges(
  db: Queryable,
  after: string,
  limit: number,
  onlyId?: string,
): Promise<TenantRow[]> {
  const args: unknown[] = [after, limit];
  if (onlyId) args.push(onlyId);
  const { rows } = await db.query<TenantRow>(
    `SELECT ${TENANT_COLUMNS}, t.change_seq::text AS change_seq FROM ${TENANT_FROM}
      WHERE t.change_seq > $1::bigint AND t.pool_state IS NULL${onlyId ? ' AND t.id = $3' : ''}
      ORDER BY t.change_seq LIMIT $2`,
    args,
  );
  return rows;
}

/** Whether the tenant's retries are stopped (undefined: no such tenant). */
export async function tenantStalled(db: Queryable, tenantId: string): Promise<boolean | undefined> {
  const { rows } = await db.query<{ stalled: boolean }>('SELECT stalled FROM tenants WHERE id = $1', [tenantId]);
  return rows[0]?.stalled;
}

/** Stores the settings given (not part of the spec: no generation, no operation); the others keep their value. */
export async function setTenantSettings(db: Queryable, id: string, settings: Partial<TenantSettings>): Promise<void> {
  const keys = SETTING_KEYS.filter((k) => settings[k] !== undefined);
  if (keys.length === 0) return;
  await db.query(
    `UPDATE tenants SET ${keys.map((k, i) => `${TENANT_SETTINGS[k].column} = $${i + 2}`).join(', ')}, updated_at = now()
      WHERE id = $1`,
    [id, ...keys.map((k) => settingParam(settings[k]))],
  );
}

/** The vcluster endpoints of every live tenant but this one (a managed cluster may not be another tenant's vcluster). */
export async function otherVclusterEndpoints(db: Queryable, tenantId: string): Promise<string[]> {
  const { rows } = await db.query<{ endpoint: string }>(
    `SELECT endpoints->>'vclusterEndpoint' AS endpoint FROM tenants
      WHERE id <> $1 AND phase <> 'Deleted' AND endpoints ? 'vclusterEndpoint'`,
    [tenantId],
  );
  return rows.map((r) => r.endpoint);
}

/** Whether the tenant is failing (stalled or failures counted), and its newest open operation. */
export async function retryState(
  db: Queryable,
  id: string,
): Promise<{ failing: boolean; open: string | null } | undefined> {
  const { rows } = await db.query<{ failing: boolean; open: string | null }>(
    `SELECT (t.stalled OR t.consecutive_failures > 0) AS failing,
            (SELECT o.id FROM operations o WHERE o.tenant_id = t.id AND o.state IN ('queued', 'running')
              ORDER BY o.created_at DESC LIMIT 1) AS open
       FROM tenants t WHERE t.id = $1`,
    [id],
  );
  return rows[0];
}

/**
 * The Ready tenants not suspended or deleted, oldest first, at most `limit` (doctor's runtime
 * checks: a bounded scan on a large fleet).
 */
export async function readyTenantRows(db: Queryable, limit: number): Promise<TenantRow[]> {
  const { rows } = await db.query<TenantRow>(
    `SELECT ${TENANT_COLUMNS} FROM ${TENANT_FROM}
      WHERE t.phase = 'Ready' AND NOT t.suspended AND NOT t.deleted AND t.pool_state IS NULL
      ORDER BY t.created_at, t.id LIMIT $1`,
    [limit],
  );
  return rows;
}
