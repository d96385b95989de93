/**
 * Git, for the one question Argo CD does not answer: which commit last changed an application's
 * source path. The Source Server keeps a bare, blobless mirror of each repository (commits and
 * trees: `git log -- <path>` needs nothing more; the few files it reads, an application's
 * kustomization or Chart.yaml, are fetched one blob at a time) under GIT_CACHE_DIR, fetched
 * when asked for a revision it does not hold and otherwise at most every GIT_REFRESH_SECONDS.
 *
 * How git is run, and why:
 *  - execFile, never a shell; revisions reach git only as resolved full SHAs or as ref names
 *    checked by the route (no leading `-`, no `..`), paths only after `--` with literal
 *    pathspecs (no pathspec magic).
 *  - Only http and https remotes (`protocol.allow=never` with those two allowed): no `file://`,
 *    `ext::` or ssh. Other repository URLs are not Git over HTTP for this server (`not-git`).
 *  - Credentials never appear in argv, in the mirror's config or in a log: a constant credential
 *    helper prints them from two environment variables of that one git process. The system and
 *    global git configuration are not read, and git never prompts.
 *  - One git process per mirror at a time (a per-mirror queue), at most `maxProcesses` at once,
 *    each killed after GIT_TIMEOUT_MS. At most `maxMirrors` mirrors are kept; the least recently
 *    used idle one is deleted to make room.
 *  - A new mirror is initialised in a temporary folder and renamed into place: a crash leaves no
 *    half-made mirror.
 */
import { createHash, randomBytes } from 'node:crypto';
import { mkdir, readdir, rename, rm, stat } from 'node:fs/promises';
import { join } from 'node:path';
import type { CommitInfo } from '../../protocol/sources.ts';
import { GitRunError, runGit } from '../common/git-run.ts';

export interface RepoCredentials {
  username: string;
  password: string;
}

/** The credentials Argo CD holds for a repository URL (credentials.ts), or undefined for an anonymous fetch. */
export type CredentialSource = (repoURL: string) => Promise<RepoCredentials | undefined>;

export type GitFailure =
  /** The Git server cannot be reached or failed (retry later). */
  | 'unavailable'
  /** The Git server refused the credentials (or asked for some and none are configured). */
  | 'auth'
  /** The repository does not exist at that URL. */
  | 'repository-not-found'
  /** The revision is not a branch, tag or commit of the repository. */
  | 'revision-not-found'
  /** Anything else git said no to. */
  | 'failed';

export class GitError extends Error {
  readonly failure: GitFailure;
  constructor(failure: GitFailure, message: string) {
    super(message);
    this.name = 'GitError';
    this.failure = failure;
  }
}

/** Where a fetch puts the remote's HEAD (what an Application's `HEAD` or empty targetRevision follows). */
const REMOTE_HEAD = 'refs/source-server/remote-head';
const FETCH_REFSPECS = ['+refs/heads/*:refs/heads/*', '+refs/tags/*:refs/tags/*', `+HEAD:${REMOTE_HEAD}`];
const FULL_SHA = /^(?:[0-9a-f]{40}|[0-9a-f]{64})$/;
const SHORT_SHA = /^[0-9a-f]{4,64}$/;

/** Only http(s) URLs are Git over HTTP for the Source Server. */
export function isHttpGitUrl(repoURL: string): boolean {
  try {
    const u = new URL(repoURL);
    return u.protocol === 'http:' || u.protocol === 'https:';
  } catch {
    return false;
  }
}

/** `repoURL` as it may be shown: without credentials in it. */
export function redactUrl(repoURL: string): string {
  try {
    const u = new URL(repoURL);
    u.username = '';
    u.password = '';
    return u.toString();
  } catch {
    return repoURL.replace(/\/\/[^/@\s]*@/g, '//');
  }
}

/** An application's source path as a pathspec: undefined for the whole repository. */
export function sourcePathspec(path: string | undefined): string | undefined {
  const p = (path ?? '').replace(/^(\.\/|\/)+/, '').replace(/\/+$/, '');
  return p === '' || p === '.' ? undefined : p;
}

interface Mirror {
  dir: string;
  /** When the last fetch finished (ms since the epoch), 0 before the first. */
  fetchedAt: number;
  /** The call sequence number when the last fetch started. */
  fetchSequence: number;
  /** The tail of this mirror's queue: one git process per mirror at a time. */
  tail: Promise<unknown>;
  /** Operations queued or running: a busy mirror is never deleted. */
  busy: number;
}

interface Run {
  stdout: string;
  stderr: string;
}

export interface GitMirrorsOptions {
  dir: string;
  credentials: CredentialSource;
  timeoutMs: number;
  refreshSeconds: number;
  maxProcesses?: number;
  maxMirrors?: number;
  now?: () => number;
}

export class GitMirrors {
  readonly #opts: Required<GitMirrorsOptions>;
  /** By URL, least recently used first. */
  readonly #mirrors = new Map<string, Mirror>();
  #running = 0;
  readonly #waiting: Array<() => void> = [];
  #started: Promise<void> | undefined;
  /** Orders calls and fetches (see resolve()). */
  #sequence = 0;

  constructor(opts: GitMirrorsOptions) {
    this.#opts = { maxProcesses: 4, maxMirrors: 64, now: Date.now, ...opts };
  }

  /**
   * The commit `revision` (a SHA, branch, tag, or HEAD/empty for the remote's default branch) names, as a full SHA.
   * `fresh`: a branch or tag is looked up after a fetch that started after this call (not within
   * the refresh window): the caller asks what the head is now (an Application Argo CD cannot
   * compare, whose synced revision says nothing of the commit that broke it).
   */
  async resolve(repoURL: string, revision: string, opts: { fresh?: boolean } = {}): Promise<string> {
    // A fetch that starts after this call was made has seen everything pushed before it: a
    // commit still missing then is not there, so queued calls for unknown commits share one fetch.
    const asked = ++this.#sequence;
    return this.#withMirror(repoURL, async (m) => {
      const fetchedSince = () => m.fetchSequence > asked;
      const wanted = revision === '' || revision === 'HEAD' ? REMOTE_HEAD : revision;
      if (FULL_SHA.test(wanted)) {
        if (m.fetchedAt > 0 && (await this.#hasCommit(m, wanted))) return wanted;
        if (!fetchedSince()) await this.#fetch(m, repoURL);
        if (await this.#hasCommit(m, wanted)) return wanted;
        throw new GitError('revision-not-found', `${wanted} is not a commit of ${redactUrl(repoURL)}`);
      }
      if ((opts.fresh || this.#opts.now() - m.fetchedAt >= this.#opts.refreshSeconds * 1000) && !fetchedSince())
        await this.#fetch(m, repoURL);
      let sha = await this.#lookup(m, wanted);
      if (sha === undefined && !fetchedSince()) {
        await this.#fetch(m, repoURL);
        sha = await this.#lookup(m, wanted);
      }
      if (sha === undefined)
        throw new GitError(
          'revision-not-found',
          `'${revision}' is not a branch, tag or commit of ${redactUrl(repoURL)}`,
        );
      return sha;
    });
  }

  /**
   * The last `count` commits at or before `sha` that changed any of `paths` (the whole repository
   * when undefined), newest first. `sha` must come from resolve().
   */
  async pathLog(repoURL: string, sha: string, paths: readonly string[] | undefined, count = 2): Promise<string[]> {
    if (!FULL_SHA.test(sha)) throw new Error(`pathLog needs a full SHA, not ${JSON.stringify(sha)}`);
    return this.#withMirror(repoURL, async (m) => {
      const args = ['--literal-pathspecs', 'log', `-${count}`, '--format=%H', sha];
      const { stdout } = await this.#git(m, paths === undefined ? args : [...args, '--', ...paths]);
      return stdout.split('\n').filter((l) => FULL_SHA.test(l));
    });
  }

  /**
   * The entries of `sha`'s tree at `paths` (repository-relative, no trailing slash): each one's
   * type and object id; paths the tree does not have are left out. Trees only: nothing is fetched.
   */
  async treeEntries(
    repoURL: string,
    sha: string,
    paths: readonly string[],
  ): Promise<Map<string, { type: 'blob' | 'tree'; oid: string }>> {
    if (!FULL_SHA.test(sha)) throw new Error(`treeEntries needs a full SHA, not ${JSON.stringify(sha)}`);
    const found = new Map<string, { type: 'blob' | 'tree'; oid: string }>();
    if (paths.length === 0) return found;
    return this.#withMirror(repoURL, async (m) => {
      const { stdout } = await this.#git(m, [
        '--literal-pathspecs',
        'ls-tree',
        '-z',
        '--full-tree',
        sha,
        '--',
        ...paths,
      ]);
      for (const record of stdout.split('\0')) {
        const tab = record.indexOf('\t');
        if (tab < 0) continue;
        const [, type, oid] = record.slice(0, tab).split(' ');
        if ((type === 'blob' || type === 'tree') && oid !== undefined) found.set(record.slice(tab + 1), { type, oid });
      }
      return found;
    });
  }

  /**
   * A blob's text (by object id, from treeEntries). The mirror holds no file contents, so git
   * fetches this one blob from the remote, with the repository's credentials, the first time.
   */
  async blobText(repoURL: string, oid: string): Promise<string> {
    if (!FULL_SHA.test(oid)) throw new Error(`blobText needs a full object id, not ${JSON.stringify(oid)}`);
    return this.#withMirror(repoURL, async (m) => {
      const credentials = (await this.#opts.credentials(repoURL)) ?? userinfo(repoURL);
      return (await this.#git(m, ['cat-file', 'blob', oid], credentials)).stdout;
    });
  }

  /** Whether commit `ancestor` is an ancestor of `sha` (or the same commit). */
  async isAncestor(repoURL: string, ancestor: string, sha: string): Promise<boolean> {
    if (!FULL_SHA.test(ancestor) || !FULL_SHA.test(sha)) throw new Error('isAncestor needs full SHAs');
    return this.#withMirror(repoURL, async (m) => {
      try {
        await this.#git(m, ['merge-base', '--is-ancestor', ancestor, sha]);
        return true;
      } catch (err) {
        if (err instanceof GitError && err.failure === 'failed') return false;
        throw err;
      }
    });
  }

  /** When a commit was made (its committer date, seconds since the epoch): which of two sources' commits is newer. */
  async commitTime(repoURL: string, sha: string): Promise<number> {
    if (!FULL_SHA.test(sha)) throw new Error(`commitTime needs a full SHA, not ${JSON.stringify(sha)}`);
    return this.#withMirror(repoURL, async (m) => {
      const { stdout } = await this.#git(m, ['show', '-s', '--format=%ct', sha]);
      return Number.parseInt(stdout.trim(), 10) || 0;
    });
  }

  /** Git's own metadata of a commit (used when Argo CD has none): author, date, message, tags. */
  async commitInfo(repoURL: string, sha: string): Promise<CommitInfo> {
    if (!FULL_SHA.test(sha)) throw new Error(`commitInfo needs a full SHA, not ${JSON.stringify(sha)}`);
    return this.#withMirror(repoURL, async (m) => {
      const { stdout } = await this.#git(m, ['show', '-s', '--format=%an <%ae>%x00%aI%x00%B', sha]);
      const [author = '', date = '', message = ''] = stdout.split('\u0000');
      const tags = await this.#git(m, ['for-each-ref', `--points-at=${sha}`, '--format=%(refname:short)', 'refs/tags']);
      return {
        revision: sha,
        ...(author.trim() ? { author: author.trim() } : {}),
        ...(date.trim() ? { date: new Date(date.trim()).toISOString() } : {}),
        ...(message.trim() ? { message: message.replace(/\n+$/, '') } : {}),
        tags: tags.stdout.split('\n').filter((t) => t !== ''),
      };
    });
  }

  /** Removes what a crash left behind (mirrors half made). */
  async start(): Promise<void> {
    this.#started ??= (async () => {
      await mkdir(this.#opts.dir, { recursive: true });
      for (const name of await readdir(this.#opts.dir))
        if (name.includes('.tmp-')) await rm(join(this.#opts.dir, name), { recursive: true, force: true });
    })();
    return this.#started;
  }

  /** Mirrors known, for the health answer. */
  get size(): number {
    return this.#mirrors.size;
  }

  async #withMirror<T>(repoURL: string, fn: (m: Mirror) => Promise<T>): Promise<T> {
    if (!isHttpGitUrl(repoURL)) throw new GitError('failed', `${redactUrl(repoURL)} is not an http(s) Git URL`);
    await this.start();
    const key = redactUrl(repoURL);
    let m = this.#mirrors.get(key);
    if (m) this.#mirrors.delete(key);
    else {
      const dir = join(this.#opts.dir, `${createHash('sha256').update(key).digest('hex').slice(0, 32)}.git`);
      m = { dir, fetchedAt: 0, fetchSequence: 0, tail: Promise.resolve(), busy: 0 };
    }
    this.#mirrors.set(key, m);
    const mirror = m;
    mirror.busy++;
    const run = mirror.tail.then(async () => {
      await this.#ensureInit(mirror, key);
      return fn(mirror);
    });
    mirror.tail = run.catch(() => undefined);
    try {
      return await run;
    } finally {
      mirror.busy--;
      await this.#evict();
    }
  }

  async #evict(): Promise<void> {
    for (const [key, m] of this.#mirrors) {
      if (this.#mirrors.size <= this.#opts.maxMirrors) return;
      if (m.busy > 0) continue;
      this.#mirrors.delete(key);
      await rm(m.dir, { recursive: true, force: true });
    }
  }

  async #ensureInit(m: Mirror, url: string): Promise<void> {
    if (m.fetchedAt > 0) return;
    try {
      await stat(join(m.dir, 'HEAD'));
      return;
    } catch {
      // Not there yet: made below.
    }
    const tmp = `${m.dir}.tmp-${randomBytes(6).toString('hex')}`;
    try {
      await this.#exec(['init', '--bare', '-q', tmp], undefined);
      const cfg = (k: string, v: string) => this.#exec(['--git-dir', tmp, 'config', k, v], undefined);
      await cfg('remote.origin.url', url);
      await cfg('remote.origin.promisor', 'true');
      await cfg('remote.origin.partialclonefilter', 'blob:none');
      await rename(tmp, m.dir);
    } catch (err) {
      await rm(tmp, { recursive: true, force: true });
      throw err;
    }
  }

  async #fetch(m: Mirror, repoURL: string): Promise<void> {
    m.fetchSequence = ++this.#sequence;
    const credentials = await this.#opts.credentials(repoURL);
    const fromUrl = userinfo(repoURL);
    await this.#git(
      m,
      ['fetch', '-q', '--filter=blob:none', '--prune', '--no-write-fetch-head', 'origin', ...FETCH_REFSPECS],
      credentials ?? fromUrl,
    );
    m.fetchedAt = this.#opts.now();
  }

  async #hasCommit(m: Mirror, sha: string): Promise<boolean> {
    try {
      await this.#git(m, ['cat-file', '-e', `${sha}^{commit}`]);
      return true;
    } catch (err) {
      if (err instanceof GitError && err.failure === 'failed') return false;
      throw err;
    }
  }

  /** A ref or abbreviated SHA resolved in the mirror, or undefined. */
  async #lookup(m: Mirror, revision: string): Promise<string | undefined> {
    const candidates = revision.startsWith('refs/')
      ? [revision]
      : [`refs/heads/${revision}`, `refs/tags/${revision}`, ...(SHORT_SHA.test(revision) ? [revision] : [])];
    for (const c of candidates) {
      try {
        const { stdout } = await this.#git(m, [
          'rev-parse',
          '--verify',
          '--quiet',
          '--end-of-options',
          `${c}^{commit}`,
        ]);
        const sha = stdout.trim();
        if (FULL_SHA.test(sha)) return sha;
      } catch (err) {
        if (!(err instanceof GitError && err.failure === 'failed')) throw err;
      }
    }
    return undefined;
  }

  #git(m: Mirror, args: string[], credentials?: RepoCredentials): Promise<Run> {
    return this.#exec(['--git-dir', m.dir, ...args], credentials);
  }

  async #exec(args: string[], credentials: RepoCredentials | undefined): Promise<Run> {
    await this.#acquire();
    try {
      return await runGit(args, { home: this.#opts.dir, credentials, timeoutMs: this.#opts.timeoutMs });
    } catch (err) {
      if (err instanceof GitRunError)
        throw classify(Object.assign(new Error(err.message), { killed: err.killed }), err.stderr, args);
      throw err;
    } finally {
      this.#release();
    }
  }

  async #acquire(): Promise<void> {
    if (this.#running < this.#opts.maxProcesses) {
      this.#running++;
      return;
    }
    await new Promise<void>((resolve) => this.#waiting.push(resolve));
  }

  #release(): void {
    const next = this.#waiting.shift();
    if (next) next();
    else this.#running--;
  }
}

/** Credentials written into a repository URL (`https://user:pass@host/…`), taken out of it. */
function userinfo(repoURL: string): RepoCredentials | undefined {
  try {
    const u = new URL(repoURL);
    if (u.username === '' && u.password === '') return undefined;
    return { username: decodeURIComponent(u.username), password: decodeURIComponent(u.password) };
  } catch {
    return undefined;
  }
}

function classify(err: Error & { killed?: boolean; signal?: string | null }, stderr: string, args: string[]): GitError {
  const command = args.find((a) => !a.startsWith('-') && !a.startsWith('/')) ?? 'git';
  const detail = stderr.trim().split('\n').slice(-3).join('; ').slice(0, 500);
  if (err.killed || err.signal === 'SIGKILL')
    return new GitError('unavailable', `git ${command} did not finish in time${detail ? `: ${detail}` : ''}`);
  if (command !== 'fetch') return new GitError('failed', `git ${command} failed${detail ? `: ${detail}` : ''}`);
  if (
    /Authentication failed|could not read (Username|Password)|returned error: 40[13]|terminal prompts disabled/i.test(
      stderr,
    )
  )
    return new GitError('auth', `the Git server refused the credentials: ${detail}`);
  if (/returned error: 404|repository .* not found|not appear to be a git repository/i.test(stderr))
    return new GitError('repository-not-found', `the repository was not found: ${detail}`);
  if (/couldn't find remote ref HEAD/i.test(stderr))
    return new GitError('failed', `the repository has no default branch (is it empty?): ${detail}`);
  return new GitError('unavailable', `git fetch failed: ${detail || err.message}`);
}
