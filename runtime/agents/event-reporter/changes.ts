/**
 * What changed each Application this replica reports, from the runtime's Source Server
 * (`GET {SOURCE_SERVER_URL}/v1/applications/:namespace/:name/change?revision=R`, sources.ts).
 *
 * A lookup is made only when what the answer depends on moved: the Application's repoURL, path,
 * targetRevision, synced revision (`status.sync.revision`, and for a multi-source Application
 * every source's, `status.sync.revisions`; none asked — the head of targetRevision
 * — while the sync status is Unknown or Argo CD reports a ComparisonError, when that revision is
 * the last one it could compare) and the message of its ComparisonError. Every other update of the Application (health,
 * operation progress) gets the last answer attached as it is. The answers are kept per
 * Application, least recently used first out once they hold more than `maxBytes` of JSON; an
 * Application deleted or owned by another replica is forgotten.
 *
 * Lookups run at most `concurrency` at a time, each within `timeoutMs`. A failed one is retried
 * with exponential backoff (full jitter, capped at `retryMaxMs`) for as long as the Application
 * stays as it was; `settled` tells the reporter each time a lookup for the Application's current
 * state ended, so that it sends the Application (again) with what it has. An answer larger than
 * MAX_CHANGE_BYTES is never attached (logged and counted): the Application is reported without it.
 *
 * The lookups go over `node:http` with a kept-alive agent (`concurrency` sockets): undici's `fetch`
 * cost about 0.7 ms of CPU per lookup here (docs/benchmarks.md "Change revisions and application
 * history"). An answer is read up to ANSWER_READ_LIMIT bytes, no further.
 */
import http from 'node:http';
import https from 'node:https';
import type { Logger } from 'pino';
import type { ApplicationSummary, UpsertItem } from '../../protocol/events.ts';
import { MAX_CHANGE_BYTES, SOURCE_SERVER_PATH_PREFIX, type ApplicationChange } from '../../protocol/sources.ts';
import { backoffDelay } from '../common/backoff.ts';
import type { ReporterMetrics } from './metrics.ts';

export interface ChangeLookupOptions {
  /** SOURCE_SERVER_URL, without a trailing slash. */
  sourceServerUrl: string;
  concurrency: number;
  timeoutMs: number;
  retryMaxMs: number;
  /** Bytes of JSON of kept answers before the least recently used go. */
  maxBytes: number;
  log: Logger;
  metrics: ReporterMetrics;
  /** A lookup for the Application's current state ended (`ok`: an answer is now attached, or none will be). */
  settled: (key: string, ok: boolean) => void;
}

/** Where a lookup stands for an Application whose state moved. */
export type Attached = 'attached' | 'pending' | 'failing';

interface Wanted {
  /** What the answer depends on, as one string. */
  key: string;
  namespace: string;
  name: string;
  revision: string | undefined;
}

interface AppState {
  wanted: Wanted;
  /** The last answer and the state it was for; `change` undefined: answered, nothing to attach. */
  known?: { key: string; change: ApplicationChange | undefined; bytes: number };
  running: boolean;
  queued: boolean;
  /** Failed lookups for `wanted` in a row (0: none, or it succeeded). */
  failures: number;
  retry?: NodeJS.Timeout;
}

/** Bytes of an answer read at most: beyond MAX_CHANGE_BYTES it is never attached, so the rest is not read. */
const ANSWER_READ_LIMIT = MAX_CHANGE_BYTES + 1;

/** An answer's status and body (at most `limit` bytes; `over`: there was more). */
interface Answer {
  status: number;
  text: string;
  over: boolean;
}

/** GET `url` through `agent` within `timeoutMs`, the body read up to `limit` bytes. */
function getText(url: string, agent: http.Agent, timeoutMs: number, limit: number): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const get = url.startsWith('https:') ? https.get : http.get;
    const req = get(url, { agent, timeout: timeoutMs }, (res) => {
      const chunks: Buffer[] = [];
      let size = 0;
      res.on('data', (chunk: Buffer) => {
        size += chunk.length;
        if (size > limit) {
          res.destroy();
          resolve({ status: res.statusCode ?? 0, text: '', over: true });
          return;
        }
        chunks.push(chunk);
      });
      res.on('end', () =>
        resolve({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString('utf8'), over: false }),
      );
      res.on('error', reject);
    });
    req.on('timeout', () => req.destroy(new Error(`no answer in ${timeoutMs} ms`)));
    req.on('error', reject);
  });
}

/** How long an answer about the head of targetRevision (no revision asked) is taken as current. */
export const HEAD_ANSWER_SECONDS = 60;

/** The lookup's inputs from an Application's summary (what its answer depends on). */
export function wantedOf(namespace: string, name: string, s: ApplicationSummary, now: () => number = Date.now): Wanted {
  const comparisonError = s.conditions?.find((c) => c.type === 'ComparisonError')?.message ?? '';
  // While Argo CD cannot compare, status.sync.revision is the last revision it could (the commit
  // that broke it is the head): the Source Server is asked for the head of targetRevision.
  const revision = s.syncStatus === 'Unknown' || comparisonError !== '' || !s.revision ? undefined : s.revision;
  const src = s.source ?? {};
  // Asked for the head, the answer ages: the head moves without the Application telling. Asked
  // again at its next update (Argo CD's refreshes) once HEAD_ANSWER_SECONDS have passed.
  const epoch = revision === undefined ? Math.floor(now() / (HEAD_ANSWER_SECONDS * 1000)) : 0;
  return {
    key: JSON.stringify([
      src.repoURL ?? '',
      src.path ?? '',
      src.targetRevision ?? '',
      revision ?? '',
      // A multi-source Application's other sources move on their own.
      revision === undefined ? [] : (s.revisions ?? []),
      comparisonError,
      epoch,
    ]),
    namespace,
    name,
    revision,
  };
}

const isObj = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** The answer when it has the contract's shape (sources.ts), else undefined. */
function asChange(v: unknown): ApplicationChange | undefined {
  if (!isObj(v)) return undefined;
  if (typeof v.revision !== 'string' || !Array.isArray(v.resources) || !Array.isArray(v.images)) return undefined;
  if (typeof v.truncated !== 'boolean') return undefined;
  if (v.changeRevision !== undefined && typeof v.changeRevision !== 'string') return undefined;
  return v as unknown as ApplicationChange;
}

export class ChangeLookups {
  private readonly o: ChangeLookupOptions;
  /** By object key, least recently used first. */
  private readonly apps = new Map<string, AppState>();
  private readonly waiting: string[] = [];
  private active = 0;
  private keptBytes = 0;
  private closed = false;
  private readonly agent: http.Agent;

  constructor(o: ChangeLookupOptions) {
    this.o = o;
    const agentOptions = { keepAlive: true, maxSockets: o.concurrency };
    this.agent = o.sourceServerUrl.startsWith('https:') ? new https.Agent(agentOptions) : new http.Agent(agentOptions);
  }

  /**
   * Attaches the last answer to an Application's item when it is for the item's state
   * ('attached'); otherwise asks for one: 'pending' while the lookup runs for the first time,
   * 'failing' while it is retried after a failure.
   */
  attach(key: string, item: UpsertItem): Attached {
    const summary = item.summary as ApplicationSummary;
    const wanted = wantedOf(item.namespace, item.name, summary);
    let st = this.apps.get(key);
    if (st) {
      // Most recently used last.
      this.apps.delete(key);
      this.apps.set(key, st);
    } else {
      st = { wanted, running: false, queued: false, failures: 0 };
      this.apps.set(key, st);
    }
    if (st.known?.key === wanted.key) {
      const change = st.known.change;
      if (change) {
        item.change = change;
        if (change.changeRevision !== undefined) summary.changeRevision = change.changeRevision;
      }
      return 'attached';
    }
    if (st.wanted.key !== wanted.key) {
      st.wanted = wanted;
      st.failures = 0;
      clearTimeout(st.retry);
      st.retry = undefined;
    }
    if (st.failures > 0) return 'failing';
    this.enqueue(key, st);
    return 'pending';
  }

  /** The Application was deleted or is owned by another replica now. */
  forget(key: string): void {
    const st = this.apps.get(key);
    if (!st) return;
    clearTimeout(st.retry);
    this.keptBytes -= st.known?.bytes ?? 0;
    this.apps.delete(key);
  }

  /** Forgets every Application `keep` refuses (ownership moved). */
  retain(keep: (key: string) => boolean): void {
    for (const key of [...this.apps.keys()]) if (!keep(key)) this.forget(key);
  }

  close(): void {
    this.closed = true;
    this.agent.destroy();
    for (const st of this.apps.values()) clearTimeout(st.retry);
  }

  get size(): number {
    return this.apps.size;
  }

  private enqueue(key: string, st: AppState): void {
    if (st.queued || st.running || st.retry !== undefined || this.closed) return;
    st.queued = true;
    this.waiting.push(key);
    this.pump();
  }

  private pump(): void {
    while (this.active < this.o.concurrency && this.waiting.length > 0 && !this.closed) {
      const key = this.waiting.shift()!;
      const st = this.apps.get(key);
      if (!st?.queued) continue;
      st.queued = false;
      st.running = true;
      this.active++;
      void this.lookup(key, st).finally(() => {
        st.running = false;
        this.active--;
        this.pump();
      });
    }
  }

  private async lookup(key: string, st: AppState): Promise<void> {
    const asked = st.wanted;
    const { metrics, log } = this.o;
    const url =
      `${this.o.sourceServerUrl}${SOURCE_SERVER_PATH_PREFIX}/${encodeURIComponent(asked.namespace)}/` +
      `${encodeURIComponent(asked.name)}/change` +
      (asked.revision !== undefined ? `?${new URLSearchParams({ revision: asked.revision }).toString()}` : '');
    const started = performance.now();
    let outcome: { change: ApplicationChange | undefined; bytes: number } | { error: string };
    try {
      const res = await getText(url, this.agent, this.o.timeoutMs, ANSWER_READ_LIMIT);
      if (res.status !== 200) throw new Error(`HTTP ${res.status}: ${res.text.slice(0, 200)}`);
      const change = res.over ? undefined : asChange(JSON.parse(res.text));
      if (!change && !res.over) throw new Error('the answer is not an ApplicationChange');
      // The answer is the change as JSON (asChange keeps it as it came): its bytes are the change's.
      const bytes = res.over ? ANSWER_READ_LIMIT : Buffer.byteLength(res.text);
      if (!change || bytes > MAX_CHANGE_BYTES) {
        metrics.changeLookups.inc({ result: 'too_large' });
        log.warn(
          { application: `${asked.namespace}/${asked.name}`, bytes, limit: MAX_CHANGE_BYTES },
          "the Source Server's change is larger than a report may carry; the Application is reported without it",
        );
        outcome = { change: undefined, bytes: 0 };
      } else {
        metrics.changeLookups.inc({ result: 'ok' });
        outcome = { change, bytes };
      }
    } catch (err) {
      metrics.changeLookups.inc({ result: 'error' });
      outcome = { error: err instanceof Error ? err.message : String(err) };
    } finally {
      metrics.changeLookupSeconds.observe((performance.now() - started) / 1000);
    }
    if (this.closed || this.apps.get(key) !== st) return;
    if (st.wanted.key !== asked.key) {
      // The Application moved while this ran: the answer is for a state it no longer has.
      this.enqueue(key, st);
      return;
    }
    if ('error' in outcome) {
      st.failures++;
      const delay = backoffDelay(st.failures - 1, { initialMs: 1000, maxMs: this.o.retryMaxMs, factor: 2 });
      if (st.failures === 1)
        log.warn(
          { application: `${asked.namespace}/${asked.name}`, err: outcome.error, retryInMs: delay },
          'could not ask the Source Server what changed the Application; reporting it without, retrying',
        );
      st.retry = setTimeout(() => {
        st.retry = undefined;
        if (this.apps.get(key) === st) this.enqueue(key, st);
      }, delay);
      st.retry.unref();
      if (st.failures === 1) this.o.settled(key, false);
      return;
    }
    this.keptBytes += outcome.bytes - (st.known?.bytes ?? 0);
    st.known = { key: asked.key, change: outcome.change, bytes: outcome.bytes };
    st.failures = 0;
    this.evict(key);
    this.o.settled(key, true);
  }

  /** Drops the least recently used answers (not `keep`'s) while the kept ones are over the bound. */
  private evict(keep: string): void {
    if (this.keptBytes <= this.o.maxBytes) return;
    for (const [key, st] of this.apps) {
      if (this.keptBytes <= this.o.maxBytes) break;
      if (key === keep || !st.known) continue;
      this.keptBytes -= st.known.bytes;
      st.known = undefined;
    }
  }
}
