/**
 * The GitOps Operator's whole `action: pr` step against a REAL Gitea (harness/gitea.ts: v1.26.0
 * built from its Go module by scripts/gitea.sh, on loopback, its data in the tests' PostgreSQL)
 * and a real Argo CD (application controller, repo-server) on a kube-apiserver:
 *
 *  - the customer's configuration repository is hosted on Gitea: created through its API and
 *    pushed over its HTTP Git with a user token; Argo CD syncs dev and staging from it over HTTP
 *    with the token as the password of its repository Secret, which the operator pushes with and
 *    opens pull requests with;
 *  - a release committed to dev starts a promotion whose staging step (a `pr` policy, its
 *    `pullRequest` pointing at Gitea's API) opens exactly one pull request on Gitea, from the
 *    step's branch into main, named after the promotion; the promotion waits while it is open;
 *    Gitea's merge API (as the customer merges) lets the step go on: Argo CD synced at the merged
 *    revision, the promotion Succeeded;
 *  - a second promotion aborted while its pull request is open: Gitea shows it closed, not
 *    merged, and the branch is gone; main is untouched.
 *
 * Skips, saying why, when Gitea or Argo CD could not be built (test/e2e/prepare.sh).
 */
import t from 'tap';
import { backgroundBuild } from './harness/background-build.ts';
import { execFile } from 'node:child_process';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { argoApiServerUnavailable, ARGO_GROUP, ARGO_VERSION, startArgoApiServer } from './harness/argo.ts';
import { argoCdUnavailable, startArgoCd } from './harness/argocd.ts';
import { giteaUnavailable, startGitea } from './harness/gitea.ts';
import {
  applier,
  argoCdRepositorySecret,
  gitopsOperator,
  installPromotionCrds,
  promotionObject,
} from './harness/promotions.ts';
import { kubectlRunner } from '../helpers/kubectl.ts';
import { until } from '../../sandbox/processes.ts';
import { PROMOTIONS_GROUP, PROMOTIONS_VERSION, type Promotion } from '../../runtime/protocol/promotions.ts';

// In scripts/test.sh's late phase Gitea may still be compiling: wait for its build.
await backgroundBuild(t, 'gitea');
t.setTimeout(10 * 60_000);

const run = promisify(execFile);
const ENVS = ['dev', 'staging'] as const;

const release = (version: string) =>
  `apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: shop-release\ndata:\n  version: "${version}"\n`;

const unavailable = (await giteaUnavailable()) ?? argoApiServerUnavailable() ?? argoCdUnavailable();
if (unavailable) {
  // In CI a real provider and a real Argo CD are required, so there it fails.
  if (process.env.CI === 'true') t.fail(`a real Gitea and Argo CD cannot run here: ${unavailable}`);
  else t.plan(0, unavailable);
} else {
  const bin = process.env.HRT_TOOLCHAIN_BIN!;
  const cluster = await startArgoApiServer(t, { name: 'gitea-promotions', crds: ['applications', 'appprojects'] });
  const dir = join(cluster.dir, 'gitea-promotions');
  await mkdir(dir, { recursive: true });
  const kubectl = kubectlRunner(bin, cluster.kubeconfigFile);
  const apply = applier(kubectl, dir);
  await installPromotionCrds(kubectl, dir);
  // Gitea and Argo CD start side by side.
  const [gitea, argocd] = await Promise.all([
    startGitea(join(dir, 'gitea')),
    startArgoCd(t, { kubeconfigFile: cluster.kubeconfigFile, kc: cluster.kc, dir: join(dir, 'argocd') }),
  ]);
  t.teardown(() => gitea.stop());
  const ns = argocd.namespace;

  /** Gitea's API as the customer (and this test) calls it, with the user's token. */
  const api = async <T = Record<string, unknown>>(method: string, path: string, body?: unknown) => {
    const r = await fetch(`${gitea.apiUrl}${path}`, {
      method,
      headers: { authorization: `token ${gitea.token}`, 'content-type': 'application/json' },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    const text = await r.text();
    const json = (r.headers.get('content-type') ?? '').includes('json') && text ? JSON.parse(text) : undefined;
    return { status: r.status, json: json as T, text };
  };
  type GiteaPull = {
    number: number;
    state: string;
    merged: boolean;
    title: string;
    body: string;
    html_url: string;
    head: { ref: string };
    base: { ref: string };
  };
  const pulls = async () => (await api<GiteaPull[]>('GET', '/repos/acme/config/pulls?state=all&limit=50')).json;

  // The customer's configuration repository on Gitea, pushed over HTTP with the user's token.
  const made = await api('POST', '/user/repos', { name: 'config', default_branch: 'main' });
  if (made.status !== 201) throw new Error(`the repository was not created: ${made.status} ${made.text}`);
  const port = new URL(gitea.url).port;
  const repoUrl = `http://127.0.0.1:${port}/acme/config.git`;
  const work = join(dir, 'customer');
  const gitEnv = {
    ...process.env,
    GIT_AUTHOR_NAME: 'Ada Lovelace',
    GIT_AUTHOR_EMAIL: 'ada@example.test',
    GIT_COMMITTER_NAME: 'Ada Lovelace',
    GIT_COMMITTER_EMAIL: 'ada@example.test',
  };
  const git = async (...args: string[]) => (await run('git', ['-C', work, ...args], { env: gitEnv })).stdout.trim();
  await mkdir(work, { recursive: true });
  await git('init', '-q', '-b', 'main');
  await git('remote', 'add', 'origin', `http://${gitea.user}:${gitea.token}@127.0.0.1:${port}/acme/config.git`);
  /** Commits `files` on main and pushes it to Gitea (the customer's release to dev). */
  const push = async (files: Record<string, string>, message: string) => {
    await git('pull', '-q', '--ff-only', 'origin', 'main').catch(() => undefined);
    for (const [path, content] of Object.entries(files)) {
      await mkdir(join(work, path, '..'), { recursive: true });
      await writeFile(join(work, path), content);
    }
    await git('add', '-A');
    await git('commit', '-q', '-m', message);
    await git('push', '-q', 'origin', 'main');
  };
  await push(
    Object.fromEntries(ENVS.map((env) => [`shop/${env}/release.yaml`, release('1.0.0')])),
    'the shop in dev and staging',
  );
  /** A file on Gitea's main, through its API. */
  const onMain = async (path: string) => (await api('GET', `/repos/acme/config/raw/${path}?ref=main`)).text;
  const mainHead = async () =>
    (await api<{ commit: { id: string } }>('GET', '/repos/acme/config/branches/main')).json.commit.id;

  // Argo CD reads it with the token as the password; the operator pushes with the same Secret.
  await argoCdRepositorySecret(kubectl, ns, {
    name: 'config-repo',
    url: repoUrl,
    username: gitea.user,
    password: gitea.token,
  });
  const appName = (env: string) => `shop-${env}`;
  await apply(
    'applications',
    ENVS.map((env) => ({
      apiVersion: `${ARGO_GROUP}/${ARGO_VERSION}`,
      kind: 'Application',
      metadata: { name: appName(env), namespace: ns },
      spec: {
        project: 'default',
        source: { repoURL: repoUrl, path: `shop/${env}`, targetRevision: 'main' },
        destination: { server: 'https://kubernetes.default.svc', namespace: `shop-${env}` },
        syncPolicy: { automated: {}, syncOptions: ['CreateNamespace=true'] },
      },
    })),
  );
  const res = promotionObject(ns);
  await apply('promotion-resources', [
    res('Environment', 'dev', { kind: 'NON_PROD' }),
    res('Environment', 'staging', { kind: 'NON_PROD' }),
    res('PromotionTemplate', 'release', {
      version: { file: 'release.yaml', jsonPath: '$.data.version' },
      files: [{ path: 'release.yaml', jsonPaths: ['$.data.version'] }],
    }),
    res('PromotionFlow', 'dev-to-staging', { triggerEnvironment: 'dev', steps: [{ environment: 'staging' }] }),
    // The repository is the Product's (no `repository`: the owner and name come from its URL).
    res('PromotionPolicy', 'staging-review', {
      selector: { environments: ['staging'] },
      action: 'pr',
      pullRequest: { provider: 'gitea', apiUrl: gitea.apiUrl },
    }),
    res('Product', 'shop', {
      repository: repoUrl,
      branch: 'main',
      template: 'release',
      flow: 'dev-to-staging',
      environments: ENVS.map((env) => ({ environment: env, path: `shop/${env}`, applications: [appName(env)] })),
    }),
  ]);

  type App = { status?: { sync?: { status?: string; revision?: string }; health?: { status?: string } } };
  const application = async (env: string) =>
    (await cluster.objects.getNamespacedCustomObject({
      group: ARGO_GROUP,
      version: ARGO_VERSION,
      namespace: ns,
      plural: 'applications',
      name: appName(env),
    })) as App;
  const first = await mainHead();
  await until('dev and staging Synced and Healthy from Gitea', 180_000, async () => {
    for (const env of ENVS) {
      const app = await application(env);
      if (
        app.status?.sync?.status !== 'Synced' ||
        app.status.sync.revision !== first ||
        app.status.health?.status !== 'Healthy'
      )
        return false;
    }
    return true;
  });

  const operator = await gitopsOperator(t, {
    kubectl,
    adminKubeconfig: cluster.kubeconfig,
    namespace: ns,
    runtimeNamespace: 'hosted-runtime',
    dir,
  });
  await operator.start();

  const get = async (name: string) =>
    (await cluster.objects.getNamespacedCustomObject({
      group: PROMOTIONS_GROUP,
      version: PROMOTIONS_VERSION,
      namespace: ns,
      plural: 'promotions',
      name,
    })) as Promotion;
  const promotionOf = (version: string) =>
    until(`the promotion of ${version}`, 120_000, async () =>
      (
        (await cluster.objects.listNamespacedCustomObject({
          group: PROMOTIONS_GROUP,
          version: PROMOTIONS_VERSION,
          namespace: ns,
          plural: 'promotions',
        })) as { items: Promotion[] }
      ).items.find((p) => p.spec.release === version),
    );
  const phase = (p: Promotion, phases: string[]) =>
    until(`promotion ${p.metadata.name} to be ${phases.join(' or ')}`, 240_000, async () => {
      const x = await get(p.metadata.name);
      return phases.includes(x.status?.phase ?? '') ? x : undefined;
    }).catch(async (err: Error) => {
      const x = await get(p.metadata.name);
      throw new Error(
        `${err.message}; it is ${JSON.stringify(x.status).slice(0, 1500)}; the operator: ${await operator.tail()}`,
        { cause: err },
      );
    });
  const awaitingPullRequest = (p: Promotion) =>
    until(`${p.metadata.name}'s pull request opened`, 120_000, async () => {
      const x = await get(p.metadata.name);
      const s = x.status?.steps?.[0];
      return s?.phase === 'AwaitingMerge' && s.proposal?.pullRequest ? x : undefined;
    }).catch(async (err: Error) => {
      const x = await get(p.metadata.name);
      throw new Error(
        `${err.message}; it is ${JSON.stringify(x.status).slice(0, 1500)}; the operator: ${await operator.tail()}`,
        { cause: err },
      );
    });

  t.test('a pull request on Gitea, waited on, merged through Gitea: staging synced at the merge', async (t) => {
    await push({ 'shop/dev/release.yaml': release('1.1.0') }, 'dev: shop 1.1.0');
    const p = await promotionOf('1.1.0');
    const awaiting = await awaitingPullRequest(p);
    const proposal = awaiting.status!.steps![0]!.proposal!;
    t.equal(proposal.branch, `promotions/${p.metadata.name}/staging`, 'proposed on a branch of its own');
    const opened = await pulls();
    t.equal(opened.length, 1, 'Gitea holds exactly one pull request');
    const pr = opened[0]!;
    t.match(
      pr,
      { state: 'open', merged: false, title: 'Promote shop 1.1.0 to staging', head: { ref: proposal.branch } },
      'open, from the step’s branch, named after the promotion',
    );
    t.equal(pr.base.ref, 'main', 'into main');
    t.ok(
      pr.body.includes(
        `Promotion \`${p.metadata.name}\` of product \`shop\`: release \`1.1.0\` to environment \`staging\``,
      ),
      `its description names the promotion: ${pr.body}`,
    );
    t.match(
      proposal.pullRequest,
      { provider: 'gitea', number: pr.number, url: pr.html_url, state: 'open' },
      'the step links Gitea’s page of it',
    );
    t.equal(
      awaiting.status!.steps![0]!.message,
      `pull request #${pr.number} (${pr.html_url}) waits to be merged into main`,
      'the step says which pull request it waits for',
    );
    await operator.rounds(2);
    const still = await get(p.metadata.name);
    t.equal(still.status?.steps?.[0]?.phase, 'AwaitingMerge', 'while it is open, the step waits');
    t.equal(await onMain('shop/staging/release.yaml'), release('1.0.0'), 'and main is untouched');
    t.equal((await pulls()).length, 1, 'no second pull request in the meantime');

    // The customer merges it in Gitea (Gitea checks a new pull request's mergeability in the
    // background and refuses a merge until it has: asked again until it takes it).
    let merged: { status: number; text: string } | undefined;
    await until('Gitea merges the pull request', 60_000, async () => {
      merged = await api('POST', `/repos/acme/config/pulls/${pr.number}/merge`, { Do: 'merge' });
      return merged.status === 200 || (merged.status !== 405 && merged.status !== 409);
    });
    t.equal(merged!.status, 200, `merged through Gitea’s merge API: ${merged!.text}`);
    const mergeCommit = await mainHead();
    const done = await phase(p, ['Succeeded', 'Failed']);
    t.equal(done.status?.phase, 'Succeeded', `merged, the promotion went on to the end: ${done.status?.message}`);
    const step = done.status!.steps![0]!;
    t.equal(step.commit, proposal.commit, 'staging’s commit is the proposed one, found on main');
    t.ok(step.mergedAt, 'with when it was found merged');
    t.equal(step.proposal?.pullRequest?.state, 'merged', 'its pull request shown merged');
    const app = await application('staging');
    t.match(
      app.status,
      { sync: { status: 'Synced', revision: mergeCommit }, health: { status: 'Healthy' } },
      'Argo CD synced staging at the merged revision',
    );
    const live = await kubectl([
      'get',
      'configmap',
      'shop-release',
      '-n',
      'shop-staging',
      '-o',
      'jsonpath={.data.version}',
    ]);
    t.equal(live.stdout, '1.1.0', 'staging runs 1.1.0');
    t.match(
      await pulls(),
      [{ number: pr.number, state: 'closed', merged: true }],
      'still the one pull request, merged',
    );
  });

  t.test('abort while the pull request is open: Gitea closes it and the branch is gone', async (t) => {
    await push({ 'shop/dev/release.yaml': release('1.2.0') }, 'dev: shop 1.2.0');
    const before = await mainHead();
    const p = await promotionOf('1.2.0');
    const awaiting = await awaitingPullRequest(p);
    const { branch, pullRequest } = awaiting.status!.steps![0]!.proposal!;
    const shown = await api<GiteaPull>('GET', `/repos/acme/config/pulls/${pullRequest!.number}`);
    t.match(shown.json, { state: 'open', head: { ref: branch } }, 'its pull request is open on Gitea');
    t.equal(
      (await api('GET', `/repos/acme/config/branches/${encodeURIComponent(branch)}`)).status,
      200,
      'its branch is on Gitea',
    );

    // Abort, as the customer (or the control plane's `promotions abort`) asks for it.
    const asked = await kubectl([
      'patch',
      `promotion.${PROMOTIONS_GROUP}`,
      p.metadata.name,
      '-n',
      ns,
      '--type',
      'merge',
      '-p',
      JSON.stringify({ spec: { abort: true } }),
    ]);
    t.equal(asked.code, 0, `abort asked: ${asked.output}`);
    const aborted = await phase(p, ['Aborted']);
    t.match(
      aborted.status?.steps?.[0]?.message,
      new RegExp(`proposal withdrawn \\(pull request #${pullRequest!.number} closed, branch ${branch} deleted\\)`),
      'the step says its proposal was withdrawn',
    );
    const closed = await api<GiteaPull>('GET', `/repos/acme/config/pulls/${pullRequest!.number}`);
    t.match(closed.json, { state: 'closed', merged: false }, 'Gitea shows the pull request closed, not merged');
    t.equal(
      (await api('GET', `/repos/acme/config/branches/${encodeURIComponent(branch)}`)).status,
      404,
      'the branch is gone from Gitea',
    );
    t.equal(await mainHead(), before, 'nothing was pushed to main');
    t.equal(await onMain('shop/staging/release.yaml'), release('1.1.0'), 'staging on main is untouched');
    t.equal((await pulls()).length, 2, 'two pull requests in all: one per promotion');
  });
}
