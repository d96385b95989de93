/**
 * End-to-end: a hosted tenant's runtime, executing. The real provisioner process, the real Pulumi
 * engine and provider plugin, the tenant's real vcluster (sandbox/vcluster-pods.ts), and the pods
 * that vcluster syncs for the runtime run as processes (sandbox/runtime-pods.ts): the tunnel
 * client, request router, app-proxy and event reporter from this checkout, Argo CD's application
 * controller and repo-server from the Argo CD build, Redis. Checked, through the public API only:
 * the tenant reaches Ready with its tunnel connected (TunnelConnected, RuntimeConnected), its
 * event reporter reporting (a heartbeat, the reported version), a demo Application from a Git
 * repository is reported with the state Argo CD wrote, and a sync asked through the API reaches
 * the runtime through the tunnel and is applied by the tenant's Argo CD.
 */
import { join } from 'node:path';
import t from 'tap';
import { CustomObjectsApi } from '@kubernetes/client-node';
import { PROVISION_TIMEOUT, provisioningSuite } from './harness/suite.ts';
import { kube } from './harness/kube.ts';
import { until } from '../../sandbox/processes.ts';
import { startGitServer } from '../../sandbox/git-server.ts';
import { catalog } from '../../runtime/catalog.ts';

const VERSION = catalog.defaultVersion();
/** The upgrade the fleet upgrade makes: the next version the catalog allows from the signup default. */
const TARGET = catalog.versions
  .map((v) => v.version)
  .find(
    (v) =>
      v !== VERSION &&
      catalog.upgradePath(VERSION, v).allowed &&
      catalog.upgradePath(VERSION, v).path.length === 1 &&
      v > VERSION,
  )!;

interface Condition {
  type: string;
  status: string;
  reason?: string;
  message?: string;
}
interface TenantView {
  id: string;
  status: { phase: string; conditions?: Condition[] };
}

await provisioningSuite(
  t,
  async (e2e) => {
    const runner = e2e.runtimePods!;
    t.comment(`runtime pods' Redis: ${runner.redis}`);
    const started = Date.now();
    const signup = await e2e.signup('hosted', VERSION);
    const tenantId = signup.tenant.id;
    const ns = `tenant-${tenantId}`;
    await e2e.api.waitForPhase(tenantId, 'Ready', PROVISION_TIMEOUT);
    e2e.timing('signup → Ready (runtime pods running)', (Date.now() - started) / 1000);

    await t.test('the runtime pods run as processes', async (t) => {
      await until('the agents and Argo CD to run', 180_000, () => {
        return (
          runner.pods(ns).filter((p) => p.kind === 'agent').length >= 7 &&
          runner.pods(ns).some((p) => p.kind === 'argocd')
        );
      }).catch((err: unknown) => {
        t.comment(`waiting: ${JSON.stringify([...runner.waiting()])}`);
        throw err;
      });
      const pods = runner.pods(ns);
      t.comment(`running: ${pods.map((p) => `${p.virtual.namespace}/${p.virtual.name} (${p.kind})`).join(', ')}`);
      t.comment(`on KWOK only: ${[...runner.kwokOnly(ns).values()].join(', ')}`);
      t.ok(
        pods.some((p) => p.virtual.name.startsWith('tunnel-client')),
        'the tunnel client runs',
      );
    });

    await t.test('Ready means connected: the tunnel is up and the event reporter reports', async (t) => {
      const connected = await until('RuntimeConnected=True', 180_000, async () => {
        const v = await e2e.api.expect<TenantView>(200, 'GET', `/v1/tenants/${tenantId}`);
        const c = v.status.conditions?.find((x) => x.type === 'RuntimeConnected');
        return c?.status === 'True' ? c : undefined;
      }).catch(async (err: Error) => {
        const v = await e2e.api.expect<TenantView>(200, 'GET', `/v1/tenants/${tenantId}`);
        throw new Error(`${err.message}; conditions: ${JSON.stringify(v.status.conditions)}`, { cause: err });
      });
      t.equal(connected.reason, 'Connected', `RuntimeConnected: ${connected.message ?? ''}`);
      const runtimes = await e2e.api.expect<{ items: Array<{ name: string; reportedVersion: string | null }> }>(
        200,
        'GET',
        `/v1/tenants/${tenantId}/runtimes`,
      );
      t.equal(
        runtimes.items.find((r) => r.name === 'hosted')?.reportedVersion,
        VERSION,
        'the hosted runtime reported its version through its heartbeat',
      );
    });

    await t.test('argoCdUrl answers: the tenant’s Argo CD API server through the tunnel', async (t) => {
      const view = await e2e.api.expect<TenantView & { status: { endpoints?: { argoCdUrl?: string } } }>(
        200,
        'GET',
        `/v1/tenants/${tenantId}`,
      );
      const argoCdUrl = view.status.endpoints?.argoCdUrl ?? '';
      t.match(argoCdUrl, new RegExp(`/v1/tenants/${tenantId}/argo-cd/$`), `argoCdUrl names the route (${argoCdUrl})`);
      const path = new URL(argoCdUrl).pathname;
      const version = await until('argocd-server to answer /api/version', 180_000, async () => {
        const res = await e2e.api.request<{ Version?: string }>('GET', `${path}api/version`, undefined, {
          authorization: `Bearer ${signup.apiKey}`,
        });
        return res.status === 200 ? res.body : undefined;
      });
      t.match(version.Version ?? '', /^v3\./, `Argo CD's API server answered its version (${version.Version ?? ''})`);
      const other = await e2e.api.request<unknown>('GET', `${path}api/version`, undefined, {
        authorization: 'Bearer hrt_tenant_not-a-key',
      });
      t.equal(other.status, 401, 'an unknown key does not reach it');
    });

    await t.test(
      'a demo Application from a served Git repository is reported, and a sync through the API is applied by the tenant’s Argo CD',
      async (t) => {
        const git = await startGitServer(join(e2e.dir, 'git'), runner.gateway);
        t.teardown(() => git.stop());
        const repo = await git.repository('demo');
        const sha = await repo.commit(
          {
            'demo/configmap.yaml':
              'apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: demo-config\ndata:\n  greeting: hello from git\n',
          },
          'demo: a ConfigMap',
        );
        const vc = kube(await e2e.tenantKubeconfig(tenantId));
        const objects = vc.kc.makeApiClient(CustomObjectsApi);
        await objects.createNamespacedCustomObject({
          group: 'argoproj.io',
          version: 'v1alpha1',
          namespace: 'argocd',
          plural: 'applications',
          body: {
            apiVersion: 'argoproj.io/v1alpha1',
            kind: 'Application',
            metadata: { name: 'demo', namespace: 'argocd' },
            spec: {
              project: 'default',
              source: { repoURL: repo.url, path: 'demo', targetRevision: 'main' },
              destination: { server: 'https://kubernetes.default.svc', namespace: 'demo' },
              syncPolicy: { syncOptions: ['CreateNamespace=true'] },
            },
          },
        });
        type Page = {
          items: Array<{ name: string; sync: string | null; health: string | null; revision?: string | null }>;
        };
        const reported = await until(
          'demo reported OutOfSync (compared by the tenant’s Argo CD)',
          180_000,
          async () => {
            const page = await e2e.api.expect<Page>(200, 'GET', `/v1/tenants/${tenantId}/applications`);
            return page.items.find((i) => i.name === 'demo' && i.sync === 'OutOfSync');
          },
        );
        t.ok(reported, 'the control plane shows demo OutOfSync, as Argo CD compared it with Git');

        const res = await e2e.api.request<unknown>(
          'POST',
          `/v1/tenants/${tenantId}/runtime/api/applications/argocd/demo/sync`,
          {},
          { authorization: `Bearer ${signup.apiKey}` },
        );
        t.equal(
          res.status,
          200,
          `the sync reached the app-proxy through the tunnel: ${JSON.stringify(res.body).slice(0, 300)}`,
        );
        const cm = await until('demo-config applied in the tenant’s cluster', 180_000, async () =>
          vc.core.readNamespacedConfigMap({ name: 'demo-config', namespace: 'demo' }).catch(() => undefined),
        );
        t.equal(cm.data?.greeting, 'hello from git', 'Argo CD applied the ConfigMap from Git');
        const synced = await until('demo reported Synced', 120_000, async () => {
          const page = await e2e.api.expect<Page>(200, 'GET', `/v1/tenants/${tenantId}/applications`);
          return page.items.find((i) => i.name === 'demo' && i.sync === 'Synced');
        });
        t.ok(synced, `the control plane shows demo Synced (commit ${sha.slice(0, 8)})`);
      },
    );

    await t.test(
      `a fleet upgrade ${VERSION} → ${TARGET} with the tunnel and Applications gates on passes them`,
      async (t) => {
        interface FleetView {
          id: string;
          state: string;
          tenants?: Array<{ tenantId: string; state: string; reason: string | null }>;
        }
        const began = Date.now();
        const created = await e2e.api.expect<{ fleetUpgrade: FleetView }>(201, 'POST', '/v1/fleet-upgrades', {
          targetVersion: TARGET,
          selector: { tenantIds: [tenantId] },
          waves: [{ count: 1 }],
          soakSeconds: 0,
          gateTimeoutSeconds: 600,
          failureBudget: { maxFailures: 0 },
          gate: { tunnel: true, applications: true },
        });
        const id = created.fleetUpgrade.id;
        const done = await until(
          `fleet upgrade ${id} to end`,
          9 * 60_000,
          async () => {
            const f = await e2e.api.expect<FleetView>(200, 'GET', `/v1/fleet-upgrades/${id}`);
            return ['completed', 'halted', 'aborted'].includes(f.state) ? f : undefined;
          },
          2000,
        );
        e2e.timing(`fleet upgrade ${VERSION} → ${TARGET} with its gates (one tenant)`, (Date.now() - began) / 1000);
        t.equal(done.state, 'completed', 'the fleet upgrade completed');
        const row = done.tenants?.find((x) => x.tenantId === tenantId);
        t.equal(
          row?.state,
          'succeeded',
          `the tenant passed its gate, tunnel and Applications included (${row?.reason ?? ''})`,
        );
        const v = await e2e.api.expect<TenantView & { status: { runtimeVersion?: string } }>(
          200,
          'GET',
          `/v1/tenants/${tenantId}`,
        );
        t.equal(v.status.runtimeVersion, TARGET, `the tenant runs ${TARGET}`);
        const connected = await until('RuntimeConnected=True after the upgrade', 180_000, async () => {
          const now = await e2e.api.expect<TenantView>(200, 'GET', `/v1/tenants/${tenantId}`);
          return now.status.conditions?.find((c) => c.type === 'RuntimeConnected' && c.status === 'True');
        });
        t.ok(connected, 'and its upgraded runtime is connected and reporting');
        type Page = { items: Array<{ name: string; sync: string | null }> };
        const page = await e2e.api.expect<Page>(200, 'GET', `/v1/tenants/${tenantId}/applications`);
        t.equal(page.items.find((i) => i.name === 'demo')?.sync, 'Synced', 'demo is still reported Synced');
      },
    );
  },
  { runtimePods: true },
);
