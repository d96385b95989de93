/**
 * List + watch of one kind across the cluster, in the manner of client-go's reflector: a
 * paginated list gives the state and a resourceVersion, a watch from that resourceVersion (with
 * bookmarks) gives every change after it; a closed watch resumes from the last resourceVersion
 * seen, a 410 Gone (the resourceVersion was compacted away) lists again, errors reconnect with
 * exponential backoff and full jitter. A kind whose CRD is not installed (404) or that this
 * client may not read (403) is logged once and tried again every `absentRetryMs`.
 *
 * Shared by the runtime's event reporter (Argo kinds in a vcluster) and the provisioner's watch
 * of the objects the tenants program owns on the root clusters. Unlike client-node's informer it
 * keeps no copy of the objects: the sink decides what to keep.
 *
 * Back-pressure: the sink refuses an event when the report queue is full; the watch then stops
 * at the last event it took, waits for room and resumes from there, so no event is dropped and the
 * API server, not this process, holds what has not been read yet.
 */
import type { KubeConfig } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import { statusError, type KubeTransport } from './transport.ts';
import { backoffDelay } from '../agents/common/backoff.ts';
import { armWait } from '../loops/wait.ts';

type Obj = Record<string, unknown>;

/** One page of a list: the items and the list's resourceVersion and continue token. */
export interface ListPage {
  items?: Obj[];
  metadata?: { resourceVersion?: string; continue?: string };
}

export interface WatchSink<ReportedKind extends string = string> {
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

export interface WatcherOptions<ReportedKind extends string = string> {
  kind: ReportedKind;
  /**
   * How the API server is reached: `transport`, or a client-node KubeConfig (then client-node is
   * loaded, at the first list: the event reporter passes a transport and never loads it).
   */
  kc?: KubeConfig;
  transport?: KubeTransport;
  sink: WatchSink<ReportedKind>;
  log: Logger;
  /** The collection's path (`/api/v1/namespaces`, `/apis/argoproj.io/v1alpha1/applications`). */
  path: string;
  /** Label and field selectors of both the list and the watch. */
  labelSelector?: string;
  fieldSelector?: string;
  /** Lists one page; undefined: a GET of `path` with the client's credentials. */
  list?: (page: { limit: number; continue?: string }) => Promise<ListPage>;
  /** Log lines for a kind that is missing (404) or forbidden (403). */
  absentMessage?: string;
  forbiddenMessage?: string;
  /** Delay between tries while the kind's CRD is missing (default 30 s). */
  absentRetryMs?: number;
  /** Cap of the reconnect backoff after errors (default 30 s). */
  maxBackoffMs?: number;
  pageSize?: number;
}

type Outcome = 'closed' | 'gone' | 'paused' | { error: unknown };

const statusOf = (err: unknown): number | undefined => {
  const e = err as { code?: unknown; statusCode?: unknown };
  return typeof e?.code === 'number' ? e.code : typeof e?.statusCode === 'number' ? e.statusCode : undefined;
};

export class Reflector<ReportedKind extends string = string> {
  readonly kind: ReportedKind;
  private readonly opts: WatcherOptions<ReportedKind>;
  private transport: KubeTransport | undefined;
  private readonly log: Logger;
  private resourceVersion: string | undefined;
  private stopped = false;
  private current: AbortController | undefined;
  private wake: (() => void) | undefined;
  private loop: Promise<void> | undefined;

  constructor(opts: WatcherOptions<ReportedKind>) {
    this.opts = opts;
    this.kind = opts.kind;
    if (!opts.transport && !opts.kc) throw new Error('Reflector: give it a transport or a KubeConfig');
    this.transport = opts.transport;
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
    const wait = armWait(ms);
    this.wake = wait.wake;
    return wait.done;
  }

  /**
   * The transport; a KubeConfig's is made on first use. A watch silent for 150 s is dead: the API
   * server sends a bookmark about once a minute.
   */
  private async kube(): Promise<KubeTransport> {
    this.transport ??= (await import('./client-node-transport.ts')).clientNodeTransport(this.opts.kc!, 150_000);
    return this.transport;
  }

  private async run(): Promise<void> {
    const { kind, sink } = this.opts;
    let attempt = 0;
    let failing = 0;
    let unavailable = false;
    while (!this.stopped) {
      try {
        if (this.resourceVersion === undefined) {
          await this.list();
          if (failing > 0) {
            this.log.info({ failures: failing }, 'listed again after failures');
            failing = 0;
          }
          if (unavailable) {
            unavailable = false;
            this.log.info('kind is readable again');
            sink.availability(kind, true);
          }
        }
        if (this.stopped) break;
        const outcome = await this.watchOnce(this.resourceVersion!);
        if (this.stopped) break;
        if (failing > 0 && typeof outcome === 'string') {
          this.log.info({ failures: failing }, 'watch reconnected');
          failing = 0;
        }
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
            const every = `trying again every ${Math.round((this.opts.absentRetryMs ?? 30_000) / 1000)} s`;
            this.log.warn(
              { status },
              status === 404
                ? `${this.opts.absentMessage ?? `${kind}s cannot be listed here (404)`}; ${every}`
                : `${this.opts.forbiddenMessage ?? `not allowed to list ${kind}s`}; ${every}`,
            );
            sink.availability(kind, false);
          }
          this.resourceVersion = undefined;
          await this.sleep(this.opts.absentRetryMs ?? 30_000);
          continue;
        }
        const delay = backoffDelay(attempt++, { initialMs: 500, maxMs: this.opts.maxBackoffMs ?? 30_000, factor: 2 });
        // The first failure of a run of them is a warning; the retries of an API server that stays
        // away are debug lines until it answers again (then one info line with their count).
        this.log[failing++ === 0 ? 'warn' : 'debug'](
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
    const items: Obj[] = [];
    let cont: string | undefined;
    let resourceVersion = '';
    const list = this.opts.list ?? ((page) => this.getPage(page));
    do {
      const page = await list({ limit: this.opts.pageSize ?? 500, ...(cont ? { continue: cont } : {}) });
      for (const item of page.items ?? []) items.push(item);
      resourceVersion = page.metadata?.resourceVersion ?? resourceVersion;
      cont = page.metadata?.continue || undefined;
    } while (cont && !this.stopped);
    if (this.stopped) return;
    this.log.debug({ count: items.length, resourceVersion }, 'listed');
    await this.opts.sink.relisted(this.kind, items, resourceVersion);
    this.resourceVersion = resourceVersion;
  }

  /** One page of the collection as the API server sends it (raw JSON, as watch events are). */
  private async getPage(page: { limit: number; continue?: string }): Promise<ListPage> {
    const res = await (
      await this.kube()
    ).request(this.opts.path, {
      query: {
        ...this.selectors(),
        limit: String(page.limit),
        ...(page.continue ? { continue: page.continue } : {}),
      },
      signal: AbortSignal.timeout(60_000),
    });
    if (res.status !== 200) throw statusError(`list ${this.opts.path}`, res.status);
    return res.body as ListPage;
  }

  private selectors(): Record<string, string> {
    return {
      ...(this.opts.labelSelector ? { labelSelector: this.opts.labelSelector } : {}),
      ...(this.opts.fieldSelector ? { fieldSelector: this.opts.fieldSelector } : {}),
    };
  }

  private async watchOnce(from: string): Promise<Outcome> {
    const { sink, kind } = this.opts;
    const transport = await this.kube();
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
      transport
        .watch(
          this.opts.path,
          {
            ...this.selectors(),
            resourceVersion: from,
            allowWatchBookmarks: true,
            timeoutSeconds: 240 + Math.floor(Math.random() * 120),
          },
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
