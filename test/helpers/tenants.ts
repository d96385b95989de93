/**
 * Test-data builders for tenants: states a test starts from without running the reconciler. Where
 * the store has a function for a write, the builder calls it (the maintenance windows, a lease let
 * go); where it has none, this module is the one place of the tests that writes the SQL: a tenant
 * made to look reconciled (the reconciler's own writes are fenced by a lease and an operation it
 * holds), times moved back, and the tenants' own rows read with the bookkeeping columns the
 * store's reads leave out.
 */
import type { Queryable } from '../../provisioner/db/tx.ts';
import type { Condition, Phase } from '../../provisioner/store/states.ts';
import { releaseLeases } from '../../provisioner/store/leases.ts';
import { setTenantSettings } from '../../provisioner/store/tenants.ts';
import type { MaintenanceWindow } from '../../provisioner/store/tenant-shapes.ts';

const idList = (ids: string | readonly string[]): readonly string[] => (typeof ids === 'string' ? [ids] : ids);

/** The Ready condition a reconciled tenant carries (its time fixed, so that tests can compare it). */
export const READY_CONDITION = {
  type: 'Ready',
  status: 'True',
  reason: 'Reconciled',
  message: '',
  lastTransitionTime: '2026-01-01T00:00:00Z',
};

export interface Reconciled {
  /** The phase reached; `Ready` unless told. */
  phase?: 'Ready' | 'Suspended' | 'Failed' | 'Sleeping';
  /** The root cluster (by name) it is placed on; left as it is unless told. */
  cluster?: string;
  /** The runtime version running; the spec's unless told. */
  actualRuntimeVersion?: string;
  suspended?: boolean;
  stalled?: boolean;
  /** Whether its conditions become READY_CONDITION alone (left as they are unless told). */
  readyCondition?: boolean;
  /** Whether last_reconciled_at becomes now (left as it is unless told). */
  reconciledNow?: boolean;
}

// SQL: states no production path writes (a reconciler's outcome without its lease and operation).
/**
 * Makes tenants look reconciled: the phase reached, its generation observed, the spec's runtime
 * version running, and what `o` adds. Their operations are left as they are.
 */
export async function markReconciled(db: Queryable, ids: string | string[], o: Reconciled = {}): Promise<void> {
  await db.query(
    `UPDATE tenants SET phase = $2, observed_generation = generation,
            actual_runtime_version = COALESCE($3, runtime_version),
            cluster_id = CASE WHEN $4::text IS NULL THEN cluster_id ELSE (SELECT id FROM root_clusters WHERE name = $4) END,
            suspended = COALESCE($5, suspended), stalled = COALESCE($6, stalled),
            conditions = CASE WHEN $7 THEN $8::jsonb ELSE conditions END,
            last_reconciled_at = CASE WHEN $9 THEN now() ELSE last_reconciled_at END
      WHERE id = ANY($1::uuid[])`,
    [
      idList(ids),
      o.phase ?? 'Ready',
      o.actualRuntimeVersion ?? null,
      o.cluster ?? null,
      o.suspended ?? null,
      o.stalled ?? null,
      o.readyCondition ?? false,
      JSON.stringify([READY_CONDITION]),
      o.reconciledNow ?? false,
    ],
  );
}

// SQL: time moved back.
/** Moves the tenants' last activity `seconds` back (instead of waiting out their plan's idle time). */
export async function markIdle(db: Queryable, ids: string | string[], seconds: number): Promise<void> {
  await db.query(`UPDATE tenants SET last_activity_at = now() - make_interval(secs => $2) WHERE id = ANY($1::uuid[])`, [
    idList(ids),
    seconds,
  ]);
}

// SQL: states no production path writes (status columns set without the reconciler, the sleeper or the lease loop).
/**
 * Status columns a test sets directly (what the reconciler, the sleeper or the lease loop would
 * have written). Each field left out is left as it is.
 */
export interface TenantStatus {
  phase?: Phase;
  suspended?: boolean;
  stalled?: boolean;
  consecutiveFailures?: number;
  /** The runtime version running (null: none yet). */
  actualRuntimeVersion?: string | null;
  /** The runtime version that ran before the running one (null: none). */
  previousRuntimeVersion?: string | null;
  /** The spec's runtime version, written without a new generation or operation. */
  runtimeVersion?: string;
  /** Whether the current generation becomes the observed one. */
  observed?: boolean;
  /** Whether the spec's runtime version becomes the one running (as after its operation succeeded). */
  runningSpec?: boolean;
  /** The root cluster (by id) it is placed on (null: none). */
  clusterId?: string | null;
  /** The root cluster (by name) it is placed on. */
  cluster?: string;
  conditions?: Condition[];
  /** The endpoints the reconciler published (stored as JSON). */
  endpoints?: unknown;
  email?: string;
  /** Added to the generation (a spec change seen without its operation; negative undoes it). */
  generationBy?: number;
  /** last_reconciled_at becomes this many seconds ago (0: now). */
  lastReconciledSecondsAgo?: number;
  /** updated_at becomes this many seconds ago. */
  updatedSecondsAgo?: number;
  /** next_attempt_at becomes this many seconds from now. */
  nextAttemptInSeconds?: number;
}

/** Sets the status columns given in `s` on the tenants (see TenantStatus); the others are left as they are. */
export async function setTenantStatus(db: Queryable, ids: string | readonly string[], s: TenantStatus): Promise<void> {
  const values: unknown[] = [idList(ids)];
  const sets: string[] = [];
  const put = (column: string, value: unknown, expr = (p: string) => p): void => {
    values.push(value);
    sets.push(`${column} = ${expr(`$${values.length}`)}`);
  };
  if (s.phase !== undefined) put('phase', s.phase);
  if (s.suspended !== undefined) put('suspended', s.suspended);
  if (s.stalled !== undefined) put('stalled', s.stalled);
  if (s.consecutiveFailures !== undefined) put('consecutive_failures', s.consecutiveFailures);
  if (s.actualRuntimeVersion !== undefined) put('actual_runtime_version', s.actualRuntimeVersion);
  if (s.previousRuntimeVersion !== undefined) put('previous_runtime_version', s.previousRuntimeVersion);
  if (s.runtimeVersion !== undefined) put('runtime_version', s.runtimeVersion);
  if (s.observed) sets.push('observed_generation = generation');
  if (s.runningSpec) sets.push('actual_runtime_version = runtime_version');
  if (s.clusterId !== undefined) put('cluster_id', s.clusterId);
  if (s.cluster !== undefined) put('cluster_id', s.cluster, (p) => `(SELECT id FROM root_clusters WHERE name = ${p})`);
  if (s.conditions !== undefined) put('conditions', JSON.stringify(s.conditions), (p) => `${p}::jsonb`);
  if (s.endpoints !== undefined) put('endpoints', JSON.stringify(s.endpoints), (p) => `${p}::jsonb`);
  if (s.email !== undefined) put('email', s.email);
  if (s.generationBy !== undefined) put('generation', s.generationBy, (p) => `generation + ${p}::int`);
  const ago = (p: string) => `now() - make_interval(secs => ${p}::float8)`;
  if (s.lastReconciledSecondsAgo !== undefined) put('last_reconciled_at', s.lastReconciledSecondsAgo, ago);
  if (s.updatedSecondsAgo !== undefined) put('updated_at', s.updatedSecondsAgo, ago);
  if (s.nextAttemptInSeconds !== undefined)
    put('next_attempt_at', s.nextAttemptInSeconds, (p) => `now() + make_interval(secs => ${p}::float8)`);
  if (sets.length === 0) return;
  await db.query(`UPDATE tenants SET ${sets.join(', ')} WHERE id = ANY($1::uuid[])`, values);
}

/**
 * Makes a tenant look stalled after failing: Failed, Stalled, `failures` attempts failed in a row,
 * its next attempt an hour away, its conditions `conditions` (a Stalled one unless told).
 */
export async function markStalled(
  db: Queryable,
  id: string,
  o: { failures?: number; conditions?: Condition[] } = {},
): Promise<void> {
  await setTenantStatus(db, id, {
    phase: 'Failed',
    stalled: true,
    consecutiveFailures: o.failures ?? 5,
    nextAttemptInSeconds: 3600,
    conditions: o.conditions ?? [
      {
        type: 'Stalled',
        status: 'True',
        reason: 'UpdateFailed',
        message: 'boom',
        lastTransitionTime: '2026-01-01T00:00:00Z',
      },
    ],
  });
}

/** Makes the tenants' last reconcile `seconds` ago (instead of waiting for their resync to come due). */
export async function markLastReconciled(
  db: Queryable,
  ids: string | readonly string[],
  seconds: number,
): Promise<void> {
  await setTenantStatus(db, ids, { lastReconciledSecondsAgo: seconds });
}

/** Sets a tenant's maintenance windows (through the store's settings write). */
export async function setMaintenanceWindows(db: Queryable, id: string, windows: MaintenanceWindow[]): Promise<void> {
  await setTenantSettings(db, id, { maintenanceWindows: windows });
}

// SQL: a state no production path writes (a lease taken outside a claim, only where none is live).
/**
 * Makes `owner` hold the tenants' lease for `seconds` more (as a reconciler replica working on
 * them); with `ifFree`, only where no live lease is held. Answers how many leases it took.
 */
export async function holdLease(
  db: Queryable,
  ids: string | readonly string[],
  owner: string,
  seconds: number,
  o: { ifFree?: boolean } = {},
): Promise<number> {
  const { rowCount } = await db.query(
    `UPDATE tenants SET lease_owner = $2, lease_expires_at = now() + make_interval(secs => $3::float8)
      WHERE id = ANY($1::uuid[]) AND (NOT $4 OR lease_expires_at IS NULL OR lease_expires_at < now())`,
    [idList(ids), owner, seconds, o.ifFree ?? false],
  );
  return rowCount ?? 0;
}

/**
 * Lets the leases go, each through its holder's release (the store's releaseLeases, as at a
 * replica's graceful shutdown): of the tenants given, or of every tenant holding one.
 */
export async function releaseLease(db: Queryable, ids?: string | readonly string[]): Promise<void> {
  const held = new Map<string, string[]>();
  for (const t of await findTenants(db, ids === undefined ? {} : { ids: idList(ids) }))
    if (t.lease_owner !== null) {
      const leased = held.get(t.lease_owner);
      if (leased) leased.push(t.id);
      else held.set(t.lease_owner, [t.id]);
    }
  for (const [owner, leased] of held) await releaseLeases(db, owner, leased);
}

// SQL: time moved back (a lease expired without its holder).
/**
 * Makes leases expired a second ago (their owner left as it is, as after a replica died): of the
 * tenants given, or of every tenant whose lease `owner` holds.
 */
export async function expireLease(db: Queryable, which: string | readonly string[] | { owner: string }): Promise<void> {
  if (typeof which === 'object' && 'owner' in which)
    await db.query(`UPDATE tenants SET lease_expires_at = now() - interval '1 second' WHERE lease_owner = $1`, [
      which.owner,
    ]);
  else
    await db.query(`UPDATE tenants SET lease_expires_at = now() - interval '1 second' WHERE id = ANY($1::uuid[])`, [
      idList(which),
    ]);
}

// SQL: reads of columns no store read answers (backoff, change number, warm pool state, lease, runtime token).
/**
 * A tenant's own row as tests read it, the bookkeeping columns the store's reads leave out
 * included (backoff, change number, warm pool state, the runtime token).
 */
export interface TenantRecord {
  id: string;
  organization: string;
  plan: string;
  region: string | null;
  phase: Phase;
  deleted: boolean;
  suspended: boolean;
  stalled: boolean;
  consecutive_failures: number;
  generation: number;
  observed_generation: number;
  runtime_version: string;
  actual_runtime_version: string | null;
  cluster_id: string | null;
  /** The root cluster's name it is placed on (null: none). */
  cluster_name: string | null;
  conditions: Condition[];
  /** When the next attempt is due (null: none planned). */
  next_attempt_at: Date | null;
  /** Whether next_attempt_at has come, by the database's clock. */
  due: boolean;
  /** The tenant's latest number in the fleet's change stream (as text: a bigint). */
  change_seq: string;
  /** 'pooled' for an unclaimed warm pool entry; null for a customer's tenant. */
  pool_state: 'pooled' | null;
  /** The warm pool entry's runtime key (its id), while it is one. */
  pool_credential_id: string | null;
  runtime_token_enc: Buffer | null;
  lease_owner: string | null;
  lease_expires_at: Date | null;
  resync_requested_at: Date | null;
  resync_reason: string | null;
  created_at: Date;
}

/** Which tenants findTenants answers; each field left out selects all. */
export interface TenantSelector {
  ids?: readonly string[];
  /** Placed on this root cluster (by id). */
  clusterId?: string;
  organization?: string;
  plan?: string;
  phase?: Phase;
  deleted?: boolean;
  /** true: unclaimed warm pool entries only; false: customers' tenants only. */
  pooled?: boolean;
  /** true: the tenants with a resync requested (and not yet run); false: those without. */
  resyncRequested?: boolean;
  /** The reason of their Ready condition (`NoCapacity`: waiting for a root cluster). */
  readyReason?: string;
  /** true: a next attempt is planned (next_attempt_at set); false: none. */
  attemptPlanned?: boolean;
}

const RECORD = `SELECT t.*, c.name AS cluster_name, t.change_seq::text AS change_seq,
         t.next_attempt_at IS NOT NULL AND t.next_attempt_at <= now() AS due
    FROM tenants t LEFT JOIN root_clusters c ON c.id = t.cluster_id`;

function whereOf(s: TenantSelector): { sql: string; values: unknown[] } {
  const values: unknown[] = [];
  const where: string[] = [];
  const add = (clause: string, value: unknown): void => {
    values.push(value);
    where.push(clause.replace('?', `$${values.length}`));
  };
  if (s.ids !== undefined) add('t.id = ANY(?::uuid[])', s.ids);
  if (s.clusterId !== undefined) add('t.cluster_id = ?', s.clusterId);
  if (s.organization !== undefined) add('t.organization = ?', s.organization);
  if (s.plan !== undefined) add('t.plan = ?', s.plan);
  if (s.phase !== undefined) add('t.phase = ?', s.phase);
  if (s.deleted !== undefined) add('t.deleted = ?', s.deleted);
  if (s.pooled !== undefined) where.push(s.pooled ? `t.pool_state = 'pooled'` : 't.pool_state IS NULL');
  if (s.resyncRequested !== undefined)
    where.push(`t.resync_requested_at IS ${s.resyncRequested ? 'NOT NULL' : 'NULL'}`);
  if (s.readyReason !== undefined)
    add(`t.conditions @> jsonb_build_array(jsonb_build_object('type', 'Ready', 'reason', ?::text))`, s.readyReason);
  if (s.attemptPlanned !== undefined) where.push(`t.next_attempt_at IS ${s.attemptPlanned ? 'NOT NULL' : 'NULL'}`);
  return { sql: where.length ? `WHERE ${where.join(' AND ')}` : '', values };
}

/** The tenants' rows `s` selects (every row, deleted and pooled ones too, unless told), oldest first. */
export async function findTenants(db: Queryable, s: TenantSelector = {}): Promise<TenantRecord[]> {
  const w = whereOf(s);
  const { rows } = await db.query<TenantRecord>(`${RECORD} ${w.sql} ORDER BY t.created_at, t.id`, w.values);
  return rows;
}

/** One tenant's row (see TenantRecord); throws when there is none. */
export async function tenantRecord(db: Queryable, id: string): Promise<TenantRecord> {
  const [row] = await findTenants(db, { ids: [id] });
  if (!row) throw new Error(`no tenant ${id}`);
  return row;
}

/** How many tenants' rows `s` selects (every row, deleted and pooled ones too, unless told). */
export async function countTenantRecords(db: Queryable, s: TenantSelector = {}): Promise<number> {
  const w = whereOf(s);
  const { rows } = await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM tenants t ${w.sql}`, w.values);
  return rows[0]!.n;
}

/** `n` tenants' ids picked at random (fewer when there are fewer), for a benchmark's readers. */
export async function randomTenantIds(db: Queryable, n: number): Promise<string[]> {
  const { rows } = await db.query<{ id: string }>('SELECT id FROM tenants ORDER BY random() LIMIT $1', [n]);
  return rows.map((r) => r.id);
}
