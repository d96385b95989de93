/**
 * End-to-end: what changed, in which commit, by whom. A hosted tenant on the newest runtime version
 * (the first with the Source Server) runs its runtime as processes (sandbox/runtime-pods.ts): Argo
 * CD's application controller, repo-server and API server, Redis (Debian's redis-server), the
 * Source Server and the other agents. Its Argo CD deploys two applications, A and B, from one
 * monorepo on a real Git server over HTTP with credentials (git's own http-backend,
 * sandbox/git-server.ts; the credentials in an Argo CD repository Secret, as a tenant adds them).
 * Checked through the public API only:
 *
 *  - a commit changing A's path gives A a history entry with that commit, its author and message,
 *    and leaves B's change revision where it was (B's revision moves, its history does not);
 *  - a commit changing only an image tag shows the image before → after and exactly one field;
 *    the diff route answers through the tunnel with both sides of the Deployment;
 *  - a commit A cannot render shows as a failed history entry with Argo CD's message;
 *  - M, a multi-source Application (two paths of the monorepo): a commit to one of its sources is
 *    its change (that commit's author from Argo CD's metadata of the source, what it changed with
 *    the other source held), and the commits to A move its revision but make no entry.
 */
import { join } from 'node:path';
import t from 'tap';
import { CustomObjectsApi } from '@kubernetes/client-node';
import { PROVISION_TIMEOUT, provisioningSuite } from './harness/suite.ts';
import { kube } from './harness/kube.ts';
import { until } from '../../sandbox/processes.ts';
import { startGitServer, type GitRepository, type GitServer } from '../../sandbox/git-server.ts';
import { catalog, compareVersions } from '../../runtime/catalog.ts';

/** The newest runtime version: the Source Server is in it. */
const VERSION = [...catalog.versions].sort((a, b) => compareVersions(b.version, a.version))[0]!.version;

const deployment = (image: string) => `apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 1
  selector:
    matchLabels: { app: web }
  template:
    metadata:
      labels: { app: web }
    spec:
      containers:
        - name: web
          image: ${image}
          ports:
            - containerPort: 8080
`;
const configMap = (name: string, level: string) =>
  `apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ${name}\ndata:\n  LOG_LEVEL: ${level}\n`;

await provisioningSuite(
  t,
  async (e2e) => {
    const runner = e2e.runtimePods!;
    const signup = await e2e.signup('hosted', VERSION);
    const tenantId = signup.tenant.id;
    const ns = `tenant-${tenantId}`;
    await e2e.api.waitForPhase(tenantId, 'Ready', PROVISION_TIMEOUT);
    /** The tenant's own key: what a customer calls the API with. */
    const api = e2e.api.withToken(signup.apiKey);
    const history = async (app: string) =>
      (
        await api.expectStatus(
          'GET /v1/tenants/:id/applications/:namespace/:name/history',
          { params: { id: tenantId, namespace: 'argocd', name: app } },
          200,
        )
      ).items;
    const appItem = async (app: string) =>
      (await api.expectStatus('GET /v1/tenants/:id/applications', { params: { id: tenantId } }, 200)).items.find(
        (i) => i.name === app,
      );
    const refresh = async (app: string) => {
      const res = await api.raw('POST', `/v1/tenants/${tenantId}/runtime/api/applications/argocd/${app}/refresh`, {
        body: {},
      });
      if (res.status !== 200) throw new Error(`refresh ${app}: ${res.status} ${JSON.stringify(res.body)}`);
    };
    /** The entry of `app` for `sha`, once it is final (succeeded or failed). */
    const finalEntry = (app: string, sha: string) =>
      until(`${app}'s history entry for ${sha.slice(0, 8)} to be final`, 240_000, async () => {
        const e = (await history(app)).find((x) => x.changeRevision === sha);
        return e && (e.result === 'succeeded' || e.result === 'failed') ? e : undefined;
      }).catch(async (err: Error) => {
        const item = await appItem(app);
        throw new Error(
          `${err.message}; ${app} reported as ${JSON.stringify(item?.summary ?? null).slice(0, 1500)}; history: ${JSON.stringify(await history(app)).slice(0, 1500)}`,
          { cause: err },
        );
      });

    await t.test('the Source Server and Argo CD’s API server run in the tenant’s runtime', async (t) => {
      await until('the source-server and argocd-server pods to run', 240_000, () => {
        const pods = runner.pods(ns);
        return (
          pods.some((p) => p.virtual.name.startsWith('source-server')) &&
          pods.some((p) => p.virtual.name.startsWith('argocd-server'))
        );
      }).catch((err: unknown) => {
        t.comment(`waiting: ${JSON.stringify([...runner.waiting()])}`);
        throw err;
      });
      const names = runner.pods(ns).map((p) => p.virtual.name);
      t.comment(`running: ${names.join(', ')}`);
      t.ok(
        names.some((n) => n.startsWith('source-server')),
        'the Source Server runs as a process, with its own network namespace and service-account token',
      );
    });

    let git: GitServer | undefined;
    let repo!: GitRepository;
    let c0 = '';
    t.teardown(() => git?.stop());
    await t.test('a monorepo on a Git server with credentials, and Applications A and B from it', async (t) => {
      const server = await startGitServer(join(e2e.dir, 'git-history'), runner.gateway, {
        credentials: { username: 'platform', password: `pw-${tenantId.slice(0, 8)}` },
      });
      git = server;
      repo = await server.repository('monorepo');
      c0 = await repo.commit(
        {
          'apps/a/deployment.yaml': deployment('nginx:1.25.0'),
          'apps/a/config.yaml': configMap('a-config', 'info'),
          'apps/b/config.yaml': configMap('b-config', 'info'),
          'apps/m/web/config.yaml': configMap('m-web', 'info'),
          'apps/m/config/config.yaml': configMap('m-config', 'info'),
        },
        'apps a and b',
        { author: { name: 'Grace Hopper', email: 'grace@example.test' } },
      );

      const vc = kube(await e2e.tenantKubeconfig(tenantId));
      await vc.core.createNamespacedSecret({
        namespace: 'argocd',
        body: {
          metadata: { name: 'monorepo', labels: { 'argocd.argoproj.io/secret-type': 'repository' } },
          stringData: { type: 'git', url: repo.url, username: 'platform', password: `pw-${tenantId.slice(0, 8)}` },
        },
      });
      const objects = vc.kc.makeApiClient(CustomObjectsApi);
      /** An Application deploying `sources` into app-<name>, synced automatically. */
      const application = (app: string, sources: Record<string, unknown>) =>
        objects.createNamespacedCustomObject({
          group: 'argoproj.io',
          version: 'v1alpha1',
          namespace: 'argocd',
          plural: 'applications',
          body: {
            apiVersion: 'argoproj.io/v1alpha1',
            kind: 'Application',
            metadata: { name: app, namespace: 'argocd' },
            spec: {
              project: 'default',
              ...sources,
              destination: { server: 'https://kubernetes.default.svc', namespace: `app-${app}` },
              syncPolicy: { automated: {}, syncOptions: ['CreateNamespace=true'] },
            },
          },
        });
      for (const app of ['a', 'b'])
        await application(app, { source: { repoURL: repo.url, path: `apps/${app}`, targetRevision: 'main' } });
      // M: a multi-source Application, two paths of the monorepo side by side.
      await application('m', {
        sources: [
          { repoURL: repo.url, path: 'apps/m/web', targetRevision: 'main' },
          { repoURL: repo.url, path: 'apps/m/config', targetRevision: 'main' },
        ],
      });
      t.ok(c0, 'the first commit is pushed over HTTP with the credentials');
    });

    await t.test('the first deployment of each application is in its history', async (t) => {
      for (const app of ['a', 'b', 'm']) {
        const e = await finalEntry(app, c0);
        t.equal(e.result, 'succeeded', `${app}: the first sync succeeded (${e.resultMessage ?? ''})`);
        t.equal(
          e.author,
          'Grace Hopper <grace@example.test>',
          `${app}: the commit's author, from Argo CD's revision metadata`,
        );
        t.equal(e.message?.trim(), 'apps a and b', `${app}: the commit's message`);
      }
      t.ok((git?.refused ?? 0) > 0, 'the Git server asked for credentials (anonymous requests were refused)');
    });

    await t.test('a commit to A’s path: a new entry for A, and B’s change revision stays', async (t) => {
      const c1 = await repo.commit({ 'apps/a/config.yaml': configMap('a-config', 'debug') }, 'a: debug logging', {
        author: { name: 'Ada Lovelace', email: 'ada@example.test' },
      });
      await refresh('a');
      await refresh('b');
      const e = await finalEntry('a', c1);
      t.equal(e.result, 'succeeded', 'A synced the change');
      t.equal(e.author, 'Ada Lovelace <ada@example.test>', 'the author of the commit that changed A');
      t.equal(e.message?.trim(), 'a: debug logging', 'its message');
      t.equal(e.previousChangeRevision, c0, 'the change revision before it');
      t.same(
        e.resources.map((r) => [r.kind, r.name, r.action, r.fields]),
        [['ConfigMap', 'a-config', 'modified', ['data.LOG_LEVEL']]],
        'one ConfigMap modified, in one field',
      );
      const b = await until('B to be reported at the new head', 180_000, async () => {
        const item = await appItem('b');
        return item?.summary?.revision === c1 ? item : undefined;
      });
      t.equal(b.summary?.changeRevision, c0, 'B’s change revision stays at the commit that last changed B');
      const bHistory = await history('b');
      t.same(
        bHistory.map((x) => x.changeRevision),
        [c0],
        'B has no new history entry for a commit that did not touch it',
      );
    });

    await t.test(
      'an image-only commit: the image before → after, one field, and the diff through the tunnel',
      async (t) => {
        const c2 = await repo.commit({ 'apps/a/deployment.yaml': deployment('nginx:1.27.1') }, 'a: nginx 1.27.1', {
          author: { name: 'Ada Lovelace', email: 'ada@example.test' },
        });
        await refresh('a');
        const e = await finalEntry('a', c2);
        t.same(
          e.images.map((i) => [i.container, i.before, i.after]),
          [['web', 'nginx:1.25.0', 'nginx:1.27.1']],
          'the image moved from 1.25.0 to 1.27.1',
        );
        t.same(
          e.images.map((i) => i.resource),
          ['Deployment/app-a/web'],
          'in the Deployment Argo CD applied in the destination namespace (its manifest names none)',
        );
        t.same(
          e.resources.map((r) => [r.kind, r.name, r.fields]),
          [['Deployment', 'web', ['spec.template.spec.containers[name=web].image']]],
          'exactly one field of one resource changed',
        );
        const diff = await api.expectStatus(
          'GET /v1/tenants/:id/applications/:namespace/:name/diff',
          { params: { id: tenantId, namespace: 'argocd', name: 'a' }, query: { revision: c2 } },
          200,
        );
        const web = diff.resources.find((r) => r.kind === 'Deployment' && r.name === 'web');
        const image = (o: Record<string, unknown> | null | undefined) =>
          (o as { spec?: { template?: { spec?: { containers?: Array<{ image?: string }> } } } } | null)?.spec?.template
            ?.spec?.containers?.[0]?.image;
        t.equal(
          image(web?.before),
          'nginx:1.25.0',
          'the diff’s before side, from Argo CD’s manifests at the previous change',
        );
        t.equal(image(web?.after), 'nginx:1.27.1', 'the diff’s after side, at the commit');
        const live = await api.request('GET /v1/tenants/:id/applications/:namespace/:name/diff', {
          params: { id: tenantId, namespace: 'argocd', name: 'a' },
        });
        t.equal(live.status, 200, `Git against the cluster answers too (${JSON.stringify(live.body).slice(0, 200)})`);
        t.equal(live.ok ? live.body.base : undefined, 'live', 'compared with the live objects');
      },
    );

    await t.test('a commit A cannot render: a failed entry with Argo CD’s message', async (t) => {
      const c3 = await repo.commit(
        { 'apps/a/broken.yaml': 'apiVersion: v1\nkind: ConfigMap\nmetadata: [this is not a mapping\n' },
        'a: a broken manifest',
        { author: { name: 'Ada Lovelace', email: 'ada@example.test' } },
      );
      await refresh('a');
      const e = await finalEntry('a', c3);
      t.equal(e.result, 'failed', 'the entry failed');
      t.ok((e.resultMessage ?? '').length > 0, `with Argo CD's message: ${e.resultMessage ?? ''}`);
      t.equal(e.author, 'Ada Lovelace <ada@example.test>', 'and still names the commit and its author');
    });

    await t.test(
      'a multi-source application: a commit to one source is its change, the other held; commits elsewhere are not',
      async (t) => {
        const cm = await repo.commit(
          { 'apps/m/config/config.yaml': configMap('m-config', 'debug') },
          'm: debug config',
          { author: { name: 'Ada Lovelace', email: 'ada@example.test' } },
        );
        await refresh('m');
        const e = await finalEntry('m', cm);
        t.equal(e.result, 'succeeded', `M synced the change (${e.resultMessage ?? ''})`);
        t.equal(e.author, 'Ada Lovelace <ada@example.test>', 'the author, from Argo CD’s metadata of that source');
        t.equal(e.message?.trim(), 'm: debug config', 'its message');
        t.equal(e.previousChangeRevision, c0, 'after M’s first deployment');
        t.same(
          e.resources.map((r) => [r.kind, r.name, r.action, r.fields]),
          [['ConfigMap', 'm-config', 'modified', ['data.LOG_LEVEL']]],
          'one field of the changed source’s ConfigMap; the other source’s m-web is held where it was',
        );
        t.same(
          (await history('m')).map((x) => x.changeRevision),
          [cm, c0],
          'the commits to A (three of them) moved M’s revision but made no entry for M',
        );
        const diff = await api.expectStatus(
          'GET /v1/tenants/:id/applications/:namespace/:name/diff',
          { params: { id: tenantId, namespace: 'argocd', name: 'm' }, query: { revision: cm } },
          200,
        );
        t.equal(diff.base, c0, 'the commit diff through the tunnel: against the source’s change before it');
        t.same(
          diff.resources.map((r) => [r.kind, r.name, r.action]),
          [['ConfigMap', 'm-config', 'modified']],
          'with both sides of what it changed',
        );
      },
    );
  },
  { runtimePods: true },
);
