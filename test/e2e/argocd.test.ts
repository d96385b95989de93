/**
 * A real Argo CD (application controller + repo-server built from the argo-cd v3 module by
 * scripts/argocd.sh; harness/argocd.ts) against a real kube-apiserver with the real Argo CRDs
 * (harness/argo.ts), syncing plain YAML from a local git repository (file://):
 *  - an Application with automated sync becomes Synced and Healthy, with the commit it deployed,
 *    and its ConfigMap exists — status written by Argo CD itself;
 *  - an Application without automated sync stays OutOfSync until the app-proxy's sync action
 *    (runtime/agents/app-proxy/actions.ts, with an admin client here) writes its operation, after
 *    which Argo CD syncs it;
 *  - a new commit is noticed after the app-proxy's refresh action (a hard refresh).
 */
import t from 'tap';
import { join } from 'node:path';
import { CoreV1Api } from '@kubernetes/client-node';
import {
  ARGO_GROUP,
  ARGO_VERSION,
  argoApiServerUnavailable,
  sampleApplication,
  startArgoApiServer,
} from './harness/argo.ts';
import { argoCdUnavailable, gitRepository, startArgoCd } from './harness/argocd.ts';
import { statusOf } from './harness/kube.ts';
import { until } from '../../sandbox/processes.ts';
import { runAction } from '../../runtime/agents/app-proxy/actions.ts';
import { argoObjects } from '../../runtime/agents/app-proxy/kube.ts';
import { clientNodeTransport } from '../../runtime/kube/client-node-transport.ts';

t.setTimeout(8 * 60_000);

const unavailable = argoApiServerUnavailable() ?? argoCdUnavailable();
if (unavailable) {
  if (process.env.CI === 'true') t.fail(`a real Argo CD cannot run: ${unavailable}`);
  else t.plan(0, unavailable);
} else {
  const argo = await startArgoApiServer(t, { name: 'argocd' });
  const dir = join(argo.dir, 'argocd-processes');
  const argocd = await startArgoCd(t, { kubeconfigFile: argo.kubeconfigFile, kc: argo.kc, dir });
  t.comment(
    `Argo CD: the real application controller and repo-server (${process.env.HRT_ARGOCD_BIN}/argocd); Redis: ${
      argocd.redis === 'redis-server'
        ? 'redis-server from PATH'
        : 'redis-standin, an in-memory stand-in (no redis-server on PATH, or HRT_ARGOCD_REDIS=redis-standin)'
    }; ready in ${argocd.startSeconds.toFixed(1)} s`,
  );
  const core = argo.kc.makeApiClient(CoreV1Api);
  const repo = await gitRepository(join(dir, 'git', 'deploy'));
  const configMap = (name: string, color: string) =>
    `apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ${name}\ndata:\n  color: ${color}\n`;
  const first = await repo.commit(
    {
      'guestbook/config.yaml': configMap('guestbook-config', 'blue'),
      'manual/config.yaml': configMap('manual-config', 'green'),
    },
    'guestbook and manual apps',
  );
  for (const ns of ['guestbook', 'manual']) await core.createNamespace({ body: { metadata: { name: ns } } });

  type App = {
    metadata: { annotations?: Record<string, string> };
    status?: {
      sync?: { status?: string; revision?: string };
      health?: { status?: string };
      operationState?: { phase?: string; syncResult?: { revision?: string } };
    };
  };
  const ref = (name: string) => ({
    group: ARGO_GROUP,
    version: ARGO_VERSION,
    namespace: argocd.namespace,
    plural: 'applications',
    name,
  });
  const actions = argoObjects(clientNodeTransport(argo.kc));
  const getApp = async (name: string) => (await argo.objects.getNamespacedCustomObject(ref(name))) as App;
  const application = (name: string, path: string, automated: boolean) => {
    const app = sampleApplication(argocd.namespace, name, { repoURL: repo.url, path }) as {
      spec: Record<string, unknown> & { source: Record<string, unknown> };
    };
    app.spec.source.targetRevision = 'main';
    app.spec.destination = { server: 'https://kubernetes.default.svc', namespace: path };
    app.spec.syncPolicy = automated ? { automated: { prune: false, selfHeal: false } } : {};
    return app;
  };
  const waitFor = (what: string, name: string, ok: (a: App) => boolean) =>
    until(what, 120_000, async () => {
      for (const p of [argocd.controller, argocd.repoServer])
        if (!p.running()) throw new Error(`${p.name} exited: ${await p.tail(15)}`);
      const a = await getApp(name);
      return ok(a) ? a : undefined;
    });

  await t.test('an automated Application is synced by Argo CD, which writes its status', async (t) => {
    const started = Date.now();
    await argo.objects.createNamespacedCustomObject({ ...ref(''), body: application('guestbook', 'guestbook', true) });
    const app = await waitFor(
      'guestbook Synced and Healthy',
      'guestbook',
      (a) => a.status?.sync?.status === 'Synced' && a.status.health?.status === 'Healthy',
    );
    t.comment(`timing: Application created → Synced and Healthy in ${((Date.now() - started) / 1000).toFixed(1)} s`);
    t.equal(app.status?.sync?.revision, first, 'the synced revision is the commit on main');
    t.equal(app.status?.operationState?.phase, 'Succeeded', 'the automated sync operation succeeded');
    const cm = await core.readNamespacedConfigMap({ name: 'guestbook-config', namespace: 'guestbook' });
    t.same(cm.data, { color: 'blue' }, 'the ConfigMap from git exists in the destination namespace');
  });

  await t.test('a manual Application is synced when a sync operation is written to it', async (t) => {
    await argo.objects.createNamespacedCustomObject({ ...ref(''), body: application('manual', 'manual', false) });
    await waitFor('manual OutOfSync', 'manual', (a) => a.status?.sync?.status === 'OutOfSync');
    const before = await core.readNamespacedConfigMap({ name: 'manual-config', namespace: 'manual' }).then(
      () => undefined,
      (e: unknown) => e,
    );
    t.equal(statusOf(before), 404, 'before the sync its ConfigMap does not exist');
    // The app-proxy's sync action (runtime/agents/app-proxy/actions.ts) writes the operation.
    const synced = await runAction(actions, {
      resource: 'applications',
      namespace: argocd.namespace,
      name: 'manual',
      action: 'sync',
      body: {},
      subject: 'e2e',
    });
    t.match(
      synced,
      { operation: { sync: { revision: 'main' }, initiatedBy: { username: 'e2e' } } },
      "the action answers with the operation it wrote: the source's targetRevision, by the caller",
    );
    t.notOk((synced.operation as { sync?: { prune?: boolean } }).sync?.prune, 'prune is off by default');
    const app = await waitFor(
      'manual Synced after the operation',
      'manual',
      (a) => a.status?.sync?.status === 'Synced' && a.status.operationState?.phase === 'Succeeded',
    );
    t.equal(app.status?.operationState?.syncResult?.revision, first, 'the operation synced the commit on main');
    const cm = await core.readNamespacedConfigMap({ name: 'manual-config', namespace: 'manual' });
    t.same(cm.data, { color: 'green' }, 'the ConfigMap was created by the sync');
  });

  await t.test('a new commit shows as OutOfSync after a hard refresh', async (t) => {
    const second = await repo.commit({ 'manual/config.yaml': configMap('manual-config', 'red') }, 'manual: red');
    // The app-proxy's refresh action (hard by default).
    await runAction(actions, {
      resource: 'applications',
      namespace: argocd.namespace,
      name: 'manual',
      action: 'refresh',
      body: undefined,
      subject: 'e2e',
    });
    const app = await waitFor(
      'manual OutOfSync at the new commit',
      'manual',
      (a) => a.status?.sync?.status === 'OutOfSync' && a.status.sync.revision === second,
    );
    t.notOk(
      app.metadata.annotations?.['argocd.argoproj.io/refresh'],
      'Argo CD removed the refresh annotation once done',
    );
    const cm = await core.readNamespacedConfigMap({ name: 'manual-config', namespace: 'manual' });
    t.same(cm.data, { color: 'green' }, 'without a sync the live ConfigMap is unchanged');
  });
}
