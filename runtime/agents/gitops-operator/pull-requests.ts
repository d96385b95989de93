/**
 * The GitOps Operator's client for the pull requests of `action: pr` (docs/promotions.md, "Pull
 * requests"): GitHub's REST API v3, Gitea's and Forgejo's API v1 (the same shapes under
 * /api/v1), and GitLab's merge requests (API v4).
 *
 * Exactly once: `open` first looks for an open pull request from the head branch into the base
 * (the branch is the promotion's own, so one found is this promotion's), and only then creates
 * one; a create the provider refuses because one exists (a request retried after a lost answer,
 * another operator replica) is answered by looking again. `close` closes one and is a no-op on
 * one already closed or merged.
 *
 * Errors are `ProviderError`s whose message says which provider answered what to which request
 * (never the token); 5xx, 429, timeouts and connection failures are retried with backoff before
 * they are thrown, and are `transient` then.
 */

export type ProviderKind = 'github' | 'gitea' | 'gitlab';
export const PROVIDER_KINDS: readonly ProviderKind[] = ['github', 'gitea', 'gitlab'];

const PROVIDER_NAMES: Record<ProviderKind, string> = { github: 'GitHub', gitea: 'Gitea', gitlab: 'GitLab' };

export interface PullRequest {
  /** The provider's number for it (GitLab: the merge request's iid). */
  number: number;
  /** Its page in the provider's web UI. */
  url: string;
  state: 'open' | 'closed' | 'merged';
}

export interface RepoRef {
  /** GitHub, Gitea: the owner; GitLab: the namespace path (groups and subgroups). */
  owner: string;
  name: string;
}

export class ProviderError extends Error {
  /** The HTTP status the provider answered (absent: no answer). */
  readonly status: number | undefined;
  /** True for 5xx, 429, timeouts and connection failures (already retried): worth asking again later. */
  readonly transient: boolean;
  constructor(message: string, status: number | undefined, transient: boolean) {
    super(message);
    this.name = 'ProviderError';
    this.status = status;
    this.transient = transient;
  }
}

export interface PullRequestClientOptions {
  kind: ProviderKind;
  /** The API's base URL: GitHub `https://api.github.com` (Enterprise: `https://HOST/api/v3`); Gitea `https://HOST/api/v1`; GitLab `https://HOST/api/v4`. */
  apiUrl: string;
  token: string;
  /** Longest wait for one request (default 15000 ms). */
  timeoutMs?: number;
  /** Attempts for a transient failure (default 3). */
  attempts?: number;
  /** The first backoff between attempts, doubled after each (default 500 ms). */
  backoffMs?: number;
  fetch?: typeof fetch;
}

/** The owner and name of a repository from its clone URL (`https://host/owner/name(.git)`); an error names what is wrong. */
export function repoRef(repoURL: string): RepoRef {
  let u: URL;
  try {
    u = new URL(repoURL);
  } catch {
    throw new ProviderError(`the repository URL '${repoURL.slice(0, 200)}' is not a URL`, undefined, false);
  }
  const parts = u.pathname
    .replace(/\.git\/?$/, '')
    .split('/')
    .filter((s) => s !== '');
  if (parts.length < 2)
    throw new ProviderError(
      `the repository URL '${u.origin}${u.pathname}' does not name an owner and a repository`,
      undefined,
      false,
    );
  return { owner: parts.slice(0, -1).join('/'), name: parts.at(-1)! };
}

interface Raw {
  number?: number;
  iid?: number;
  html_url?: string;
  web_url?: string;
  state?: string;
  merged?: boolean;
  merged_at?: string | null;
  head?: { ref?: string };
  base?: { ref?: string };
  source_branch?: string;
  target_branch?: string;
}

export class PullRequestClient {
  readonly #o: Required<Omit<PullRequestClientOptions, 'fetch'>> & { fetch: typeof fetch };

  constructor(o: PullRequestClientOptions) {
    if (!PROVIDER_KINDS.includes(o.kind))
      throw new ProviderError(`'${String(o.kind)}' is not a provider`, undefined, false);
    let base: URL;
    try {
      base = new URL(o.apiUrl);
    } catch {
      throw new ProviderError(`the API URL '${o.apiUrl.slice(0, 200)}' is not a URL`, undefined, false);
    }
    if (base.protocol !== 'https:' && base.protocol !== 'http:')
      throw new ProviderError(`the API URL '${base.origin}' is not http(s)`, undefined, false);
    this.#o = {
      kind: o.kind,
      apiUrl: o.apiUrl.replace(/\/+$/, ''),
      token: o.token,
      timeoutMs: o.timeoutMs ?? 15_000,
      attempts: Math.max(1, o.attempts ?? 3),
      backoffMs: o.backoffMs ?? 500,
      fetch: o.fetch ?? fetch,
    };
  }

  get provider(): string {
    return PROVIDER_NAMES[this.#o.kind];
  }

  /** The open pull request from `head` into `base`, or undefined. */
  async find(repo: RepoRef, head: string, base: string): Promise<PullRequest | undefined> {
    if (this.#o.kind === 'gitlab') {
      const q = new URLSearchParams({ state: 'opened', source_branch: head, target_branch: base, per_page: '20' });
      const list = (await this.#request('GET', `${this.#project(repo)}/merge_requests?${q.toString()}`)) as Raw[];
      const hit = Array.isArray(list)
        ? list.find((x) => x.source_branch === head && x.target_branch === base)
        : undefined;
      return hit ? this.#pull(hit) : undefined;
    }
    // GitHub filters by `head=owner:branch`; Gitea ignores it and pages through the open ones.
    for (let page = 1; page <= 20; page++) {
      const q = new URLSearchParams({ state: 'open', head: `${repo.owner}:${head}`, base, page: String(page) });
      q.set(this.#o.kind === 'gitea' ? 'limit' : 'per_page', '50');
      const list = (await this.#request('GET', `${this.#repo(repo)}/pulls?${q.toString()}`)) as Raw[];
      if (!Array.isArray(list)) return undefined;
      const hit = list.find((x) => x.head?.ref === head && x.base?.ref === base);
      if (hit) return this.#pull(hit);
      if (list.length < 50) return undefined;
    }
    return undefined;
  }

  /** The open pull request from `head` into `base`: the one there is, else a new one. */
  async open(
    repo: RepoRef,
    p: { head: string; base: string; title: string; body: string },
  ): Promise<PullRequest & { created: boolean }> {
    const found = await this.find(repo, p.head, p.base);
    if (found) return { ...found, created: false };
    try {
      const raw =
        this.#o.kind === 'gitlab'
          ? await this.#request('POST', `${this.#project(repo)}/merge_requests`, {
              source_branch: p.head,
              target_branch: p.base,
              title: p.title,
              description: p.body,
              remove_source_branch: true,
            })
          : await this.#request('POST', `${this.#repo(repo)}/pulls`, {
              head: p.head,
              base: p.base,
              title: p.title,
              body: p.body,
            });
      return { ...this.#pull(raw as Raw), created: true };
    } catch (err) {
      // One exists already (GitHub 422, Gitea and GitLab 409): it is the one to keep.
      if (err instanceof ProviderError && (err.status === 409 || err.status === 422)) {
        const again = await this.find(repo, p.head, p.base);
        if (again) return { ...again, created: false };
      }
      throw err;
    }
  }

  /** Closes pull request `number` (nothing to do when it is closed or merged already). */
  async close(repo: RepoRef, number: number): Promise<PullRequest> {
    const path =
      this.#o.kind === 'gitlab'
        ? `${this.#project(repo)}/merge_requests/${number}`
        : `${this.#repo(repo)}/pulls/${number}`;
    const now = this.#pull((await this.#request('GET', path)) as Raw);
    if (now.state !== 'open') return now;
    const raw =
      this.#o.kind === 'gitlab'
        ? await this.#request('PUT', path, { state_event: 'close' })
        : await this.#request('PATCH', path, { state: 'closed' });
    return this.#pull(raw as Raw);
  }

  #repo(r: RepoRef): string {
    return `/repos/${encodeURIComponent(r.owner)}/${encodeURIComponent(r.name)}`;
  }

  #project(r: RepoRef): string {
    return `/projects/${encodeURIComponent(`${r.owner}/${r.name}`)}`;
  }

  #pull(x: Raw): PullRequest {
    const number = this.#o.kind === 'gitlab' ? x.iid : x.number;
    const url = this.#o.kind === 'gitlab' ? x.web_url : x.html_url;
    if (typeof number !== 'number' || typeof url !== 'string')
      throw new ProviderError(`${this.provider} answered a pull request without its number or URL`, undefined, false);
    const merged = x.merged === true || (typeof x.merged_at === 'string' && x.merged_at !== '') || x.state === 'merged';
    const state = merged ? 'merged' : x.state === 'open' || x.state === 'opened' ? 'open' : 'closed';
    return { number, url, state };
  }

  #headers(): Record<string, string> {
    const h: Record<string, string> = { accept: 'application/json', 'user-agent': 'hosted-runtimes-gitops-operator' };
    if (this.#o.kind === 'github') {
      h.accept = 'application/vnd.github+json';
      h['x-github-api-version'] = '2022-11-28';
      h.authorization = `Bearer ${this.#o.token}`;
    } else if (this.#o.kind === 'gitea') h.authorization = `token ${this.#o.token}`;
    else h['private-token'] = this.#o.token;
    return h;
  }

  async #request(method: string, path: string, body?: unknown): Promise<unknown> {
    const what = `${method} ${path.split('?')[0]}`;
    let last: ProviderError | undefined;
    for (let attempt = 1; attempt <= this.#o.attempts; attempt++) {
      if (attempt > 1) await new Promise((r) => setTimeout(r, this.#o.backoffMs * 2 ** (attempt - 2)));
      let res: Response;
      try {
        res = await this.#o.fetch(`${this.#o.apiUrl}${path}`, {
          method,
          headers: { ...this.#headers(), ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
          ...(body === undefined ? {} : { body: JSON.stringify(body) }),
          redirect: 'error',
          signal: AbortSignal.timeout(this.#o.timeoutMs),
        });
      } catch (err) {
        const timedOut = err instanceof Error && (err.name === 'TimeoutError' || err.name === 'AbortError');
        last = new ProviderError(
          timedOut
            ? `${this.provider} did not answer ${what} within ${this.#o.timeoutMs} ms (${this.#o.attempts} attempts)`
            : `${this.provider} could not be reached for ${what}: ${causeOf(err)} (${this.#o.attempts} attempts)`,
          undefined,
          true,
        );
        continue;
      }
      const text = await res.text().catch(() => '');
      if (res.ok) {
        try {
          return text === '' ? {} : (JSON.parse(text) as unknown);
        } catch {
          throw new ProviderError(
            `${this.provider} answered ${what} with something that is not JSON`,
            res.status,
            false,
          );
        }
      }
      const transient = res.status >= 500 || res.status === 429;
      last = new ProviderError(
        `${this.provider} answered ${res.status}${res.statusText ? ` ${res.statusText}` : ''} to ${what}${detail(text)}${hint(res.status)}${transient ? ` (${this.#o.attempts} attempts)` : ''}`,
        res.status,
        transient,
      );
      if (!transient) throw last;
    }
    throw last!;
  }
}

function causeOf(err: unknown): string {
  const cause = err instanceof Error && err.cause instanceof Error ? err.cause.message : undefined;
  return (cause ?? (err instanceof Error ? err.message : String(err))).slice(0, 200);
}

/** The provider's own words (`message`, GitLab's `message`/`error`), cut short. */
function detail(text: string): string {
  let m: unknown;
  try {
    const j = JSON.parse(text) as { message?: unknown; error?: unknown; errors?: unknown };
    m = j.message ?? j.error;
    if (Array.isArray(j.errors) && j.errors.length > 0) {
      const first = j.errors[0] as { message?: unknown } | string;
      const e = typeof first === 'string' ? first : first.message;
      if (typeof e === 'string') m = `${typeof m === 'string' ? `${m}: ` : ''}${e}`;
    }
  } catch {
    m = undefined;
  }
  const s = typeof m === 'string' ? m : Array.isArray(m) ? m.join('; ') : '';
  return s ? `: ${s.replace(/\s+/g, ' ').slice(0, 200)}` : '';
}

function hint(status: number): string {
  if (status === 401) return ' — the token (the password of the repository credentials Secret) is not accepted';
  if (status === 403) return ' — the token may not open pull requests in this repository';
  if (status === 404) return ' — no such repository or API at this URL, or the token cannot see it';
  return '';
}
