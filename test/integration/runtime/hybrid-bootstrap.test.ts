/**
 * A hybrid runtime's install bundle applied with the real kubectl to a real kube-apiserver standing
 * for the customer's cluster (the end-to-end toolchain's, API server only: HRT_TOOLCHAIN_BIN, as
 * test/integration/api/clusters-add.test.ts), and its bootstrap program
 * (runtime/agents/bootstrap/main.ts) run as a process with the bootstrap Job's own ServiceAccount
 * token, so that the bundle's Role is what allows or refuses each call. The control plane is a
 * double here: a loopback HTTP server answering `POST /v1/runtimes/bootstrap` as the design fixes
 * it (single use, 401 otherwise); the end-to-end tier runs the real one.
 *
 * Asserted: the bundle applies cleanly (no Pod Security warning in the restricted namespace); the
 * token is exchanged once (after one 503, retried), the credentials Secret holds what the control
 * plane answered, the bootstrap Secret is deleted; a second run calls nothing; a refused token
 * exits 3 and writes nothing; no token ever appears in the program's output; the remove command
 * deletes every labelled object and nothing of the customer's.
 * Without the toolchain the file is skipped with the reason; with CI=true that is a failure.
 */
import t, { type Test } from 'tap';
import { execFile, spawn } from 'node:child_process';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer, type IncomingMessage } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { freePort } from '../../helpers/ports.ts';
import { APPLICATION_CRD, missingKubeToolchain, startCustomerCluster } from '../../helpers/kubectl.ts';
import { hybridInstallBundle, manifestFileName } from '../../../runtime/hybrid/bundle.ts';
import { catalog } from '../../../runtime/catalog.ts';
import { BOOTSTRAP_SECRET, BOOTSTRAP_TOKEN_KEY, CREDENTIAL_KEYS } from '../../../runtime/protocol/bootstrap.ts';
import { until } from '../../../sandbox/until.ts';

const main = fileURLToPath(new URL('../../../runtime/agents/bootstrap/main.ts', import.meta.url));
const reporterMain = fileURLToPath(new URL('../../../runtime/agents/event-reporter/main.ts', import.meta.url));
const toolchainBin = process.env.HRT_TOOLCHAIN_BIN;
const missing = missingKubeToolchain(toolchainBin);

const TENANT = '5b0e2a8c-3d41-4f6a-9c7e-1a2b3c4d5e6f';
const TOKEN = 'hrth_' + 'q'.repeat(20) + 'Z9-_' + 'x'.repeat(19);
const STALE_TOKEN = 'hrth_' + 'S'.repeat(43);
const RUNTIME_TOKEN = 'hrt_runtime_' + 'r'.repeat(40);
const PUBLIC_KEY =
  '-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEAexampleexampleexampleexampleexample=\n-----END PUBLIC KEY-----\n';

/** An object as kubectl prints it (the fields read here). */
interface KubeJson {
  metadata?: { deletionTimestamp?: string };
  data?: Record<string, string>;
}

interface Run {
  code: number | null;
  output: string;
}

if (missing && process.env.CI === 'true') {
  t.fail(`a real kube-apiserver is needed and CI=true: ${missing}`);
} else if (missing) {
  t.plan(0, `skipped: needs a real kube-apiserver: ${missing}`);
} else {
  t.setTimeout(300_000);
  const dir = await mkdtemp(join(tmpdir(), 'hrt-hybrid-bootstrap-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  // Pod Security warns (as well as enforces) at restricted: a workload's pod template that the
  // runtime namespace's `enforce: restricted` would refuse is reported when it is applied.
  const { plane, kubectl } = await startCustomerCluster(t, toolchainBin!, dir, { podSecurityDefault: 'restricted' });
  t.comment(`kube-apiserver ${plane.server} ready in ${plane.startSeconds.toFixed(1)} s`);

  const getJson = async (kind: string, name: string, ns: string) => {
    const r = await kubectl(['get', kind, name, ...(ns ? ['-n', ns] : []), '-o', 'json', '--ignore-not-found']);
    return r.stdout.trim() ? (JSON.parse(r.stdout) as KubeJson) : undefined;
  };

  // The control plane double: one valid token, redeemed once; the first call answers 503.
  const calls: Array<{ authorization: string | undefined; status: number }> = [];
  let redeemed = false;
  /** The event batches the event reporter posted (raw JSON). */
  const batches: string[] = [];
  const controlPlane = createServer((req: IncomingMessage, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const answer = (status: number, body: unknown, headers: Record<string, string> = {}) => {
        calls.push({ authorization: req.headers.authorization, status });
        res.writeHead(status, { 'content-type': 'application/json', ...headers }).end(JSON.stringify(body));
      };
      if (req.method === 'POST' && req.url === '/v1/runtime/events') {
        batches.push(Buffer.concat(chunks).toString('utf8'));
        res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
        return;
      }
      if (req.method !== 'POST' || req.url !== '/v1/runtimes/bootstrap')
        return answer(404, { error: { code: 'NOT_FOUND' } });
      if (calls.length === 0) return answer(503, { error: { code: 'UNAVAILABLE' } }, { 'retry-after': '0' });
      if (req.headers.authorization !== `Bearer ${TOKEN}` || redeemed)
        return answer(401, { error: { code: 'bootstrap_token_invalid', message: 'the bootstrap token is not valid' } });
      redeemed = true;
      answer(200, {
        tenantId: TENANT,
        runtimeId: 'rt-1',
        name: 'plant-a',
        runtimeToken: RUNTIME_TOKEN,
        tunnelUrl: 'wss://cp.example.test/v1/tunnel',
        controlPlaneUrl: 'https://cp.example.test',
        publicKey: PUBLIC_KEY,
      });
    });
  });
  await new Promise<void>((resolve) => controlPlane.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => controlPlane.close(() => resolve())));
  const cpUrl = `http://127.0.0.1:${(controlPlane.address() as { port: number }).port}`;

  const bundle = hybridInstallBundle({
    runtime: {
      tenantId: TENANT,
      runtimeId: 'rt-1',
      name: 'plant-a',
      access: 'tunnel',
      argo: 'existing',
      argoNamespace: 'gitops',
      upgrader: false,
    },
    version: catalog.versions[catalog.versions.length - 1]!,
    controlPlaneUrl: cpUrl,
    tunnelUrl: 'wss://cp.example.test/v1/tunnel',
    publicKey: PUBLIC_KEY,
    bootstrapToken: TOKEN,
  });
  const manifest = join(dir, manifestFileName('plant-a'));
  await writeFile(manifest, bundle.manifests, { mode: 0o600 });

  /** A kubeconfig authenticating as one of the bundle's ServiceAccounts (a token from the TokenRequest API). */
  const kubeconfigOf = async (account: string): Promise<string> => {
    const token = await kubectl(['create', 'token', account, '-n', 'hosted-runtime']);
    if (token.code !== 0) throw new Error(`kubectl create token ${account}: ${token.output}`);
    const doc = JSON.parse(plane.kubeconfig) as { users: Array<{ user: Record<string, string> }> };
    doc.users[0]!.user = { token: token.stdout.trim() };
    const file = join(dir, `${account}-kubeconfig`);
    await writeFile(file, JSON.stringify(doc), { mode: 0o600 });
    return file;
  };

  /** The bootstrap program as the Job runs it, with the Job's ServiceAccount token and the mounted token file. */
  const bootstrap = async (env: Record<string, string> = {}): Promise<Run> => {
    const token = await kubectl(['create', 'token', 'runtime-bootstrap', '-n', 'hosted-runtime']);
    if (token.code !== 0) throw new Error(`kubectl create token: ${token.output}`);
    const doc = JSON.parse(plane.kubeconfig) as { users: Array<{ user: Record<string, string> }> };
    doc.users[0]!.user = { token: token.stdout.trim() };
    const kubeconfig = join(dir, 'job-kubeconfig');
    await writeFile(kubeconfig, JSON.stringify(doc), { mode: 0o600 });
    // What the Job's optional Secret volume holds: the key's file, or nothing once the Secret is gone.
    const tokenDir = join(dir, 'bootstrap-token');
    await rm(tokenDir, { recursive: true, force: true });
    const secret = await getJson('secret', BOOTSTRAP_SECRET, 'hosted-runtime');
    if (secret) {
      await mkdir(tokenDir);
      await writeFile(
        join(tokenDir, BOOTSTRAP_TOKEN_KEY),
        Buffer.from(secret.data?.[BOOTSTRAP_TOKEN_KEY] ?? '', 'base64'),
      );
    }
    return new Promise((resolve) => {
      execFile(
        process.execPath,
        [main],
        {
          env: {
            PATH: process.env.PATH,
            CONTROL_PLANE_URL: cpUrl,
            TUNNEL_URL: 'wss://cp.example.test/v1/tunnel',
            CONTROL_PLANE_PUBLIC_KEY: PUBLIC_KEY,
            BOOTSTRAP_TOKEN_FILE: join(tokenDir, BOOTSTRAP_TOKEN_KEY),
            POD_NAMESPACE: 'hosted-runtime',
            KUBECONFIG: kubeconfig,
            RETRY_MAX_SECONDS: '1',
            LOG_LEVEL: 'debug',
            ...env,
          },
          timeout: 120_000,
        },
        (err, stdout, stderr) =>
          resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, output: stdout + stderr }),
      );
    });
  };
  const noToken = (t: Test, run: Run, what: string) => {
    for (const [name, value] of [
      ['bootstrap token', TOKEN],
      ['stale bootstrap token', STALE_TOKEN],
      ['runtime token', RUNTIME_TOKEN],
    ] as const)
      t.notOk(run.output.includes(value), `${what}: the ${name} is not in the program's output`);
  };

  t.test('the bundle applies with kubectl, without a Pod Security warning', async (t) => {
    // The customer's existing Argo CD namespace, with something of its own in it.
    t.equal((await kubectl(['create', 'namespace', 'gitops'])).code, 0, 'the customer namespace gitops is created');
    // Its Argo CD's Application kind (the CRD reduced to what the API server needs to serve it).
    const crd = join(dir, 'application-crd.json');
    await writeFile(crd, JSON.stringify(APPLICATION_CRD));
    t.equal((await kubectl(['apply', '-f', crd])).code, 0, 'the Application CRD is created');
    const established = await kubectl([
      'wait',
      '--for=condition=Established',
      'crd/applications.argoproj.io',
      '--timeout=60s',
    ]);
    t.equal(established.code, 0, `the Application CRD is established within 60 s (${established.output.trim()})`);
    t.equal(
      (
        await kubectl([
          'create',
          'configmap',
          'argocd-cm',
          '-n',
          'gitops',
          '--from-literal=url=https://argo.example.test',
        ])
      ).code,
      0,
      'with a ConfigMap of the customer’s Argo CD',
    );
    const r = await kubectl(['apply', '-f', manifest]);
    t.equal(r.code, 0, `kubectl apply exits 0 (${r.output.trim().split('\n').slice(-3).join(' | ')})`);
    t.notMatch(r.output, /PodSecurity|would violate/, 'no Pod Security warning for any pod template');
    t.equal(
      r.stdout.trim().split('\n').length,
      bundle.objects.length,
      `one line per object applied (${bundle.objects.length})`,
    );
    const creds = await getJson('secret', 'runtime-credentials', 'hosted-runtime');
    t.same(creds?.data ?? {}, {}, 'the credentials Secret exists, empty');
  });

  t.test('the accounts hold exactly the rights the bundle lists (asked of the API server)', async (t) => {
    const can = async (account: string, ...args: string[]) =>
      (await kubectl(['auth', 'can-i', ...args, `--as=system:serviceaccount:hosted-runtime:${account}`])).code === 0;
    const rights: Array<[string, string[], boolean]> = [
      ['runtime-bootstrap', ['get', 'secrets/runtime-credentials', '-n', 'hosted-runtime'], true],
      ['runtime-bootstrap', ['patch', 'secrets/runtime-credentials', '-n', 'hosted-runtime'], true],
      ['runtime-bootstrap', ['delete', 'secrets/runtime-bootstrap', '-n', 'hosted-runtime'], true],
      ['runtime-bootstrap', ['create', 'secrets', '-n', 'hosted-runtime'], false],
      ['runtime-bootstrap', ['get', 'secrets/app-proxy-token', '-n', 'hosted-runtime'], false],
      ['runtime-bootstrap', ['delete', 'secrets/runtime-credentials', '-n', 'hosted-runtime'], false],
      ['runtime-bootstrap', ['patch', 'secrets/runtime-credentials', '-n', 'gitops'], false],
      ['event-reporter', ['list', 'applications.argoproj.io', '-n', 'gitops'], true],
      ['event-reporter', ['watch', 'applications.argoproj.io', '-n', 'gitops'], true],
      ['event-reporter', ['list', 'applications.argoproj.io', '--all-namespaces'], false],
      ['event-reporter', ['list', 'applications.argoproj.io', '-n', 'default'], false],
      ['event-reporter', ['patch', 'applications.argoproj.io', '-n', 'gitops'], false],
      ['app-proxy', ['patch', 'applications.argoproj.io/web', '-n', 'gitops'], true],
      ['app-proxy', ['get', 'applications.argoproj.io/web', '-n', 'gitops'], true],
      ['app-proxy', ['list', 'applications.argoproj.io', '-n', 'gitops'], false],
      ['app-proxy', ['delete', 'applications.argoproj.io/web', '-n', 'gitops'], false],
      ['app-proxy', ['patch', 'applications.argoproj.io/web', '-n', 'default'], false],
      ['app-proxy', ['get', 'configmaps/argocd-cm', '-n', 'gitops'], false],
      ['tunnel-client', ['get', 'secrets', '-n', 'hosted-runtime'], false],
      // The promotion resources (the newest version has the GitOps Operator), in gitops only.
      ['event-reporter', ['watch', 'promotions.promotions.hosted-runtimes.io', '-n', 'gitops'], true],
      ['event-reporter', ['list', 'products.promotions.hosted-runtimes.io', '--all-namespaces'], false],
      ['app-proxy', ['create', 'promotions.promotions.hosted-runtimes.io', '-n', 'gitops'], true],
      ['app-proxy', ['delete', 'promotions.promotions.hosted-runtimes.io/p', '-n', 'gitops'], false],
      ['gitops-operator', ['list', 'promotions.promotions.hosted-runtimes.io', '-n', 'gitops'], true],
      [
        'gitops-operator',
        ['update', 'promotions.promotions.hosted-runtimes.io', '--subresource=status', '-n', 'gitops'],
        true,
      ],
      ['gitops-operator', ['update', 'promotions.promotions.hosted-runtimes.io', '-n', 'gitops'], false],
      ['gitops-operator', ['list', 'secrets', '-n', 'gitops'], true],
      ['gitops-operator', ['get', 'secrets/argocd-secret', '-n', 'gitops'], false],
      ['gitops-operator', ['list', 'promotions.promotions.hosted-runtimes.io', '--all-namespaces'], false],
      ['gitops-operator', ['list', 'secrets', '-n', 'hosted-runtime'], false],
      ['gitops-operator', ['create', 'workflows.argoproj.io', '-n', 'default'], false],
    ];
    for (const [account, args, expected] of rights)
      t.equal(
        await can(account, ...args),
        expected,
        `${account}: ${args.join(' ')} is ${expected ? 'allowed' : 'refused'}`,
      );
  });

  t.test(
    'the event reporter, with its account and WATCH_NAMESPACE, reports the Applications of the Argo CD namespace',
    async (t) => {
      const app = (namespace: string, name: string) => ({
        apiVersion: 'argoproj.io/v1alpha1',
        kind: 'Application',
        metadata: { name, namespace },
        spec: {
          project: 'default',
          destination: { namespace: 'web' },
          source: { repoURL: 'https://git.example.test/web' },
        },
      });
      const apps = join(dir, 'applications.json');
      await writeFile(
        apps,
        JSON.stringify({ apiVersion: 'v1', kind: 'List', items: [app('gitops', 'web'), app('default', 'elsewhere')] }),
      );
      t.equal(
        (await kubectl(['apply', '-f', apps])).code,
        0,
        'an Application in gitops and one in default are created',
      );
      const reporter = (
        bundle.objects.find((o) => o.kind === 'Deployment' && o.metadata.name === 'event-reporter') as unknown as {
          spec: { template: { spec: { containers: Array<{ env: Array<{ name: string; value?: string }> }> } } };
        }
      ).spec.template.spec.containers[0]!.env;
      const watchNamespace = reporter.find((e) => e.name === 'WATCH_NAMESPACE')?.value;
      t.equal(watchNamespace, 'gitops', "the bundle's event reporter watches gitops");
      const child = spawn(process.execPath, [reporterMain], {
        env: {
          PATH: process.env.PATH,
          CONTROL_PLANE_URL: cpUrl,
          RUNTIME_TOKEN: 'hrt_event_reporter_token_for_the_double',
          REPLICA_NAME: 'event-reporter-0',
          POD_NAMESPACE: 'hosted-runtime',
          WATCH_NAMESPACE: watchNamespace!,
          KUBECONFIG: await kubeconfigOf('event-reporter'),
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
      type Item = { kind: string; namespace: string; name: string };
      const reported = () =>
        batches.flatMap((b) =>
          ((JSON.parse(b) as { items?: Item[] }).items ?? []).map((i) => `${i.kind} ${i.namespace}/${i.name}`),
        );
      await until('the event reporter to report Application gitops/web', 60_000, () =>
        reported().includes('Application gitops/web'),
      ).catch((err: Error) => t.fail(`${err.message}; its output: ${output.slice(-2000)}`));
      t.ok(reported().includes('Application gitops/web'), 'Application gitops/web is reported');
      t.notOk(
        reported().some((r) => r.includes(' default/')),
        'nothing of another namespace is reported',
      );
      t.notMatch(output, /not allowed to list Applications/, 'the Application watch was not refused');
      // The install grants no rights on Rollouts and Workflows next to an existing Argo CD: the
      // reporter says so once per kind and goes on.
      t.match(output, /not allowed to list Rollouts/, 'Rollouts: logged as not allowed');
      t.match(output, /not allowed to list Workflows/, 'Workflows: logged as not allowed');
      child.kill('SIGTERM');
      t.equal(await exited, 0, 'the event reporter stops on SIGTERM with exit code 0');
    },
  );

  t.test(
    'the bootstrap exchanges the token once, writes the credentials and deletes the bootstrap Secret',
    async (t) => {
      const run = await bootstrap();
      t.equal(run.code, 0, `the program exits 0 (${run.output.trim().split('\n').slice(-2).join(' | ')})`);
      t.same(
        calls.map((c) => c.status),
        [503, 200],
        'the control plane was called twice: a 503 (retried) and the 200',
      );
      t.ok(
        calls.every((c) => c.authorization === `Bearer ${TOKEN}`),
        'each call presented the bootstrap token from the Secret',
      );
      const creds = await getJson('secret', 'runtime-credentials', 'hosted-runtime');
      const decoded = Object.fromEntries(
        Object.entries(creds?.data ?? {}).map(([k, v]) => [k, Buffer.from(v, 'base64').toString()]),
      );
      t.same(
        decoded,
        {
          [CREDENTIAL_KEYS.token]: RUNTIME_TOKEN,
          [CREDENTIAL_KEYS.tunnelUrl]: 'wss://cp.example.test/v1/tunnel',
          [CREDENTIAL_KEYS.controlPlaneUrl]: 'https://cp.example.test',
          [CREDENTIAL_KEYS.publicKey]: PUBLIC_KEY,
        },
        'the credentials Secret holds the runtime token, URLs and public key the control plane answered',
      );
      t.equal(
        await getJson('secret', BOOTSTRAP_SECRET, 'hosted-runtime'),
        undefined,
        'the bootstrap Secret is deleted',
      );
      noToken(t, run, 'first run');
    },
  );

  t.test('the bundle applied again keeps the credentials; a second run calls nothing', async (t) => {
    const apply = await kubectl(['apply', '-f', manifest]);
    t.equal(apply.code, 0, 'kubectl apply of the same bundle exits 0');
    const creds = await getJson('secret', 'runtime-credentials', 'hosted-runtime');
    t.equal(
      Buffer.from(creds?.data?.[CREDENTIAL_KEYS.token] ?? '', 'base64').toString(),
      RUNTIME_TOKEN,
      'the runtime token the Job wrote is still there',
    );
    t.ok(
      await getJson('secret', BOOTSTRAP_SECRET, 'hosted-runtime'),
      'the bootstrap Secret is back (its token redeemed)',
    );
    const before = calls.length;
    const run = await bootstrap();
    t.equal(run.code, 0, 'the program exits 0');
    t.equal(calls.length, before, 'the control plane was not called');
    t.match(run.output, /already holds the runtime token/, 'it says why');
    t.equal(
      await getJson('secret', BOOTSTRAP_SECRET, 'hosted-runtime'),
      undefined,
      'and deletes the bootstrap Secret again',
    );
    noToken(t, run, 'second run');
  });

  t.test('an unreachable control plane: bounded attempts, exit 1, nothing written', async (t) => {
    t.equal(
      (
        await kubectl([
          'patch',
          'secret',
          'runtime-credentials',
          '-n',
          'hosted-runtime',
          '--type=merge',
          '-p',
          '{"data":null}',
        ])
      ).code,
      0,
      'the credentials are emptied (a cluster whose bootstrap has not run)',
    );
    t.equal(
      (
        await kubectl([
          'create',
          'secret',
          'generic',
          BOOTSTRAP_SECRET,
          '-n',
          'hosted-runtime',
          `--from-literal=${BOOTSTRAP_TOKEN_KEY}=${STALE_TOKEN}`,
        ])
      ).code,
      0,
      'a bootstrap Secret holding a token is created',
    );
    const closed = await freePort();
    const run = await bootstrap({ CONTROL_PLANE_URL: `http://127.0.0.1:${closed}`, BOOTSTRAP_MAX_ATTEMPTS: '3' });
    t.equal(run.code, 1, 'the program exits 1 (the Job may try again)');
    t.equal(
      run.output.match(/the control plane is unreachable/g)?.length,
      3,
      'it tried BOOTSTRAP_MAX_ATTEMPTS = 3 times',
    );
    t.match(run.output, /no answer from the control plane after 3 attempts/, 'and says it gave up');
    const creds = await getJson('secret', 'runtime-credentials', 'hosted-runtime');
    t.same(creds?.data ?? {}, {}, 'nothing was written to the credentials Secret');
    t.ok(await getJson('secret', BOOTSTRAP_SECRET, 'hosted-runtime'), 'the bootstrap Secret is kept for the next try');
    noToken(t, run, 'unreachable run');
  });

  t.test('a refused token: exit 3, nothing written, the bootstrap Secret kept', async (t) => {
    // The state the previous test left: no credentials, a bootstrap Secret with a token the control plane does not know.
    const before = calls.length;
    const run = await bootstrap();
    t.equal(run.code, 3, 'the program exits 3 (the Job fails without another try)');
    t.same(
      calls.slice(before).map((c) => c.status),
      [401],
      'one call, answered 401, not retried',
    );
    t.match(run.output, /refused the bootstrap token/, 'the output says the token was refused');
    const creds = await getJson('secret', 'runtime-credentials', 'hosted-runtime');
    t.same(creds?.data ?? {}, {}, 'nothing was written to the credentials Secret');
    t.ok(await getJson('secret', BOOTSTRAP_SECRET, 'hosted-runtime'), 'the bootstrap Secret is kept');
    noToken(t, run, 'refused run');
  });

  t.test('the remove command deletes every labelled object and nothing of the customer’s', async (t) => {
    // The API server runs alone here: no namespace controller finalises the deleted namespace, so
    // kubectl is told not to wait for it.
    const [deleteLine, ...rest] = bundle.removeCommand.split('\n');
    t.same(
      rest.filter((l) => !l.startsWith('#')),
      [],
      'existing Argo CD: no helm uninstall (the note on the shared promotion CRDs is comments)',
    );
    const args = deleteLine!
      .replace(/^kubectl /, '')
      .match(/'[^']*'|\S+/g)!
      .map((a) => a.replace(/^'|'$/g, ''));
    const r = await kubectl([...args, '--wait=false']);
    t.equal(r.code, 0, `kubectl delete exits 0 (${r.output.trim().split('\n').slice(-2).join(' | ')})`);
    const selector = args[args.indexOf('-l') + 1]!;
    const left = await kubectl([
      'get',
      args[1]!.replace(/,?namespaces$/, ''),
      '--all-namespaces',
      '-l',
      selector,
      '-o',
      'name',
    ]);
    t.equal(left.code, 0, `kubectl get of those kinds by the labels exits 0 (${left.output.trim()})`);
    t.equal(left.stdout.trim(), '', 'no labelled object is left but the namespace');
    const ns = await getJson('namespace', 'hosted-runtime', '');
    t.ok(ns?.metadata?.deletionTimestamp, 'the runtime namespace is being deleted');
    t.ok(await getJson('namespace', 'gitops', ''), 'the customer namespace gitops is kept');
    t.ok(await getJson('configmap', 'argocd-cm', 'gitops'), 'and its Argo CD ConfigMap');
    t.equal(
      (await kubectl(['get', 'roles', '-n', 'gitops', '-o', 'name'])).stdout.trim(),
      '',
      'no Role left in gitops',
    );
    t.equal(
      (await kubectl(['get', 'crd', 'promotions.promotions.hosted-runtimes.io', '-o', 'name'])).code,
      0,
      'the promotion CRDs stay (shared with any other runtime in the cluster)',
    );
  });
}
