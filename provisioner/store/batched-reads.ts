/**
 * Batched reads for the API's hot path: the tenant a status poll asks for (`GET /v1/tenants/:id`)
 * and the API key it presents when the key is not in the cache. Reads that arrive while earlier
 * ones are at the database wait and then go together, as one `= ANY($1)` statement: one round
 * trip and one backend wake-up for a batch instead of one per request.
 *
 * Consistency is the same as one query per request: a read only ever joins a batch that has not
 * been sent yet, so the snapshot it is answered from is taken after the request arrived, and a
 * write committed before the request (on any replica, by the reconciler, by hand) is visible.
 * Nothing is kept between batches (docs/decisions.md "Consistent tenant reads").
 */
import DataLoader from 'dataloader';
import pg from 'pg';
import { guardPool, healthOf } from '../db/availability.ts';
import type { Queryable } from '../db/tx.ts';
import { lookupKeyHashes, type KeyIdentity } from './keys.ts';
import { getTenantRows, type TenantRow } from './tenants.ts';

export interface BatchOptions {
  /** Batches at the database at once. Default 1: under load, batches grow instead. */
  concurrency?: number;
  /** Most reads in one statement. Default 200. */
  maxBatchSize?: number;
}

/** Reads of one kind, by string key, batched. */
export class BatchedReads<V> {
  readonly #loader: DataLoader<string, V | undefined>;
  readonly #load: (keys: string[]) => Promise<Map<string, V>>;
  #free: number;
  /** Batches formed while every slot was busy, oldest first; each is sent when a slot frees. */
  readonly #waiting: (() => void)[] = [];
  #batches = 0;
  #reads = 0;

  /** `load` answers a batch: the values of the keys it knows (each key once). */
  constructor(load: (keys: string[]) => Promise<Map<string, V>>, opts: BatchOptions = {}) {
    this.#load = load;
    this.#free = concurrencyOf(opts);
    this.#loader = new DataLoader((keys) => this.#run(keys), {
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

  /** The value of `key`, or undefined when there is none. */
  get(key: string): Promise<V | undefined> {
    return this.#loader.load(key);
  }

  /** Statements sent and reads answered so far (their ratio is the mean batch size). */
  stats(): { batches: number; reads: number } {
    return { batches: this.#batches, reads: this.#reads };
  }

  async #run(keys: readonly string[]): Promise<(V | undefined)[]> {
    this.#batches++;
    this.#reads += keys.length;
    try {
      const found = await this.#load([...new Set(keys)]);
      return keys.map((k) => found.get(k));
    } finally {
      const next = this.#waiting.shift();
      if (next) setImmediate(next);
      else this.#free++;
    }
  }
}

function concurrencyOf(opts: BatchOptions): number {
  const n = opts.concurrency ?? 1;
  if (!Number.isInteger(n) || n < 1)
    throw new RangeError(`read concurrency must be a positive integer, got ${opts.concurrency}`);
  return n;
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export interface HotReads {
  /** The tenant row (with its cluster name and live tunnel), or undefined when there is none. */
  readonly tenant: (id: string) => Promise<TenantRow | undefined>;
  /** The identity of a key by its SHA-256 (base64), or undefined when unknown or revoked. */
  readonly key: (hashBase64: string) => Promise<KeyIdentity | undefined>;
  /** Statements and reads so far, per kind. */
  stats(): { tenants: { batches: number; reads: number }; keys: { batches: number; reads: number } };
  /** Releases the connections; call after the API stopped serving. */
  close(): Promise<void>;
}

/** The hot reads on `db` (tests); see createHotReads for the product's. */
export function hotReadsOn(
  db: Queryable,
  opts: BatchOptions = {},
  close: () => Promise<void> = async () => {},
): HotReads {
  const tenants = new BatchedReads((ids) => getTenantRows(db, ids), opts);
  const keys = new BatchedReads((hashes) => lookupKeyHashes(db, hashes), opts);
  return {
    tenant: (id) => (UUID.test(id) ? tenants.get(id.toLowerCase()) : Promise.resolve(undefined)),
    key: (hash) => keys.get(hash),
    stats: () => ({ tenants: tenants.stats(), keys: keys.stats() }),
    close,
  };
}

/**
 * The hot reads on connections of their own (`concurrency` per kind, with the API pool's
 * settings), whose sessions always use a statement's generic plan: with the default plan cache
 * mode, Postgres plans `= ANY($1)` again on every execution when batches hold few distinct keys,
 * which costs more than the read itself.
 */
export const HOT_READS_APPLICATION_NAME = 'provisioner-hot-reads';

export function createHotReads(api: pg.Pool, opts: BatchOptions = {}): HotReads {
  const pool = new pg.Pool({
    ...api.options,
    max: 2 * concurrencyOf(opts),
    options: '-c plan_cache_mode=force_generic_plan',
    // Named in pg_stat_activity, so an operator (and the tests) can tell these sessions apart.
    application_name: HOT_READS_APPLICATION_NAME,
  });
  // A lost connection, idle or reading, must not crash the process; it reports to the API pool's health.
  guardPool(pool, healthOf(api));
  return hotReadsOn(pool, opts, () => pool.end());
}
