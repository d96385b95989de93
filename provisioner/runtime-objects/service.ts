/**
 * The control plane's side of the event reporter (runtime/protocol/events.ts): applies a runtime's
 * event batches to the stored application state (store/runtime-objects.ts) in one transaction,
 * and follows a tenant's changes for the change stream, woken through the notifications hub on
 * `runtime_object` (payload: the tenant id) by whichever replica stored them.
 */
import type pg from 'pg';
import type { Notifications, Unsubscribe } from '../db/notifications.ts';
import { withTx } from '../db/tx.ts';
import {
  digestCandidates,
  getObject,
  listObjects,
  latestSeq,
  lockTenantObjects,
  notifyObjectChanges,
  readChanges,
  readHorizon,
  recordReporter,
  removeObjects,
  RUNTIME_OBJECT_CHANNEL,
  upsertObjects,
  type ObjectFilter,
  type PurgeHorizon,
  type RuntimeObjectRow,
} from '../store/runtime-objects.ts';
import { isOwner, type EventBatch, type EventBatchResult, type ReportedKind } from '../../runtime/protocol/events.ts';
import { prepareBatch } from './ingest.ts';

/** What ingestion reports to the metrics. */
export interface IngestStats {
  onBatch(result: EventBatchResult & { items: number }): void;
}

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
  readonly #notifications: Notifications | undefined;
  readonly #stats: IngestStats | undefined;
  readonly #waiters = new Map<string, Set<() => void>>();
  #unsubscribe: Unsubscribe | undefined;

  constructor(opts: { pool: pg.Pool; notifications?: Notifications; stats?: IngestStats }) {
    this.#pool = opts.pool;
    this.#notifications = opts.notifications;
    this.#stats = opts.stats;
  }

  /**
   * Applies a batch of `tenantId`'s runtime: each item only when newer than the stored state,
   * digests, the heartbeat, in one transaction (all or nothing: a failed batch is retried whole).
   * `checkObjectSizes`: the body is large enough to hold an oversized `object`.
   */
  async ingest(tenantId: string, batch: EventBatch, checkObjectSizes = true): Promise<EventBatchResult> {
    const { writes } = prepareBatch(batch, checkObjectSizes);
    const result = await withTx(this.#pool, async (c) => {
      await lockTenantObjects(c, tenantId);
      const applied = await upsertObjects(c, tenantId, batch.replica, writes);
      let removedByDigest = 0;
      for (const d of batch.digests ?? []) {
        const present = d.objects.map((o) => ({ namespace: o.namespace, name: o.name }));
        const candidates = await digestCandidates(c, tenantId, d.kind, d.listResourceVersion, present);
        const mine = await ownedByReplica(candidates, d.kind, d.replica, d.members);
        removedByDigest += await removeObjects(c, tenantId, d.kind, d.listResourceVersion, d.replica, mine);
      }
      await recordReporter(c, tenantId, batch.replica, batch.heartbeat);
      if (applied + removedByDigest > 0) await notifyObjectChanges(c, tenantId);
      return { applied, stale: batch.items.length - applied, removedByDigest };
    });
    this.#stats?.onBatch({ ...result, items: batch.items.length });
    return result;
  }

  list(tenantId: string, filter: ObjectFilter): Promise<RuntimeObjectRow[]> {
    return listObjects(this.#pool, tenantId, filter);
  }

  get(tenantId: string, kind: ReportedKind, namespace: string, name: string): Promise<RuntimeObjectRow | undefined> {
    return getObject(this.#pool, tenantId, kind, namespace, name);
  }

  /** What the tenant's purged tombstones left (undefined: none was purged). */
  horizon(tenantId: string): Promise<PurgeHorizon | undefined> {
    return readHorizon(this.#pool, tenantId);
  }

  /** Where a stream asking for new changes only starts. */
  latestSeq(tenantId: string): Promise<string> {
    return latestSeq(this.#pool, tenantId);
  }

  /**
   * The tenant's changes after `afterSeq`, then new ones as they are stored (on any replica), until
   * `signal` aborts. Each object appears at its latest change only (its row carries one seq).
   */
  async *follow(tenantId: string, opts: FollowChangesOptions): AsyncGenerator<RuntimeObjectRow> {
    let after = opts.afterSeq;
    const batch = opts.batch ?? 500;
    const pollMs = opts.pollMs ?? 2000;
    // From the start, a client knows no object: deletions it could not have seen are left out (those
    // stored before the stream began; one stored since is sent, it may remove what the replay showed).
    const replayUpTo = after === '0' ? BigInt(await latestSeq(this.#pool, tenantId)) : 0n;
    while (!opts.signal.aborted) {
      const armed = this.#arm(tenantId, pollMs, opts.signal);
      const rows = await readChanges(this.#pool, tenantId, after, batch, opts.kind);
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

  #ensureListening(): void {
    if (this.#unsubscribe || !this.#notifications) return;
    this.#unsubscribe = this.#notifications.subscribe(
      RUNTIME_OBJECT_CHANNEL,
      (tenantId) => this.#wake(tenantId),
      // After a reconnect anything may have been missed: every follower reads again.
      () => {
        for (const id of [...this.#waiters.keys()]) this.#wake(id);
      },
    );
  }

  #wake(tenantId: string): void {
    for (const fn of [...(this.#waiters.get(tenantId) ?? [])]) fn();
  }

  /** A wait armed before reading: resolves on a notification for the tenant, after `ms`, or on abort. */
  #arm(tenantId: string, ms: number, signal: AbortSignal): { done: Promise<void>; cancel: () => void } {
    this.#ensureListening();
    let set = this.#waiters.get(tenantId);
    if (!set) this.#waiters.set(tenantId, (set = new Set()));
    const waiters = set;
    let finish: () => void = () => {};
    const done = new Promise<void>((resolve) => {
      const timer = setTimeout(() => finish(), ms);
      finish = () => {
        clearTimeout(timer);
        signal.removeEventListener('abort', finish);
        waiters.delete(finish);
        if (waiters.size === 0 && this.#waiters.get(tenantId) === waiters) this.#waiters.delete(tenantId);
        resolve();
      };
    });
    signal.addEventListener('abort', finish, { once: true });
    waiters.add(finish);
    return { done, cancel: finish };
  }

  /** Wakes every follower (they see their signal) and stops listening. */
  close(): void {
    for (const id of [...this.#waiters.keys()]) this.#wake(id);
    this.#unsubscribe?.();
    this.#unsubscribe = undefined;
  }
}
