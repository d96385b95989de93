/**
 * Asks Argo CD to compare again an Application whose comparison failed because the repo-server
 * did not answer. The runtime's pods start side by side (after a wake, an upgrade, a node loss):
 * when the application controller compares before its repo-server listens, the Application is
 * `Unknown` with a ComparisonError until the controller's next reconciliation, which Argo CD runs
 * every `timeout.reconciliation` (180 s by default) plus its jitter. A customer sees `Unknown` for
 * minutes after their runtime is back.
 *
 * The replica that owns an Application (rendezvous hashing, members.ts) sets Argo CD's refresh
 * annotation (`argocd.argoproj.io/refresh: normal`, as `argocd app get --refresh` does) after
 * 10 s, then 30 s, then 90 s while the error stays; the controller removes the annotation when it
 * compared. Only errors of a repo-server that was not reachable are retried (gRPC Unavailable or
 * DeadlineExceeded, a refused connection, a name not resolved yet): an error of the Application
 * itself (a wrong path, a bad chart) waits for Argo CD's own reconciliation as before. At most
 * COMPARISON_RETRY_CONCURRENCY patches run at once, and only Applications in that state are kept.
 * A reporter without the right to patch Applications (beside a customer's own Argo CD) stops
 * asking at the first 403.
 */
import type { Logger } from 'pino';
import type { KubeTransport } from '../../kube/transport.ts';

type Obj = Record<string, unknown>;

export const REFRESH_ANNOTATION = 'argocd.argoproj.io/refresh';
/** After how long, for each retry in turn, an Application still failing is refreshed. */
export const COMPARISON_RETRY_DELAYS_MS = [10_000, 30_000, 90_000];
const COMPARISON_RETRY_CONCURRENCY = 4;

/** A repo-server that did not answer: what Argo CD's ComparisonError says then. */
const UNREACHABLE_REPO_SERVER =
  /rpc error: code = (Unavailable|DeadlineExceeded)|connection refused|no such host|i\/o timeout|connection reset by peer/;

const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);

/**
 * The message of an Application's ComparisonError when it says the repo-server did not answer,
 * and no refresh is already asked; undefined otherwise.
 */
export function unreachableRepoServer(app: Obj): string | undefined {
  const meta = isObj(app.metadata) ? app.metadata : {};
  const annotations = isObj(meta.annotations) ? meta.annotations : {};
  if (typeof annotations[REFRESH_ANNOTATION] === 'string') return undefined;
  const status = isObj(app.status) ? app.status : {};
  const conditions = Array.isArray(status.conditions) ? status.conditions.filter(isObj) : [];
  for (const c of conditions) {
    if (c.type === 'ComparisonError' && typeof c.message === 'string' && UNREACHABLE_REPO_SERVER.test(c.message))
      return c.message;
  }
  return undefined;
}

export interface ComparisonRetriesOptions {
  kube: KubeTransport;
  log: Logger;
  /** Called after each refresh asked, with its outcome. */
  onRefresh?: (outcome: 'asked' | 'failed' | 'forbidden') => void;
  delaysMs?: number[];
}

interface Pending {
  namespace: string;
  name: string;
  /** Refreshes asked in this episode of the error. */
  tries: number;
  timer: NodeJS.Timeout | undefined;
}

export class ComparisonRetries {
  readonly #o: ComparisonRetriesOptions;
  readonly #delays: number[];
  /** Owned Applications in the error, by key. */
  readonly #pending = new Map<string, Pending>();
  readonly #queue: string[] = [];
  #running = 0;
  #closed = false;

  constructor(o: ComparisonRetriesOptions) {
    this.#o = o;
    this.#delays = o.delaysMs ?? COMPARISON_RETRY_DELAYS_MS;
  }

  /** How many Applications are waiting for a refresh (or gave up until they leave the error). */
  get size(): number {
    return this.#pending.size;
  }

  /** The latest state of an Application this replica owns. */
  seen(key: string, app: Obj): void {
    if (this.#closed) return;
    const message = unreachableRepoServer(app);
    if (message === undefined) {
      // Compared since, or a refresh is under way: the next failure starts a new episode, unless
      // only the annotation hides it (the controller is about to compare).
      const meta = isObj(app.metadata) ? app.metadata : {};
      const annotations = isObj(meta.annotations) ? meta.annotations : {};
      if (typeof annotations[REFRESH_ANNOTATION] !== 'string') this.forget(key);
      return;
    }
    const meta = isObj(app.metadata) ? app.metadata : {};
    if (typeof meta.namespace !== 'string' || typeof meta.name !== 'string') return;
    const p = this.#pending.get(key) ?? { namespace: meta.namespace, name: meta.name, tries: 0, timer: undefined };
    this.#pending.set(key, p);
    if (p.timer || p.tries >= this.#delays.length) return;
    p.timer = setTimeout(() => {
      p.timer = undefined;
      if (this.#pending.get(key) !== p) return;
      p.tries += 1;
      this.#queue.push(key);
      this.#drain();
    }, this.#delays[p.tries]);
    p.timer.unref();
  }

  forget(key: string): void {
    const p = this.#pending.get(key);
    if (!p) return;
    clearTimeout(p.timer);
    this.#pending.delete(key);
  }

  /** Keeps only the Applications `keep` says this replica still owns. */
  retain(keep: (key: string) => boolean): void {
    for (const key of [...this.#pending.keys()]) if (!keep(key)) this.forget(key);
  }

  close(): void {
    this.#closed = true;
    for (const key of [...this.#pending.keys()]) this.forget(key);
    this.#queue.length = 0;
  }

  #drain(): void {
    while (!this.#closed && this.#running < COMPARISON_RETRY_CONCURRENCY && this.#queue.length > 0) {
      const key = this.#queue.shift()!;
      const p = this.#pending.get(key);
      if (!p) continue;
      this.#running += 1;
      void this.#refresh(p).finally(() => {
        this.#running -= 1;
        this.#drain();
      });
    }
  }

  async #refresh(p: Pending): Promise<void> {
    const path = `/apis/argoproj.io/v1alpha1/namespaces/${encodeURIComponent(p.namespace)}/applications/${encodeURIComponent(p.name)}`;
    try {
      const res = await this.#o.kube.request(path, {
        method: 'PATCH',
        contentType: 'application/merge-patch+json',
        body: { metadata: { annotations: { [REFRESH_ANNOTATION]: 'normal' } } },
      });
      if (res.status === 404) return; // deleted meanwhile: its removal forgets it
      if (res.status === 403) {
        // Beside a customer's own Argo CD (argo=existing) the reporter may only read Applications:
        // their refreshes are the customer's, so this stops for the life of the process.
        this.#o.onRefresh?.('forbidden');
        this.#o.log.info(
          { application: `${p.namespace}/${p.name}` },
          'no right to patch Applications: refreshes of failed comparisons are off',
        );
        this.close();
        return;
      }
      if (res.status < 200 || res.status >= 300) throw new Error(`the API server answered ${res.status}`);
      this.#o.onRefresh?.('asked');
      this.#o.log.info(
        { application: `${p.namespace}/${p.name}`, attempt: p.tries },
        'comparison failed on an unreachable repo-server: refresh asked',
      );
    } catch (err) {
      this.#o.onRefresh?.('failed');
      this.#o.log.warn({ application: `${p.namespace}/${p.name}`, err: String(err) }, 'asking a refresh failed');
    }
  }
}
