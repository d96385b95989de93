/**
 * The Source Server of a hybrid runtime, every part real: the control plane is the `provisioner
 * serve` process (real Postgres); the customer's cluster is a kube-apiserver with the real Argo
 * CRDs where a real Argo CD (application controller, repo-server and API server over https with
 * the certificate in `argocd-server-tls`, harness/argocd.ts) syncs two Applications from one
 * monorepo on a real Git server over HTTP with credentials (git's own http-backend,
 * sandbox/git-server.ts; the credentials in an Argo CD repository Secret).
 *
 * A runtime registered at the newest catalog version beside that Argo CD (`argo: existing`): its
 * bundle is applied with kubectl, the bootstrap program writes the runtime key, and five of its
 * agents (not the GitOps Operator, which the bundle installs too with the promotion CRDs; the
 * promotions e2e file runs it) run as processes with their Deployments' environment and their
 * own ServiceAccounts' tokens (Services' addresses replaced by loopback ports; the token Secret's
 * mounted file written as the kubelet would).
 *
 *  - Until the customer creates the token, the Source Server answers 503 naming the Secret.
 *  - The customer declares the account and makes its token with Argo CD's own API, as
 *    `argocd account generate-token` does; from then on the Source Server reads Argo CD's API
 *    with it, verifying the server against `argocd-server-tls`.
 *  - A commit to one application's path gives that application a history entry under the hybrid
 *    runtime with the commit's author and message, and none to the other; the diff route answers
 *    through the tunnel with both sides.
 *  - `argo: new`: a second runtime's Source Server, with the environment and Role its bundle gives
 *    (Argo CD's namespace is `argocd` in both modes here: the customer's Argo CD stands in for the
 *    one the bundle's charts would install), finds its login refused, writes its password's hash
 *    into argocd-secret with its own Role, and the real Argo CD then accepts the login.
 */
import t from 'tap';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import bcrypt from 'bcryptjs';
import { argoApiServerUnavailable, ARGO_GROUP, ARGO_VERSION, startArgoApiServer } from './harness/argo.ts';
import { argoCdUnavailable, selfSignedCertificate, startArgoCd } from './harness/argocd.ts';
import { kubectlRunner } from '../helpers/kubectl.ts';
import { serverPort, startProcess, until, type ManagedProcess } from '../../sandbox/processes.ts';
import { startGitServer } from '../../sandbox/git-server.ts';
import {
  kubeconfigAs as kubeconfigAsAccount,
  runBootstrapProgram,
  runtimeNamespace,
  secretValues,
  startHybridControlPlane,
  workloadEnv,
} from './harness/hybrid.ts';
import { catalog, compareVersions } from '../../runtime/catalog.ts';
import type { Runtime, RuntimeRegistered } from '../../provisioner/api/types.ts';

t.setTimeout(12 * 60_000);

/** The newest runtime version: the Source Server is in it. */
const VERSION = [...catalog.versions].sort((a, b) => compareVersions(b.version, a.version))[0]!.version;
const ADMIN_PASSWORD = 'e2e-admin-pw-7c1d';
const GIT_USER = 'platform';
const GIT_PASSWORD = 'git-pw-3b9e51';

interface HistoryEntry {
  changeRevision: string;
  author: string | null;
  message: string | null;
  result: string;
  resultMessage: string | null;
  resources: Array<{ kind: string; name: string; action: string; fields: string[] }>;
}

const configMap = (name: string, color: string) =>
  `apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ${name}\ndata:\n  color: ${color}\n`;

const unavailable = argoApiServerUnavailable() ?? argoCdUnavailable();
if (unavailable) {
  if (process.env.CI === 'true') t.fail(`a real Argo CD cannot run: ${unavailable}`);
  else t.plan(0, unavailable);
} else {
  const bin = process.env.HRT_TOOLCHAIN_BIN!;
  const main = (agent: string) => fileURLToPath(new URL(`../../runtime/agents/${agent}/main.ts`, import.meta.url));

  // The customer's cluster, its Argo CD with its API server over https, and its Git server.
  const customer = await startArgoApiServer(t, { name: 'customer' });
  const dir = join(customer.dir, 'hybrid-source');
  await mkdir(dir, { recursive: true });
  const kubectl = kubectlRunner(bin, customer.kubeconfigFile);
  const certificate = await selfSignedCertificate(join(dir, 'tls'), [
    'argocd-server.argocd.svc',
    'argocd-server',
    '127.0.0.1',
  ]);
  const argocd = await startArgoCd(t, {
    kubeconfigFile: customer.kubeconfigFile,
    kc: customer.kc,
    dir: join(dir, 'argocd'),
    server: { certificate },
  });
  const argoNs = argocd.namespace;
  // The admin's password, as `argocd admin initial-password` would give it to the customer.
  const patchSecret = (data: Record<string, string>) =>
    kubectl([
      'patch',
      'secret',
      'argocd-secret',
      '-n',
      argoNs,
      '--type',
      'merge',
      '-p',
      JSON.stringify({ stringData: data }),
    ]);
  await patchSecret({
    'admin.password': bcrypt.hashSync(ADMIN_PASSWORD, 10),
    'admin.passwordMtime': new Date(Date.now() - 60_000).toISOString().replace(/\.\d+Z$/, 'Z'),
  });
  const git = await startGitServer(join(dir, 'git'), '127.0.0.1', {
    credentials: { username: GIT_USER, password: GIT_PASSWORD },
  });
  t.teardown(() => git.stop());
  const repo = await git.repository('deploy');
  const c0 = await repo.commit(
    { 'web/config.yaml': configMap('web-config', 'blue'), 'batch/config.yaml': configMap('batch-config', 'green') },
    'web and batch',
    { author: { name: 'Grace Hopper', email: 'grace@example.test' } },
  );
  const repoSecret = await kubectl([
    'create',
    'secret',
    'generic',
    'deploy-repo',
    '-n',
    argoNs,
    '--from-literal=type=git',
    `--from-literal=url=${repo.url}`,
    `--from-literal=username=${GIT_USER}`,
    `--from-literal=password=${GIT_PASSWORD}`,
  ]);
  if (repoSecret.code !== 0) throw new Error(`precondition: the repository Secret: ${repoSecret.output}`);
  await kubectl(['label', 'secret', 'deploy-repo', '-n', argoNs, 'argocd.argoproj.io/secret-type=repository']);
  const ref = (name: string) => ({
    group: ARGO_GROUP,
    version: ARGO_VERSION,
    namespace: argoNs,
    plural: 'applications',
    name,
  });
  for (const name of ['web', 'batch'])
    await customer.objects.createNamespacedCustomObject({
      ...ref(''),
      body: {
        apiVersion: `${ARGO_GROUP}/${ARGO_VERSION}`,
        kind: 'Application',
        metadata: { name, namespace: argoNs },
        spec: {
          project: 'default',
          source: { repoURL: repo.url, path: name, targetRevision: 'main' },
          destination: { server: 'https://kubernetes.default.svc', namespace: name },
          syncPolicy: { automated: {}, syncOptions: ['CreateNamespace=true'] },
        },
      },
    });
  type App = { status?: { sync?: { status?: string; revision?: string } } };
  const getApp = async (name: string) => (await customer.objects.getNamespacedCustomObject(ref(name))) as App;
  await until('web and batch Synced at the first commit (the customer’s Argo CD)', 180_000, async () => {
    for (const name of ['web', 'batch']) {
      const a = await getApp(name);
      if (a.status?.sync?.status !== 'Synced' || a.status.sync.revision !== c0) return false;
    }
    return true;
  });

  // The control plane: `provisioner serve` (harness/hybrid.ts).
  const { call, signup } = await startHybridControlPlane(t, bin, dir);
  const tenant = await signup('hybrid-source');
  const base = `/v1/tenants/${tenant.tenantId}/runtimes`;

  const agents: ManagedProcess[] = [];
  t.teardown(async () => {
    for (const a of agents) await a.stop();
  });
  /** Registers a runtime at VERSION, applies its bundle and runs its bootstrap program. */
  const install = async (name: string, argo: 'existing' | 'new') => {
    const reg = await call<RuntimeRegistered>('POST', base, tenant.apiKey, {
      name,
      mode: 'hybrid',
      access: 'tunnel',
      argo,
      ...(argo === 'existing' ? { argoNamespace: argoNs } : {}),
      version: VERSION,
    });
    if (reg.status !== 201) throw new Error(`registration of ${name}: ${reg.status} ${JSON.stringify(reg.body)}`);
    const ns = runtimeNamespace(name);
    const manifest = join(dir, `hybrid-runtime-${name}.yaml`);
    await writeFile(manifest, reg.body.install.manifests, { mode: 0o600 });
    // argo=new: the manifest only; the Argo charts are not installed (the customer's Argo CD stands in).
    const applied = await kubectl(['apply', '-f', manifest]);
    if (applied.code !== 0) throw new Error(`kubectl apply: ${applied.output.slice(-500)}`);
    const run = await runBootstrapProgram(kubectl, customer.kubeconfig, dir, reg.body.install.manifests, ns);
    if (run.code !== 0) throw new Error(`bootstrap of ${name}: ${run.output.slice(-800)}`);
    const manifests = reg.body.install.manifests;
    const start = async (agent: string, env: Record<string, string>) => {
      const p = startProcess(`${name}-${agent}`, process.execPath, [main(agent)], join(dir, `${name}-${agent}.log`), {
        env: {
          PATH: process.env.PATH ?? '',
          ...(await workloadEnv(kubectl, manifests, 'Deployment', agent, ns, dir)),
          HOST: '127.0.0.1',
          ...env,
        },
      });
      agents.push(p);
      return p;
    };
    const healthy = (p: ManagedProcess, port: number) =>
      until(`${p.name} /healthz`, 60_000, async () => {
        if (!p.running()) throw new Error(`${p.name} exited: ${await p.tail(10)}`);
        return (await fetch(`http://127.0.0.1:${port}/healthz`, { signal: AbortSignal.timeout(2000) })).ok;
      });
    return {
      ns,
      manifests,
      start,
      healthy,
      kubeconfigAs: (account: string) => kubeconfigAsAccount(kubectl, customer.kubeconfig, dir, account, ns),
    };
  };

  const plant = await install('plant', 'existing');
  const sourcePort = await serverPort();
  const sourceUrl = `http://127.0.0.1:${sourcePort}`;
  const tokenDir = join(dir, 'plant-source-server-token');
  await mkdir(tokenDir, { recursive: true });
  const change = (app: string, url = sourceUrl) =>
    fetch(`${url}/v1/applications/${argoNs}/${app}/change`, { signal: AbortSignal.timeout(30_000) }).then(
      async (r) => ({ status: r.status, body: (await r.json()) as Record<string, unknown> }),
    );

  let sourceServer!: ManagedProcess;
  t.test('argo=existing: without the customer’s token the Source Server says which Secret to create', async (t) => {
    sourceServer = await plant.start('source-server', {
      PORT: String(sourcePort),
      KUBECONFIG: await plant.kubeconfigAs('source-server'),
      // The Service's address on loopback; the certificate's names include 127.0.0.1.
      ARGOCD_SERVER_URL: argocd.serverUrl!,
      // Where the kubelet would project the optional Secret's key.
      ARGOCD_TOKEN_FILE: join(tokenDir, 'token'),
      GIT_CACHE_DIR: join(dir, 'plant-git-cache'),
    });
    await plant.healthy(sourceServer, sourcePort);
    const r = await change('web');
    t.equal(r.status, 503, 'answered 503');
    t.match(
      JSON.stringify(r.body),
      /no Argo CD API token yet/,
      `the answer says the token is missing: ${JSON.stringify(r.body).slice(0, 300)}`,
    );
  });

  t.test('with the token the customer makes, it reads Argo CD’s API over verified https', async (t) => {
    // The customer declares the account and makes its token (argocd account generate-token).
    const cm = await kubectl([
      'patch',
      'configmap',
      'argocd-cm',
      '-n',
      argoNs,
      '--type',
      'merge',
      '-p',
      JSON.stringify({ data: { 'accounts.source-server': 'apiKey, login' } }),
    ]);
    t.equal(cm.code, 0, `argocd-cm: ${cm.output}`);
    const rbac = await kubectl([
      'patch',
      'configmap',
      'argocd-rbac-cm',
      '-n',
      argoNs,
      '--type',
      'merge',
      '-p',
      JSON.stringify({ data: { 'policy.csv': 'g, source-server, role:readonly\n' } }),
    ]);
    t.equal(rbac.code, 0, `argocd-rbac-cm: ${rbac.output}`);
    const session = await until('the admin login (Argo CD read its settings)', 60_000, async () => {
      const r = await argoCdApi('POST', '/api/v1/session', undefined, { username: 'admin', password: ADMIN_PASSWORD });
      return r.status === 200 ? (r.body as { token: string }).token : undefined;
    });
    const made = await until('the account’s token', 60_000, async () => {
      const r = await argoCdApi('POST', '/api/v1/account/source-server/token', session, {
        name: 'source-server',
        id: 'hybrid-plant',
      });
      return r.status === 200 ? (r.body as { token: string }).token : undefined;
    });
    const created = await kubectl([
      'create',
      'secret',
      'generic',
      'source-server-argocd',
      '-n',
      plant.ns,
      `--from-literal=token=${made}`,
    ]);
    t.equal(created.code, 0, 'the customer stores it as Secret source-server-argocd');
    await writeFile(
      join(tokenDir, 'token'),
      (await secretValues(kubectl, 'source-server-argocd', plant.ns)).token ?? '',
    );
    const r = await until('the Source Server answers with the token', 60_000, async () => {
      const x = await change('web');
      return x.status === 200 ? x : undefined;
    }).catch(async (err: Error) => {
      throw new Error(`${err.message}; its log: ${await sourceServer.tail(20)}`, { cause: err });
    });
    t.equal(r.body.changeRevision, c0, 'web’s change revision is the first commit');
    t.match(r.body.commit, { author: 'Grace Hopper <grace@example.test>' }, 'with its author, from Argo CD');
    t.match(
      await sourceServer.tail(200),
      /verified against its certificate/,
      'the server was verified against argocd-server-tls',
    );
  });

  t.test('the other agents: a commit to web’s path is web’s history entry only, with a diff', async (t) => {
    const [routerPort, proxyPort, tunnelPort, reporterPort] = await Promise.all([
      serverPort(),
      serverPort(),
      serverPort(),
      serverPort(),
    ]);
    const info = await kubectl([
      'get',
      'configmap',
      'runtime-versions',
      '-n',
      plant.ns,
      '-o',
      'jsonpath={.data.runtime-info\\.json}',
    ]);
    const infoDir = join(dir, 'runtime-info');
    await mkdir(infoDir, { recursive: true });
    await writeFile(join(infoDir, 'runtime-info.json'), info.stdout);
    const proxy = await plant.start('app-proxy', {
      PORT: String(proxyPort),
      KUBECONFIG: await plant.kubeconfigAs('app-proxy'),
      RUNTIME_INFO_FILE: join(infoDir, 'runtime-info.json'),
      SOURCE_SERVER_URL: sourceUrl,
    });
    const router = await plant.start('request-router', {
      PORT: String(routerPort),
      APP_PROXY_URL: `http://127.0.0.1:${proxyPort}`,
    });
    await plant.healthy(proxy, proxyPort);
    await plant.healthy(router, routerPort);
    await plant.start('tunnel-client', {
      HEALTH_PORT: String(tunnelPort),
      ROUTER_URL: `http://127.0.0.1:${routerPort}`,
    });
    const reporter = await plant.start('event-reporter', {
      PORT: String(reporterPort),
      KUBECONFIG: await plant.kubeconfigAs('event-reporter'),
      HEARTBEAT_INTERVAL_SECONDS: '1',
      SOURCE_SERVER_URL: sourceUrl,
    });
    const history = async (app: string) =>
      (
        await call<{ items: HistoryEntry[] }>(
          'GET',
          `${base}/plant/objects/applications/${argoNs}/${app}/history`,
          tenant.apiKey,
        )
      ).body.items ?? [];
    const entry = (app: string, sha: string) =>
      until(`${app}'s history entry for ${sha.slice(0, 8)}`, 180_000, async () => {
        const e = (await history(app)).find((x) => x.changeRevision === sha);
        return e && (e.result === 'succeeded' || e.result === 'failed') ? e : undefined;
      }).catch(async (err: Error) => {
        throw new Error(
          `${err.message}; history: ${JSON.stringify(await history(app)).slice(0, 800)}; the reporter's log: ${await reporter.tail(15)}`,
          { cause: err },
        );
      });
    const first = await entry('web', c0);
    t.equal(first.author, 'Grace Hopper <grace@example.test>', 'the first deployment of web, by its author');

    const c1 = await repo.commit({ 'web/config.yaml': configMap('web-config', 'red') }, 'web: red', {
      author: { name: 'Ada Lovelace', email: 'ada@example.test' },
    });
    await until('the tunnel connected', 60_000, async () => {
      const r = await call<Runtime>('GET', `${base}/plant`, tenant.apiKey);
      return r.body.tunnel.connected;
    });
    // A refresh asked at the control plane, through the tunnel to the app-proxy (as a customer would).
    for (const app of ['web', 'batch']) {
      const r = await call('POST', `${base}/plant/proxy/api/applications/${argoNs}/${app}/refresh`, tenant.apiKey, {});
      t.equal(r.status, 200, `${app} refreshed through the tunnel`);
    }
    const e = await entry('web', c1);
    t.equal(e.result, 'succeeded', 'web synced the change');
    t.equal(e.author, 'Ada Lovelace <ada@example.test>', 'the author of the commit that changed web');
    t.equal(e.message?.trim(), 'web: red', 'its message');
    t.same(
      e.resources.map((r) => [r.kind, r.name, r.action, r.fields]),
      [['ConfigMap', 'web-config', 'modified', ['data.color']]],
      'one field of one ConfigMap',
    );
    await until(
      'batch Synced at the new head',
      120_000,
      async () => (await getApp('batch')).status?.sync?.revision === c1,
    );
    t.same(
      (await history('batch')).map((x) => x.changeRevision),
      [c0],
      'batch has no entry for a commit that did not touch it',
    );
    const diff = await call<{
      resources: Array<{
        name: string;
        before: { data?: { color?: string } } | null;
        after: { data?: { color?: string } } | null;
      }>;
    }>('GET', `${base}/plant/objects/applications/${argoNs}/web/diff?revision=${c1}`, tenant.apiKey);
    t.equal(diff.status, 200, `the diff through the tunnel: ${JSON.stringify(diff.body).slice(0, 200)}`);
    const web = diff.body.resources?.find((r) => r.name === 'web-config');
    t.same([web?.before?.data?.color, web?.after?.data?.color], ['blue', 'red'], 'both sides: blue → red');
  });

  t.test(
    'argo=new: the Source Server writes its password’s hash with its own Role, and Argo CD accepts it',
    async (t) => {
      const works = await install('works', 'new');
      const before = await secretValues(kubectl, 'argocd-secret', argoNs);
      t.notOk(before['accounts.source-server.password'], 'no password for the account before it starts');
      const port = await serverPort();
      const p = await works.start('source-server', {
        PORT: String(port),
        KUBECONFIG: await works.kubeconfigAs('source-server'),
        // This Argo CD serves https (the bundle's would serve http, `server.insecure`): its address and certificate.
        ARGOCD_SERVER_URL: argocd.serverUrl!,
        ARGOCD_CA_SECRET: 'argocd-server-tls',
        GIT_CACHE_DIR: join(dir, 'works-git-cache'),
      });
      await works.healthy(p, port);
      const r = await until('the Source Server logged in with the password it set up', 90_000, async () => {
        const x = await change('web', `http://127.0.0.1:${port}`);
        return x.status === 200 ? x : undefined;
      }).catch(async (err: Error) => {
        throw new Error(`${err.message}; its log: ${await p.tail(20)}`, { cause: err });
      });
      t.ok(r.body.changeRevision, 'it answers from Argo CD’s API');
      const after = await secretValues(kubectl, 'argocd-secret', argoNs);
      t.match(
        after['accounts.source-server.password'],
        /^\$2[ab]\$10\$/,
        'a bcrypt hash of its password in argocd-secret',
      );
      t.equal(after['admin.password'], before['admin.password'], 'the admin’s password is as it was');
      t.equal(after['server.secretkey'], before['server.secretkey'], 'and Argo CD’s signing key');
      const can = async (verb: string, what: string) =>
        (
          await kubectl([
            'auth',
            'can-i',
            verb,
            what,
            '-n',
            argoNs,
            `--as=system:serviceaccount:${works.ns}:source-server`,
          ])
        ).stdout.trim();
      t.equal(await can('patch', 'secrets/argocd-secret'), 'yes', 'its Role may patch argocd-secret');
      t.equal(await can('patch', 'secrets/deploy-repo'), 'no', 'and no other Secret');
      t.equal(await can('patch', 'configmaps/argocd-cm'), 'no', 'nor Argo CD’s settings');
    },
  );

  /** Argo CD's API server, over https verified against the test's certificate. */
  async function argoCdApi(method: string, path: string, token?: string, body?: unknown) {
    const { Agent, fetch: undiciFetch } = await import('undici');
    const agent = new Agent({ connect: { ca: certificate.cert } });
    try {
      const res = await undiciFetch(`${argocd.serverUrl}${path}`, {
        method,
        dispatcher: agent,
        headers: {
          'content-type': 'application/json',
          ...(token ? { authorization: `Bearer ${token}` } : {}),
        },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      });
      return { status: res.status, body: await res.json().catch((): unknown => undefined) };
    } finally {
      await agent.close();
    }
  }
}
