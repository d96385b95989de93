/**
 * Idle sleep and wake on demand (docs/operations.md "Sleep").
 *
 * - Activity: a request that reaches a tenant's runtime (its API through the tunnel, its Argo CD)
 *   moves the tenant's `last_activity_at`, written at most every 30 s per tenant, in batches.
 * - Sleep: the `idle-sleep` loop puts an awake Ready tenant to sleep once its plan's idle time
 *   passed with no activity (PROVISIONER_SLEEP_IDLE_SECONDS), unless one of its plan's keep-awake
 *   windows is open in the tenant's time zone (PROVISIONER_SLEEP_AWAKE_WINDOWS; the window's own
 *   zone for a tenant without one); `POST /v1/tenants/:id/sleep` does it at once. Sleep is a
 *   spec change of the control plane's own (`sleeping`, a generation, a `sleep` operation) that
 *   the reconciler applies as it applies a suspension: the vcluster's control plane at zero and
 *   the pods it synced deleted, the data on its volume kept.
 * - Wake: a request to a sleeping tenant's runtime, `POST /v1/tenants/:id/wake`, or any spec
 *   change (an upgrade, a resume) queues a `wake` operation, leased, crash-safe and audited as any
 *   other; the request waits for the runtime's tunnel up to PROVISIONER_WAKE_WAIT_SECONDS, then is
 *   answered 503 TENANT_WAKING with Retry-After. Wakes of one root cluster run at most
 *   PROVISIONER_CLUSTER_PARALLELISM at a time (the reconciler's claim), so a wake storm after an
 *   outage queues instead of loading the cluster.
 */
import type pg from 'pg';
import type { Logger } from 'pino';
import type { SleepConfig } from '../config.ts';
import { withTx, type Queryable } from '../db/tx.ts';
import { errors } from '../errors.ts';
import { PeriodicLoop } from '../../runtime/loops/periodic.ts';
import { wait } from '../../runtime/loops/wait.ts';
import { writeAudit, type Actor, type Requester } from '../store/audit.ts';
import { fleetUpgradeOf } from '../store/fleet-upgrades.ts';
import {
  ACTIVITY_WRITE_EVERY_SECONDS,
  WAKE_CONNECT_GRACE_SECONDS,
  lockIdleTenants,
  tenantTimeZones,
  touchActivity,
  type IdlePlan,
} from '../store/sleep.ts';
import {
  changeSpec,
  getTenantRow,
  toTenant,
  type MaintenanceWindow,
  type Tenant,
  type TenantRow,
} from '../store/tenants.ts';
import { occurrences } from '../fleet/windows.ts';

export interface SleepServiceOptions {
  pool: pg.Pool;
  config: SleepConfig;
  /** Whether the tenant's hosted runtime has a tunnel on any replica. */
  connected: (tenantId: string) => Promise<boolean>;
  /** Whether this process runs the `idle-sleep` loop (default true; off where no reconciler runs). */
  idleLoop?: boolean;
  logger?: Logger | undefined;
}

export interface SleepAccepted {
  tenant: Tenant;
  operationId: string;
  queued: boolean;
}

/** Tenants put to sleep per transaction of an idle round, and transactions per round. */
const IDLE_BATCH = 50;
const IDLE_BATCHES_PER_ROUND = 20;
/** How often a waiting request looks whether the runtime is back. */
const WAKE_POLL_MS = 500;
/** What a TENANT_WAKING answer asks the caller to wait. */
const WAKING_RETRY_AFTER_SECONDS = 10;
/** Tenants remembered by the activity throttle before it starts afresh. */
const THROTTLE_ENTRIES = 100_000;

const IDLE_ACTOR: Actor = { id: 'idle-sleep', role: 'system' };

export class SleepService {
  readonly loop: PeriodicLoop;
  readonly #o: SleepServiceOptions;
  /** When this process last wrote each tenant's activity (ms). */
  readonly #written = new Map<string, number>();
  /** Tenants whose activity waits for the next batch write. */
  readonly #pending = new Set<string>();
  #flush: NodeJS.Timeout | undefined;
  /** One wait per waking tenant, shared by the requests that wait for it. */
  readonly #waits = new Map<string, Promise<boolean>>();
  /** Counters for /metrics. */
  readonly stats = { slept: 0, woken: 0, wokenByRequest: 0, wakingAnswers: 0 };

  constructor(o: SleepServiceOptions) {
    this.#o = o;
    const enabled = o.idleLoop !== false && Object.values(o.config.idleSeconds).some((s) => s > 0);
    this.loop = new PeriodicLoop({
      name: 'idle-sleep',
      enabled,
      round: async () => {
        await this.sleepIdle();
      },
      intervalMs: () => o.config.checkSeconds * 1000 * (0.9 + Math.random() * 0.2),
      firstDelayMs: () => Math.random() * Math.min(o.config.checkSeconds * 1000, 10_000),
      tearDown: () => this.#flushNow(),
      logger: o.logger,
    });
  }

  /** Records activity of the tenant (a request reached its runtime); written in the background. */
  activity(tenantId: string): void {
    const now = Date.now();
    const last = this.#written.get(tenantId);
    if (last !== undefined && now - last < ACTIVITY_WRITE_EVERY_SECONDS * 1000) return;
    if (this.#written.size >= THROTTLE_ENTRIES) this.#written.clear();
    this.#written.set(tenantId, now);
    this.#pending.add(tenantId);
    this.#flush ??= setTimeout(() => void this.#flushNow(), 200);
  }

  async #flushNow(): Promise<void> {
    if (this.#flush) clearTimeout(this.#flush);
    this.#flush = undefined;
    const ids = [...this.#pending];
    this.#pending.clear();
    if (ids.length === 0) return;
    try {
      await touchActivity(this.#o.pool, ids);
    } catch (err) {
      // Activity is advisory: lost, a tenant may sleep a little early and wakes on its next request.
      for (const id of ids) this.#written.delete(id);
      this.#o.logger?.warn({ err: (err as Error).message, tenants: ids.length }, 'could not record tenant activity');
    }
  }

  /**
   * One round of the idle loop: idle tenants put to sleep, a batch per transaction (each with its
   * operation and audit row). Answers how many.
   */
  async sleepIdle(now = Date.now()): Promise<number> {
    const { idleSeconds, awakeWindows } = this.#o.config;
    // The zones tenants set matter only to a plan that sleeps and has keep-awake windows.
    const windowed = Object.entries(idleSeconds).some(([plan, s]) => s > 0 && (awakeWindows[plan]?.length ?? 0) > 0);
    const plans = idlePlans(idleSeconds, awakeWindows, windowed ? await tenantTimeZones(this.#o.pool) : [], now);
    let total = 0;
    for (let i = 0; i < IDLE_BATCHES_PER_ROUND; i++) {
      const n = await withTx(this.#o.pool, async (tx) => {
        const idle = await lockIdleTenants(tx, plans, IDLE_BATCH);
        for (const { id, idle_seconds } of idle) {
          const row = (await getTenantRow(tx, id))!;
          const op = await changeSpec(
            tx,
            row,
            { sleeping: true },
            'sleep',
            `no activity for ${formatIdle(idle_seconds)} (plan ${row.plan} sleeps after ${formatIdle(this.#o.config.idleSeconds[row.plan] ?? 0)}): going to sleep`,
          );
          await writeAudit(tx, IDLE_ACTOR, {
            action: 'tenant.sleep',
            targetType: 'tenant',
            targetId: id,
            after: { idleSeconds: idle_seconds, operationId: op.id },
          });
        }
        return idle.length;
      });
      total += n;
      if (n < IDLE_BATCH) break;
    }
    if (total > 0) {
      this.stats.slept += total;
      this.#o.logger?.info({ tenants: total }, 'idle tenants put to sleep');
    }
    return total;
  }

  /** Puts an awake Ready tenant to sleep now (an operator's or the tenant's own request). */
  async sleep(tenantId: string, by: Requester): Promise<SleepAccepted> {
    return withTx(this.#o.pool, async (tx) => {
      const row = await getTenantRow(tx, tenantId, true);
      if (!row) throw errors.notFound('tenant', tenantId);
      if (row.deleted) throw errors.tenantDeleted(tenantId);
      if (row.sleeping) return { tenant: toTenant(row), operationId: row.last_operation_id!, queued: false };
      const why = await this.#notSleepable(tx, row);
      if (why) throw errors.notSleepable(tenantId, why);
      const op = await changeSpec(tx, row, { sleeping: true }, 'sleep', 'going to sleep on request');
      await writeAudit(tx, by.actor, {
        action: 'tenant.sleep',
        targetType: 'tenant',
        targetId: tenantId,
        after: { operationId: op.id },
        requestId: by.requestId,
      });
      return { tenant: toTenant((await getTenantRow(tx, tenantId))!), operationId: op.id, queued: true };
    });
  }

  async #notSleepable(tx: Queryable, row: TenantRow): Promise<string | undefined> {
    if (row.suspended) return 'it is suspended (a suspended runtime already runs nothing)';
    if (row.phase !== 'Ready') return `its phase is ${row.phase}; only a Ready tenant sleeps`;
    if (row.generation !== row.observed_generation) return 'a change of its spec is not applied yet';
    const fleet = await fleetUpgradeOf(tx, row.id);
    if (fleet) return `it is part of fleet upgrade ${fleet}, which is not finished`;
    return undefined;
  }

  /**
   * Wakes a sleeping tenant: a `wake` operation, audited. Answers the wake operation (queued:
   * false when the tenant was not asleep or a wake is already under way: then its last operation).
   */
  async wake(tenantId: string, by: Requester, reason: string): Promise<SleepAccepted> {
    return withTx(this.#o.pool, async (tx) => {
      const row = await getTenantRow(tx, tenantId, true);
      if (!row) throw errors.notFound('tenant', tenantId);
      if (row.deleted) throw errors.tenantDeleted(tenantId);
      if (!row.sleeping) return { tenant: toTenant(row), operationId: row.last_operation_id!, queued: false };
      const op = await changeSpec(tx, row, { sleeping: false }, 'wake', `waking: ${reason}`);
      await writeAudit(tx, by.actor, {
        action: 'tenant.wake',
        targetType: 'tenant',
        targetId: tenantId,
        after: { reason, operationId: op.id },
        requestId: by.requestId,
      });
      this.stats.woken += 1;
      return { tenant: toTenant((await getTenantRow(tx, tenantId))!), operationId: op.id, queued: true };
    });
  }

  /**
   * Before a request is forwarded to the tenant's hosted runtime: records the activity and, when
   * the runtime is asleep (or waking), wakes it and waits up to PROVISIONER_WAKE_WAIT_SECONDS for
   * its tunnel. Throws 503 TENANT_WAKING when it is not back by then. A tenant that is not asleep
   * passes at once, whether its runtime is connected or not (the forward says so).
   */
  async beforeForward(tenantId: string, by: Requester): Promise<void> {
    this.activity(tenantId);
    if (await this.#o.connected(tenantId)) return;
    const row = await getTenantRow(this.#o.pool, tenantId);
    if (!row || row.deleted) return;
    const justWoken =
      row.phase === 'Ready' &&
      row.woke_at != null &&
      Date.now() - row.woke_at.getTime() < WAKE_CONNECT_GRACE_SECONDS * 1000;
    if (!row.sleeping && row.phase !== 'Sleeping' && row.phase !== 'Waking' && !justWoken) return;
    const { operationId, queued } = row.sleeping
      ? await this.wake(tenantId, by, `a request to its runtime (${by.requestId})`)
      : { operationId: row.last_operation_id!, queued: false };
    if (queued) this.stats.wokenByRequest += 1;
    let wait = this.#waits.get(tenantId);
    if (!wait) {
      wait = this.#waitConnected(tenantId, this.#o.config.wakeWaitSeconds * 1000).finally(() =>
        this.#waits.delete(tenantId),
      );
      this.#waits.set(tenantId, wait);
    }
    if (await wait) return;
    this.stats.wakingAnswers += 1;
    throw errors.tenantWaking(operationId, WAKING_RETRY_AFTER_SECONDS);
  }

  async #waitConnected(tenantId: string, ms: number): Promise<boolean> {
    const deadline = Date.now() + ms;
    while (Date.now() < deadline) {
      await wait(Math.min(WAKE_POLL_MS, deadline - Date.now()));
      if (await this.#o.connected(tenantId)) return true;
    }
    return false;
  }
}

/**
 * What the idle loop may put to sleep at `now` (store/sleep.ts IdlePlan): every tenant of a plan
 * without keep-awake windows (PROVISIONER_SLEEP_AWAKE_WINDOWS); of a plan with some, the tenants
 * for whose time zone none of its windows is open. A window's local times (rule, dtstart,
 * duration) are read in the tenant's zone, or in the window's own for a tenant without one (null).
 * `zones` are the zones tenants set (store/sleep.ts tenantTimeZones): each window is evaluated
 * once per zone, not per tenant.
 */
export function idlePlans(
  idle: Readonly<Record<string, number>>,
  windows: Readonly<Record<string, readonly MaintenanceWindow[]>>,
  zones: readonly string[],
  now: number,
): IdlePlan[] {
  const open = (w: MaintenanceWindow) => occurrences(w, now, now + 1).some((i) => i.start <= now && now < i.end);
  return Object.entries(idle).map(([plan, seconds]) => {
    const planWindows = windows[plan] ?? [];
    if (planWindows.length === 0) return { plan, seconds };
    const asleepIn = [null, ...zones].filter(
      (zone) => !planWindows.some((w) => open(zone === null ? w : { ...w, timeZone: zone })),
    );
    return { plan, seconds, zones: asleepIn };
  });
}

/** 1800 → "30m", 90 → "1m30s", 45 → "45s". */
export function formatIdle(seconds: number): string {
  const h = Math.floor(seconds / 3600);
  const m = Math.floor((seconds % 3600) / 60);
  const s = seconds % 60;
  return [h ? `${h}h` : '', m ? `${m}m` : '', s || (!h && !m) ? `${s}s` : ''].join('');
}
