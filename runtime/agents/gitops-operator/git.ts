/**
 * The GitOps Operator's Git: one working clone per configuration repository under its cache
 * folder, fetched before every read and every change, never trusted across a restart (a clone
 * whose state is unclear is reset to the remote branch; a crash leaves at worst an unpushed local
 * commit, which the next reset drops).
 *
 * Exactly once in Git: every commit the operator pushes carries trailers naming the promotion and
 * the environment (`Promotion-Id`, `Promotion-Environment`, or `Promotion-Revert`). Before it
 * changes an environment it looks for that commit on the remote branch (`findCommit`): found, that
 * commit is the step's, whatever happened to the process that pushed it. A push the remote refuses
 * because the branch moved is retried on the new head (the change is recomputed from the files
 * there: a field already at the release needs no commit).
 *
 * Runs git as every agent does (common/git-run.ts): no shell, http(s) only, credentials (Argo
 * CD's repository Secrets, source-server/credentials.ts) never in argv, config or logs.
 */
import { createHash } from 'node:crypto';
import { mkdir, rm, writeFile } from 'node:fs/promises';
import { dirname, join, normalize } from 'node:path';
import { type GitCredentials, GitRunError, runGit } from '../common/git-run.ts';

export type CredentialSource = (repoURL: string) => Promise<GitCredentials | undefined>;

export class PromotionGitError extends Error {
  /** `unavailable`: try again later; `conflict`: the branch moved under a push; `failed`: this will not work as asked. */
  readonly failure: 'unavailable' | 'conflict' | 'failed';
  constructor(failure: 'unavailable' | 'conflict' | 'failed', message: string) {
    super(message);
    this.name = 'PromotionGitError';
    this.failure = failure;
  }
}

export interface Author {
  name: string;
  email: string;
}

export interface FileChange {
  /** A path relative to the repository's root. */
  path: string;
  content: string;
}

const FULL_SHA = /^[0-9a-f]{40}$/;
const BRANCH = /^(?!-)(?!.*\.\.)[A-Za-z0-9._/-]{1,200}$/;

/** A path inside the repository (no `..`, no absolute path), normalized; an error otherwise. */
export function repoPath(...parts: string[]): string {
  const p = normalize(parts.join('/')).replace(/^\.\/+/, '');
  if (p.startsWith('/') || p === '..' || p.startsWith('../') || p.includes('/../') || p.startsWith('.git'))
    throw new PromotionGitError('failed', `'${parts.join('/')}' is not a path inside the repository`);
  return p;
}

export class PromotionGit {
  readonly #dir: string;
  readonly #credentials: CredentialSource;
  readonly #timeoutMs: number;
  /** One operation per repository at a time. */
  readonly #queues = new Map<string, Promise<unknown>>();

  constructor(o: { dir: string; credentials: CredentialSource; timeoutMs: number }) {
    this.#dir = o.dir;
    this.#credentials = o.credentials;
    this.#timeoutMs = o.timeoutMs;
  }

  /**
   * Fetches `branch` and answers its head and the files asked for there (undefined: no such file),
   * or at `revision`, a commit of the branch's history.
   */
  async read(
    repoURL: string,
    branch: string,
    paths: string[],
    revision?: string,
  ): Promise<{ head: string; files: Map<string, string | undefined> }> {
    if (revision !== undefined && !FULL_SHA.test(revision))
      throw new PromotionGitError('failed', `'${revision}' is not a commit`);
    return this.#serial(repoURL, async (clone) => {
      const head = await this.#sync(clone, repoURL, branch);
      const files = new Map<string, string | undefined>();
      for (const p of paths) files.set(p, await this.#show(clone, revision ?? head, p));
      return { head, files };
    });
  }

  /** The last `limit` commits of the branch that changed `path`, newest first, with its content after each. */
  async history(
    repoURL: string,
    branch: string,
    path: string,
    limit: number,
  ): Promise<Array<{ commit: string; content: string | undefined }>> {
    return this.#serial(repoURL, async (clone) => {
      const head = await this.#sync(clone, repoURL, branch);
      const { stdout } = await this.#git(clone, ['log', `-${limit}`, '--format=%H', head, '--', repoPath(path)]);
      const out: Array<{ commit: string; content: string | undefined }> = [];
      for (const commit of stdout.split('\n').filter((x) => FULL_SHA.test(x)))
        out.push({ commit, content: await this.#show(clone, commit, path) });
      return out;
    });
  }

  /**
   * The commit on the remote branch whose message carries every trailer given, or undefined. With
   * `missingOk`, a branch that does not exist (a proposal not pushed yet) has none.
   */
  async findCommit(
    repoURL: string,
    branch: string,
    trailers: Record<string, string>,
    missingOk = false,
  ): Promise<string | undefined> {
    return this.#serial(repoURL, async (clone) => {
      if (missingOk && !(await this.#remoteHas(clone, repoURL, branch))) return undefined;
      const head = await this.#sync(clone, repoURL, branch);
      const grep = Object.entries(trailers).flatMap(([k, v]) => ['--grep', `${k}: ${v}`]);
      const { stdout } = await this.#git(clone, [
        'log',
        '--fixed-strings',
        '--all-match',
        ...grep,
        '-1',
        '--format=%H',
        head,
        '--',
      ]);
      const sha = stdout.trim();
      return FULL_SHA.test(sha) ? sha : undefined;
    });
  }

  /** Whether `ancestor` is `revision` or one of its ancestors on the branch (fetched first). */
  async contains(repoURL: string, branch: string, revision: string, ancestor: string): Promise<boolean> {
    if (!FULL_SHA.test(revision) || !FULL_SHA.test(ancestor)) return false;
    return this.#serial(repoURL, async (clone) => {
      await this.#sync(clone, repoURL, branch);
      try {
        await this.#git(clone, ['merge-base', '--is-ancestor', ancestor, revision]);
        return true;
      } catch (err) {
        if (err instanceof PromotionGitError && err.failure === 'failed') return false;
        throw err;
      }
    });
  }

  /**
   * Commits `changes` on top of the branch's head with `message` (its trailers included) and pushes
   * it. Answers the commit, or undefined when the files already hold those contents (nothing to
   * commit). A push refused because the branch moved is a `conflict`: the caller recomputes.
   * With `proposeOn`, the commit is pushed to that branch instead (a proposal for the provider to
   * merge; the operator's own branch, replaced when it exists).
   */
  async commit(
    repoURL: string,
    branch: string,
    changes: FileChange[],
    message: string,
    author: Author,
    proposeOn?: string,
  ): Promise<string | undefined> {
    if (proposeOn !== undefined && !BRANCH.test(proposeOn))
      throw new PromotionGitError('failed', `'${proposeOn}' is not a branch name`);
    return this.#serial(repoURL, async (clone) => {
      const head = await this.#sync(clone, repoURL, branch);
      await this.#git(clone, ['checkout', '-q', '--force', '-B', 'promotion', head]);
      for (const c of changes) {
        const file = join(clone.dir, repoPath(c.path));
        await mkdir(dirname(file), { recursive: true });
        await writeFile(file, c.content);
      }
      await this.#git(clone, ['add', '--', ...changes.map((c) => repoPath(c.path))]);
      const staged = await this.#git(clone, ['diff', '--cached', '--name-only']);
      if (staged.stdout.trim() === '') return undefined;
      const env = {
        GIT_AUTHOR_NAME: author.name,
        GIT_AUTHOR_EMAIL: author.email,
        GIT_COMMITTER_NAME: author.name,
        GIT_COMMITTER_EMAIL: author.email,
      };
      await this.#git(clone, ['-c', 'commit.gpgsign=false', 'commit', '-q', '--file', '-'], { env, input: message });
      const sha = (await this.#git(clone, ['rev-parse', 'HEAD'])).stdout.trim();
      if (proposeOn !== undefined) await this.#push(clone, repoURL, proposeOn, true);
      else await this.#push(clone, repoURL, branch);
      return sha;
    });
  }

  /** Deletes a branch of the operator's own (a withdrawn proposal); a branch already gone is fine. */
  async deleteBranch(repoURL: string, branch: string): Promise<void> {
    if (!BRANCH.test(branch)) throw new PromotionGitError('failed', `'${branch}' is not a branch name`);
    await this.#serial(repoURL, async (clone) => {
      await this.#ensureClone(clone, repoURL);
      if (!(await this.#remoteHas(clone, repoURL, branch))) return;
      await this.#git(clone, ['push', '-q', 'origin', `:refs/heads/${branch}`], {
        credentials: await this.#credentials(repoURL),
      });
    });
  }

  /** Whether the remote has the branch. */
  async #remoteHas(clone: Clone, repoURL: string, branch: string): Promise<boolean> {
    await this.#ensureClone(clone, repoURL);
    const { stdout } = await this.#git(clone, ['ls-remote', '--heads', 'origin', `refs/heads/${branch}`], {
      credentials: await this.#credentials(repoURL),
    });
    return stdout.trim() !== '';
  }

  /** Reverts `commit` on the branch's head with `message` and pushes it; undefined when there is nothing to revert. */
  async revert(
    repoURL: string,
    branch: string,
    commit: string,
    message: string,
    author: Author,
  ): Promise<string | undefined> {
    if (!FULL_SHA.test(commit)) throw new PromotionGitError('failed', `'${commit}' is not a commit`);
    return this.#serial(repoURL, async (clone) => {
      const head = await this.#sync(clone, repoURL, branch);
      await this.#git(clone, ['checkout', '-q', '--force', '-B', 'promotion', head]);
      const env = {
        GIT_AUTHOR_NAME: author.name,
        GIT_AUTHOR_EMAIL: author.email,
        GIT_COMMITTER_NAME: author.name,
        GIT_COMMITTER_EMAIL: author.email,
      };
      try {
        await this.#git(clone, ['revert', '--no-commit', commit]);
      } catch (err) {
        await this.#git(clone, ['revert', '--abort']).catch(() => undefined);
        throw new PromotionGitError(
          'failed',
          `commit ${commit.slice(0, 12)} cannot be reverted on ${branch}: ${(err as Error).message}`,
        );
      }
      const staged = await this.#git(clone, ['diff', '--cached', '--name-only']);
      if (staged.stdout.trim() === '') return undefined;
      await this.#git(clone, ['-c', 'commit.gpgsign=false', 'commit', '-q', '--file', '-'], { env, input: message });
      const sha = (await this.#git(clone, ['rev-parse', 'HEAD'])).stdout.trim();
      await this.#push(clone, repoURL, branch);
      return sha;
    });
  }

  async #push(clone: Clone, repoURL: string, branch: string, force = false): Promise<void> {
    try {
      await this.#git(clone, ['push', '-q', 'origin', `${force ? '+' : ''}HEAD:refs/heads/${branch}`], {
        credentials: await this.#credentials(repoURL),
      });
    } catch (err) {
      if (err instanceof PromotionGitError && /\[rejected\]|non-fast-forward|fetch first|stale info/.test(err.message))
        throw new PromotionGitError('conflict', `the branch ${branch} moved while the change was made`);
      throw err;
    }
  }

  /** Fetches the branch and answers its head (the clone made first when missing). */
  async #sync(clone: Clone, repoURL: string, branch: string): Promise<string> {
    if (!BRANCH.test(branch)) throw new PromotionGitError('failed', `'${branch}' is not a branch name`);
    await this.#ensureClone(clone, repoURL);
    await this.#git(
      clone,
      ['fetch', '-q', '--prune', 'origin', `+refs/heads/${branch}:refs/remotes/origin/${branch}`],
      {
        credentials: await this.#credentials(repoURL),
      },
    );
    const head = (await this.#git(clone, ['rev-parse', `refs/remotes/origin/${branch}`])).stdout.trim();
    if (!FULL_SHA.test(head)) throw new PromotionGitError('failed', `branch ${branch} has no head`);
    return head;
  }

  async #ensureClone(clone: Clone, repoURL: string): Promise<void> {
    if (clone.ready) return;
    await rm(clone.dir, { recursive: true, force: true });
    await mkdir(clone.dir, { recursive: true });
    await this.#git(clone, ['init', '-q']);
    await this.#git(clone, ['remote', 'add', 'origin', repoURL]);
    clone.ready = true;
  }

  async #show(clone: Clone, head: string, path: string): Promise<string | undefined> {
    const p = repoPath(path);
    try {
      return (await this.#git(clone, ['show', `${head}:${p}`])).stdout;
    } catch (err) {
      if (err instanceof PromotionGitError && /does not exist|exists on disk, but not in/.test(err.message))
        return undefined;
      throw err;
    }
  }

  async #git(
    clone: Clone,
    args: string[],
    o: { credentials?: GitCredentials | undefined; env?: Record<string, string>; input?: string } = {},
  ) {
    try {
      return await runGit(args, {
        home: this.#dir,
        cwd: clone.dir,
        timeoutMs: this.#timeoutMs,
        credentials: o.credentials,
        ...(o.env ? { env: o.env } : {}),
        ...(o.input !== undefined ? { input: o.input } : {}),
      });
    } catch (err) {
      if (!(err instanceof GitRunError)) throw err;
      const detail = err.stderr.trim().split('\n').slice(-3).join('; ').slice(0, 500);
      const command = args.find((a) => !a.startsWith('-')) ?? 'git';
      if (err.killed) throw new PromotionGitError('unavailable', `git ${command} did not finish in time`);
      if (
        (command === 'fetch' || command === 'push' || command === 'ls-remote') &&
        !/\[rejected\]|non-fast-forward|fetch first/.test(err.stderr)
      )
        throw new PromotionGitError('unavailable', `git ${command} failed: ${detail || err.message}`);
      throw new PromotionGitError('failed', `git ${command} failed: ${detail || err.message}`);
    }
  }

  async #serial<T>(repoURL: string, fn: (clone: Clone) => Promise<T>): Promise<T> {
    const key = createHash('sha256').update(repoURL).digest('hex').slice(0, 16);
    const clone = this.#clones.get(key) ?? { dir: join(this.#dir, key), ready: false };
    this.#clones.set(key, clone);
    const prev = this.#queues.get(key) ?? Promise.resolve();
    const run = prev.then(
      () => fn(clone),
      () => fn(clone),
    );
    this.#queues.set(
      key,
      run.catch(() => undefined),
    );
    try {
      return await run;
    } catch (err) {
      // A clone in an unknown state is made again at the next use.
      if (!(err instanceof PromotionGitError) || err.failure !== 'conflict') clone.ready = false;
      throw err;
    }
  }

  readonly #clones = new Map<string, Clone>();
}

interface Clone {
  dir: string;
  ready: boolean;
}
