/**
 * Purging old tombstones of runtime objects (docs/runtime.md "Tombstone retention"). A deletion's
 * tombstone is kept PROVISIONER_TOMBSTONE_RETENTION_HOURS (default 24), then deleted; what it
 * guarded is kept compactly in the runtime's horizon (migrations 016 and 025, store/runtime-objects.ts
 * purgeTombstones), so a late state of a purged object is still refused and a change stream that
 * resumes from before a purged deletion starts over.
 *
 * Every replica runs the loop; one purges at a time: each batch is a transaction that first takes
 * a transaction-level advisory lock with pg_try_advisory_xact_lock, and a replica that does not get
 * it leaves the round to the one that has it. A batch is one tenant's tombstones, at most
 * `batchSize` of them, under its tenant's ingest lock (so no batch of that runtime is applied
 * halfway through it); a round stops after `maxBatches` batches and goes on at the next interval.
 */
import type pg from 'pg';
import type { Logger } from 'pino';
import { tryLockForTransaction, withTx } from '../db/tx.ts';
import { lockTenantObjects, oldestTombstoneRuntime, purgeTombstones } from '../store/runtime-objects.ts';
import { PeriodicLoop } from '../../runtime/loops/periodic.ts';

/** The key of the advisory lock one purging replica holds per batch (key space of hashtextextended). */
const PURGE_LOCK = 'runtime_objects:purge';

export interface PurgeOptions {
  pool: pg.Pool;
  retentionSeconds: number;
  /** Time between rounds (default 10 minutes). */
  intervalMs?: number;
  /** Tombstones per batch (default 1,000) and batches per round (default 100). */
  batchSize?: number;
  maxBatches?: number;
  log?: Logger;
  onPurged?: (n: number) => void;
}

export interface PurgeRound {
  purged: number;
  batches: number;
  /** Another replica held the purge lock: this one left the round to it. */
  busy: boolean;
}

export class TombstonePurger {
  readonly #options: PurgeOptions;
  /** The background loop (runtime/loops/periodic.ts): a round every intervalMs (±10 %), the first within a minute. */
  readonly loop: PeriodicLoop;

  constructor(o: PurgeOptions) {
    this.#options = o;
    const interval = o.intervalMs ?? 10 * 60_000;
    this.loop = new PeriodicLoop({
      name: 'tombstone-purger',
      round: async (signal) => {
        const r = await this.runOnce({}, () => signal.aborted);
        if (r.purged > 0) o.log?.info(r, 'purged old tombstones of runtime objects');
      },
      // Replicas started together do not all try at once.
      firstDelayMs: () => Math.random() * Math.min(interval, 60_000),
      intervalMs: () => interval * (0.9 + Math.random() * 0.2),
      retryMs: () => interval * (0.9 + Math.random() * 0.2),
      onFailure: (err) =>
        o.log?.warn({ err: (err as Error).message }, 'purging old tombstones failed; trying again later'),
    });
  }

  /**
   * One round: batches until no tombstone is old enough, the lock is another replica's, maxBatches
   * were done, or `stop()` says so. Also callable while the loop is stopped (tests, operators).
   */
  async runOnce(
    limits: { batchSize?: number; maxBatches?: number } = {},
    stop: () => boolean = () => false,
  ): Promise<PurgeRound> {
    const batchSize = limits.batchSize ?? this.#options.batchSize ?? 1000;
    const maxBatches = limits.maxBatches ?? this.#options.maxBatches ?? 100;
    const round: PurgeRound = { purged: 0, batches: 0, busy: false };
    while (round.batches < maxBatches && !stop()) {
      const n = await withTx(this.#options.pool, async (c) => {
        if (!(await tryLockForTransaction(c, PURGE_LOCK))) return undefined;
        const runtime = await oldestTombstoneRuntime(c, this.#options.retentionSeconds);
        if (!runtime) return 0;
        await lockTenantObjects(c, runtime.tenantId);
        return purgeTombstones(c, runtime, this.#options.retentionSeconds, batchSize);
      });
      if (n === undefined) {
        round.busy = true;
        break;
      }
      if (n === 0) break;
      round.batches++;
      round.purged += n;
      this.#options.onPurged?.(n);
    }
    return round;
  }
}
