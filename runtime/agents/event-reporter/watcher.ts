/**
 * List + watch of one Argo kind across the cluster, in the manner of client-go's reflector: a
 * paginated list gives the state and a resourceVersion, a watch from that resourceVersion (with
 * bookmarks) gives every change after it; a closed watch resumes from the last resourceVersion
 * seen, a 410 Gone (the resourceVersion was compacted away) lists again, errors reconnect with
 * exponential backoff and full jitter. A kind whose CRD is not installed (404) or that this
 * replica may not read (403) is logged once and tried again every `absentRetryMs`.
 *
 * Back-pressure: the sink refuses an event when the report queue is full; the watch then stops
 * at the last event it took, waits for room and resumes from there, so no event is dropped and the
 * API server, not this process, holds what has not been read yet.
 */
import { CustomObjectsApi, type KubeConfig, Watch } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import { REPORTED_KINDS, type ReportedKind } from '../../protocol/events.ts';
import { backoffDelay } from '../common/backoff.ts';

type Obj = Record<string, unknown>;

export interface WatchSink {
  /** A current state (ADDED/MODIFIED); false when the queue is full and the watch must pause. */
  upsert(kind: ReportedKind, obj: Obj): boolean;
  /** A deletion; false when the queue is full. */
  remove(kind: ReportedKind, obj: Obj): boolean;
  /** A complete list: the sink replaces its cache and reports what changed (may wait for room). */
  relisted(kind: ReportedKind, items: Obj[], resourceVersion: string): Promise<void>;
  /** The cache is current at this resourceVersion (every event and bookmark). */
  advanced(kind: ReportedKind, resourceVersion: string): void;
  /** The watch resumed after an error: the sink schedules a digest. */
  reconnected(kind: ReportedKind): void;
  /** The kind cannot be read (CRD missing or forbidden), or can again. */
  availability(kind: ReportedKind, available: boolean): void;
  /** Resolves once the queue has room again. */
  waitForRoom(): Promise<void>;
  onRestart(kind: ReportedKind, reason: 'closed' | 'error' | 'gone' | 'paused'): void;
}

export interface WatcherOptions {
  kind: ReportedKind;
  kc: KubeConfig;
  sink: WatchSink;
  log: Logger;
  /** Delay between tries while the kind's CRD is missing (default 30 s). */
  absentRetryMs?: number;
  pageSize?: number;
}

type Outcome = 'closed' | 'gone' | 'paused' | { error: unknown };

const statusOf = (err: unknown): number | undefined => {
  const e = err as { code?: unknown; statusCode?: unknown };
  return typeof e?.code === 'number' ? e.code : typeof e?.statusCode === 'number' ? e.statusCode : undefined;
};

export class KindWatcher {
  readonly kind: ReportedKind;
  private readonly opts: WatcherOptions;
  private readonly api: CustomObjectsApi;
  private readonly watch: Watch;
  private readonly log: Logger;
  private resourceVersion: string | undefined;
  private stopped = false;
  private current: AbortController | undefined;
  private wake: (() => void) | undefined;
  private loop: Promise<void> | undefined;

  constructor(opts: WatcherOptions) {
    this.opts = opts;
    this.kind = opts.kind;
    this.api = opts.kc.makeApiClient(CustomObjectsApi);
    this.watch = new Watch(opts.kc);
    // The client aborts a watch silent for 30 s; the API server sends a bookmark only about once a
    // minute, so a quiet kind would reconnect all the time. A watch silent for 150 s is dead.
    // (The property is not part of the client's typed API, hence Object.assign.)
    Object.assign(this.watch, { requestTimeoutMs: 150_000 });
    this.log = opts.log.child({ kind: opts.kind });
  }

  start(): void {
    this.loop ??= this.run();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.current?.abort();
    this.wake?.();
    await this.loop;
  }

  private sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(done, ms);
      function done() {
        clearTimeout(timer);
        resolve();
      }
      this.wake = done;
    });
  }

  private async run(): Promise<void> {
    const { kind, sink } = this.opts;
    let attempt = 0;
    let unavailable = false;
    while (!this.stopped) {
      try {
        if (this.resourceVersion === undefined) {
          await this.list();
          if (unavailable) {
            unavailable = false;
            this.log.info('kind is readable again');
            sink.availability(kind, true);
          }
        }
        if (this.stopped) break;
        const outcome = await this.watchOnce(this.resourceVersion!);
        if (this.stopped) break;
        if (outcome === 'gone') {
          this.log.info(
            { resourceVersion: this.resourceVersion },
            'watch resourceVersion is gone (410); listing again',
          );
          this.resourceVersion = undefined;
          sink.onRestart(kind, 'gone');
        } else if (outcome === 'paused') {
          sink.onRestart(kind, 'paused');
          await sink.waitForRoom();
        } else if (outcome === 'closed') {
          sink.onRestart(kind, 'closed');
          attempt = 0;
        } else {
          throw outcome.error;
        }
      } catch (err) {
        if (this.stopped) break;
        const status = statusOf(err);
        if (status === 404 || status === 403) {
          if (!unavailable) {
            unavailable = true;
            this.log.warn(
              { status },
              status === 404
                ? `the ${kind} CRD is not installed; not reporting ${kind}s, trying again every ${Math.round((this.opts.absentRetryMs ?? 30_000) / 1000)} s`
                : `not allowed to list ${kind}s; trying again every ${Math.round((this.opts.absentRetryMs ?? 30_000) / 1000)} s`,
            );
            sink.availability(kind, false);
          }
          this.resourceVersion = undefined;
          await this.sleep(this.opts.absentRetryMs ?? 30_000);
          continue;
        }
        const delay = backoffDelay(attempt++, { initialMs: 500, maxMs: 30_000, factor: 2 });
        this.log.warn(
          { err: err instanceof Error ? err.message : String(err), status, retryInMs: delay },
          'watch failed; reconnecting',
        );
        sink.onRestart(kind, 'error');
        await this.sleep(delay);
        if (this.resourceVersion !== undefined) sink.reconnected(kind);
      }
    }
  }

  private async list(): Promise<void> {
    const { group, version, plural } = REPORTED_KINDS[this.kind];
    const items: Obj[] = [];
    let cont: string | undefined;
    let resourceVersion = '';
    do {
      const page = (await this.api.listClusterCustomObject({
        group,
        version,
        plural,
        limit: this.opts.pageSize ?? 500,
        ...(cont ? { _continue: cont } : {}),
      })) as { items?: Obj[]; metadata?: { resourceVersion?: string; continue?: string } };
      for (const item of page.items ?? []) items.push(item);
      resourceVersion = page.metadata?.resourceVersion ?? resourceVersion;
      cont = page.metadata?.continue || undefined;
    } while (cont && !this.stopped);
    if (this.stopped) return;
    this.log.debug({ count: items.length, resourceVersion }, 'listed');
    await this.opts.sink.relisted(this.kind, items, resourceVersion);
    this.resourceVersion = resourceVersion;
  }

  private watchOnce(from: string): Promise<Outcome> {
    const { group, version, plural } = REPORTED_KINDS[this.kind];
    const { sink, kind } = this.opts;
    return new Promise<Outcome>((resolve) => {
      let finished = false;
      const finish = (o: Outcome) => {
        if (finished) return;
        finished = true;
        this.current?.abort();
        resolve(o);
      };
      const onEvent = (type: string, obj: Obj) => {
        if (finished) return;
        const rv = (obj.metadata as { resourceVersion?: string } | undefined)?.resourceVersion;
        switch (type) {
          case 'ADDED':
          case 'MODIFIED':
            if (!sink.upsert(kind, obj)) return finish('paused');
            break;
          case 'DELETED':
            if (!sink.remove(kind, obj)) return finish('paused');
            break;
          case 'BOOKMARK':
            break;
          case 'ERROR': {
            const code = (obj as { code?: number }).code;
            if (code === 410) return finish('gone');
            const message = typeof obj.message === 'string' ? obj.message : 'watch error';
            return finish({ error: Object.assign(new Error(message), { code }) });
          }
          default:
            return;
        }
        if (rv) {
          this.resourceVersion = rv;
          sink.advanced(kind, rv);
        }
      };
      this.watch
        .watch(
          `/apis/${group}/${version}/${plural}`,
          { resourceVersion: from, allowWatchBookmarks: true, timeoutSeconds: 240 + Math.floor(Math.random() * 120) },
          onEvent,
          (err: unknown) => {
            // An idle watch timed out on the client: a normal end, resumed at once like a closed one.
            const idle = err instanceof Error && err.name === 'TimeoutError';
            finish(!err || idle ? 'closed' : statusOf(err) === 410 ? 'gone' : { error: err });
          },
        )
        .then(
          (controller) => {
            this.current = controller;
            if (finished || this.stopped) controller.abort();
          },
          (err: unknown) => finish({ error: err }),
        );
    });
  }
}
