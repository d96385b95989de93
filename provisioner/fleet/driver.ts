/**
 * The fleet upgrade driver: runs beside the reconciler in every provisioner process and carries
 * the started fleet upgrades out. State lives in Postgres only. A process drives a fleet upgrade
 * while it holds its lease (lease_owner, lease_expires_at, as for tenants); each decision round
 * ("tick") is one transaction that locks the fleet upgrade's row and re-checks the lease, so two
 * replicas never drive the same wave, and everything a tick decides (a tenant's spec change, its
 * row, the audit rows) commits together or not at all: a SIGKILL loses nothing and repeats nothing.
 *
 * A tick: (1) judges every step under way with the health gate (gate.ts) and moves its tenant on
 * (next hop, succeeded, automatic rollback, quarantined); (2) while running, checks the current
 * wave's failure budget (halt), then starts tenants within maxConcurrency, maxUnavailable and the
 * per-cluster cap; (3) settles the wave, soaks, and moves to the next wave or completes; while
 * aborting, rolls moved tenants back in reverse wave order. The clock is injectable (tests).
 */
import { hostname } from 'node:os';
import { randomBytes } from 'node:crypto';
import type pg from 'pg';
import pino from 'pino';
import { pgCode, withTx, type Queryable } from '../db/tx.ts';
import { isConnectionError } from '../db/availability.ts';
import type { Notifications, Unsubscribe } from '../db/notifications.ts';
import { Waker } from '../common/waker.ts';
import { writeAudits, type Actor } from '../store/audit.ts';
import { changeSpec, getTenantRow, type TenantRow } from '../store/tenants.ts';
import { liveTunnel } from '../store/tunnels.ts';
import type { Catalog } from '../../runtime/catalog.ts';
import { STALE_AFTER_SECONDS } from '../../runtime/protocol/events.ts';
import { judgeGate, type GateCheck, type Snapshot } from './gate.ts';
import { DEFAULT_UPGRADE_SECONDS, DEFAULT_WINDOW_WAIT_SECONDS, pathFor, type FleetOptions } from './plan.ts';
import { expectedDurations, finishAbortIfIdle } from './service.ts';
import { explainNoFit, nextFit, OUTSIDE_WINDOW } from './windows.ts';
import type { MaintenanceWindow } from '../store/tenants.ts';
import {
  ACTIVE_FLEET_STATES,
  FLEET_CHANNEL,
  recordEvents,
  type FleetRow,
  type FleetTenantState,
  type WaveRow,
} from './store.ts';

export type FleetDriverLog = Pick<pino.Logger, 'info' | 'warn' | 'error'>;

export interface FleetDriverOptions {
  pool: pg.Pool;
  catalog: Catalog;
  /** Lease owner id; default `<host>:<pid>:fleet:<random>`. */
  owner?: string;
  leaseTtlMs?: number;
  /** Time between ticks (NOTIFY on the fleet channel wakes it sooner). */
  pollMs?: number;
  /** Most steps of fleet upgrades whose engine run is pending or running on one root cluster, across all fleet upgrades. */
  clusterParallelism?: number;
  /** The clock of soak times and gate timeouts (ms since the epoch). */
  now?: () => number;
  notifications?: Notifications;
  logger?: FleetDriverLog;
}

export interface FleetDriverStats {
  ticks: number;
  /** Milliseconds of the last and the slowest tick. */
  lastTickMs: number;
  maxTickMs: number;
  tickMsTotal: number;
  /** Decisions by kind: started, hop, succeeded, rollback, quarantined, halted, wave_completed, completed, reverted, left, skipped, aborted. */
  decisions: Map<string, number>;
}

type StepKind = 'upgrade' | 'rollback' | 'revert';

/** What the windows say of a pending tenant: start (neither field), wait until `deferUntil`, or skip. */
interface WindowAnswer {
  skip?: string;
  deferUntil?: Date;
  what?: string;
}

interface InFlightRow {
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

const IN_FLIGHT_SQL = `
  SELECT ft.tenant_id, ft.wave, ft.state, ft.path, ft.hop, ft.from_version, ft.generation, ft.operation_id,
         ft.step_from, ft.step_to, ft.step_started_at, ft.snapshot, ft.gate, ft.reason,
         t.observed_generation, t.actual_runtime_version, t.phase, t.stalled, t.deleted,
         t.conditions @> '[{"type": "Ready", "status": "True"}]' AS ready,
         o.state AS op_state, o.error AS op_error, o.created_at AS op_created_at, o.finished_at AS op_finished_at,
         rt.connected_at AS tunnel_connected_at,
         (SELECT max(r.last_seen) FROM runtime_reporters r WHERE r.tenant_id = t.id) AS reporter_last_seen,
         (SELECT count(*)::int FROM runtime_objects ro
           WHERE ro.tenant_id = t.id AND ro.kind = 'Application' AND NOT ro.deleted
             AND ro.health = 'Healthy' AND ro.sync = 'Synced') AS apps_good
    FROM fleet_upgrade_tenants ft
    JOIN tenants t ON t.id = ft.tenant_id
    LEFT JOIN operations o ON o.id = ft.operation_id
    LEFT JOIN runtime_tunnels rt ON rt.tenant_id = t.id AND ${liveTunnel('rt')}
   WHERE ft.fleet_upgrade_id = $1 AND ft.state IN ('upgrading', 'rolling_back', 'reverting')
   ORDER BY ft.position`;

const KIND_OF: Record<string, StepKind> = { upgrading: 'upgrade', rolling_back: 'rollback', reverting: 'revert' };

/** Everything one tick decided, for the audit log and the stats. */
interface Tick {
  fleet: FleetRow;
  options: FleetOptions;
  now: Date;
  tx: pg.PoolClient;
  /** Events written by this tick (a NOTIFY tells the progress streams). */
  events: number;
  /** The tick's decisions, in order: written as events and audit rows at its end, two statements in all. */
  decided: Array<{ action: string; tenantId: string | null; after: Record<string, unknown> }>;
}

export class FleetDriver {
  readonly owner: string;
  readonly stats: FleetDriverStats = { ticks: 0, lastTickMs: 0, maxTickMs: 0, tickMsTotal: 0, decisions: new Map() };
  readonly #pool: pg.Pool;
  readonly #catalog: Catalog;
  readonly #leaseTtlMs: number;
  readonly #pollMs: number;
  readonly #clusterParallelism: number;
  readonly #now: () => number;
  readonly #notifications: Notifications | undefined;
  readonly #log: FleetDriverLog;
  readonly #actor: Actor;
  /** Deferrals (valid until their instant) and skips (valid for good) by fleet upgrade, deadline, expected duration and windows. */
  readonly #deferrals = new Map<string, WindowAnswer>();
  #unsubscribe: Unsubscribe | undefined;
  #loop: Promise<void> | undefined;
  #stopping = false;
  readonly #waker = new Waker();

  constructor(o: FleetDriverOptions) {
    this.owner = o.owner ?? `${hostname()}:${process.pid}:fleet:${randomBytes(3).toString('hex')}`;
    this.#pool = o.pool;
    this.#catalog = o.catalog;
    this.#leaseTtlMs = o.leaseTtlMs ?? 30_000;
    this.#pollMs = o.pollMs ?? 1000;
    this.#clusterParallelism = o.clusterParallelism ?? 2;
    this.#now = o.now ?? Date.now;
    this.#notifications = o.notifications;
    this.#log = o.logger ?? pino({ level: 'silent' });
    this.#actor = { id: `fleet-driver:${this.owner}`, role: 'system' };
  }

  start(): void {
    this.#unsubscribe = this.#notifications?.subscribe(
      FLEET_CHANNEL,
      () => this.kick(),
      () => this.kick(),
    );
    this.#loop = this.#run();
  }

  async stop(): Promise<void> {
    this.#stopping = true;
    this.kick();
    await this.#loop;
    this.#unsubscribe?.();
    this.#unsubscribe = undefined;
    // Hand the leases back: another replica takes over at once, not after the TTL.
    await this.#pool
      .query(`UPDATE fleet_upgrades SET lease_owner = NULL, lease_expires_at = NULL WHERE lease_owner = $1`, [
        this.owner,
      ])
      .catch(() => {});
  }

  kick(): void {
    this.#waker.kick();
  }

  async #run(): Promise<void> {
    let errors = 0;
    while (!this.#stopping) {
      this.#waker.clear();
      try {
        await this.tickAll();
        errors = 0;
      } catch (err) {
        errors += 1;
        if (!isConnectionError(err)) this.#log.error({ err: String(err) }, 'fleet upgrade tick failed');
      }
      if (this.#stopping) break;
      await this.#waker.sleep(errors ? Math.min(10_000, 200 * 2 ** errors) : this.#pollMs);
    }
  }

  /** Takes (or renews) the leases of the active fleet upgrades no live lease of another process holds, and ticks each. */
  async tickAll(): Promise<string[]> {
    const { rows } = await this.#pool.query<{ id: string }>(
      `UPDATE fleet_upgrades SET lease_owner = $1, lease_expires_at = now() + $2 * interval '1 millisecond'
        WHERE id IN (SELECT id FROM fleet_upgrades
                      WHERE state = ANY($3::text[])
                        AND (lease_owner IS NULL OR lease_owner = $1 OR lease_expires_at < now())
                      ORDER BY created_at FOR UPDATE SKIP LOCKED)
        RETURNING id`,
      [this.owner, this.#leaseTtlMs, ACTIVE_FLEET_STATES],
    );
    for (const { id } of rows) await this.tick(id);
    return rows.map((r) => r.id);
  }

  /** One decision round of one fleet upgrade, in one transaction, fenced by the lease. Returns false when not held. */
  async tick(id: string): Promise<boolean> {
    const began = performance.now();
    const held = await withTx(this.#pool, async (tx) => {
      const { rows } = await tx.query<FleetRow>(
        `SELECT * FROM fleet_upgrades WHERE id = $1 AND lease_owner = $2 AND lease_expires_at > now() FOR UPDATE`,
        [id, this.owner],
      );
      const fleet = rows[0];
      if (!fleet || !ACTIVE_FLEET_STATES.includes(fleet.state)) return false;
      const t: Tick = {
        fleet,
        options: fleet.options as unknown as FleetOptions,
        now: new Date(this.#now()),
        tx,
        events: 0,
        decided: [],
      };
      await this.#judge(t);
      if (fleet.state === 'running') await this.#advance(t);
      else if (fleet.state === 'aborting') await this.#abortStep(t);
      await this.#writeDecisions(t);
      if (t.events > 0) await tx.query('SELECT pg_notify($1, $2)', [FLEET_CHANNEL, id]);
      await tx.query(
        `UPDATE fleet_upgrades SET lease_expires_at = now() + $2 * interval '1 millisecond' WHERE id = $1`,
        [id, this.#leaseTtlMs],
      );
      return true;
    });
    const ms = performance.now() - began;
    this.stats.ticks += 1;
    this.stats.lastTickMs = ms;
    this.stats.tickMsTotal += ms;
    this.stats.maxTickMs = Math.max(this.stats.maxTickMs, ms);
    return held;
  }

  #count(kind: string): void {
    this.stats.decisions.set(kind, (this.stats.decisions.get(kind) ?? 0) + 1);
  }

  /** A decision: an event of the fleet upgrade and an audit row, written with the tick's others at its end (#writeDecisions). */
  #audit(t: Tick, action: string, after: Record<string, unknown>, tenantId?: string): Promise<void> {
    t.decided.push({ action, tenantId: tenantId ?? null, after });
    t.events += 1;
    return Promise.resolve();
  }

  /**
   * The tick's decisions as events and audit rows, in the order they were made, one statement
   * each: every round trip of a tick delays the steps it starts (their engine runs begin once it
   * commits), and a tick starting ten tenants made twenty of these.
   */
  async #writeDecisions(t: Tick): Promise<void> {
    if (t.decided.length === 0) return;
    await recordEvents(
      t.tx,
      t.fleet.id,
      t.decided.map((d) => ({ action: d.action, tenantId: d.tenantId, data: d.after })),
    );
    await writeAudits(
      t.tx,
      this.#actor,
      t.decided.map((d) => ({
        action: `fleet_upgrade.${d.action}`,
        targetType: d.tenantId ? 'tenant' : 'fleet_upgrade',
        targetId: d.tenantId ?? t.fleet.id,
        after: d.tenantId ? { fleetUpgradeId: t.fleet.id, ...d.after } : d.after,
      })),
    );
  }

  async #setTenant(t: Tick, tenantId: string, fields: Record<string, unknown>): Promise<void> {
    const keys = Object.keys(fields);
    await t.tx.query(
      `UPDATE fleet_upgrade_tenants SET ${keys.map((k, i) => `${k} = $${i + 3}`).join(', ')}
        WHERE fleet_upgrade_id = $1 AND tenant_id = $2`,
      [t.fleet.id, tenantId, ...keys.map((k) => fields[k])],
    );
  }

  /** Finishes a tenant's part: its final state, why, and it no longer holds the tenant. */
  async #finish(
    t: Tick,
    tenantId: string,
    state: FleetTenantState,
    fields: Record<string, unknown> = {},
  ): Promise<void> {
    await this.#setTenant(t, tenantId, { state, finished_at: t.now, active: false, ...fields });
  }

  /** Changes the tenant's version (one spec change, as the API would) and records the step. */
  async #startStep(
    t: Tick,
    tenantId: string,
    kind: StepKind,
    from: string,
    to: string,
    fields: Record<string, unknown>,
    locked?: TenantRow,
  ): Promise<boolean> {
    const row = locked ?? (await getTenantRow(t.tx, tenantId, true));
    if (!row || row.deleted) {
      await this.#finish(t, tenantId, 'skipped', { reason: 'the tenant was deleted' });
      this.#count('skipped');
      return false;
    }
    // Only the Applications check compares with the snapshot: without it, no query for one.
    const snapshot = kind === 'upgrade' && t.options.gate.applications ? await this.#snapshot(t.tx, tenantId) : null;
    const what = kind === 'upgrade' ? 'upgrade' : kind === 'rollback' ? 'automatic rollback' : 'rollback after abort';
    const op = await changeSpec(
      t.tx,
      row,
      { runtimeVersion: to },
      'upgrade',
      `fleet upgrade ${t.fleet.id}: ${what} ${from} -> ${to}`,
    );
    await this.#setTenant(t, tenantId, {
      state: kind === 'upgrade' ? 'upgrading' : kind === 'rollback' ? 'rolling_back' : 'reverting',
      generation: op.generation,
      operation_id: op.id,
      step_from: from,
      step_to: to,
      step_started_at: t.now,
      snapshot: snapshot === null ? null : JSON.stringify(snapshot),
      gate: null,
      ...fields,
    });
    await this.#audit(
      t,
      kind === 'upgrade' ? 'tenant_upgrade' : `tenant_${kind}`,
      { from, to, operationId: op.id },
      tenantId,
    );
    this.#count(kind === 'upgrade' ? 'started' : kind);
    return true;
  }

  /** What the gate compares with: the tenant's live tunnel and its Healthy/Synced Applications, just before the step. */
  async #snapshot(db: Queryable, tenantId: string): Promise<Snapshot> {
    const { rows } = await db.query<{ reporting: boolean; good: number; total: number; tunnel: boolean }>(
      `SELECT EXISTS (SELECT 1 FROM runtime_reporters r WHERE r.tenant_id = $1
                        AND r.last_seen > now() - $2 * interval '1 second') AS reporting,
              (SELECT count(*)::int FROM runtime_objects ro WHERE ro.tenant_id = $1 AND ro.kind = 'Application'
                 AND NOT ro.deleted AND ro.health = 'Healthy' AND ro.sync = 'Synced') AS good,
              (SELECT count(*)::int FROM runtime_objects ro WHERE ro.tenant_id = $1 AND ro.kind = 'Application'
                 AND NOT ro.deleted) AS total,
              EXISTS (SELECT 1 FROM runtime_tunnels rt WHERE rt.tenant_id = $1 AND ${liveTunnel('rt')}) AS tunnel`,
      [tenantId, STALE_AFTER_SECONDS],
    );
    const r = rows[0]!;
    return { applications: r.reporting ? { good: r.good, total: r.total } : null, tunnelConnected: r.tunnel };
  }

  /** (1) Every step under way: judged by the gate, and its tenant moved on. */
  async #judge(t: Tick): Promise<void> {
    const { rows } = await t.tx.query<InFlightRow>(IN_FLIGHT_SQL, [t.fleet.id]);
    for (const r of rows) {
      const kind = KIND_OF[r.state]!;
      const verdict = judgeGate({
        kind,
        generation: Number(r.generation),
        to: r.step_to,
        startedAtMs: r.step_started_at.getTime(),
        nowMs: t.now.getTime(),
        timeoutMs: t.options.gateTimeoutSeconds * 1000,
        checks: t.options.gate,
        snapshot: r.snapshot,
        tenant: {
          observedGeneration: Number(r.observed_generation),
          actualVersion: r.actual_runtime_version,
          phase: r.phase,
          ready: r.ready,
          stalled: r.stalled,
          deleted: r.deleted,
          tunnelConnectedAt: r.tunnel_connected_at,
          reporterLastSeen: r.reporter_last_seen,
          applicationsGood: r.apps_good,
        },
        operation:
          r.op_state === null
            ? null
            : { state: r.op_state, error: r.op_error, createdAt: r.op_created_at!, finishedAt: r.op_finished_at },
      });
      const gate = JSON.stringify({
        passed: verdict.verdict === 'pass',
        checks: verdict.checks,
        at: t.now.toISOString(),
      });
      if (verdict.verdict === 'wait') {
        if (JSON.stringify(r.gate?.checks ?? null) !== JSON.stringify(verdict.checks))
          await this.#setTenant(t, r.tenant_id, { gate });
        continue;
      }
      if (verdict.verdict === 'gone') {
        await this.#finish(t, r.tenant_id, 'skipped', { gate, reason: `${verdict.reason} during the fleet upgrade` });
        await this.#audit(t, 'tenant_skipped', { reason: verdict.reason }, r.tenant_id);
        this.#count('skipped');
        continue;
      }
      if (kind === 'upgrade') await this.#afterUpgrade(t, r, verdict, gate);
      else if (kind === 'rollback') {
        const reason =
          verdict.verdict === 'pass'
            ? `${r.reason ?? 'gate failed'}; rolled back to ${r.step_to}`
            : `${r.reason ?? 'gate failed'}; the rollback to ${r.step_to} failed too: ${verdict.reason}`;
        await this.#finish(t, r.tenant_id, 'quarantined', { gate, reason, rolled_back: verdict.verdict === 'pass' });
        await this.#audit(t, 'tenant_quarantined', { reason, rolledBack: verdict.verdict === 'pass' }, r.tenant_id);
        this.#count('quarantined');
      } else if (verdict.verdict === 'pass') {
        await this.#finish(t, r.tenant_id, 'reverted', {
          gate,
          rolled_back: true,
          reason: `rolled back to ${r.step_to} after the abort`,
        });
        await this.#audit(t, 'tenant_reverted', { to: r.step_to }, r.tenant_id);
        this.#count('reverted');
      } else {
        const reason = `the rollback to ${r.step_to} after the abort failed: ${verdict.reason}`;
        await this.#finish(t, r.tenant_id, 'left', { gate, reason });
        await this.#audit(t, 'tenant_left', { reason }, r.tenant_id);
        this.#count('left');
      }
    }
  }

  async #afterUpgrade(
    t: Tick,
    r: InFlightRow,
    verdict: { verdict: 'pass' } | { verdict: 'fail'; reason: string },
    gate: string,
  ): Promise<void> {
    if (verdict.verdict === 'pass') {
      const next = r.path[r.hop + 1];
      if (next !== undefined && t.fleet.state !== 'aborting') {
        // The tenant's upgrade goes on through its path (a pause stops new tenants, not a tenant mid-path).
        await this.#setTenant(t, r.tenant_id, { gate });
        await this.#startStep(t, r.tenant_id, 'upgrade', r.step_to, next, { hop: r.hop + 1 });
        this.#count('hop');
        return;
      }
      if (next !== undefined) {
        const reason = `aborted after the hop to ${r.step_to}; its path went on to ${r.path.at(-1)}`;
        await this.#setTenant(t, r.tenant_id, { state: 'interrupted', gate, reason, finished_at: t.now });
        await this.#audit(t, 'tenant_interrupted', { reason }, r.tenant_id);
        return;
      }
      await this.#setTenant(t, r.tenant_id, { state: 'succeeded', gate, finished_at: t.now });
      await this.#audit(t, 'tenant_succeeded', { version: r.step_to }, r.tenant_id);
      this.#count('succeeded');
      return;
    }
    // The gate failed: one automatic rollback of this hop when the catalog allows it, then quarantine.
    const back = this.#catalog.rollbackAnswer(r.step_to, r.step_from);
    const failure = `gate failed on ${r.step_from} -> ${r.step_to}: ${verdict.reason}`;
    if (back.allowed) {
      await this.#setTenant(t, r.tenant_id, { gate, reason: failure });
      await this.#startStep(t, r.tenant_id, 'rollback', r.step_to, r.step_from, {});
      return;
    }
    const reason = `${failure}; not rolled back: ${back.reason}`;
    await this.#finish(t, r.tenant_id, 'quarantined', { gate, reason });
    await this.#audit(t, 'tenant_quarantined', { reason, rolledBack: false }, r.tenant_id);
    this.#count('quarantined');
  }

  /** Counts of the wave's tenants after this tick's decisions so far. */
  async #waveCounts(
    t: Tick,
    wave: number,
  ): Promise<{ inFlight: number; pending: number; failed: number; unhealthy: number }> {
    const { rows } = await t.tx.query<{ in_flight: number; pending: number; failed: number; unhealthy: number }>(
      `SELECT count(*) FILTER (WHERE ft.state IN ('upgrading', 'rolling_back', 'reverting'))::int AS in_flight,
              count(*) FILTER (WHERE ft.state = 'pending')::int AS pending,
              count(*) FILTER (WHERE ft.state = 'quarantined')::int AS failed,
              count(*) FILTER (WHERE ft.state IN ('pending', 'succeeded', 'quarantined') AND NOT t.deleted
                               AND NOT (t.phase = 'Ready' AND t.conditions @> '[{"type": "Ready", "status": "True"}]'))::int AS unhealthy
         FROM fleet_upgrade_tenants ft JOIN tenants t ON t.id = ft.tenant_id
        WHERE ft.fleet_upgrade_id = $1 AND ft.wave = $2`,
      [t.fleet.id, wave],
    );
    const r = rows[0]!;
    return { inFlight: r.in_flight, pending: r.pending, failed: r.failed, unhealthy: r.unhealthy };
  }

  /** Steps whose engine run is pending or running, per root cluster, across every fleet upgrade. */
  async #clusterLoad(t: Tick): Promise<Map<string, number>> {
    const { rows } = await t.tx.query<{ cluster_id: string | null; n: number }>(
      `SELECT t.cluster_id, count(*)::int AS n
         FROM fleet_upgrade_tenants ft JOIN tenants t ON t.id = ft.tenant_id
        WHERE ft.state IN ('upgrading', 'rolling_back', 'reverting') AND t.generation <> t.observed_generation
        GROUP BY t.cluster_id`,
    );
    return new Map(rows.map((r) => [r.cluster_id ?? '', r.n]));
  }

  /** (2) and (3) while running: budget, starts, wave settling, soak, next wave, completion. */
  async #advance(t: Tick): Promise<void> {
    const { rows: waves } = await t.tx.query<WaveRow>(
      'SELECT * FROM fleet_upgrade_waves WHERE fleet_upgrade_id = $1 ORDER BY wave',
      [t.fleet.id],
    );
    // A bound: each round either starts the next wave or stops.
    for (let round = 0; round <= waves.length; round++) {
      const w = waves[t.fleet.current_wave];
      if (!w) return this.#complete(t);
      if (w.state === 'pending') {
        await t.tx.query(
          `UPDATE fleet_upgrade_waves SET state = 'running', started_at = $3 WHERE fleet_upgrade_id = $1 AND wave = $2`,
          [t.fleet.id, w.wave, t.now],
        );
        w.state = 'running';
        await this.#audit(t, 'wave_start', { wave: w.wave, size: w.size });
      }
      let c = await this.#waveCounts(t, w.wave);
      const failed = c.failed - w.forgiven;
      const overCount = w.max_failures !== null && failed > w.max_failures;
      const overPercent = w.max_failure_percent !== null && (failed * 100) / w.size > w.max_failure_percent;
      if (failed > 0 && (overCount || overPercent)) {
        const reason = `${w.wave === 0 ? 'the canary' : `wave ${w.wave}`}: ${failed} of ${w.size} tenants failed, over the failure budget (${[
          w.max_failures !== null ? `at most ${w.max_failures}` : '',
          w.max_failure_percent !== null ? `at most ${w.max_failure_percent} %` : '',
        ]
          .filter(Boolean)
          .join(', ')})`;
        await t.tx.query(
          `UPDATE fleet_upgrades SET state = 'halted', state_reason = $2, updated_at = now() WHERE id = $1`,
          [t.fleet.id, reason],
        );
        await this.#audit(t, 'halt', { wave: w.wave, failed, reason });
        this.#log.warn({ fleetUpgrade: t.fleet.id, reason }, 'fleet upgrade halted');
        this.#count('halted');
        return;
      }
      // Tenants of this wave left out for their windows are judged again with the windows they have now.
      if (await this.#requeue(t, w)) {
        if (w.state === 'soaking') {
          await t.tx.query(
            `UPDATE fleet_upgrade_waves SET state = 'running', settled_at = NULL WHERE fleet_upgrade_id = $1 AND wave = $2`,
            [t.fleet.id, w.wave],
          );
          w.state = 'running';
          w.settled_at = null;
        }
        c = await this.#waveCounts(t, w.wave);
      }
      if (c.pending > 0 && w.state === 'running') {
        const free = Math.min(w.max_concurrency - c.inFlight, w.max_unavailable - c.inFlight - c.unhealthy);
        if (free > 0) {
          await this.#startTenants(t, w, free);
          c = await this.#waveCounts(t, w.wave);
        }
      }
      if (c.pending > 0 || c.inFlight > 0) return;
      // The wave settled: soak (not after the last wave), then the next wave.
      const last = w.wave === waves.length - 1;
      if (w.state === 'running') {
        await t.tx.query(
          `UPDATE fleet_upgrade_waves SET state = 'soaking', settled_at = $3 WHERE fleet_upgrade_id = $1 AND wave = $2`,
          [t.fleet.id, w.wave, t.now],
        );
        w.state = 'soaking';
        w.settled_at = t.now;
      }
      if (!last && t.now.getTime() < w.settled_at!.getTime() + w.soak_seconds * 1000) return;
      await t.tx.query(
        `UPDATE fleet_upgrade_waves SET state = 'completed', completed_at = $3 WHERE fleet_upgrade_id = $1 AND wave = $2`,
        [t.fleet.id, w.wave, t.now],
      );
      w.state = 'completed';
      await this.#audit(t, 'wave_complete', { wave: w.wave });
      this.#count('wave_completed');
      t.fleet.current_wave += 1;
      await t.tx.query(`UPDATE fleet_upgrades SET current_wave = $2, updated_at = now() WHERE id = $1`, [
        t.fleet.id,
        t.fleet.current_wave,
      ]);
    }
  }

  async #complete(t: Tick): Promise<void> {
    await t.tx.query(
      `UPDATE fleet_upgrades SET state = 'completed', finished_at = now(), updated_at = now() WHERE id = $1`,
      [t.fleet.id],
    );
    await t.tx.query('UPDATE fleet_upgrade_tenants SET active = false WHERE fleet_upgrade_id = $1 AND active', [
      t.fleet.id,
    ]);
    const { rows } = await t.tx.query<{ state: string; n: number }>(
      `SELECT state, count(*)::int AS n FROM fleet_upgrade_tenants WHERE fleet_upgrade_id = $1 GROUP BY state`,
      [t.fleet.id],
    );
    await this.#audit(t, 'complete', { counts: Object.fromEntries(rows.map((r) => [r.state, r.n])) });
    this.#log.info({ fleetUpgrade: t.fleet.id }, 'fleet upgrade completed');
    this.#count('completed');
  }

  /**
   * Starts up to `free` pending tenants of the wave, in plan order, within the per-cluster cap and
   * their maintenance windows: a tenant whose window is closed now (or has less than its expected
   * duration left, or a freeze holds) is deferred until the next window that fits, and the others
   * go first; one whose windows will not open with room before the wave's deadline is skipped
   * (outside-window). The pending tenants are read page by page, so deferred ones never hide the rest.
   */
  async #startTenants(t: Tick, w: WaveRow, free: number): Promise<void> {
    const load = await this.#clusterLoad(t);
    const windows = await this.#windowCheck(t, w);
    const page = Math.max(free * 20, 100);
    let started = 0;
    let after = -1;
    for (;;) {
      const { rows } = await t.tx.query<{
        tenant_id: string;
        position: number;
        path: string[];
        from_version: string;
        cluster_id: string | null;
        deferred_until: Date | null;
        windows: MaintenanceWindow[];
      }>(
        `SELECT ft.tenant_id, ft.position, ft.path, ft.from_version, t.cluster_id, ft.deferred_until,
                t.maintenance_windows AS windows
           FROM fleet_upgrade_tenants ft JOIN tenants t ON t.id = ft.tenant_id
          WHERE ft.fleet_upgrade_id = $1 AND ft.wave = $2 AND ft.state = 'pending' AND ft.position > $4
          ORDER BY ft.position LIMIT $3`,
        [t.fleet.id, w.wave, page, after],
      );
      for (const p of rows) {
        if (started >= free) return;
        after = p.position;
        const skip = async (reason: string, extra: Record<string, unknown> = {}): Promise<void> => {
          await this.#finish(t, p.tenant_id, 'skipped', { reason, deferred_until: null });
          await this.#audit(t, 'tenant_skipped', { reason, ...extra }, p.tenant_id);
          this.#count('skipped');
        };
        const fit = await windows(p.windows, p.from_version, p.path);
        if (fit.skip !== undefined) {
          await skip(fit.skip, { outsideWindow: true });
          continue;
        }
        if (fit.deferUntil !== undefined) {
          if (p.deferred_until?.getTime() !== fit.deferUntil.getTime()) {
            const reason = `waiting for its maintenance window: the next that fits (${fit.what}) opens at ${fit.deferUntil.toISOString()}`;
            await this.#setTenant(t, p.tenant_id, { deferred_until: fit.deferUntil, reason });
            await this.#audit(t, 'tenant_deferred', { until: fit.deferUntil.toISOString(), reason }, p.tenant_id);
            this.#count('deferred');
          }
          continue;
        }
        const cluster = p.cluster_id ?? '';
        if ((load.get(cluster) ?? 0) >= this.#clusterParallelism) continue;
        const row = await getTenantRow(t.tx, p.tenant_id, true);
        if (!row || row.deleted) {
          await skip('the tenant was deleted before its turn');
          continue;
        }
        // The tenant may have changed since the plan: its path is worked out again from where it is.
        const found = pathFor(this.#catalog, t.fleet.target_version, {
          id: row.id,
          organization: row.organization,
          version: row.runtime_version,
          actualVersion: row.actual_runtime_version,
          phase: row.phase,
          suspended: row.suspended,
          stalled: (await this.#stalled(t.tx, row.id)) ?? false,
          cluster: null,
          inFleetUpgrade: null,
        });
        if ('reason' in found) {
          await skip(`${found.reason} when its turn came`);
          continue;
        }
        const from = row.runtime_version;
        await this.#startStep(
          t,
          p.tenant_id,
          'upgrade',
          from,
          found.path[0]!,
          {
            path: found.path,
            hop: 0,
            started_at: t.now,
            deferred_until: null,
            reason: null,
            ...(from !== p.from_version ? { from_version: from } : {}),
          },
          row,
        );
        load.set(cluster, (load.get(cluster) ?? 0) + 1);
        started += 1;
      }
      if (rows.length < page || started >= free) return;
    }
  }

  /**
   * Takes back the tenants of the wave (running or soaking: not completed) that were left out for
   * their windows only — excluded by the plan, or skipped by the driver before any step — when
   * their windows as they are now (or the override) let them start before the wave's deadline:
   * they are pending again and #startTenants judges them like the others. A tenant that ever
   * started (started_at) is never taken back, nor one another fleet upgrade holds now. Answers the
   * number taken back.
   */
  async #requeue(t: Tick, w: WaveRow): Promise<number> {
    const { rows } = await t.tx.query<{
      tenant_id: string;
      state: 'excluded' | 'skipped';
      from_version: string;
      path: string[];
      windows: MaintenanceWindow[];
    }>(
      `SELECT ft.tenant_id, ft.state, ft.from_version, ft.path, t.maintenance_windows AS windows
         FROM fleet_upgrade_tenants ft JOIN tenants t ON t.id = ft.tenant_id
        WHERE ft.fleet_upgrade_id = $1 AND ft.wave = $2 AND ft.state IN ('excluded', 'skipped')
          AND ft.started_at IS NULL AND starts_with(ft.reason, $3) AND NOT t.deleted
          AND NOT EXISTS (SELECT 1 FROM fleet_upgrade_tenants o WHERE o.tenant_id = ft.tenant_id AND o.active)
        ORDER BY ft.position`,
      [t.fleet.id, w.wave, OUTSIDE_WINDOW],
    );
    if (rows.length === 0) return 0;
    const windows = await this.#windowCheck(t, w);
    const back: typeof rows = [];
    for (const r of rows) {
      const fit = await windows(r.windows, r.from_version, r.path);
      if (fit.skip === undefined) back.push(r);
    }
    if (back.length === 0) return 0;
    const ids = back.map((r) => r.tenant_id);
    // Another fleet upgrade may take one of them meanwhile (its start is not serialised with this
    // tick): then nothing is taken back now, and the next tick no longer sees that tenant.
    await t.tx.query('SAVEPOINT requeue');
    try {
      await t.tx.query(
        `UPDATE fleet_upgrade_tenants SET state = 'pending', active = true, reason = NULL, finished_at = NULL, deferred_until = NULL
          WHERE fleet_upgrade_id = $1 AND tenant_id = ANY($2::uuid[])`,
        [t.fleet.id, ids],
      );
    } catch (err) {
      if (pgCode(err) !== '23505') throw err;
      await t.tx.query('ROLLBACK TO SAVEPOINT requeue');
      return 0;
    }
    await t.tx.query('RELEASE SAVEPOINT requeue');
    // Tenants the plan excluded were not counted in the wave's size; skipped ones were.
    const added = back.filter((r) => r.state === 'excluded').length;
    if (added > 0)
      await t.tx.query(`UPDATE fleet_upgrade_waves SET size = size + $3 WHERE fleet_upgrade_id = $1 AND wave = $2`, [
        t.fleet.id,
        w.wave,
        added,
      ]);
    const reason =
      t.fleet.windows_override !== null
        ? 'the maintenance windows were overridden'
        : "its maintenance windows changed: one opens with room before the wave's deadline";
    for (const r of back) {
      await this.#audit(t, 'tenant_requeued', { reason, was: r.state }, r.tenant_id);
      this.#count('requeued');
    }
    return back.length;
  }

  /**
   * This tick's judge of windows for the wave: whether a tenant may start now, must wait until a
   * window that fits opens (within the wave's deadline), or cannot start before the deadline. The
   * override lifts the windows and the duration-fits rule; freezes always hold. Answers are
   * memoised per windows and expected duration within the tick, deferrals across ticks.
   */
  async #windowCheck(
    t: Tick,
    w: WaveRow,
  ): Promise<(windows: MaintenanceWindow[], from: string, path: string[]) => Promise<WindowAnswer>> {
    const freezes = t.options.freezes ?? [];
    const override = t.fleet.windows_override !== null;
    const nowMs = t.now.getTime();
    const deadline =
      (w.started_at ?? t.now).getTime() + (t.options.windowWaitSeconds ?? DEFAULT_WINDOW_WAIT_SECONDS) * 1000;
    const memo = new Map<string, WindowAnswer>();
    const needs = new Map<string, { seconds: number; what: string }>();
    return async (tenantWindows, from, path) => {
      const windows = override ? [] : tenantWindows;
      if (windows.length === 0 && freezes.length === 0) return {};
      let needMs = 0;
      let what = 'no duration needed: windows overridden';
      if (!override) {
        // One read per distinct path in a tick.
        const pathKey = `${from} ${path.join(' ')}`;
        let e = needs.get(pathKey);
        if (!e) {
          const expected = await expectedDurations(
            t.tx,
            [{ fromVersion: from, path }],
            t.options.defaultUpgradeSeconds ?? DEFAULT_UPGRADE_SECONDS,
          );
          e = expected({ fromVersion: from, path });
          needs.set(pathKey, e);
        }
        needMs = e.seconds * 1000;
        what = `${Math.ceil(e.seconds / 60)} min expected: ${e.what}`;
      }
      const key = `${t.fleet.id}|${deadline}|${needMs}|${what}|${JSON.stringify(windows)}`;
      const known = memo.get(key);
      if (known) return known;
      // A deferral stays true until its instant for the same windows, need and deadline (the
      // first instant that fits after a time is the first after any later time before it); a
      // skip stays true (nothing fits before the deadline from a time, so nothing from a later one).
      const earlier = this.#deferrals.get(key);
      if (earlier && (earlier.skip !== undefined || nowMs < earlier.deferUntil!.getTime())) return earlier;
      const fit = nextFit({ windows, freezes }, nowMs, needMs, Math.max(0, deadline - nowMs));
      const answer =
        fit.at === null
          ? { skip: `${explainNoFit(fit, needMs, what)} (the wave's deadline)` }
          : fit.at > nowMs
            ? { deferUntil: new Date(fit.at), what }
            : {};
      memo.set(key, answer);
      if (answer.deferUntil || answer.skip !== undefined) {
        if (this.#deferrals.size >= 10_000) this.#deferrals.clear();
        this.#deferrals.set(key, answer);
      }
      return answer;
    };
  }

  async #stalled(db: Queryable, tenantId: string): Promise<boolean | undefined> {
    const { rows } = await db.query<{ stalled: boolean }>('SELECT stalled FROM tenants WHERE id = $1', [tenantId]);
    return rows[0]?.stalled;
  }

  /** While aborting: once no upgrade is under way, roll moved tenants back (reverse wave order), then end. */
  async #abortStep(t: Tick): Promise<void> {
    const { rows: busy } = await t.tx.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM fleet_upgrade_tenants WHERE fleet_upgrade_id = $1 AND state IN ('upgrading', 'rolling_back')`,
      [t.fleet.id],
    );
    if (busy[0]!.n > 0) return;
    if (t.fleet.abort_rollback) {
      // The highest wave with tenants still to roll back (or being rolled back) goes first.
      const { rows } = await t.tx.query<{
        tenant_id: string;
        state: string;
        path: string[];
        hop: number;
        from_version: string;
        wave: number;
      }>(
        `SELECT tenant_id, state, path, hop, from_version, wave FROM fleet_upgrade_tenants
          WHERE fleet_upgrade_id = $1 AND state IN ('succeeded', 'interrupted', 'reverting')
            AND wave = (SELECT max(wave) FROM fleet_upgrade_tenants WHERE fleet_upgrade_id = $1
                         AND state IN ('succeeded', 'interrupted', 'reverting'))
          ORDER BY position DESC`,
        [t.fleet.id],
      );
      if (rows.length > 0) {
        let free = t.options.maxConcurrency - rows.filter((r) => r.state === 'reverting').length;
        for (const r of rows) {
          if (free <= 0) break;
          if (r.state === 'reverting') continue;
          const tenant = await getTenantRow(t.tx, r.tenant_id, true);
          const at = r.path[r.hop]!;
          let refusal: string | undefined;
          if (!tenant || tenant.deleted) refusal = 'the tenant was deleted';
          else if (r.hop > 0)
            refusal = `it moved ${r.hop + 1} hops (${[r.from_version, ...r.path.slice(0, r.hop + 1)].join(' -> ')}): a rollback returns only to the version last run`;
          else if (tenant.runtime_version !== at || tenant.actual_runtime_version !== at)
            refusal = `its version changed since (spec ${tenant.runtime_version}, running ${tenant.actual_runtime_version ?? 'nothing'})`;
          else {
            const back = this.#catalog.rollbackAnswer(at, r.from_version);
            if (!back.allowed) refusal = back.reason;
          }
          if (refusal !== undefined) {
            const reason = `left on ${at}: ${refusal}`;
            await this.#finish(t, r.tenant_id, 'left', { reason });
            await this.#audit(t, 'tenant_left', { reason }, r.tenant_id);
            this.#count('left');
            continue;
          }
          await this.#startStep(t, r.tenant_id, 'revert', at, r.from_version, {});
          free -= 1;
        }
        return;
      }
    }
    if (await finishAbortIfIdle(t.tx, t.fleet.id, t.fleet.abort_rollback)) {
      await this.#audit(t, 'aborted', {});
      this.#log.info({ fleetUpgrade: t.fleet.id }, 'fleet upgrade aborted');
      this.#count('aborted');
    }
  }
}
