/**
 * The GitOps Operator's pull-request client (runtime/agents/gitops-operator/pull-requests.ts)
 * against a loopback TEST DOUBLE of each provider's API (test/helpers/pull-request-provider-double.ts):
 * the requests it sends (paths, bodies, the token's header), find-or-create opening exactly one
 * pull request per head branch, closing, and the step messages a provider's errors become
 * (401, 404, 422, 5xx and timeouts, the transient ones retried). The client against a real
 * Gitea: test/e2e/gitea-pull-requests.test.ts (docs/testing.md, "Pull requests").
 */
import t from 'tap';
import {
  ProviderError,
  PullRequestClient,
  repoRef,
  type ProviderKind,
} from '../../../runtime/agents/gitops-operator/pull-requests.ts';
import { startProviderDouble } from '../../helpers/pull-request-provider-double.ts';

const TOKEN = 'tok-3f9a0c1d2e';
const repo = { owner: 'acme', name: 'config' };
const ask = {
  head: 'promotions/shop-1-4-0/staging',
  base: 'main',
  title: 'Promote shop 1.4.0 to staging',
  body: 'Promotion shop-1-4-0',
};

/** The ProviderError a call ends in (the test fails when it succeeds). */
async function failure(call: Promise<unknown>): Promise<ProviderError> {
  const err = await call.then(
    () => undefined,
    (e: unknown) => e,
  );
  if (!(err instanceof ProviderError)) throw new Error(`expected a ProviderError, got ${String(err)}`);
  return err;
}

const fast = { timeoutMs: 500, attempts: 3, backoffMs: 5 };

t.test('repoRef: owner and name from the clone URL', async (t) => {
  t.same(repoRef('https://git.example.test/acme/config.git'), { owner: 'acme', name: 'config' });
  t.same(repoRef('https://gitlab.example.test/group/sub/config'), { owner: 'group/sub', name: 'config' });
  t.throws(() => repoRef('https://git.example.test/config.git'), /does not name an owner and a repository/);
  t.throws(() => repoRef('not a url'), /is not a URL/);
});

for (const kind of ['github', 'gitea', 'gitlab'] as ProviderKind[]) {
  t.test(`${kind} (a test double): opens one pull request per head branch, finds it again, closes it`, async (t) => {
    const double = await startProviderDouble({ kind, owner: 'acme', repo: 'config', token: TOKEN });
    t.teardown(() => double.close());
    const client = new PullRequestClient({ kind, apiUrl: double.apiUrl, token: TOKEN, ...fast });

    const first = await client.open(repo, ask);
    t.equal(first.created, true, 'a new one');
    t.equal(first.number, 1);
    t.equal(first.state, 'open');
    t.match(first.url, /^http:\/\/127\.0\.0\.1:\d+\/acme\/config\//, 'its page');
    const create = double.requests.find((r) => r.method === 'POST')!;
    const base = kind === 'gitea' ? '/api/v1' : kind === 'gitlab' ? '/api/v4' : '';
    if (kind === 'gitlab') {
      t.equal(create.path, `${base}/projects/acme%2Fconfig/merge_requests`, 'the project by its encoded path');
      t.match(create.body, { source_branch: ask.head, target_branch: 'main', title: ask.title, description: ask.body });
      t.equal(create.headers['private-token'], TOKEN, 'the token in PRIVATE-TOKEN');
    } else {
      t.equal(create.path, `${base}/repos/acme/config/pulls`);
      t.same(create.body, { head: ask.head, base: 'main', title: ask.title, body: ask.body });
      t.equal(create.headers.authorization, kind === 'github' ? `Bearer ${TOKEN}` : `token ${TOKEN}`);
    }
    if (kind === 'github') t.equal(create.headers.accept, 'application/vnd.github+json');

    // A restarted operator (a new client) asks again: the same one, nothing created.
    const again = await new PullRequestClient({ kind, apiUrl: double.apiUrl, token: TOKEN, ...fast }).open(repo, ask);
    t.same({ number: again.number, created: again.created }, { number: 1, created: false }, 'found by its head branch');
    t.equal(double.pulls.length, 1, 'exactly one pull request');
    t.equal(double.requests.filter((r) => r.method === 'POST').length, 1, 'one create');

    // Another branch is another pull request.
    const other = await client.open(repo, { ...ask, head: 'promotions/shop-1-4-0/prod' });
    t.equal(other.number, 2);

    const closed = await client.close(repo, 1);
    t.equal(closed.state, 'closed', 'closed');
    t.equal(double.pulls[0]!.state, 'closed');
    const closing = double.requests.find((r) => r.method === (kind === 'gitlab' ? 'PUT' : 'PATCH'))!;
    t.same(closing.body, kind === 'gitlab' ? { state_event: 'close' } : { state: 'closed' }, 'the close request');
    const writes = double.requests.length;
    t.equal((await client.close(repo, 1)).state, 'closed', 'closing a closed one again is a no-op');
    t.equal(double.requests.length, writes + 1, 'one read, no write');
    t.equal(await client.find(repo, ask.head, 'main'), undefined, 'a closed one is not found as open');

    double.merge(2);
    t.equal((await client.close(repo, 2)).state, 'merged', 'a merged one is left as it is');
  });
}

t.test('gitea: finds its pull request on a later page of the open ones', async (t) => {
  const double = await startProviderDouble({ kind: 'gitea', owner: 'acme', repo: 'config', token: TOKEN });
  t.teardown(() => double.close());
  const client = new PullRequestClient({ kind: 'gitea', apiUrl: double.apiUrl, token: TOKEN, ...fast });
  for (let i = 0; i < 60; i++) await client.open(repo, { ...ask, head: `feature/${i}` });
  const mine = await client.open(repo, ask);
  t.equal(mine.number, 61);
  t.equal((await client.open(repo, ask)).created, false, 'found on page 2');
  t.equal(double.pulls.length, 61, 'not opened twice');
});

t.test('a create the provider refuses as a duplicate (a lost answer retried) keeps the existing one', async (t) => {
  for (const kind of ['github', 'gitea'] as const) {
    const double = await startProviderDouble({ kind, owner: 'acme', repo: 'config', token: TOKEN });
    const client = new PullRequestClient({ kind, apiUrl: double.apiUrl, token: TOKEN, ...fast });
    await client.open(repo, ask);
    // The list answers nothing once (as a list racing the create would), the create is refused.
    let listed = false;
    const racing = new PullRequestClient({
      kind,
      apiUrl: double.apiUrl,
      token: TOKEN,
      ...fast,
      fetch: async (url, init) => {
        if (init?.method === 'GET' && !listed) {
          listed = true;
          return new Response('[]', { status: 200 });
        }
        return fetch(url, init);
      },
    });
    const r = await racing.open(repo, ask);
    t.same({ number: r.number, created: r.created }, { number: 1, created: false }, `${kind}: the existing one`);
    t.equal(double.pulls.length, 1, `${kind}: still one`);
    await double.close();
  }
});

t.test('provider errors: clear messages, never the token; 5xx and timeouts retried', async (t) => {
  const double = await startProviderDouble({
    kind: 'github',
    owner: 'acme',
    repo: 'config',
    token: TOKEN,
    branches: [ask.head],
  });
  t.teardown(() => double.close());
  const client = new PullRequestClient({ kind: 'github', apiUrl: double.apiUrl, token: TOKEN, ...fast });

  const wrong = new PullRequestClient({ kind: 'github', apiUrl: double.apiUrl, token: 'not-the-token', ...fast });
  const e401 = await failure(wrong.open(repo, ask));
  t.match(
    e401.message,
    /^GitHub answered 401 Unauthorized to GET \/repos\/acme\/config\/pulls: Bad credentials — the token \(the password of the repository credentials Secret\) is not accepted$/,
  );
  t.equal(e401.transient, false, '401 is not retried');
  t.notMatch(e401.message, /not-the-token/, 'the token is not in the message');

  const e404 = await failure(client.open({ owner: 'acme', name: 'gone' }, ask));
  t.match(
    e404.message,
    /GitHub answered 404 Not Found to GET \/repos\/acme\/gone\/pulls: Not Found — no such repository or API at this URL/,
  );

  const e422 = await failure(client.open(repo, { ...ask, head: 'promotions/missing/staging' }));
  t.match(
    e422.message,
    /GitHub answered 422 Unprocessable Entity to POST \/repos\/acme\/config\/pulls: Validation Failed: head promotions\/missing\/staging does not exist/,
  );
  t.equal(e422.transient, false);

  // Two 502s, then an answer: the third attempt opens it.
  double.failNext(502, 2, 'POST');
  const before = double.requests.length;
  const opened = await client.open(repo, ask);
  t.equal(opened.created, true, 'opened after two 5xx answers');
  t.equal(double.requests.slice(before).filter((r) => r.method === 'POST').length, 3, 'three attempts');

  double.failNext(503, 3);
  const e5xx = await failure(client.find(repo, ask.head, 'main'));
  t.match(
    e5xx.message,
    /^GitHub answered 503 Service Unavailable to GET \/repos\/acme\/config\/pulls: the double answers 503 \(3 attempts\)$/,
  );
  t.equal(e5xx.transient, true, '5xx is transient');

  double.failNext(-1, 3);
  const slow = await failure(client.find(repo, ask.head, 'main'));
  t.equal(slow.message, 'GitHub did not answer GET /repos/acme/config/pulls within 500 ms (3 attempts)');
  t.equal(slow.transient, true);

  double.failNext(0, 1);
  t.equal((await client.find(repo, ask.head, 'main'))?.number, 1, 'a dropped connection is retried');

  const closedPort = new PullRequestClient({
    kind: 'gitea',
    apiUrl: 'http://127.0.0.1:9/api/v1',
    token: TOKEN,
    ...fast,
  });
  const down = await failure(closedPort.find(repo, ask.head, 'main'));
  t.match(down.message, /^Gitea could not be reached for GET \/repos\/acme\/config\/pulls: .*\(3 attempts\)$/);

  t.throws(
    () => new PullRequestClient({ kind: 'bitbucket' as ProviderKind, apiUrl: double.apiUrl, token: TOKEN }),
    /'bitbucket' is not a provider/,
  );
  t.throws(() => new PullRequestClient({ kind: 'gitea', apiUrl: 'ftp://x', token: TOKEN }), /is not http\(s\)/);
});
