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
 *
 * This module holds the loop and the round; the round's parts are judge.ts (1), waves.ts (2, 3)
 * with requeue.ts (maintenance windows), abort.ts, and round.ts (what they share); their
 * statements are store/fleet-upgrades.ts's.
 */
import { hostname } from 'node:os';
import { randomBytes } from 'node:crypto';
import type pg from 'pg';
import pino from 'pino';
import { withTx } from '../db/tx.ts';
import { isConnectionError } from '../db/availability.ts';
import type { Notifications, Unsubscribe } from '../db/notifications.ts';
import { PeriodicLoop } from '../../runtime/loops/periodic.ts';
import type { LoopStatus, Runnable } from '../../runtime/loops/health.ts';
import {
  ACTIVE_FLEET_STATES,
  FLEET_CHANNEL,
  leaseActiveFleetUpgrades,
  lockLeasedFleetUpgrade,
  notifyFleetUpgrade,
  releaseFleetLeases,
  renewFleetLease,
} from '../store/fleet-upgrades.ts';
import type { Catalog } from '../../runtime/catalog.ts';
import { abortStep } from './abort.ts';
import { judgeSteps } from './judge.ts';
import type { FleetOptions } from './plan.ts';
import { writeDecisions, type AskHybridUpgrades, type DriverContext, type FleetDriverLog, type Tick } from './round.ts';
import { advance } from './waves.ts';

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
  /** Asks a tenant's opted-in hybrid runtimes for the version its hosted runtime reached (RuntimeService.askUpgradesByAgent). */
  askHybridUpgrades?: AskHybridUpgrades;
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

export class FleetDriver implements Runnable {
  readonly owner: string;
  readonly stats: FleetDriverStats = { ticks: 0, lastTickMs: 0, maxTickMs: 0, tickMsTotal: 0, decisions: new Map() };
  readonly #pool: pg.Pool;
  readonly #leaseTtlMs: number;
  readonly #pollMs: number;
  readonly #now: () => number;
  readonly #notifications: Notifications | undefined;
  readonly #log: FleetDriverLog;
  /** What every round of this driver shares. */
  readonly #round: DriverContext;
  #unsubscribe: Unsubscribe | undefined;
  /** The loop (runtime/loops/periodic.ts): tickAll() every pollMs, or at once when kicked. */
  readonly #loop: PeriodicLoop;
  readonly name = 'fleet-driver';

  constructor(o: FleetDriverOptions) {
    this.owner = o.owner ?? `${hostname()}:${process.pid}:fleet:${randomBytes(3).toString('hex')}`;
    this.#pool = o.pool;
    this.#leaseTtlMs = o.leaseTtlMs ?? 30_000;
    this.#pollMs = o.pollMs ?? 1000;
    this.#now = o.now ?? Date.now;
    this.#notifications = o.notifications;
    this.#log = o.logger ?? pino({ level: 'silent' });
    this.#round = {
      catalog: o.catalog,
      clusterParallelism: o.clusterParallelism ?? 2,
      log: this.#log,
      actor: { id: `fleet-driver:${this.owner}`, role: 'system' },
      deferrals: new Map(),
      count: (kind) => this.#count(kind),
      ...(o.askHybridUpgrades ? { askHybridUpgrades: o.askHybridUpgrades } : {}),
    };
    this.#loop = new PeriodicLoop({
      name: this.name,
      round: async () => void (await this.tickAll()),
      intervalMs: () => this.#pollMs,
      retryMs: (failures) => Math.min(10_000, 200 * 2 ** failures),
      onFailure: (err) => {
        if (!isConnectionError(err)) this.#log.error({ err: String(err) }, 'fleet upgrade tick failed');
      },
      setUp: () => {
        this.#unsubscribe = this.#notifications?.subscribe(
          FLEET_CHANNEL,
          () => this.kick(),
          () => this.kick(),
        );
      },
      tearDown: () => {
        this.#unsubscribe?.();
        this.#unsubscribe = undefined;
      },
    });
  }

  /** Subscribes to the fleet channel and starts the loop; the signal stops it. */
  start(signal?: AbortSignal): Promise<void> {
    return this.#loop.start(signal);
  }

  /** Stops the loop after the tick under way and hands the leases back (also those of ticks run without the loop). */
  async stop(): Promise<void> {
    await this.#loop.stop();
    // Another replica takes over at once, not after the TTL.
    await releaseFleetLeases(this.#pool, this.owner).catch(() => {});
  }

  status(): LoopStatus {
    return this.#loop.status();
  }

  kick(): void {
    this.#loop.kick();
  }

  /** Takes (or renews) the leases of the active fleet upgrades no live lease of another process holds, and ticks each. */
  async tickAll(): Promise<string[]> {
    const ids = await leaseActiveFleetUpgrades(this.#pool, this.owner, this.#leaseTtlMs);
    for (const id of ids) await this.tick(id);
    return ids;
  }

  /** One decision round of one fleet upgrade, in one transaction, fenced by the lease. Returns false when not held. */
  async tick(id: string): Promise<boolean> {
    const began = performance.now();
    const held = await withTx(this.#pool, async (tx) => {
      const fleet = await lockLeasedFleetUpgrade(tx, id, this.owner);
      if (!fleet || !ACTIVE_FLEET_STATES.includes(fleet.state)) return false;
      const t: Tick = {
        fleet,
        options: fleet.options as unknown as FleetOptions,
        now: new Date(this.#now()),
        tx,
        driver: this.#round,
        events: 0,
        decided: [],
      };
      await judgeSteps(t);
      if (fleet.state === 'running') await advance(t);
      else if (fleet.state === 'aborting') await abortStep(t);
      await writeDecisions(t);
      if (t.events > 0) await notifyFleetUpgrade(tx, id);
      await renewFleetLease(tx, id, this.#leaseTtlMs);
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
}
