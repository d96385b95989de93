/**
 * A tunnel-based hybrid runtime beside the customer's own Argo CD, every part real: the control
 * plane is the `provisioner serve` process (real Postgres); the customer's cluster is a
 * kube-apiserver with the real Argo CRDs where a real Argo CD (application controller and
 * repo-server, harness/argocd.ts) syncs Applications from a local git repository in namespace
 * `argocd`. The install bundle (`argo: existing`) is applied with kubectl; the bootstrap program
 * writes the runtime key; then the four agents run as processes with the environment their
 * Deployments give them, the credentials the install created and, for the two that call the API
 * server, their own ServiceAccounts' tokens (addresses are loopback ports instead of Services).
 *
 *  - The tunnel connects: the control plane shows TunnelConnected.
 *  - The event reporter reports the customer's Applications with the state the real Argo CD wrote:
 *    listed under the runtime (not the hosted one), Reporting, ArgoCDReachable, reportedVersion.
 *  - A sync asked through the control plane (`…/runtimes/:name/proxy/api/applications/…/sync`)
 *    travels the tunnel to the app-proxy, whose Role in the customer's namespace lets it write the
 *    operation, and the real Argo CD syncs the Application.
 *  - Nothing of the customer's Argo CD is changed beyond the two Roles the bundle lists.
 *  - Removal closes the tunnel and revokes the key; the remove command leaves Argo CD alone.
 */
import t from 'tap';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  argoApiServerUnavailable,
  ARGO_GROUP,
  ARGO_VERSION,
  sampleApplication,
  startArgoApiServer,
} from './harness/argo.ts';
import { argoCdUnavailable, gitRepository, startArgoCd } from './harness/argocd.ts';
import { kubectlRunner } from '../helpers/kubectl.ts';
import { serverPort, startProcess, until, type ManagedProcess } from '../../sandbox/processes.ts';
import {
  kubeconfigAs as kubeconfigAsAccount,
  removeCommandArgs,
  runBootstrapProgram,
  runtimeNamespace,
  startHybridControlPlane,
  workloadEnv,
} from './harness/hybrid.ts';
import type { Runtime, RuntimeRegistered, RuntimeRemoved } from '../../provisioner/api/types.ts';

t.setTimeout(12 * 60_000);

const unavailable = argoApiServerUnavailable() ?? argoCdUnavailable();
if (unavailable) {
  if (process.env.CI === 'true') t.fail(`a real Argo CD cannot run: ${unavailable}`);
  else t.plan(0, unavailable);
} else {
  const bin = process.env.HRT_TOOLCHAIN_BIN!;
  const main = (agent: string) => fileURLToPath(new URL(`../../runtime/agents/${agent}/main.ts`, import.meta.url));

  // The customer's cluster and its own Argo CD.
  const customer = await startArgoApiServer(t, { name: 'customer' });
  const dir = join(customer.dir, 'hybrid');
  await mkdir(dir, { recursive: true });
  const kubectl = kubectlRunner(bin, customer.kubeconfigFile);
  const argocd = await startArgoCd(t, {
    kubeconfigFile: customer.kubeconfigFile,
    kc: customer.kc,
    dir: join(dir, 'argocd'),
  });
  const repo = await gitRepository(join(dir, 'git', 'deploy'));
  await repo.commit(
    {
      'web/config.yaml': 'apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web-config\ndata:\n  color: blue\n',
      'batch/config.yaml': 'apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: batch-config\ndata:\n  color: green\n',
    },
    'web and batch',
  );
  const ref = (name: string) => ({
    group: ARGO_GROUP,
    version: ARGO_VERSION,
    namespace: argocd.namespace,
    plural: 'applications',
    name,
  });
  type App = {
    status?: { sync?: { status?: string }; health?: { status?: string }; operationState?: { phase?: string } };
  };
  const getApp = async (name: string) => (await customer.objects.getNamespacedCustomObject(ref(name))) as App;
  for (const [name, automated] of [
    ['web', true],
    ['batch', false],
  ] as const) {
    const app = sampleApplication(argocd.namespace, name, { repoURL: repo.url, path: name }) as {
      spec: Record<string, unknown> & { source: Record<string, unknown> };
    };
    app.spec.source.targetRevision = 'main';
    app.spec.syncPolicy = {
      syncOptions: ['CreateNamespace=true'],
      ...(automated ? { automated: { prune: false, selfHeal: false } } : {}),
    };
    await customer.objects.createNamespacedCustomObject({ ...ref(''), body: app });
  }
  await until('web Synced and Healthy (the customer’s Argo CD)', 180_000, async () => {
    const a = await getApp('web');
    return a.status?.sync?.status === 'Synced' && a.status.health?.status === 'Healthy';
  });
  /** The customer's Argo CD namespace as it is: every object kind the install might touch, by name. */
  const argoNamespaceObjects = async () =>
    (
      await kubectl([
        'get',
        'roles,rolebindings,configmaps,secrets,serviceaccounts',
        '-n',
        argocd.namespace,
        '-o',
        'name',
      ])
    ).stdout
      .trim()
      .split('\n')
      .sort();
  const argoBefore = await argoNamespaceObjects();

  // The control plane: `provisioner serve` (harness/hybrid.ts).
  const { call, signup } = await startHybridControlPlane(t, bin, dir);
  const tenant = await signup('existing-argo');
  const base = `/v1/tenants/${tenant.tenantId}/runtimes`;
  const runtime = async () => (await call<Runtime>('GET', `${base}/plant`, tenant.apiKey)).body;
  /** The runtime's own namespace in the customer's cluster (per runtime). */
  const NS = runtimeNamespace('plant');
  const kubeconfigAs = (account: string) => kubeconfigAsAccount(kubectl, customer.kubeconfig, dir, account, NS);
  const agentEnv = (kind: string, name: string) =>
    workloadEnv(kubectl, registered.install.manifests, kind, name, NS, dir);

  let registered: RuntimeRegistered;
  let runtimeKey = '';
  const agents: ManagedProcess[] = [];
  const agent = (name: string) => agents.find((a) => a.name === name);
  t.teardown(async () => {
    for (const a of agents) await a.stop();
  });

  t.test('installed beside the customer’s Argo CD with kubectl and the bootstrap program', async (t) => {
    const reg = await call<RuntimeRegistered>('POST', base, tenant.apiKey, {
      name: 'plant',
      mode: 'hybrid',
      access: 'tunnel',
      argo: 'existing',
      argoNamespace: argocd.namespace,
    });
    t.equal(reg.status, 201, `registered: ${JSON.stringify(reg.body).slice(0, 200)}`);
    registered = reg.body;
    const manifest = join(dir, 'hybrid-runtime-plant.yaml');
    await writeFile(manifest, registered.install.manifests, { mode: 0o600 });
    const applied = await kubectl(['apply', '-f', manifest]);
    t.equal(applied.code, 0, `applied: ${applied.output.slice(-300)}`);

    const run = await runBootstrapProgram(kubectl, customer.kubeconfig, dir, registered.install.manifests, NS);
    t.equal((await runtime()).namespace, NS, 'the runtime reports its own namespace, where the install put it');
    t.equal(run.code, 0, `the bootstrap program succeeds: ${run.output.slice(-800)}`);
    runtimeKey = run.runtimeKey ?? '';
    t.match(runtimeKey, /^hrt_/, 'the runtime key is in the cluster');
  });

  t.test(
    'the four agents run with the install’s credentials: the tunnel connects, the reporter reports Argo CD’s state',
    async (t) => {
      const [routerPort, proxyPort, tunnelPort, reporterPort] = await Promise.all([
        serverPort(),
        serverPort(),
        serverPort(),
        serverPort(),
      ]);
      // The app-proxy's mounted runtime-info file: the versions ConfigMap's key, as the volume would give it.
      const info = await kubectl([
        'get',
        'configmap',
        'runtime-versions',
        '-n',
        NS,
        '-o',
        'jsonpath={.data.runtime-info\\.json}',
      ]);
      const infoDir = join(dir, 'runtime-info');
      await mkdir(infoDir, { recursive: true });
      await writeFile(join(infoDir, 'runtime-info.json'), info.stdout);
      const start = async (agent: string, env: Record<string, string>) => {
        const p = startProcess(agent, process.execPath, [main(agent)], join(dir, `${agent}.log`), {
          env: { PATH: process.env.PATH ?? '', ...(await agentEnv('Deployment', agent)), HOST: '127.0.0.1', ...env },
        });
        agents.push(p);
        return p;
      };
      /** Waits for an agent's /healthz on `port`, as its readiness probe would, failing with its log. */
      const healthy = (p: ManagedProcess, port: number) =>
        until(`${p.name} /healthz`, 60_000, async () => {
          if (!p.running()) throw new Error(`${p.name} exited: ${await p.tail(10)}`);
          return (await fetch(`http://127.0.0.1:${port}/healthz`, { signal: AbortSignal.timeout(2000) })).ok;
        });
      const proxy = await start('app-proxy', {
        PORT: String(proxyPort),
        KUBECONFIG: await kubeconfigAs('app-proxy'),
        RUNTIME_INFO_FILE: join(infoDir, 'runtime-info.json'),
      });
      const router = await start('request-router', {
        PORT: String(routerPort),
        APP_PROXY_URL: `http://127.0.0.1:${proxyPort}`,
      });
      await healthy(proxy, proxyPort);
      await healthy(router, routerPort);
      const tunnel = await start('tunnel-client', {
        HEALTH_PORT: String(tunnelPort),
        ROUTER_URL: `http://127.0.0.1:${routerPort}`,
      });
      const reporter = await start('event-reporter', {
        PORT: String(reporterPort),
        KUBECONFIG: await kubeconfigAs('event-reporter'),
        HEARTBEAT_INTERVAL_SECONDS: '1',
      });
      const connected = await until('the tunnel connected', 60_000, async () => {
        const r = await runtime();
        return r.tunnel.connected ? r : undefined;
      }).catch(async (err: Error) => {
        t.fail(`${err.message}; the tunnel client's log: ${await tunnel.tail(20)}`);
        return runtime();
      });
      t.match(
        connected.conditions.find((c) => c.type === 'TunnelConnected'),
        { status: 'True' },
        'TunnelConnected',
      );

      type Page = { items: Array<{ namespace: string; name: string; health: string | null; sync: string | null }> };
      const listed = await until('the customer’s Applications listed under the runtime', 90_000, async () => {
        const page = await call<Page>('GET', `${base}/plant/objects/applications`, tenant.apiKey);
        return page.body.items.length >= 2 ? page.body : undefined;
      }).catch(async (err: Error): Promise<Page> => {
        t.fail(`${err.message}; the reporter's log: ${await reporter.tail(20)}`);
        return { items: [] };
      });
      const written = async (name: string) => {
        const a = await getApp(name);
        return [argocd.namespace, name, a.status?.health?.status ?? null, a.status?.sync?.status ?? null];
      };
      t.same(
        listed.items.map((i) => [i.namespace, i.name, i.health, i.sync]),
        [await written('batch'), await written('web')],
        'as the real Argo CD wrote their state',
      );
      t.same(
        listed.items.map((i) => i.sync),
        ['OutOfSync', 'Synced'],
        'batch (manual sync) OutOfSync, web (automated) Synced',
      );
      const hosted = await call<Page>('GET', `/v1/tenants/${tenant.tenantId}/applications`, tenant.apiKey);
      t.same(hosted.body.items, [], 'not under the tenant’s hosted runtime');
      const r = await until('Reporting and ArgoCDReachable', 60_000, async () => {
        const x = await runtime();
        const ok = (type: string) => x.conditions.find((c) => c.type === type)?.status === 'True';
        return ok('Reporting') && ok('ArgoCDReachable') && ok('Ready') ? x : undefined;
      });
      t.equal(r.reportedVersion, r.version, 'the reporter states the version its bundle was made for');
    },
  );

  t.test('a sync asked at the control plane reaches the customer’s Argo CD through the tunnel', async (t) => {
    const res = await call<{ operation?: { initiatedBy?: { username?: string } } }>(
      'POST',
      `${base}/plant/proxy/api/applications/${argocd.namespace}/batch/sync`,
      tenant.apiKey,
      {},
    );
    t.equal(res.status, 200, `the app-proxy wrote the operation: ${JSON.stringify(res.body).slice(0, 300)}`);
    await until('batch Synced by the customer’s Argo CD', 120_000, async () => {
      const a = await getApp('batch');
      return a.status?.sync?.status === 'Synced' && a.status.operationState?.phase === 'Succeeded';
    });
    const cm = await kubectl(['get', 'configmap', 'batch-config', '-n', 'batch', '-o', 'jsonpath={.data.color}']);
    t.equal(cm.stdout, 'green', 'Argo CD synced it: its ConfigMap exists');
    const listed = await until('the reporter reports it Synced', 60_000, async () => {
      const page = await call<{ items: Array<{ name: string; sync: string | null }> }>(
        'GET',
        `${base}/plant/objects/applications`,
        tenant.apiKey,
      );
      return page.body.items.find((i) => i.name === 'batch' && i.sync === 'Synced');
    });
    t.ok(listed, 'and the control plane shows it Synced');
  });

  t.test('nothing of the customer’s Argo CD changed but the two Roles and RoleBindings the bundle lists', async (t) => {
    const after = await argoNamespaceObjects();
    const added = after.filter((o) => !argoBefore.includes(o));
    t.same(
      added.sort(),
      [
        'role.rbac.authorization.k8s.io/hosted-runtime-plant-app-proxy',
        'role.rbac.authorization.k8s.io/hosted-runtime-plant-event-reporter',
        'rolebinding.rbac.authorization.k8s.io/hosted-runtime-plant-app-proxy',
        'rolebinding.rbac.authorization.k8s.io/hosted-runtime-plant-event-reporter',
      ],
      'only the bundle’s Roles and RoleBindings were added',
    );
    t.same(
      argoBefore.filter((o) => !after.includes(o)),
      [],
      'nothing was removed',
    );
  });

  t.test('removal closes the tunnel and revokes the key; the remove command leaves Argo CD alone', async (t) => {
    const removed = await call<RuntimeRemoved>('DELETE', `${base}/plant`, tenant.apiKey);
    t.equal(removed.status, 200);
    const pull = await call('POST', '/v1/runtime/events', runtimeKey, { items: [] });
    t.equal(pull.status, 401, 'the runtime key is refused');
    const tunnel = agent('tunnel-client');
    const closed = await until('the tunnel closed as revoked', 30_000, async () =>
      (await tunnel?.tail(20))?.match(/"code":4003[^\n]*tunnel disconnected/),
    ).catch(() => undefined);
    t.ok(closed, `the tunnel client was disconnected with 4003 (revoked): ${closed ? '' : await tunnel?.tail(5)}`);
    // --wait=false: this API server has no namespace controller to finish the namespace's deletion.
    const del = await kubectl(['--wait=false', ...removeCommandArgs(removed.body.removeCommand)]);
    t.equal(del.code, 0, `the remove command: ${del.output.slice(-300)}`);
    const after = await argoNamespaceObjects();
    t.same(after, argoBefore, 'the Argo CD namespace is as it was before the install');
    t.equal((await getApp('web')).status?.health?.status, 'Healthy', 'the customer’s Applications are untouched');
  });
}
