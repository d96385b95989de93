/**
 * Batched tenant reads for the hottest route of the API (`GET /v1/tenants/:id`, polled by CLIs,
 * dashboards and runtimes). Reads that arrive while earlier ones are at the database wait and then
 * go together, as one `WHERE id = ANY($1)` statement: one round trip and one backend wake-up for a
 * batch instead of one per request.
 *
 * Consistency is the same as one query per request: a read only ever joins a batch that has not
 * been sent yet, so the snapshot it is answered from is taken after the request arrived, and a
 * write committed before the request (on any replica, by the reconciler, by hand) is visible.
 * Nothing is kept between batches (docs/decisions.md "Consistent tenant reads").
 */
import DataLoader from 'dataloader';
import pg from 'pg';
import type { Queryable } from '../db/tx.ts';
import { TENANT_COLUMNS, TENANT_FROM, type TenantRow } from './tenants.ts';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export interface TenantReaderOptions {
  /** Batches at the database at once. Default 1: under load, batches grow instead. */
  concurrency?: number;
  /** Most reads in one statement. Default 200. */
  maxBatchSize?: number;
}

export class TenantReader {
  readonly #db: Queryable;
  readonly #loader: DataLoader<string, TenantRow | undefined>;
  readonly #onClose: () => Promise<void>;
  #free: number;
  /** Batches formed while every slot was busy, oldest first; each is sent when a slot frees. */
  readonly #waiting: (() => void)[] = [];
  #batches = 0;
  #reads = 0;

  /** `db` runs the batches; `onClose` releases it (see createTenantReader). */
  constructor(db: Queryable, opts: TenantReaderOptions & { onClose?: () => Promise<void> } = {}) {
    this.#db = db;
    this.#onClose = opts.onClose ?? (async () => {});
    this.#free = concurrencyOf(opts);
    this.#loader = new DataLoader((ids) => this.#load(ids), {
      cache: false,
      maxBatchSize: opts.maxBatchSize ?? 200,
      batchScheduleFn: (send) => {
        if (this.#free > 0) {
          this.#free--;
          // After the current I/O phase: requests read from other sockets in it join this batch.
          setImmediate(send);
        } else {
          this.#waiting.push(send);
        }
      },
    });
  }

  /** The tenant row (with its cluster name and live tunnel), or undefined when there is none. */
  get(id: string): Promise<TenantRow | undefined> {
    if (!UUID.test(id)) return Promise.resolve(undefined);
    return this.#loader.load(id.toLowerCase());
  }

  /** Statements sent and reads answered so far (their ratio is the mean batch size). */
  stats(): { batches: number; reads: number } {
    return { batches: this.#batches, reads: this.#reads };
  }

  /** Releases the reader's connections; call after the API stopped serving. */
  close(): Promise<void> {
    return this.#onClose();
  }

  async #load(ids: readonly string[]): Promise<(TenantRow | undefined)[]> {
    this.#batches++;
    this.#reads += ids.length;
    try {
      const { rows } = await this.#db.query<TenantRow>({
        // Named: parsed once per connection.
        name: 'tenants-by-ids',
        text: `SELECT ${TENANT_COLUMNS} FROM ${TENANT_FROM} WHERE t.id = ANY($1::uuid[])`,
        values: [[...new Set(ids)]],
      });
      const byId = new Map(rows.map((r) => [r.id, r]));
      return ids.map((id) => byId.get(id));
    } finally {
      const next = this.#waiting.shift();
      if (next) setImmediate(next);
      else this.#free++;
    }
  }
}

function concurrencyOf(opts: TenantReaderOptions): number {
  const n = opts.concurrency ?? 1;
  if (!Number.isInteger(n) || n < 1) throw new RangeError(`tenant read concurrency must be a positive integer, got ${opts.concurrency}`);
  return n;
}

/**
 * A reader on connections of its own (`concurrency` of them, with the API pool's settings), whose
 * sessions always use the statement's generic plan: with the default plan cache mode, Postgres
 * plans `= ANY($1)` again on every execution when batches hold few distinct ids, which costs
 * more than the read itself.
 */
export function createTenantReader(api: pg.Pool, opts: TenantReaderOptions = {}): TenantReader {
  const pool = new pg.Pool({ ...api.options, max: concurrencyOf(opts) });
  // A lost idle connection must not crash the process; the pool replaces it.
  pool.on('error', () => {});
  // Queued on a new connection before its first batch.
  pool.on('connect', (client) => void client.query('SET plan_cache_mode = force_generic_plan').catch(() => {}));
  return new TenantReader(pool, { ...opts, onClose: () => pool.end() });
}
