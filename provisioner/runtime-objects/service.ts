/**
 * The control plane's side of the event reporter (runtime/protocol/events.ts): applies a runtime's
 * event batches to the stored application state (store/runtime-objects.ts) in one transaction,
 * and follows a runtime's changes for the change stream, woken through the notifications hub on
 * `runtime_object` (payload: the runtime id) by whichever replica stored them.
 *
 * A batch is stored under the runtime its key names: a hybrid runtime's key (api_keys.runtime_id)
 * under that runtime, the hosted runtime's key under the tenant's hosted runtime row. A hybrid
 * runtime's accepted batches are also its heartbeat (runtimes.last_heartbeat_at, with the version
 * and watched kinds its reporter's heartbeat states), written at most once per
 * RUNTIME_HEARTBEAT_WRITE_SECONDS per runtime unless what it states changed.
 */
import type pg from 'pg';
import { ChannelWaiters } from '../db/channel-waiters.ts';
import type { Notifications } from '../db/notifications.ts';
import { withTx } from '../db/tx.ts';
import {
  digestCandidates,
  getObject,
  listObjects,
  latestSeq,
  lockTenantObjects,
  notifyObjectChanges,
  readUsage,
  readChanges,
  readHorizon,
  hostedRuntimeId,
  recordReporter,
  runtimeByName,
  removeObjects,
  RUNTIME_OBJECT_CHANNEL,
  upsertObjects,
  type ObjectFilter,
  type ObjectWrite,
  type PurgeHorizon,
  type RuntimeObjectRow,
  type RuntimeRef,
} from '../store/runtime-objects.ts';
import { hybridRuntimeLive, recordRuntimeHeartbeat } from '../store/runtimes.ts';
import {
  isOwner,
  STALE_AFTER_SECONDS,
  type EventBatch,
  type EventBatchResult,
  type Heartbeat,
} from '../../runtime/protocol/events.ts';
import type { ReportedKind } from '../../runtime/protocol/kinds.ts';
import { prepareBatch } from './ingest.ts';
import { notifyHistory, trimTenantHistory, writeHistory } from '../store/application-history.ts';
import type { HistoryWrite } from '../app-history/rules.ts';
import { WindowBudget } from './budgets.ts';
import { errors } from '../errors.ts';
import { DEFAULT_TENANT_BUDGETS, type TenantBudgets } from '../config.ts';

/** What ingestion reports to the metrics. */
export interface IngestStats {
  onBatch(result: EventBatchResult & { items: number }): void;
  onRefused(budget: 'objects' | 'bytes' | 'batch_rate' | 'digest_rate' | 'in_flight'): void;
}

/** What one tenant's runtime may store and send (config.budgets, docs/security.md). */
export type IngestBudgets = Pick<
  TenantBudgets,
  | 'runtimeObjects'
  | 'runtimeObjectBytes'
  | 'eventBatchesPerSecond'
  | 'digestsPerMinute'
  | 'appHistoryEntries'
  | 'appHistoryBytes'
>;

export interface FollowChangesOptions {
  /** Start after this change (0: every live object, then every change). */
  afterSeq: string;
  kind?: ReportedKind;
  signal: AbortSignal;
  /** Polling interval when no notification arrives (default 2000 ms). */
  pollMs?: number;
  /** Rows read per query (default 500). */
  batch?: number;
}

/**
 * The longest a hybrid runtime's `last_heartbeat_at` lags its newest accepted batch (per replica of
 * the control plane): its reporter's two replicas may send up to PROVISIONER_RUNTIME_EVENT_BATCHES_PER_SECOND
 * batches each, and a write of the runtime's row per batch would make that one row as hot as the
 * objects themselves (a row version and WAL each time). A quarter of STALE_AFTER_SECONDS: a runtime
 * that reports (a heartbeat every HEARTBEAT_INTERVAL_SECONDS) never looks stale because of it.
 */
export const RUNTIME_HEARTBEAT_WRITE_SECONDS = STALE_AFTER_SECONDS / 4;

/** Who sent a batch: its key's tenant and, for a hybrid runtime's key, that runtime. */
export interface BatchSource {
  tenantId: string;
  /** The hybrid runtime the key is bound to (api_keys.runtime_id); null: the tenant's hosted runtime. */
  runtimeId: string | null;
}

/** What a hybrid runtime's row says of its agents, as this process last wrote it. */
interface WrittenHeartbeat {
  atMs: number;
  version: string | null;
  argoCdListed: boolean | null;
}

/** Entries of the in-process caches (hosted runtime ids, written heartbeats) before they are cleared. */
const CACHE_LIMIT = 10_000;

/**
 * Batches of one tenant applied or waiting for its lock at once in this process: each holds a pool
 * connection while it waits, so a runtime sending many at once would take the pool from the other
 * tenants. Four: the reporter's two replicas and, during a rollout, their two successors.
 */
export const MAX_BATCHES_IN_FLIGHT_PER_TENANT = 4;

/** The longest a digest works out owners before it lets other requests run (setImmediate). */
export const OWNERSHIP_SLICE_MS = 5;

/**
 * The candidates `replica` owns among `members`, in slices of at most about OWNERSHIP_SLICE_MS
 * with a turn of the event loop between them: at most candidates × members hashes in all (the
 * stored objects of one kind, bounded by the tenant's object budget, times MAX_DIGEST_MEMBERS;
 * usually one or two per candidate, isOwner), never in one piece.
 */
async function ownedByReplica<K extends { namespace: string; name: string }>(
  candidates: readonly K[],
  kind: ReportedKind,
  replica: string,
  members: readonly string[],
): Promise<K[]> {
  const mine: K[] = [];
  let sliceStart = performance.now();
  for (let i = 0; i < candidates.length; i++) {
    if (i % 32 === 0 && performance.now() - sliceStart >= OWNERSHIP_SLICE_MS) {
      await new Promise<void>((resolve) => setImmediate(resolve));
      sliceStart = performance.now();
    }
    const k = candidates[i]!;
    if (isOwner(replica, { kind, namespace: k.namespace, name: k.name }, members)) mine.push(k);
  }
  return mine;
}

export class RuntimeObjectService {
  readonly #pool: pg.Pool;
  readonly #stats: IngestStats | undefined;
  readonly #waiters: ChannelWaiters;
  readonly #budgets: IngestBudgets;
  readonly #batchRate: WindowBudget;
  readonly #digestRate: WindowBudget;
  readonly #inFlight = new Map<string, number>();
  /** Tenant → its hosted runtime's id: made with the tenant and never changed. */
  readonly #hosted = new Map<string, string>();
  readonly #heartbeats = new Map<string, WrittenHeartbeat>();

  constructor(opts: { pool: pg.Pool; notifications?: Notifications; stats?: IngestStats; budgets?: IngestBudgets }) {
    this.#pool = opts.pool;
    this.#waiters = new ChannelWaiters(opts.notifications, RUNTIME_OBJECT_CHANNEL);
    this.#stats = opts.stats;
    this.#budgets = opts.budgets ?? DEFAULT_TENANT_BUDGETS;
    this.#batchRate = new WindowBudget(this.#budgets.eventBatchesPerSecond, 1000);
    this.#digestRate = new WindowBudget(this.#budgets.digestsPerMinute, 60_000);
  }

  /** Takes one batch (and its digests) of the tenant's rates, or refuses it with 429 and Retry-After. */
  #admit(tenantId: string, digests: number): void {
    const batchWait = this.#batchRate.take(tenantId);
    if (batchWait !== undefined) {
      this.#stats?.onRefused('batch_rate');
      throw errors.rateLimited(
        batchWait,
        `this runtime already sent ${this.#budgets.eventBatchesPerSecond} event batches this second (PROVISIONER_RUNTIME_EVENT_BATCHES_PER_SECOND)`,
      );
    }
    if (digests === 0) return;
    const digestWait = this.#digestRate.take(tenantId, digests);
    if (digestWait !== undefined) {
      this.#stats?.onRefused('digest_rate');
      throw errors.rateLimited(
        digestWait,
        `this runtime already sent ${this.#budgets.digestsPerMinute} digests this minute (PROVISIONER_RUNTIME_DIGESTS_PER_MINUTE); send the batch again without them or later`,
      );
    }
  }

  /**
   * Refuses (413, rolling the transaction back) a batch that took the tenant's stored objects over
   * a budget it was within or that grew them further; a batch that shrinks them, or keeps them, passes.
   */
  async #checkUsage(c: pg.ClientBase, tenantId: string, before: { objects: number; bytes: number }): Promise<void> {
    const after = await readUsage(c, tenantId);
    const { runtimeObjects, runtimeObjectBytes } = this.#budgets;
    if (after.objects > runtimeObjects && after.objects > before.objects) {
      this.#stats?.onRefused('objects');
      throw errors.runtimeObjectBudgetExceeded(
        'objects',
        after.objects,
        runtimeObjects,
        'PROVISIONER_RUNTIME_OBJECTS_PER_TENANT',
      );
    }
    if (after.bytes > runtimeObjectBytes && after.bytes > before.bytes) {
      this.#stats?.onRefused('bytes');
      throw errors.runtimeObjectBudgetExceeded(
        'bytes',
        after.bytes,
        runtimeObjectBytes,
        'PROVISIONER_RUNTIME_OBJECT_BYTES_PER_TENANT',
      );
    }
  }

  /** The tenant's hosted runtime, or undefined for an unknown tenant. */
  async hostedRuntime(tenantId: string): Promise<RuntimeRef | undefined> {
    let runtimeId = this.#hosted.get(tenantId);
    if (runtimeId === undefined) {
      runtimeId = await hostedRuntimeId(this.#pool, tenantId);
      if (runtimeId === undefined) return undefined;
      if (this.#hosted.size >= CACHE_LIMIT) this.#hosted.clear();
      this.#hosted.set(tenantId, runtimeId);
    }
    return { tenantId, runtimeId };
  }

  /**
   * Applies a batch of the source's runtime: each item only when newer than the stored state,
   * digests, the heartbeat, in one transaction (all or nothing: a failed batch is retried whole).
   * `checkObjectSizes`: the body is large enough to hold an oversized `object`. The tenant's
   * budgets (rates, batches in flight, stored objects and bytes) are shared by all its runtimes.
   */
  async ingest(source: BatchSource, batch: EventBatch, checkObjectSizes = true): Promise<EventBatchResult> {
    const { tenantId } = source;
    const { writes, history } = prepareBatch(batch, checkObjectSizes);
    const inFlight = this.#inFlight.get(tenantId) ?? 0;
    if (inFlight >= MAX_BATCHES_IN_FLIGHT_PER_TENANT) {
      this.#stats?.onRefused('in_flight');
      throw errors.rateLimited(
        1,
        `this runtime already has ${MAX_BATCHES_IN_FLIGHT_PER_TENANT} event batches in progress; send the next when one is answered`,
      );
    }
    this.#admit(tenantId, batch.digests?.length ?? 0);
    this.#inFlight.set(tenantId, inFlight + 1);
    try {
      const ref: RuntimeRef | undefined =
        source.runtimeId === null ? await this.hostedRuntime(tenantId) : { tenantId, runtimeId: source.runtimeId };
      if (!ref) throw errors.notFound('tenant', tenantId);
      return await this.#apply(ref, source.runtimeId !== null, batch, writes, history);
    } finally {
      const n = (this.#inFlight.get(tenantId) ?? 1) - 1;
      if (n > 0) this.#inFlight.set(tenantId, n);
      else this.#inFlight.delete(tenantId);
    }
  }

  async #apply(
    ref: RuntimeRef,
    hybrid: boolean,
    batch: EventBatch,
    writes: ObjectWrite[],
    history: HistoryWrite[],
  ): Promise<EventBatchResult> {
    const { tenantId } = ref;
    const heartbeat = hybrid ? this.#heartbeatDue(ref.runtimeId, batch.heartbeat) : undefined;
    const result = await withTx(this.#pool, async (c) => {
      await lockTenantObjects(c, tenantId);
      // Removal deletes a runtime's objects under the same lock, then revokes its key.
      if (hybrid && !(await hybridRuntimeLive(c, ref.runtimeId))) throw errors.invalidKey();
      const before = await readUsage(c, tenantId);
      const applied = await upsertObjects(c, ref, batch.replica, writes);
      // The applications' history, from the reports now stored (app-history/rules.ts); the
      // tenant's oldest entries beyond its budget go in the same transaction.
      const entries = await writeHistory(c, ref, history);
      if (entries.inserted > 0)
        await trimTenantHistory(c, tenantId, this.#budgets.appHistoryEntries, this.#budgets.appHistoryBytes);
      if (entries.written > 0) await notifyHistory(c, ref.runtimeId);
      let removedByDigest = 0;
      for (const d of batch.digests ?? []) {
        const present = d.objects.map((o) => ({ namespace: o.namespace, name: o.name }));
        const candidates = await digestCandidates(c, ref, d.kind, d.listResourceVersion, present);
        const mine = await ownedByReplica(candidates, d.kind, d.replica, d.members);
        removedByDigest += await removeObjects(c, ref, d.kind, d.listResourceVersion, d.replica, mine);
      }
      await this.#checkUsage(c, tenantId, before);
      await recordReporter(c, ref, batch.replica, batch.heartbeat);
      if (heartbeat)
        await recordRuntimeHeartbeat(c, ref.runtimeId, {
          version: heartbeat.version,
          argoCdListed: heartbeat.argoCdListed,
          minIntervalSeconds: RUNTIME_HEARTBEAT_WRITE_SECONDS,
        });
      if (applied + removedByDigest > 0) await notifyObjectChanges(c, ref.runtimeId);
      return { applied, stale: batch.items.length - applied, removedByDigest };
    });
    if (heartbeat) {
      if (this.#heartbeats.size >= CACHE_LIMIT) this.#heartbeats.clear();
      this.#heartbeats.set(ref.runtimeId, heartbeat);
    }
    this.#stats?.onBatch({ ...result, items: batch.items.length });
    return result;
  }

  /**
   * What a hybrid runtime's row should say after this batch, or undefined when this process wrote
   * the same within RUNTIME_HEARTBEAT_WRITE_SECONDS. The version and the watched kinds come from a
   * batch's heartbeat (each replica's, every HEARTBEAT_INTERVAL_SECONDS); a batch without one
   * keeps what the row says.
   */
  #heartbeatDue(runtimeId: string, hb: Heartbeat | undefined): WrittenHeartbeat | undefined {
    const last = this.#heartbeats.get(runtimeId);
    const now = performance.now();
    const version = hb?.runtimeVersion ?? last?.version ?? null;
    const argoCdListed = hb?.listed ? hb.listed.includes('Application') : (last?.argoCdListed ?? null);
    if (
      last &&
      now - last.atMs < RUNTIME_HEARTBEAT_WRITE_SECONDS * 1000 &&
      version === last.version &&
      argoCdListed === last.argoCdListed
    )
      return undefined;
    return { atMs: now, version, argoCdListed };
  }

  /** The tenant's runtime of that name (not removed), or undefined. */
  runtime(tenantId: string, name: string): Promise<RuntimeRef | undefined> {
    return runtimeByName(this.#pool, tenantId, name);
  }

  list(ref: RuntimeRef, filter: ObjectFilter): Promise<RuntimeObjectRow[]> {
    return listObjects(this.#pool, ref, filter);
  }

  get(ref: RuntimeRef, kind: ReportedKind, namespace: string, name: string): Promise<RuntimeObjectRow | undefined> {
    return getObject(this.#pool, ref, kind, namespace, name);
  }

  /** What the runtime's purged tombstones left (undefined: none was purged). */
  horizon(ref: RuntimeRef): Promise<PurgeHorizon | undefined> {
    return readHorizon(this.#pool, ref);
  }

  /** Where a stream asking for new changes only starts. */
  latestSeq(ref: RuntimeRef): Promise<string> {
    return latestSeq(this.#pool, ref);
  }

  /**
   * The runtime's changes after `afterSeq`, then new ones as they are stored (on any replica), until
   * `signal` aborts. Each object appears at its latest change only (its row carries one seq).
   */
  async *follow(ref: RuntimeRef, opts: FollowChangesOptions): AsyncGenerator<RuntimeObjectRow> {
    let after = opts.afterSeq;
    const batch = opts.batch ?? 500;
    const pollMs = opts.pollMs ?? 2000;
    // From the start, a client knows no object: deletions it could not have seen are left out (those
    // stored before the stream began; one stored since is sent, it may remove what the replay showed).
    const replayUpTo = after === '0' ? BigInt(await latestSeq(this.#pool, ref)) : 0n;
    while (!opts.signal.aborted) {
      const armed = this.#waiters.arm(ref.runtimeId, pollMs, opts.signal);
      const rows = await readChanges(this.#pool, ref, after, batch, opts.kind);
      if (rows.length > 0) armed.cancel();
      for (const row of rows) {
        if (opts.signal.aborted) return;
        after = row.seq;
        if (row.deleted && BigInt(row.seq) <= replayUpTo) continue;
        yield row;
      }
      if (rows.length === 0) await armed.done;
    }
  }

  /** Wakes every follower (they see their signal) and stops listening. */
  close(): void {
    this.#waiters.close();
  }
}
