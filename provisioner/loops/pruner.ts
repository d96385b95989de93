/**
 * The shape of a loop that deletes what outlived its retention (the idempotency records past their
 * replay window, the removed hybrid runtimes past theirs): each round deletes in batches, one
 * transaction per batch, until a batch comes back short, `maxBatches` were done, or the loop
 * stops; then waits `intervalMs` (±10 %). Every replica runs it: a batch skips the rows another
 * replica's batch holds (the statement's FOR UPDATE SKIP LOCKED), so replicas share the work
 * instead of waiting for each other. The first round comes within a minute of start, spread so
 * that replicas started together do not all begin at once.
 */
import type pg from 'pg';
import type { Logger } from 'pino';
import { withTx, type Queryable } from '../db/tx.ts';
import { PeriodicLoop } from '../../runtime/loops/periodic.ts';

export interface PrunerOptions {
  /** The loop's name (the manager's list, /readyz, GET /v1/doctor, /metrics). */
  name: string;
  pool: pg.Pool;
  /** One batch: deletes at most `limit` rows and answers how many it deleted. */
  batch: (db: Queryable, limit: number) => Promise<number>;
  /** Time between rounds (default 10 minutes). */
  intervalMs?: number;
  /** Rows per batch (default 500) and batches per round (default 100). */
  batchSize?: number;
  maxBatches?: number;
  /** What the log says after a round that deleted rows, e.g. 'pruned idempotency records'. */
  what: string;
  log?: Logger | undefined;
  onPruned?: (n: number) => void;
}

export class Pruner {
  readonly #options: PrunerOptions;
  /** The background loop (runtime/loops/periodic.ts). */
  readonly loop: PeriodicLoop;

  constructor(o: PrunerOptions) {
    this.#options = o;
    const interval = o.intervalMs ?? 10 * 60_000;
    const jittered = () => interval * (0.9 + Math.random() * 0.2);
    this.loop = new PeriodicLoop({
      name: o.name,
      round: async (signal) => {
        const n = await this.runOnce(() => signal.aborted);
        if (n > 0) o.log?.info({ deleted: n }, o.what);
      },
      firstDelayMs: () => Math.random() * Math.min(interval, 60_000),
      intervalMs: jittered,
      retryMs: jittered,
      onFailure: (err) => o.log?.warn({ err: (err as Error).message }, `${o.name}: round failed; trying again later`),
    });
  }

  /** One round; answers how many rows went. Also callable while the loop is stopped (tests, operators). */
  async runOnce(stop: () => boolean = () => false): Promise<number> {
    const batchSize = this.#options.batchSize ?? 500;
    const maxBatches = this.#options.maxBatches ?? 100;
    let total = 0;
    for (let i = 0; i < maxBatches && !stop(); i++) {
      const n = await withTx(this.#options.pool, (tx) => this.#options.batch(tx, batchSize));
      total += n;
      if (n > 0) this.#options.onPruned?.(n);
      if (n < batchSize) break;
    }
    return total;
  }
}
