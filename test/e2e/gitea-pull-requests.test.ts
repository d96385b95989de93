/**
 * The GitOps Operator's pull-request client (runtime/agents/gitops-operator/pull-requests.ts,
 * `action: pr`) against a REAL Gitea (harness/gitea.ts: v1.26.0 built from its Go module by
 * scripts/gitea.sh, on loopback, its data in the tests' PostgreSQL), as the operator uses it:
 *
 *  - a branch pushed over HTTP with the token as the password, the pull request opened from it
 *    into main; a second client (a restarted operator) finds it by its head branch and opens none;
 *  - Gitea's own merge API merges it: main then holds the branch's commit (what the operator's
 *    merge detection reads: the trailers on the target branch), and closing it is a no-op (merged);
 *  - another branch's pull request closed (abort), Gitea shows it closed;
 *  - Gitea's errors as the step would show them: a wrong token (401), no such repository (404), a
 *    head branch that does not exist.
 *
 * Skips, saying why, when scripts/gitea.sh could not build Gitea (test/e2e/prepare.sh). The
 * operator's whole `action: pr` step runs against a real Gitea in gitea-promotions.test.ts, and in
 * promotions.test.ts against a provider double with Gitea's shapes (a create whose answer is lost
 * while the operator is killed; docs/testing.md, "Pull requests").
 */
import t from 'tap';
import { backgroundBuild } from './harness/background-build.ts';
import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { giteaUnavailable, startGitea } from './harness/gitea.ts';
import { ProviderError, PullRequestClient } from '../../runtime/agents/gitops-operator/pull-requests.ts';

const run = promisify(execFile);

// In scripts/test.sh's late phase this build may still be compiling: wait for it.
await backgroundBuild(t, 'gitea');
t.setTimeout(10 * 60_000);
const unavailable = await giteaUnavailable();
if (unavailable) {
  // A Gitea that did not build skips this file only (test/e2e/prepare.sh prints the build's
  // reason); in CI a real provider is required, so there it fails.
  if (process.env.CI === 'true') t.fail(`a real Gitea cannot run here: ${unavailable}`);
  else t.plan(0, `a real Gitea cannot run here: ${unavailable}`);
} else {
  const dir = await mkdtemp(join(tmpdir(), 'gitea-prs-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const gitea = await startGitea(join(dir, 'gitea'));
  t.teardown(() => gitea.stop());

  const api = async (method: string, path: string, body?: unknown, token = gitea.token) => {
    const r = await fetch(`${gitea.apiUrl}${path}`, {
      method,
      headers: { authorization: `token ${token}`, 'content-type': 'application/json' },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    const text = await r.text();
    return { status: r.status, json: (text ? JSON.parse(text) : undefined) as Record<string, unknown> & unknown[] };
  };
  const made = await api('POST', '/user/repos', { name: 'config', auto_init: true, default_branch: 'main' });
  if (made.status !== 201) throw new Error(`precondition: the repository was not created: ${made.status}`);

  // A clone with the token as the password, as the operator pushes with its repository Secret.
  const remote = `http://${gitea.user}:${gitea.token}@127.0.0.1:${new URL(gitea.url).port}/acme/config.git`;
  const work = join(dir, 'work');
  const git = (...args: string[]) =>
    run('git', ['-C', work, ...args], {
      env: {
        ...process.env,
        GIT_AUTHOR_NAME: 'GitOps Operator',
        GIT_AUTHOR_EMAIL: 'operator@example.test',
        GIT_COMMITTER_NAME: 'GitOps Operator',
        GIT_COMMITTER_EMAIL: 'operator@example.test',
      },
    });
  await run('git', ['clone', '-q', remote, work]);
  const propose = async (branch: string, release: string) => {
    await git('checkout', '-q', '-B', branch, 'origin/main');
    await writeFile(join(work, 'release.yaml'), `version: "${release}"\n`);
    await git('add', 'release.yaml');
    await git(
      'commit',
      '-q',
      '-m',
      `Promote shop ${release} to staging\n\nPromotion-Id: uid-${release}\nPromotion-Environment: staging\n`,
    );
    await git('push', '-q', 'origin', branch);
    return (await git('rev-parse', 'HEAD')).stdout.trim();
  };
  const repo = { owner: 'acme', name: 'config' };
  const client = () => new PullRequestClient({ kind: 'gitea', apiUrl: gitea.apiUrl, token: gitea.token });

  t.test('opened once per head branch, merged by Gitea’s merge API, found merged', async (t) => {
    const head = 'promotions/shop-1-4-0/staging';
    const commit = await propose(head, '1.4.0');
    const opened = await client().open(repo, {
      head,
      base: 'main',
      title: 'Promote shop 1.4.0 to staging',
      body: 'Promotion `shop-1-4-0`',
    });
    t.match(opened, { number: 1, state: 'open', created: true }, 'Gitea opened pull request #1');
    t.equal(opened.url, `${gitea.url}/acme/config/pulls/1`, 'its page in Gitea');
    const again = await client().open(repo, { head, base: 'main', title: 'x', body: 'y' });
    t.match(again, { number: 1, created: false }, 'a restarted operator finds it by its head branch');
    const all = await api('GET', '/repos/acme/config/pulls?state=all');
    t.equal(all.json.length, 1, 'Gitea holds exactly one pull request');
    t.match(all.json[0], { title: 'Promote shop 1.4.0 to staging', head: { ref: head }, base: { ref: 'main' } });

    const merge = await api('POST', '/repos/acme/config/pulls/1/merge', { Do: 'merge' });
    t.equal(merge.status, 200, 'merged through Gitea’s merge API');
    await git('fetch', '-q', 'origin', 'main');
    const contains = await git('merge-base', '--is-ancestor', commit, 'origin/main').then(
      () => true,
      () => false,
    );
    t.ok(contains, 'main now holds the proposed commit, with its trailers (what the operator waits for)');
    t.equal(await client().find(repo, head, 'main'), undefined, 'no open pull request from the branch any more');
    t.equal((await client().close(repo, 1)).state, 'merged', 'closing a merged one changes nothing');
  });

  t.test('abort: the pull request closed', async (t) => {
    const head = 'promotions/shop-1-5-0/staging';
    await propose(head, '1.5.0');
    const opened = await client().open(repo, { head, base: 'main', title: 'Promote shop 1.5.0 to staging', body: '' });
    t.equal(opened.number, 2);
    t.equal((await client().close(repo, 2)).state, 'closed', 'closed');
    const shown = await api('GET', '/repos/acme/config/pulls/2');
    t.match(shown.json, { state: 'closed', merged: false }, 'Gitea shows it closed, not merged');
    t.equal(await client().find(repo, head, 'main'), undefined, 'not found as open');
  });

  t.test('Gitea’s errors, as the step shows them', async (t) => {
    const head = 'promotions/shop-1-6-0/staging';
    const failure = async (call: Promise<unknown>) => {
      const err = await call.then(
        () => undefined,
        (e: unknown) => e,
      );
      if (!(err instanceof ProviderError)) throw new Error(`expected a ProviderError, got ${String(err)}`);
      return err;
    };
    const wrong = new PullRequestClient({ kind: 'gitea', apiUrl: gitea.apiUrl, token: 'not-a-token' });
    const e401 = await failure(wrong.open(repo, { head, base: 'main', title: 't', body: '' }));
    t.match(e401.message, /^Gitea answered 401 Unauthorized to GET \/repos\/acme\/config\/pulls.* — the token/);
    t.equal(e401.transient, false);
    const e404 = await failure(
      client().open({ owner: 'acme', name: 'gone' }, { head, base: 'main', title: 't', body: '' }),
    );
    t.match(e404.message, /^Gitea answered 404 Not Found to GET \/repos\/acme\/gone\/pulls.* — no such repository/);
    const noBranch = await failure(client().open(repo, { head, base: 'main', title: 't', body: '' }));
    t.match(noBranch.message, /^Gitea answered 4\d\d .* to POST \/repos\/acme\/config\/pulls/, noBranch.message);
    t.equal(noBranch.transient, false, 'not retried');
  });
}
