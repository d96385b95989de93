/**
 * A hybrid runtime's install, every part real: the control plane (the app on loopback with real
 * Postgres) registers the runtime and answers its bundle; the bundle is applied with kubectl to a
 * real kube-apiserver standing for the customer's cluster; the bootstrap program runs as the
 * bundle's Job would, with the Job's own ServiceAccount token, and exchanges the token at the
 * control plane's real route; the tunnel client then connects with the credentials the Job wrote
 * in the customer's cluster, and the event reporter, with the bundle's environment, its own account
 * and that key, reports the customer's Applications, which the control plane then lists under the
 * runtime with the version and Argo CD reachability the reporter stated. Removal revokes the key,
 * closes the tunnel, and its remove command
 * deletes what the install created. (hybrid-bootstrap.test.ts covers the program's failure modes
 * against a double of the route; this file covers the two halves together.)
 */
import t from 'tap';
import { execFile, spawn } from 'node:child_process';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { once } from 'node:events';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { parseAllDocuments } from 'yaml';
import { createTestApi } from '../../helpers/api.ts';
import { portOutsideEphemeralRange } from '../../helpers/ports.ts';
import { APPLICATION_CRD, missingKubeToolchain, startCustomerCluster } from '../../helpers/kubectl.ts';
import { startTunnelClient } from '../../../runtime/agents/tunnel-client/client.ts';
import { BOOTSTRAP_SECRET, BOOTSTRAP_TOKEN_KEY, CREDENTIAL_KEYS } from '../../../runtime/protocol/bootstrap.ts';
import type { RuntimeRegistered } from '../../../provisioner/api/types.ts';
import { ApiClient } from '../../../provisioner/http/api-client.ts';
import { until } from '../../../sandbox/until.ts';

const main = fileURLToPath(new URL('../../../runtime/agents/bootstrap/main.ts', import.meta.url));
const reporterMain = fileURLToPath(new URL('../../../runtime/agents/event-reporter/main.ts', import.meta.url));
const toolchainBin = process.env.HRT_TOOLCHAIN_BIN;
/** The runtime's namespace in the customer's cluster: its own, `hosted-runtime-<name>`. */
const RUNTIME_NS = 'hosted-runtime-plant-b';
const missing = missingKubeToolchain(toolchainBin);

interface Run {
  code: number | null;
  output: string;
  stdout: string;
}
type Secret = { data?: Record<string, string> };

if (missing && process.env.CI === 'true') {
  t.fail(`a real kube-apiserver is needed and CI=true: ${missing}`);
} else if (missing) {
  t.plan(0, `skipped: needs a real kube-apiserver: ${missing}`);
} else {
  t.setTimeout(300_000);
  const dir = await mkdtemp(join(tmpdir(), 'hrt-hybrid-install-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));

  // The control plane, at a URL fixed before it starts: its bundles name it.
  const port = await portOutsideEphemeralRange();
  const publicUrl = `http://127.0.0.1:${port}`;
  const api = await createTestApi({ env: { PROVISIONER_PUBLIC_URL: publicUrl } });
  await api.app.listen({ port, host: '127.0.0.1' });
  t.teardown(() => api.close());
  /** The runtimes' own routes (outside the route map), at the public URL. */
  const call = async <T>(method: string, path: string, key: string, body?: unknown) => {
    const res = await fetch(publicUrl + path, {
      method,
      headers: {
        authorization: `Bearer ${key}`,
        ...(body !== undefined ? { 'content-type': 'application/json' } : {}),
      },
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
    });
    return { status: res.status, body: (await res.json()) as T };
  };

  // The customer's cluster.
  const { plane, kubectl } = await startCustomerCluster(t, toolchainBin!, dir);
  const secret = async (name: string): Promise<Secret | undefined> => {
    const r = await kubectl(['get', 'secret', name, '-n', RUNTIME_NS, '-o', 'json', '--ignore-not-found']);
    return r.stdout.trim() ? (JSON.parse(r.stdout) as Secret) : undefined;
  };
  const decoded = (s: Secret | undefined, key: string) =>
    s?.data?.[key] === undefined ? undefined : Buffer.from(s.data[key], 'base64').toString('utf8');

  const tenant = await api.signup();
  /** The tenant's client at the public URL (the socket its bundles name), for the mapped routes. */
  const asTenant = new ApiClient({ baseUrl: publicUrl, token: tenant.apiKey });
  const runtimeView = () =>
    asTenant.call('GET /v1/tenants/:id/runtimes/:name', { params: { id: tenant.tenantId, name: 'plant-b' } });
  let registered: RuntimeRegistered;
  let runtimeToken = '';

  t.test('registered at the control plane, applied with kubectl, bootstrapped by the Job program', async (t) => {
    const reg = await asTenant.request('POST /v1/tenants/:id/runtimes', {
      params: { id: tenant.tenantId },
      body: { name: 'plant-b', mode: 'hybrid', access: 'tunnel', argo: 'existing', argoNamespace: 'gitops' },
    });
    t.equal(reg.status, 201, `registration answers 201 (got ${JSON.stringify(reg.body)})`);
    if (!reg.ok) return;
    registered = reg.body;
    t.equal(registered.runtime.state, 'awaiting-install', 'the runtime awaits its install');

    const manifest = join(dir, 'hybrid-runtime-plant-b.yaml');
    await writeFile(manifest, registered.install.manifests, { mode: 0o600 });
    t.equal((await kubectl(['create', 'namespace', 'gitops'])).code, 0, "the customer's Argo CD namespace exists");
    const applied = await kubectl(['apply', '-f', manifest]);
    t.equal(applied.code, 0, `kubectl apply of the answered manifest succeeds: ${applied.output}`);

    // The Job's pod: its ServiceAccount's token and the bootstrap Secret's key as mounted files.
    t.equal(registered.install.namespace, RUNTIME_NS, "the runtime's own namespace, by its name");
    const jobToken = await kubectl(['create', 'token', 'runtime-bootstrap', '-n', RUNTIME_NS]);
    t.equal(jobToken.code, 0, `a token for the Job's ServiceAccount: ${jobToken.output}`);
    const doc = JSON.parse(plane.kubeconfig) as { users: Array<{ user: Record<string, string> }> };
    doc.users[0]!.user = { token: jobToken.stdout.trim() };
    const kubeconfig = join(dir, 'job-kubeconfig');
    await writeFile(kubeconfig, JSON.stringify(doc), { mode: 0o600 });
    const tokenDir = join(dir, 'bootstrap-token');
    await mkdir(tokenDir);
    const bootstrapToken = decoded(await secret(BOOTSTRAP_SECRET), BOOTSTRAP_TOKEN_KEY);
    t.equal(bootstrapToken, registered.bootstrapToken, "the bundle's bootstrap Secret holds the answered token");
    await writeFile(join(tokenDir, BOOTSTRAP_TOKEN_KEY), bootstrapToken ?? '');

    // The Job's container environment as the bundle sets it (its plain values), with the two the
    // pod would get from its volume and the downward API.
    type Job = {
      kind: string;
      spec: { template: { spec: { containers: Array<{ env: Array<{ name: string; value?: string }> }> } } };
    };
    const job = parseAllDocuments(registered.install.manifests)
      .map((d) => d.toJS() as Job)
      .find((o) => o?.kind === 'Job');
    const jobEnv = Object.fromEntries(
      (job?.spec.template.spec.containers[0]?.env ?? []).flatMap((e) =>
        e.value === undefined ? [] : [[e.name, e.value]],
      ),
    );
    t.equal(jobEnv.CONTROL_PLANE_URL, publicUrl, "the Job calls the control plane's public URL");
    const run = await new Promise<Run>((resolve) => {
      execFile(
        process.execPath,
        [main],
        {
          env: {
            PATH: process.env.PATH,
            ...jobEnv,
            BOOTSTRAP_TOKEN_FILE: join(tokenDir, BOOTSTRAP_TOKEN_KEY),
            POD_NAMESPACE: RUNTIME_NS,
            KUBECONFIG: kubeconfig,
          },
          timeout: 120_000,
        },
        (err, stdout, stderr) =>
          resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, output: stdout + stderr, stdout }),
      );
    });
    t.equal(run.code, 0, `the bootstrap program succeeds: ${run.output.slice(-2000)}`);
    t.notOk(run.output.includes(registered.bootstrapToken), "the bootstrap token is not in the program's output");

    const credentials = await secret('runtime-credentials');
    runtimeToken = decoded(credentials, CREDENTIAL_KEYS.token) ?? '';
    t.match(runtimeToken, /^hrt_/, 'the runtime key was written into runtime-credentials in the cluster');
    t.notOk(run.output.includes(runtimeToken), "the runtime key is not in the program's output");
    t.equal(
      decoded(credentials, CREDENTIAL_KEYS.tunnelUrl),
      `ws://127.0.0.1:${port}/v1/tunnel`,
      "the credentials name the control plane's tunnel",
    );
    t.equal(await secret(BOOTSTRAP_SECRET), undefined, 'the bootstrap Secret is deleted');

    const view = await runtimeView();
    t.equal(view.state, 'installed', 'the control plane shows the runtime installed');
    t.equal(view.keyIssued, true, 'the control plane shows its key issued');
    const again = await call('POST', '/v1/runtimes/bootstrap', registered.bootstrapToken, {});
    t.equal(again.status, 401, 'the redeemed bootstrap token is refused afterwards');
  });

  t.test(
    "the event reporter, with the bundle's environment, its own account and the runtime key, reports under the runtime",
    async (t) => {
      t.ok(runtimeToken, 'the previous test wrote the credentials');
      const crd = join(dir, 'application-crd.json');
      await writeFile(crd, JSON.stringify(APPLICATION_CRD));
      t.equal((await kubectl(['apply', '-f', crd])).code, 0, "the customer's Argo CD has the Application CRD");
      await until(
        'the Application CRD served',
        30_000,
        async () => (await kubectl(['get', 'applications.argoproj.io', '-n', 'gitops'])).code === 0 || undefined,
      );
      const app = join(dir, 'application.json');
      await writeFile(
        app,
        JSON.stringify({
          apiVersion: 'argoproj.io/v1alpha1',
          kind: 'Application',
          metadata: { name: 'web', namespace: 'gitops' },
          spec: { project: 'default', source: { repoURL: 'https://git.example.test/web' } },
          status: { health: { status: 'Healthy' }, sync: { status: 'Synced' } },
        }),
      );
      t.equal((await kubectl(['apply', '-f', app])).code, 0, 'an Application in the Argo CD namespace');

      // The event reporter's pod: its ServiceAccount's token, the Deployment's plain environment,
      // the Secret's values the bundle maps into it (as variables, and the runtime key as the file
      // of the mounted credentials Secret).
      const saToken = await kubectl(['create', 'token', 'event-reporter', '-n', RUNTIME_NS]);
      t.equal(saToken.code, 0, `a token for the event reporter's ServiceAccount: ${saToken.output}`);
      const doc = JSON.parse(plane.kubeconfig) as { users: Array<{ user: Record<string, string> }> };
      doc.users[0]!.user = { token: saToken.stdout.trim() };
      const kubeconfig = join(dir, 'event-reporter-kubeconfig');
      await writeFile(kubeconfig, JSON.stringify(doc), { mode: 0o600 });
      type Deployment = {
        kind: string;
        metadata: { name: string };
        spec: { template: { spec: { containers: Array<{ env: Array<{ name: string; value?: string }> }> } } };
      };
      const deployment = parseAllDocuments(registered.install.manifests)
        .map((d) => d.toJS() as Deployment)
        .find((o) => o?.kind === 'Deployment' && o.metadata.name === 'event-reporter');
      const env = Object.fromEntries(
        (deployment?.spec.template.spec.containers[0]?.env ?? []).flatMap((e) =>
          e.value === undefined ? [] : [[e.name, e.value]],
        ),
      );
      t.equal(env.RUNTIME_VERSION, registered.runtime.version, 'the bundle gives the reporter its runtime version');
      const credentials = await secret('runtime-credentials');
      t.match(
        env.RUNTIME_TOKEN_FILE,
        /\/runtime-credentials\/runtime-token$/,
        'the reporter reads the runtime key from the mounted credentials Secret',
      );
      const tokenFile = join(dir, 'runtime-token');
      await writeFile(tokenFile, decoded(credentials, CREDENTIAL_KEYS.token) ?? '', { mode: 0o600 });
      const child = spawn(process.execPath, [reporterMain], {
        env: {
          PATH: process.env.PATH,
          ...env,
          RUNTIME_TOKEN_FILE: tokenFile,
          CONTROL_PLANE_URL: decoded(credentials, CREDENTIAL_KEYS.controlPlaneUrl)!,
          REPLICA_NAME: 'event-reporter-0',
          POD_NAMESPACE: RUNTIME_NS,
          KUBECONFIG: kubeconfig,
          PORT: '0',
          HOST: '127.0.0.1',
          HEARTBEAT_INTERVAL_SECONDS: '1',
        },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let output = '';
      child.stdout.on('data', (b: Buffer) => (output += b.toString()));
      child.stderr.on('data', (b: Buffer) => (output += b.toString()));
      const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
      t.teardown(() => {
        if (child.exitCode === null) child.kill('SIGKILL');
      });

      type Page = { items: Array<{ namespace: string; name: string; health: string | null }> };
      const listed = await until("the reporter's Application listed under the runtime", 60_000, async () => {
        const page = await asTenant.call('GET /v1/tenants/:id/runtimes/:name/objects/applications', {
          params: { id: tenant.tenantId, name: 'plant-b' },
        });
        return page.items.length > 0 ? page : undefined;
      }).catch((err: Error): Page => {
        t.fail(`${err.message}; its output: ${output.slice(-2000)}`);
        return { items: [] };
      });
      t.same(
        listed.items.map((i) => [i.namespace, i.name, i.health]),
        [['gitops', 'web', 'Healthy']],
        "the customer's Application, as the reporter saw it",
      );
      const hosted = await asTenant.call('GET /v1/tenants/:id/applications', { params: { id: tenant.tenantId } });
      t.same(hosted.items, [], "the hosted runtime's listing does not show it");
      const view = await until(
        'the runtime showing the version and Argo CD reachability the reporter stated',
        30_000,
        async () => {
          const v = await runtimeView();
          return v.conditions.some((c) => c.type === 'ArgoCDReachable') ? v : undefined;
        },
      );
      t.equal(view.reportedVersion, registered.runtime.version, 'reportedVersion is the bundle’s version');
      t.equal(view.versionSkew, false, 'no version skew');
      t.ok(view.lastHeartbeatAt, 'lastHeartbeatAt is set');
      t.match(
        view.conditions.find((c) => c.type === 'Reporting'),
        { status: 'True' },
        'Reporting is True',
      );
      t.match(
        view.conditions.find((c) => c.type === 'ArgoCDReachable'),
        { status: 'True', reason: 'ApplicationsListed', message: /namespace gitops/ },
        'ArgoCDReachable is True: its Role in gitops lets it list Applications',
      );
      t.notOk(output.includes(runtimeToken), "the runtime key is not in the reporter's output");
      child.kill('SIGTERM');
      t.equal(await exited, 0, 'the event reporter stops on SIGTERM with exit code 0');
    },
  );

  t.test('the tunnel client connects with the credentials written in the cluster; removal undoes it', async (t) => {
    t.ok(runtimeToken, 'the previous test wrote the credentials');
    const upstream = http.createServer((_req, res) => res.end('{}')).listen(0, '127.0.0.1');
    await once(upstream, 'listening');
    t.teardown(() => upstream.close());
    const credentials = await secret('runtime-credentials');
    const client = startTunnelClient({
      url: decoded(credentials, CREDENTIAL_KEYS.tunnelUrl)!,
      token: runtimeToken,
      upstream: `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`,
      backoff: { initialMs: 50, maxMs: 200 },
    });
    t.teardown(() => client.close());
    if (!client.connected) await once(client.events, 'connected');
    const connected = await until('the runtime shows its tunnel connected', 30_000, async () => {
      const v = await runtimeView();
      return v.tunnel?.connected ? v : undefined;
    });
    t.equal(connected.tunnel?.connected, true, 'the hybrid runtime is connected through its own tunnel');

    const closed = once(client.events, 'disconnected');
    const removal = await asTenant.request('DELETE /v1/tenants/:id/runtimes/:name', {
      params: { id: tenant.tenantId, name: 'plant-b' },
    });
    t.equal(removal.status, 200, 'removal answers 200');
    if (!removal.ok) return;
    const removed = removal.body;
    t.equal(removed.runtime.state, 'removed', 'the runtime is removed');
    const [code] = (await closed) as [number];
    t.equal(code, 4003, "removal closes the runtime's tunnel with the revoked close code");
    const whoami = await asTenant.withToken(runtimeToken).request('GET /v1/whoami');
    t.equal(whoami.status, 401, 'the runtime key is refused after removal');

    // The remove command, as the customer runs it (no namespace controller here: do not wait).
    const [deleteLine, ...rest] = removed.removeCommand.split('\n');
    t.same(rest, [], 'existing Argo CD: the remove command is one kubectl delete, no helm');
    const command = `${deleteLine} --wait=false`;
    const del = await new Promise<Run>((resolve) =>
      execFile(
        'bash',
        ['-c', command],
        {
          env: { ...process.env, KUBECONFIG: plane.kubeconfigFile, PATH: `${toolchainBin}:${process.env.PATH}` },
          timeout: 120_000,
        },
        (err, stdout, stderr) =>
          resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, output: stdout + stderr, stdout }),
      ),
    );
    t.equal(del.code, 0, `the remove command succeeds: ${del.output.slice(-1500)}`);
    const left = await kubectl([
      'get',
      'deployments,serviceaccounts,roles,rolebindings,jobs',
      '-A',
      '-l',
      `hosted-runtimes.io/runtime=plant-b`,
      '-o',
      'name',
    ]);
    t.equal(left.stdout.trim(), '', 'nothing the install created is left but the terminating namespace');
    t.equal(
      (await kubectl(['get', 'namespace', 'gitops', '-o', 'name'])).stdout.trim(),
      'namespace/gitops',
      "the customer's Argo CD namespace is left alone",
    );
  });
}
