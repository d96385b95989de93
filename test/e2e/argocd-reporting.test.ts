/**
 * End-to-end, for a provisioned tenant: a real Argo CD (harness/argocd.ts) runs against the
 * tenant's vcluster API server (whose Argo charts installed the real CRDs) and syncs plain YAML
 * from a local git repository into it; the event reporter agent runs as a process against the
 * same API server with the credentials the tenants program wrote (the runtime-credentials
 * Secret: runtime token and control plane URL); the Application's sync and health — written by
 * Argo CD itself, not by the test — appear in `GET /v1/tenants/:id/applications` within 10 s.
 * Then a new commit and a hard refresh: the stored object follows Argo CD to the new revision.
 * Last, the sync action through the tunnel (tunnel-client, request-router and app-proxy as
 * processes with the program's credentials): the tenant's `POST …/runtime/api/applications/…/sync`
 * reaches Argo CD, which syncs an OutOfSync Application, and the result comes back through the
 * reporter (Synced, Succeeded, initiated by the caller's key).
 */
import t from 'tap';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { CoreV1Api, CustomObjectsApi, KubeConfig } from '@kubernetes/client-node';
import { ARGO_GROUP, ARGO_VERSION } from './harness/argo.ts';
import { argoCdUnavailable, gitRepository, startArgoCd } from './harness/argocd.ts';
import { PROVISION_TIMEOUT, provisioningSuite } from './harness/suite.ts';
import { freePort, startProcess, StopWaiting, until } from '../../sandbox/processes.ts';
import { catalog } from '../../runtime/catalog.ts';
import { stringAt } from './harness/api-client.ts';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const VERSION = '1.6.0';

const argoCd = argoCdUnavailable();
if (argoCd) {
  if (process.env.CI === 'true') t.fail(`a real Argo CD cannot run: ${argoCd}`);
  else t.plan(0, argoCd);
} else {
  await provisioningSuite(t, async (e2e) => {
    await t.test(
      'Argo CD in a tenant vcluster: sync and health reach the control plane through the reporter',
      async (t) => {
        const signup = await e2e.signup('argoco', VERSION);
        const tenantId = signup.tenant.id;
        await e2e.api.waitForPhase(tenantId, 'Ready', PROVISION_TIMEOUT);
        const kubeconfig = await e2e.tenantKubeconfig(tenantId);
        const kubeconfigFile = join(e2e.dir, `vcluster-${tenantId}.kubeconfig`);
        await writeFile(kubeconfigFile, kubeconfig, { mode: 0o600 });
        const kc = new KubeConfig();
        kc.loadFromString(kubeconfig);
        const core = kc.makeApiClient(CoreV1Api);
        const objects = kc.makeApiClient(CustomObjectsApi);

        const argocd = await startArgoCd(t, { kubeconfigFile, kc, dir: join(e2e.dir, 'argocd') });
        t.comment(
          `Argo CD: the real application controller and repo-server in the tenant's vcluster; Redis: ${
            argocd.redis === 'redis-server' ? 'redis-server from PATH' : 'redis-standin, an in-memory stand-in'
          }`,
        );

        // The reporter, with what the program wrote into the vcluster.
        const creds = await core.readNamespacedSecret({ name: 'runtime-credentials', namespace: 'hosted-runtime' });
        const field = (k: string) => Buffer.from(creds.data?.[k] ?? '', 'base64').toString('utf8');
        const token = field('runtime-token');
        const controlPlaneUrl = field('control-plane-url');
        t.ok(token && controlPlaneUrl, 'the runtime credentials Secret holds the token and the control plane URL');
        const reporterPort = await freePort();
        const reporter = startProcess(
          'event-reporter',
          process.execPath,
          [join(ROOT, 'runtime/agents/event-reporter/main.ts')],
          join(e2e.dir, 'event-reporter.log'),
          {
            cwd: ROOT,
            env: {
              PATH: process.env.PATH,
              CONTROL_PLANE_URL: controlPlaneUrl,
              RUNTIME_TOKEN: token,
              REPLICA_NAME: 'reporter-0',
              KUBECONFIG: kubeconfigFile,
              PORT: String(reporterPort),
              HOST: '127.0.0.1',
              LOG_LEVEL: 'info',
            },
          },
        );
        t.teardown(() => reporter.stop(3000));

        const repo = await gitRepository(join(e2e.dir, 'git', 'deploy'));
        const cm = (color: string) =>
          `apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: guestbook-config\ndata:\n  color: ${color}\n`;
        const first = await repo.commit({ 'guestbook/config.yaml': cm('blue') }, 'guestbook');
        await objects.createNamespacedCustomObject({
          group: ARGO_GROUP,
          version: ARGO_VERSION,
          namespace: argocd.namespace,
          plural: 'applications',
          body: {
            apiVersion: `${ARGO_GROUP}/${ARGO_VERSION}`,
            kind: 'Application',
            metadata: { name: 'guestbook', namespace: argocd.namespace },
            spec: {
              project: 'default',
              source: { repoURL: repo.url, path: 'guestbook', targetRevision: 'main' },
              destination: { server: 'https://kubernetes.default.svc', namespace: 'guestbook' },
              syncPolicy: { automated: { prune: false, selfHeal: false }, syncOptions: ['CreateNamespace=true'] },
            },
          },
        });
        type App = { status?: { sync?: { status?: string; revision?: string }; health?: { status?: string } } };
        const live = async () =>
          (await objects.getNamespacedCustomObject({
            group: ARGO_GROUP,
            version: ARGO_VERSION,
            namespace: argocd.namespace,
            plural: 'applications',
            name: 'guestbook',
          })) as App;
        await until(
          'Argo CD to sync guestbook',
          120_000,
          async () => {
            const a = await live();
            return a.status?.sync?.status === 'Synced' && a.status.health?.status === 'Healthy';
          },
          250,
        );
        const syncedAt = Date.now();
        t.equal((await live()).status?.sync?.revision, first, 'Argo CD synced the commit on main');

        const listed = async () =>
          (
            await e2e.api.expectStatus('GET /v1/tenants/:id/applications', { params: { id: tenantId } }, 200)
          ).items.find((i) => i.name === 'guestbook' && i.namespace === argocd.namespace);
        const reported = await until(
          'guestbook Synced and Healthy in the API',
          60_000,
          async () => {
            const i = await listed();
            return i?.sync === 'Synced' && i.health === 'Healthy' ? i : undefined;
          },
          250,
        );
        const lag = (Date.now() - syncedAt) / 1000;
        e2e.timing('Argo CD sync written → visible in GET /v1/tenants/:id/applications', lag);
        t.ok(
          lag <= 10,
          `the API shows guestbook Synced and Healthy ${lag.toFixed(1)} s after Argo CD wrote it (≤ 10 s)`,
        );
        t.comment(`reported item: ${JSON.stringify(reported)}`);

        // A new commit, a hard refresh: Argo CD finds it OutOfSync... then syncs it (automated).
        const second = await repo.commit({ 'guestbook/config.yaml': cm('red') }, 'guestbook: red');
        await objects.patchNamespacedCustomObject({
          group: ARGO_GROUP,
          version: ARGO_VERSION,
          namespace: argocd.namespace,
          plural: 'applications',
          name: 'guestbook',
          body: [{ op: 'add', path: '/metadata/annotations', value: { 'argocd.argoproj.io/refresh': 'hard' } }],
        });
        await until(
          'Argo CD to sync the second commit',
          120_000,
          async () =>
            (await live()).status?.sync?.revision === second && (await live()).status?.sync?.status === 'Synced',
          250,
        );
        const object = await until(
          'the stored Application at the second commit',
          30_000,
          async () => {
            const res = await e2e.api.request('GET /v1/tenants/:id/applications/:namespace/:name', {
              params: { id: tenantId, namespace: argocd.namespace, name: 'guestbook' },
            });
            return res.status === 200 && res.ok && stringAt(res.body.object, 'status', 'sync', 'revision') === second
              ? res.body
              : undefined;
          },
          250,
        );
        t.equal(
          stringAt(object.object, 'status', 'sync', 'revision'),
          second,
          'the stored object carries the revision Argo CD synced last',
        );

        // The sync action through the tunnel: the runtime side (tunnel-client → request-router →
        // app-proxy) runs as processes with the credentials the program wrote; the tenant calls the
        // control plane, Argo CD performs the sync, and the reporter brings the result back. The
        // processes run outside the vcluster, so the in-cluster addresses and the mounted runtime
        // info file of the rendered Deployments are replaced by loopback ports and the same values
        // (test/unit/pulumi/agent-env.test.ts checks the rendered environment itself).
        const [routerPort, proxyPort, healthPort] = await Promise.all([freePort(), freePort(), freePort()]);
        const agent = (name: string, env: Record<string, string>) => {
          const p = startProcess(
            name,
            process.execPath,
            [join(ROOT, `runtime/agents/${name}/main.ts`)],
            join(e2e.dir, `${name}.log`),
            { cwd: ROOT, env: { PATH: process.env.PATH, HOST: '127.0.0.1', LOG_LEVEL: 'info', ...env } },
          );
          t.teardown(() => p.stop(3000));
          return p;
        };
        const components = catalog.versions.find((v) => v.version === VERSION)!.components;
        agent('app-proxy', {
          PORT: String(proxyPort),
          TENANT_ID: tenantId,
          CONTROL_PLANE_PUBLIC_KEY: field('control-plane-public-key'),
          RUNTIME_VERSION: VERSION,
          RUNTIME_COMPONENTS: JSON.stringify(components),
          KUBECONFIG: kubeconfigFile,
        });
        agent('request-router', {
          PORT: String(routerPort),
          APP_PROXY_URL: `http://127.0.0.1:${proxyPort}`,
          // Not used here (no Argo Events webhooks in this test); required by the router.
          EVENT_SOURCE_URL: 'http://127.0.0.1:9/',
        });
        agent('tunnel-client', {
          TUNNEL_URL: field('tunnel-url'),
          RUNTIME_TOKEN: token,
          ROUTER_URL: `http://127.0.0.1:${routerPort}`,
          HEALTH_PORT: String(healthPort),
          HEALTH_HOST: '127.0.0.1',
        });
        await objects.createNamespacedCustomObject({
          group: ARGO_GROUP,
          version: ARGO_VERSION,
          namespace: argocd.namespace,
          plural: 'applications',
          body: {
            apiVersion: `${ARGO_GROUP}/${ARGO_VERSION}`,
            kind: 'Application',
            metadata: { name: 'manual', namespace: argocd.namespace },
            spec: {
              project: 'default',
              source: { repoURL: repo.url, path: 'guestbook', targetRevision: 'main' },
              destination: { server: 'https://kubernetes.default.svc', namespace: 'manual' },
              syncPolicy: { syncOptions: ['CreateNamespace=true'] },
            },
          },
        });
        const item = async (name: string) =>
          (
            await e2e.api.expectStatus('GET /v1/tenants/:id/applications', { params: { id: tenantId } }, 200)
          ).items.find((i) => i.name === name && i.namespace === argocd.namespace);
        await until(
          'manual OutOfSync in the API',
          60_000,
          async () => (await item('manual'))?.sync === 'OutOfSync',
          250,
        );
        const tenant = e2e.api.withToken(signup.apiKey);
        const action = `/v1/tenants/${tenantId}/runtime/api/applications/${argocd.namespace}/manual/sync`;
        // Until the tunnel is up the control plane answers 502/503; the first 200 is the sync.
        const answer = await until(
          'the sync action through the tunnel',
          60_000,
          async () => {
            const res = await tenant.raw('POST', action, { body: {} });
            if (res.status === 200) return res;
            if (res.status !== 502 && res.status !== 503)
              throw new StopWaiting(`sync answered ${res.status}: ${JSON.stringify(res.body)}`);
            return undefined;
          },
          500,
        );
        t.equal(
          stringAt(answer.body, 'metadata', 'name'),
          'manual',
          'the action answered with the Application after the change',
        );
        const sentAt = Date.now();
        const synced = await until(
          'manual Synced in the API after the action',
          60_000,
          async () => {
            const i = await item('manual');
            return i?.sync === 'Synced' && i.phase === 'Succeeded' ? i : undefined;
          },
          250,
        );
        e2e.timing('sync action → Argo CD synced → visible in the API', (Date.now() - sentAt) / 1000);
        t.equal(synced.health, 'Healthy', 'the synced Application is reported Healthy');
        const stored = await e2e.api.expectStatus(
          'GET /v1/tenants/:id/applications/:namespace/:name',
          { params: { id: tenantId, namespace: argocd.namespace, name: 'manual' } },
          200,
        );
        const by = stringAt(stored.object, 'status', 'operationState', 'operation', 'initiatedBy', 'username');
        t.ok(by && by !== 'admin', `the reported operation was initiated by the caller's key (${by})`);
        t.ok(
          await core.readNamespacedConfigMap({ name: 'guestbook-config', namespace: 'manual' }),
          'Argo CD created the ConfigMap in the vcluster',
        );
      },
    );
  });
}
