/**
 * Applications' history as the API serves it (docs/api.md "Application history"): an application's
 * entries newest first, its change stream (every entry written, as it is written on any replica,
 * woken through the notifications hub on `application_history`, payload: the runtime id), and the
 * retention loop. Entries are written by the event batch ingest (runtime-objects/service.ts) in the
 * transaction that stores the batch; their rules are app-history/rules.ts.
 */
import type pg from 'pg';
import type { FastifyRequest } from 'fastify';
import type { Logger } from 'pino';
import { ChannelWaiters } from '../db/channel-waiters.ts';
import type { Notifications } from '../db/notifications.ts';
import { Pruner } from '../loops/pruner.ts';
import { getRuntimeByName } from '../store/runtimes.ts';
import { fetchDiff, type DiffRequest, type DiffRuntime, type DiffTransport } from './diff.ts';
import {
  APPLICATION_HISTORY_CHANNEL,
  applicationReported,
  latestHistorySeq,
  listHistoryJson,
  pruneHistory,
  readHistoryChanges,
  type ApplicationRef,
  type HistoryJsonRow,
  type HistoryRow,
} from '../store/application-history.ts';

export interface FollowHistoryOptions {
  /** Start after this write (0: every entry, then every write). */
  afterSeq: string;
  signal: AbortSignal;
  /** Polling interval when no notification arrives (default 2000 ms). */
  pollMs?: number;
  /** Rows read per query (default 200). */
  batch?: number;
}

/**
 * The `app-history-pruner` loop: deletes entries recorded more than `retentionDays` ago, 500 per
 * transaction, skipping rows another replica's batch holds (loops/pruner.ts).
 */
export function historyPruner(pool: pg.Pool, retentionDays: number, log?: Logger): Pruner {
  return new Pruner({
    name: 'app-history-pruner',
    pool,
    batch: (db, limit) => pruneHistory(db, retentionDays, limit),
    what: 'deleted application history entries older than PROVISIONER_APP_HISTORY_RETENTION_DAYS',
    log,
  });
}

export class AppHistoryService {
  readonly #pool: pg.Pool;
  readonly #transport: DiffTransport | undefined;
  readonly #waiters: ChannelWaiters;

  constructor(opts: { pool: pg.Pool; notifications?: Notifications; transport?: DiffTransport }) {
    this.#pool = opts.pool;
    this.#waiters = new ChannelWaiters(opts.notifications, APPLICATION_HISTORY_CHANNEL);
    this.#transport = opts.transport;
  }

  /** The tenant's runtime of that name (not removed) as the diff reaches it, or undefined. */
  async runtime(tenantId: string, name: string): Promise<DiffRuntime | undefined> {
    const row = await getRuntimeByName(this.#pool, tenantId, name);
    return (
      row && {
        tenantId,
        name: row.name,
        mode: row.mode,
        id: row.id,
        access: row.access,
        ingressUrl: row.ingress_url,
        state: row.state,
      }
    );
  }

  /** The application's diff from its runtime's Source Server (app-history/diff.ts). */
  diff(request: FastifyRequest, runtime: DiffRuntime, diff: DiffRequest): ReturnType<typeof fetchDiff> {
    if (!this.#transport) throw new Error('AppHistoryService: no transport to reach runtimes');
    return fetchDiff(this.#transport, request, runtime, diff);
  }

  /** The application's entries newest first, after a keyset position of a previous page, each as the API's JSON text. */
  listJson(
    app: ApplicationRef,
    runtimeName: string,
    limit: number,
    after?: { recordedKey: string; id: string },
  ): Promise<HistoryJsonRow[]> {
    return listHistoryJson(this.#pool, app, runtimeName, limit, after);
  }

  /** Whether the runtime ever reported the application (its history may be empty). */
  reported(app: ApplicationRef): Promise<boolean> {
    return applicationReported(this.#pool, app);
  }

  /** Where a stream asking for new writes only starts. */
  latestSeq(app: ApplicationRef): Promise<string> {
    return latestHistorySeq(this.#pool, app);
  }

  /**
   * The application's entries written after `afterSeq`, then new writes as they are stored (on any
   * replica), until `signal` aborts. An entry appears at its latest write only (its row carries one seq).
   */
  async *follow(app: ApplicationRef, opts: FollowHistoryOptions): AsyncGenerator<HistoryRow> {
    let after = opts.afterSeq;
    const batch = opts.batch ?? 200;
    const pollMs = opts.pollMs ?? 2000;
    while (!opts.signal.aborted) {
      const armed = this.#waiters.arm(app.runtimeId, pollMs, opts.signal);
      const rows = await readHistoryChanges(this.#pool, app, after, batch);
      if (rows.length > 0) armed.cancel();
      for (const row of rows) {
        if (opts.signal.aborted) return;
        after = row.seq;
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
