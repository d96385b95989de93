/**
 * A real Argo CD — the application controller and the repo-server, built from the argo-cd v3
 * Go module by scripts/argocd.sh (HRT_ARGOCD_BIN, exported by test/e2e/prepare.sh) — running as
 * processes on loopback against any API server that has the Argo CRDs (harness/argo.ts, or a
 * tenant's vcluster whose charts carry the real CRDs), in namespace `argocd` there, with the
 * "in-cluster" destination being that same API server (as in a runtime, where Argo CD runs in
 * the tenant's vcluster). Redis is `redis-server` when it is on PATH (Debian's redis-server
 * package); otherwise, or with HRT_ARGOCD_REDIS=redis-standin, `redis-standin` (an in-memory
 * Redis protocol server, miniredis — a stand-in, named in the test output; Argo CD uses Redis
 * only as a cache).
 *
 * With `server`, also Argo CD's API server (argocd-server), over https with the certificate given.
 *
 * Every server listens on 127.0.0.1 only (the controller's metrics address is made so by
 * scripts/argocd.sh's build; it is hard-coded to 0.0.0.0 upstream).
 *
 * `gitRepository(dir)` makes a local git repository (file:// URL) with commits of plain YAML,
 * which the repo-server clones with the machine's `git`.
 */
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { promisify } from 'node:util';
import { CoreV1Api, CustomObjectsApi, type KubeConfig } from '@kubernetes/client-node';
import { ARGO_GROUP, ARGO_VERSION } from './argo.ts';
import { statusOf } from './kube.ts';
import { serverPort, startProcess, until, type ManagedProcess } from '../../../sandbox/processes.ts';
import { refuseInEarlyPhase } from './phase.ts';

const execFileP = promisify(execFile);

function onPath(command: string): string | undefined {
  for (const d of (process.env.PATH ?? '').split(':')) {
    if (d && existsSync(join(d, command))) return join(d, command);
  }
  return undefined;
}

/** The folder with `argocd` and `redis-standin` (HRT_ARGOCD_BIN), or undefined. */
export function argoCdBin(): string | undefined {
  const bin = process.env.HRT_ARGOCD_BIN;
  return bin && existsSync(join(bin, 'argocd')) && existsSync(join(bin, 'redis-standin')) ? bin : undefined;
}

/** Why a real Argo CD cannot run here, or undefined. */
export function argoCdUnavailable(): string | undefined {
  refuseInEarlyPhase('Argo CD');
  if (argoCdBin()) return undefined;
  if (!onPath('git')) return 'git is not installed (the repo-server clones with it)';
  return (
    'HRT_ARGOCD_BIN is not set or lacks argocd/redis-standin: run the tier through scripts/test.sh e2e ' +
    '(test/e2e/prepare.sh builds Argo CD with scripts/argocd.sh), or export HRT_ARGOCD_BIN=$(bash scripts/argocd.sh | tail -1)'
  );
}

export interface ArgoCd {
  namespace: string;
  /** With `server`: argocd-server's https URL on loopback, and its process. */
  serverUrl?: string;
  server?: ManagedProcess;
  /** `redis-server` (real, from PATH) or `redis-standin` (in-memory stand-in). */
  redis: 'redis-server' | 'redis-standin';
  controller: ManagedProcess;
  repoServer: ManagedProcess;
  /** Seconds from start to the controller and repo-server answering their health checks. */
  startSeconds: number;
  stop(): Promise<void>;
}

export interface ArgoCdOptions {
  /** Admin kubeconfig file of the API server Argo CD runs in and deploys to. */
  kubeconfigFile: string;
  kc: KubeConfig;
  /** Folder for logs, HOME and TMPDIR of the processes. */
  dir: string;
  /** Argo CD's namespace; default `argocd`. */
  namespace?: string;
  /** Wait bound for start-up; default 2 minutes. */
  timeoutMs?: number;
  /**
   * Also run Argo CD's API server (argocd-server) over https on loopback, with this certificate
   * in Secret `argocd-server-tls`, where Argo CD reads its server certificate from.
   */
  server?: { certificate: TlsCertificate };
}

export interface TlsCertificate {
  /** PEM */
  cert: string;
  /** PEM */
  key: string;
}

/** A self-signed certificate (openssl) for the hosts given: IP addresses and DNS names. */
export async function selfSignedCertificate(dir: string, hosts: string[]): Promise<TlsCertificate> {
  await mkdir(dir, { recursive: true });
  const san = hosts.map((h) => (/^[\d.]+$/.test(h) ? `IP:${h}` : `DNS:${h}`)).join(',');
  const [certFile, keyFile] = [join(dir, 'tls.crt'), join(dir, 'tls.key')];
  await execFileP(
    'openssl',
    ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '2']
      .concat(['-subj', `/O=e2e/CN=${hosts[0]}`, '-addext', `subjectAltName=${san}`])
      .concat(['-keyout', keyFile, '-out', certFile]),
    { timeout: 30_000 },
  );
  return { cert: await readFile(certFile, 'utf8'), key: await readFile(keyFile, 'utf8') };
}

async function ignoreConflict(p: Promise<unknown>): Promise<void> {
  try {
    await p;
  } catch (err) {
    if (statusOf(err) !== 409) throw err;
  }
}

async function httpOk(url: string): Promise<boolean> {
  try {
    const res = await fetch(url, { signal: AbortSignal.timeout(3000) });
    return res.ok;
  } catch {
    return false;
  }
}

/**
 * Installs Argo CD's settings (argocd-cm, argocd-rbac-cm, argocd-secret, the `default`
 * AppProject) into the API server and starts Redis, the repo-server and the application
 * controller. Stopped in `t.teardown` (also callable; idempotent).
 */
export async function startArgoCd(t: { teardown(fn: () => unknown): void }, o: ArgoCdOptions): Promise<ArgoCd> {
  refuseInEarlyPhase('startArgoCd (Argo CD)');
  const started = Date.now();
  const bin = argoCdBin();
  if (!bin) throw new Error(argoCdUnavailable());
  const ns = o.namespace ?? 'argocd';
  const timeoutMs = o.timeoutMs ?? 120_000;
  const core = o.kc.makeApiClient(CoreV1Api);
  const objects = o.kc.makeApiClient(CustomObjectsApi);
  const labels = { 'app.kubernetes.io/part-of': 'argocd' };
  await ignoreConflict(core.createNamespace({ body: { metadata: { name: ns } } }));
  await ignoreConflict(
    core.createNamespacedConfigMap({ namespace: ns, body: { metadata: { name: 'argocd-cm', labels } } }),
  );
  await ignoreConflict(
    core.createNamespacedConfigMap({ namespace: ns, body: { metadata: { name: 'argocd-rbac-cm', labels } } }),
  );
  await ignoreConflict(
    core.createNamespacedSecret({
      namespace: ns,
      body: {
        metadata: { name: 'argocd-secret', labels },
        stringData: { 'server.secretkey': 'e2e-only-not-a-secret' },
      },
    }),
  );
  // The real argo-cd chart creates argocd-secret empty; argocd-server (not run here) writes
  // server.secretkey into it on its first start, and the controller's settings need it.
  const secret = await core.readNamespacedSecret({ name: 'argocd-secret', namespace: ns });
  if (!secret.data?.['server.secretkey']) {
    secret.data = { ...secret.data, 'server.secretkey': Buffer.from('e2e-only-not-a-secret').toString('base64') };
    await core.replaceNamespacedSecret({ name: 'argocd-secret', namespace: ns, body: secret });
  }
  await ignoreConflict(
    objects.createNamespacedCustomObject({
      group: ARGO_GROUP,
      version: ARGO_VERSION,
      namespace: ns,
      plural: 'appprojects',
      body: {
        apiVersion: `${ARGO_GROUP}/${ARGO_VERSION}`,
        kind: 'AppProject',
        metadata: { name: 'default', namespace: ns },
        spec: {
          sourceRepos: ['*'],
          destinations: [{ server: '*', namespace: '*' }],
          clusterResourceWhitelist: [{ group: '*', kind: '*' }],
        },
      },
    }),
  );

  await mkdir(join(o.dir, 'home'), { recursive: true });
  await mkdir(join(o.dir, 'tmp'), { recursive: true });
  const processes: ManagedProcess[] = [];
  let stopped: Promise<void> | undefined;
  const stop = () =>
    (stopped ??= (async () => {
      for (const p of [...processes].reverse()) await p.stop(3000);
    })());
  t.teardown(stop);
  const [redisPort, repoPort, repoMetrics, ctlMetrics, serverListen, serverMetrics] = await Promise.all([
    serverPort(),
    serverPort(),
    serverPort(),
    serverPort(),
    serverPort(),
    serverPort(),
  ]);
  // HRT_ARGOCD_REDIS=redis-standin uses the stand-in even where redis-server is installed.
  const redisServer = process.env.HRT_ARGOCD_REDIS === 'redis-standin' ? undefined : onPath('redis-server');
  const redis = redisServer
    ? startProcess(
        'redis-server',
        redisServer,
        ['--port', String(redisPort), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'],
        join(o.dir, 'redis.log'),
      )
    : startProcess(
        'redis-standin',
        join(bin, 'redis-standin'),
        ['--port', String(redisPort)],
        join(o.dir, 'redis.log'),
      );
  processes.push(redis);
  const env = {
    ...process.env,
    HOME: join(o.dir, 'home'),
    TMPDIR: join(o.dir, 'tmp'),
    KUBECONFIG: o.kubeconfigFile,
    // The "in-cluster" destination (https://kubernetes.default.svc) is the API server of KUBECONFIG.
    ARGOCD_FAKE_IN_CLUSTER: 'true',
    ARGOCD_GPG_ENABLED: 'false',
    // The repo-server's git credential helper socket (default /tmp/reposerver-ask-pass.sock, shared).
    ARGOCD_ASK_PASS_SOCK: join(o.dir, 'askpass.sock'),
    // The repo-server's git runs `argocd` as its GIT_ASKPASS helper (repositories with credentials).
    PATH: `${bin}:${process.env.PATH ?? ''}`,
  };
  const common = ['--redis', `127.0.0.1:${redisPort}`, '--loglevel', 'info'];
  const repoServer = startProcess(
    'argocd-repo-server',
    join(bin, 'argocd'),
    [
      '--address',
      '127.0.0.1',
      '--port',
      String(repoPort),
      '--metrics-address',
      '127.0.0.1',
      '--metrics-port',
      String(repoMetrics),
      '--disable-tls',
      ...common,
    ],
    join(o.dir, 'repo-server.log'),
    { env: { ...env, ARGOCD_BINARY_NAME: 'argocd-repo-server' } },
  );
  processes.push(repoServer);
  const controller = startProcess(
    'argocd-application-controller',
    join(bin, 'argocd'),
    [
      '--kubeconfig',
      o.kubeconfigFile,
      '--namespace',
      ns,
      '--repo-server',
      `127.0.0.1:${repoPort}`,
      '--repo-server-plaintext',
      '--metrics-port',
      String(ctlMetrics),
      '--status-processors',
      '2',
      '--operation-processors',
      '2',
      ...common,
    ],
    join(o.dir, 'application-controller.log'),
    { env: { ...env, ARGOCD_BINARY_NAME: 'argocd-application-controller' } },
  );
  processes.push(controller);
  let server: ManagedProcess | undefined;
  if (o.server) {
    await ignoreConflict(
      core.createNamespacedSecret({
        namespace: ns,
        body: {
          metadata: { name: 'argocd-server-tls', labels },
          type: 'kubernetes.io/tls',
          stringData: { 'tls.crt': o.server.certificate.cert, 'tls.key': o.server.certificate.key },
        },
      }),
    );
    server = startProcess(
      'argocd-server',
      join(bin, 'argocd'),
      [
        '--namespace',
        ns,
        '--address',
        '127.0.0.1',
        '--port',
        String(serverListen),
        '--metrics-address',
        '127.0.0.1',
        '--metrics-port',
        String(serverMetrics),
        '--repo-server',
        `127.0.0.1:${repoPort}`,
        '--repo-server-plaintext',
        '--staticassets',
        join(o.dir, 'tmp'),
        ...common,
      ],
      join(o.dir, 'server.log'),
      { env: { ...env, ARGOCD_BINARY_NAME: 'argocd-server' } },
    );
    processes.push(server);
  }
  try {
    await until('Argo CD repo-server and application controller healthy', timeoutMs, async () => {
      for (const p of processes) if (!p.running()) throw new Error(`${p.name} exited: ${await p.tail(15)}`);
      const [rs, ctl, srv] = await Promise.all([
        httpOk(`http://127.0.0.1:${repoMetrics}/healthz`),
        httpOk(`http://127.0.0.1:${ctlMetrics}/healthz`),
        server ? httpOk(`http://127.0.0.1:${serverMetrics}/metrics`) : true,
      ]);
      return rs && ctl && srv;
    });
  } catch (err) {
    await stop();
    throw err;
  }
  return {
    namespace: ns,
    ...(server ? { server, serverUrl: `https://127.0.0.1:${serverListen}` } : {}),
    redis: redisServer ? 'redis-server' : 'redis-standin',
    controller,
    repoServer,
    startSeconds: (Date.now() - started) / 1000,
    stop,
  };
}

export interface GitRepository {
  /** file:// URL */
  url: string;
  /** Writes the files (path → content) and commits them; resolves with the new commit id. */
  commit(files: Record<string, string>, message: string): Promise<string>;
}

/** A local git repository on branch `main` (created empty; use `commit`). */
export async function gitRepository(dir: string): Promise<GitRepository> {
  await mkdir(dir, { recursive: true });
  const git = async (...args: string[]) =>
    (
      await execFileP(
        'git',
        ['-C', dir, '-c', 'user.name=e2e', '-c', 'user.email=e2e@example.test', '-c', 'commit.gpgsign=false', ...args],
        { timeout: 30_000 },
      )
    ).stdout.trim();
  await git('init', '-q', '-b', 'main');
  return {
    url: `file://${dir}`,
    async commit(files, message) {
      for (const [path, content] of Object.entries(files)) {
        await mkdir(dirname(join(dir, path)), { recursive: true });
        await writeFile(join(dir, path), content);
      }
      await git('add', '-A');
      await git('commit', '-q', '-m', message);
      return git('rev-parse', 'HEAD');
    },
  };
}
