/**
 * The runtime's Source Server (runtime/agents/source-server), as the event reporter and the
 * app-proxy call it over HTTP on loopback, against:
 *  - a real Git server over HTTP with credentials (sandbox/git-server.ts: git's own smart-HTTP
 *    backend, HTTP Basic) holding a monorepo with apps/a and apps/b, pushed to as a developer does;
 *  - the repository credentials in Argo CD's repository Secrets on a real kube-apiserver (a
 *    `repo-creds` template for the Git server and a `repository` Secret with a wrong password for
 *    a second repository), read by the Source Server's own credential source. Without the
 *    toolchain (HRT_TOOLCHAIN_BIN) the same Secrets are handed to the same matching code directly
 *    (said in a TAP comment; with CI=true that fails);
 *  - ArgoCdApiDouble (TEST DOUBLE, below): Argo CD's API server as the Source Server uses it.
 *    The e2e tier runs the real Argo CD (test/e2e), so the manifests here come from the double.
 *
 * What is checked: a commit to apps/a gives A that commit as change revision (with its author and
 * message) and leaves B's where it was; a commit to a Helm value file outside H's path moves H's, one
 * to a path K's manifest-generate-paths annotation names moves K's, and neither moves for a file
 * they do not name; an image-only commit names the image before → after and
 * exactly one field; a commit Argo CD cannot render comes back with Argo CD's message (200 on
 * /change, 422 on /diff); a wrong Git password is a clear 502 and no password is logged; Argo CD
 * or Git down is a 503 with Retry-After; a multi-source Application's change revision, commit diff
 * and preview move the source a commit changed and hold the others at their synced revisions; bad
 * input is a 400 naming the field; a session Argo CD forgot is renewed by one login.
 */
import t from 'tap';
import { execFile } from 'node:child_process';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { promisify } from 'node:util';
import { pino } from 'pino';
import { parseAllDocuments } from 'yaml';
import { startGitServer } from '../../../sandbox/git-server.ts';
import { missingKubeToolchain, startCustomerCluster } from '../../helpers/kubectl.ts';
import { agentKubeTransport } from '../../../runtime/agents/common/kube.ts';
import { buildSourceServer } from '../../../runtime/agents/source-server/app.ts';
import { ArgoCdClient } from '../../../runtime/agents/source-server/argocd.ts';
import { SourceService } from '../../../runtime/agents/source-server/change.ts';
import {
  argoCdRepoCredentials,
  matchCredentials,
  parseRepoSecrets,
  SECRET_TYPE_LABEL,
} from '../../../runtime/agents/source-server/credentials.ts';
import { type CredentialSource, GitMirrors } from '../../../runtime/agents/source-server/git.ts';
import type { ApplicationChange, ApplicationDiff, ApplicationPreview } from '../../../runtime/protocol/sources.ts';

const run = promisify(execFile);
const toolchainBin = process.env.HRT_TOOLCHAIN_BIN;
const missing = missingKubeToolchain(toolchainBin);

const GIT_USER = 'deployer';
const GIT_PASSWORD = 'git-pw-5d1f0c9e7b';
const WRONG_GIT_PASSWORD = 'wrong-pw-83a6e2f1';
const ARGO_PASSWORD = 'argo-pw-c47e9a1d20';

const ALICE = { name: 'Alice Example', email: 'alice@example.test' };
const BOB = { name: 'Bob Example', email: 'bob@example.test' };

const deploymentYaml = (replicas: number, image: string): string => `apiVersion: apps/v1
kind: Deployment
metadata:
  name: a-web
  namespace: team-a
spec:
  replicas: ${replicas}
  selector:
    matchLabels: { app: a-web }
  template:
    metadata:
      labels: { app: a-web }
    spec:
      containers:
        - name: web
          image: ${image}
          ports:
            - name: http
              containerPort: 8080
        - name: metrics
          image: registry.example.test/exporter:2.0
`;
const configMapYaml = (level: string): string => `apiVersion: v1
kind: ConfigMap
metadata:
  name: b-config
  namespace: team-b
data:
  LOG_LEVEL: ${level}
`;

type Json = Record<string, unknown>;

interface DoubleApp {
  repo: string;
  path?: string;
  targetRevision?: string;
  /** A multi-source Application's sources (spec.sources), each a path of a repository at main. */
  sources?: Array<{ repo: string; path: string }>;
  /** Where Argo CD puts the manifests that name no namespace (spec.destination.namespace). */
  destinationNamespace?: string;
  /** The source's Helm value files (spec.source.helm.valueFiles, relative to the path). */
  valueFiles?: string[];
  annotations?: Record<string, string>;
}

/**
 * TEST DOUBLE of Argo CD's API server (the e2e tier runs the real one): the session login of a
 * local account, and for the Applications it is given: the Application, the manifests at a
 * revision (the YAML files under the source path, read from the Git server's bare repository at
 * that revision and answered as JSON texts, as Argo CD's repo-server answers for a directory
 * source; YAML that does not parse is Argo CD's manifest generation error: HTTP 500 with its
 * grpc-gateway error body; a multi-source Application's with its sources pinned by
 * `sourcePositions` and `revisions`, each source's files added up), a revision's metadata (from
 * git; a multi-source Application's source by `sourceIndex`), and the managed resources (target
 * state at the head of the branch, live state as the test sets it). Unknown Applications are
 * 403 "permission denied", as Argo CD answers them.
 */
async function startArgoCdApiDouble(opts: { gitRoot: string; apps: Record<string, DoubleApp> }) {
  const tokens = new Set<string>();
  const live = new Map<string, Json>();
  /** The multi-source manifests asked for, as `position:revision …`. */
  const multiSourceAsks: string[] = [];
  let logins = 0;
  const bare = (repo: string) => join(opts.gitRoot, `${repo}.git`);
  const git = async (repo: string, ...args: string[]) =>
    (await run('git', ['--git-dir', bare(repo), ...args], { timeout: 30_000 })).stdout;
  const resolve = async (repo: string, rev: string) => (await git(repo, 'rev-parse', `${rev}^{commit}`)).trim();
  const manifests = async (app: DoubleApp, revision: string): Promise<string[]> => {
    const sha = await resolve(app.repo, revision);
    // A kustomization is Kustomize's input, not a manifest (the double renders no Kustomize).
    const files = (await git(app.repo, 'ls-tree', '-r', '--name-only', sha, '--', app.path ?? '.'))
      .split('\n')
      .filter((f) => /\.ya?ml$/.test(f) && !/(^|\/)kustomization\.ya?ml$/.test(f));
    const out: string[] = [];
    // The value files in the repository, as a chart would render them: one ConfigMap of their keys.
    const values: Record<string, string> = {};
    for (const f of app.valueFiles ?? []) {
      if (/^https?:\/\//.test(f)) continue;
      const text = await git(app.repo, 'show', `${sha}:${join(app.path ?? '.', f)}`);
      for (const [k, v] of Object.entries((parseAllDocuments(text)[0]?.toJS() ?? {}) as Json)) values[k] = String(v);
    }
    if (app.valueFiles)
      out.push(
        JSON.stringify({
          apiVersion: 'v1',
          kind: 'ConfigMap',
          metadata: { name: 'values', namespace: 'x' },
          data: values,
        }),
      );
    for (const file of files) {
      const text = await git(app.repo, 'show', `${sha}:${file}`);
      for (const doc of parseAllDocuments(text)) {
        if (doc.errors.length > 0)
          throw new Error(
            `rpc error: code = Unknown desc = Manifest generation error (cached): failed to unmarshal ${file}: ${doc.errors[0]!.message.split('\n')[0]}`,
          );
        const obj: unknown = doc.toJS();
        if (obj) out.push(JSON.stringify(obj));
      }
    }
    return out;
  };
  const send = (res: http.ServerResponse, status: number, body: unknown) =>
    res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
  const grpcError = (res: http.ServerResponse, status: number, code: number, message: string) =>
    send(res, status, { error: message, code, message });

  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      void (async () => {
        const url = new URL(req.url ?? '/', 'http://argocd.invalid');
        if (req.method === 'POST' && url.pathname === '/api/v1/session') {
          const body = JSON.parse(Buffer.concat(chunks).toString() || '{}') as { username?: string; password?: string };
          if (body.username !== 'source-server' || body.password !== ARGO_PASSWORD)
            return grpcError(res, 401, 16, 'Invalid username or password');
          logins++;
          const token = `session-${logins}`;
          tokens.add(token);
          return send(res, 200, { token });
        }
        const bearer = /^Bearer (.+)$/.exec(req.headers.authorization ?? '')?.[1];
        if (bearer === undefined || !tokens.has(bearer))
          return grpcError(res, 401, 16, 'invalid session: token is expired');
        const m = /^\/api\/v1\/applications\/([^/]+)(\/.*)?$/.exec(url.pathname);
        const name = m ? decodeURIComponent(m[1]!) : '';
        const app = opts.apps[name];
        if (!m || !app || url.searchParams.get('appNamespace') !== 'argocd')
          return grpcError(res, 403, 7, 'permission denied');
        const repoURL = `${gitUrl}/${app.repo}.git`;
        const rest = m[2] ?? '';
        try {
          if (rest === '') {
            const source = {
              repoURL,
              path: app.path,
              targetRevision: app.targetRevision ?? 'main',
              ...(app.valueFiles ? { helm: { valueFiles: app.valueFiles } } : {}),
            };
            return send(res, 200, {
              metadata: {
                name,
                namespace: 'argocd',
                uid: `uid-${name}`,
                ...(app.annotations ? { annotations: app.annotations } : {}),
              },
              spec: app.sources
                ? {
                    sources: app.sources.map((x) => ({
                      repoURL: `${gitUrl}/${x.repo}.git`,
                      path: x.path,
                      targetRevision: 'main',
                    })),
                    destination: { namespace: 'x' },
                  }
                : { source, destination: { namespace: 'x' } },
              status: {
                sync: app.sources
                  ? { status: 'Synced', revisions: await Promise.all(app.sources.map((x) => resolve(x.repo, 'main'))) }
                  : { status: 'Synced', revision: await resolve(app.repo, 'main') },
              },
            });
          }
          if (rest === '/manifests' && app.sources) {
            // Argo CD's multi-source form: sourcePositions (1-based) and revisions side by side.
            const positions = url.searchParams.getAll('sourcePositions').map(Number);
            const revisions = url.searchParams.getAll('revisions');
            multiSourceAsks.push(positions.map((p, i) => `${p}:${revisions[i]}`).join(' '));
            try {
              const all: string[] = [];
              for (const [i, x] of app.sources.entries()) {
                const at = positions.indexOf(i + 1);
                all.push(...(await manifests({ repo: x.repo, path: x.path }, at >= 0 ? revisions[at]! : 'main')));
              }
              return send(res, 200, { manifests: all });
            } catch (err) {
              return grpcError(res, 500, 2, (err as Error).message);
            }
          }
          if (rest === '/manifests') {
            const revision = url.searchParams.get('revision') ?? 'main';
            try {
              return send(res, 200, {
                manifests: await manifests(app, revision),
                revision: await resolve(app.repo, revision),
              });
            } catch (err) {
              return grpcError(res, 500, 2, (err as Error).message);
            }
          }
          const meta = /^\/revisions\/([^/]+)\/metadata$/.exec(rest);
          if (meta) {
            const index = url.searchParams.get('sourceIndex');
            const repo = app.sources && index !== null ? app.sources[Number(index)]!.repo : app.repo;
            const [author, date, message] = (
              await git(repo, 'show', '-s', '--format=%an <%ae>%x00%aI%x00%B', decodeURIComponent(meta[1]!))
            ).split('\u0000');
            return send(res, 200, { author, date, message: message!.trim(), tags: [] });
          }
          if (rest === '/managed-resources') {
            const generated = app.sources
              ? (await Promise.all(app.sources.map((x) => manifests({ repo: x.repo, path: x.path }, 'main')))).flat()
              : await manifests(app, 'main');
            const items = generated.map((text) => {
              const obj = JSON.parse(text) as {
                apiVersion: string;
                kind: string;
                metadata: { name: string; namespace?: string };
              };
              const namespace = obj.metadata.namespace ?? app.destinationNamespace ?? '';
              const key = `${obj.kind}/${namespace}/${obj.metadata.name}`;
              const state = live.get(key);
              return {
                group: obj.apiVersion.includes('/') ? obj.apiVersion.split('/')[0] : '',
                kind: obj.kind,
                namespace,
                name: obj.metadata.name,
                targetState: text,
                normalizedLiveState: state ? JSON.stringify(state) : 'null',
                modified: state === undefined || JSON.stringify(state) !== text,
              };
            });
            return send(res, 200, { items });
          }
          return grpcError(res, 404, 5, 'not found');
        } catch (err) {
          return grpcError(res, 500, 2, (err as Error).message);
        }
      })();
    });
  });
  await new Promise<void>((ok) => server.listen(0, '127.0.0.1', ok));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    get logins() {
      return logins;
    },
    /** Argo CD forgets every session (as after a restart with a new signing key). */
    forgetSessions: () => tokens.clear(),
    multiSourceAsks,
    setLive: (key: string, obj: Json) => live.set(key, obj),
    stop: () =>
      new Promise<void>((ok) => {
        server.closeAllConnections();
        server.close(() => ok());
      }),
  };
}

let gitUrl = '';

t.setTimeout(240_000);
if (missing && process.env.CI === 'true') t.fail(`a real kube-apiserver is needed and CI=true: ${missing}`);

const dir = await mkdtemp(join(tmpdir(), 'hrt-source-server-'));
t.teardown(() => rm(dir, { recursive: true, force: true }));
const gitRoot = join(dir, 'git');
const gitServer = await startGitServer(gitRoot, '127.0.0.1', {
  credentials: { username: GIT_USER, password: GIT_PASSWORD },
});
let gitStopped = false;
t.teardown(() => (gitStopped ? undefined : gitServer.stop()));
gitUrl = gitServer.url;
const monorepo = await gitServer.repository('monorepo');
const other = await gitServer.repository('other');
await other.commit({ 'apps/o/cm.yaml': configMapYaml('info') }, 'other: first');

const c1 = await monorepo.commit(
  {
    'apps/a/deploy.yaml': deploymentYaml(2, 'registry.example.test/web:1.0'),
    'apps/b/config.yaml': configMapYaml('info'),
  },
  'apps a and b',
  { author: ALICE },
);

const argo = await startArgoCdApiDouble({
  gitRoot,
  apps: {
    a: { repo: 'monorepo', path: 'apps/a' },
    b: { repo: 'monorepo', path: './apps/b/' },
    multi: {
      repo: 'monorepo',
      path: 'apps/b',
      sources: [
        { repo: 'monorepo', path: 'apps/b' },
        { repo: 'monorepo', path: 'apps/m2' },
      ],
    },
    o: { repo: 'other', path: 'apps/o' },
    c: { repo: 'monorepo', path: 'apps/c', destinationNamespace: 'team-c' },
    // Helm value files shared outside the path (one remote, one leaving nothing of the repository).
    h: {
      repo: 'monorepo',
      path: 'apps/h',
      valueFiles: ['../../values/h-prod.yaml', 'https://values.example.test/h.yaml'],
    },
    // Argo CD's manifest-generate-paths annotation: its path and a base from the repository's root.
    k: {
      repo: 'monorepo',
      path: 'apps/k',
      annotations: { 'argocd.argoproj.io/manifest-generate-paths': '.;/bases/web' },
    },
    // A Kustomize overlay whose base is outside its path, and builds on a shared base in turn.
    ko: { repo: 'monorepo', path: 'apps/ko/overlays/prod' },
  },
});
t.teardown(() => argo.stop());

// Argo CD's repository Secrets: a credential template for the whole Git server, and the second
// repository's own Secret with a wrong password (the exact match wins over the template).
const secret = (name: string, type: string, url: string, password: string) => ({
  apiVersion: 'v1',
  kind: 'Secret',
  metadata: { name, namespace: 'argocd', labels: { [SECRET_TYPE_LABEL]: type } },
  data: Object.fromEntries(
    Object.entries({ url, username: GIT_USER, password }).map(([k, v]) => [k, Buffer.from(v).toString('base64')]),
  ),
});
const secrets = [
  secret('git-server-creds', 'repo-creds', `${gitServer.url}/`, GIT_PASSWORD),
  secret('repo-other', 'repository', other.url, WRONG_GIT_PASSWORD),
];
let credentials: CredentialSource;
if (missing) {
  t.comment(`repository Secrets handed to the credential matching directly: ${missing}`);
  const parsed = parseRepoSecrets({ items: secrets });
  credentials = async (url) => matchCredentials(parsed, url);
} else {
  const { plane, kubectl } = await startCustomerCluster(t, toolchainBin!, join(dir, 'kube'));
  const file = join(dir, 'secrets.json');
  await writeFile(
    file,
    JSON.stringify({
      apiVersion: 'v1',
      kind: 'List',
      items: [{ apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'argocd' } }, ...secrets],
    }),
  );
  const applied = await kubectl(['apply', '-f', file]);
  if (applied.code !== 0) throw new Error(`precondition: kubectl apply: ${applied.output}`);
  credentials = argoCdRepoCredentials(agentKubeTransport(plane.kubeconfigFile), 'argocd');
}

// Every log line of the Source Server, to look for passwords in.
const logLines: string[] = [];
const logger = pino(
  { level: 'debug' },
  new Writable({
    write(chunk: Buffer, _enc, done) {
      logLines.push(chunk.toString());
      done();
    },
  }),
);

async function startSourceServer(argoCdUrl: string) {
  const service = new SourceService({
    argo: new ArgoCdClient({
      serverUrl: argoCdUrl,
      username: 'source-server',
      password: () => ARGO_PASSWORD,
      timeoutMs: 10_000,
    }),
    git: new GitMirrors({
      dir: join(dir, `mirrors-${Math.random().toString(36).slice(2)}`),
      credentials,
      timeoutMs: 60_000,
      refreshSeconds: 0,
    }),
    cacheMaxBytes: 8 * 1024 * 1024,
    log: logger,
  });
  const app = await buildSourceServer({ service, logger });
  await app.listen({ port: 0, host: '127.0.0.1' });
  t.teardown(() => app.close());
  const base = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
  return async <T = Json>(path: string): Promise<{ status: number; body: T; headers: Headers }> => {
    const res = await fetch(`${base}${path}`);
    return { status: res.status, body: (await res.json()) as T, headers: res.headers };
  };
}

const get = await startSourceServer(argo.url);
const change = async (app: string, revision?: string) => {
  const r = await get<ApplicationChange>(
    `/v1/applications/argocd/${app}/change${revision ? `?revision=${revision}` : ''}`,
  );
  if (r.status !== 200) throw new Error(`GET change of ${app}: HTTP ${r.status}: ${JSON.stringify(r.body)}`);
  return r.body;
};

t.test('the first commit: both applications changed there, every resource added', async (t) => {
  const a = await change('a');
  t.equal(a.revision, c1, 'computed at the head of main (the targetRevision)');
  t.equal(a.changeRevision, c1, "A's change revision is the first commit");
  t.notOk('previousChangeRevision' in a, 'no previous change revision');
  t.same(
    a.resources.map((r) => [r.kind, r.name, r.action]),
    [['Deployment', 'a-web', 'added']],
    'its Deployment, added',
  );
  t.same(
    a.images.map((i) => [i.container, i.before, i.after]),
    [
      ['web', undefined, 'registry.example.test/web:1.0'],
      ['metrics', undefined, 'registry.example.test/exporter:2.0'],
    ],
    'both images added',
  );
  const b = await change('b');
  t.equal(b.changeRevision, c1, "B's change revision is the first commit (path './apps/b/' as Argo CD allows it)");
});

let c2 = '';
t.test('a commit to apps/a moves A’s change revision only, with its author and message', async (t) => {
  c2 = await monorepo.commit(
    { 'apps/a/deploy.yaml': deploymentYaml(3, 'registry.example.test/web:1.0') },
    'scale a to 3',
    {
      author: BOB,
    },
  );
  const a = await change('a', c2);
  t.equal(a.changeRevision, c2, "A's change revision is the new commit");
  t.equal(a.previousChangeRevision, c1, 'the one before it is the first commit');
  t.match(
    a.commit,
    { revision: c2, author: 'Bob Example <bob@example.test>', message: 'scale a to 3' },
    'its author and message',
  );
  t.same(
    a.resources.map((r) => [r.kind, r.name, r.action, r.fields]),
    [['Deployment', 'a-web', 'modified', ['spec.replicas']]],
    'one field of one resource changed: spec.replicas',
  );
  t.same(a.images, [], 'no image moved');
  const b = await change('b', c2);
  t.equal(b.revision, c2, 'B is asked at the new head of the branch');
  t.equal(b.changeRevision, c1, "B's change revision stays the first commit");
  t.match(
    b.commit,
    { author: 'Alice Example <alice@example.test>', message: 'apps a and b' },
    "B's commit is still Alice's",
  );
});

let c3 = '';
t.test('an image-only commit: the image before → after and exactly one field', async (t) => {
  c3 = await monorepo.commit({ 'apps/a/deploy.yaml': deploymentYaml(3, 'registry.example.test/web:1.1') }, 'web 1.1', {
    author: BOB,
  });
  const a = await change('a', c3);
  t.equal(a.changeRevision, c3, 'the image commit is the change revision');
  t.same(a.resources.length, 1, 'one resource changed');
  t.same(
    a.resources[0]!.fields,
    ['spec.template.spec.containers[name=web].image'],
    'exactly the web container’s image',
  );
  t.same(
    a.images,
    [
      {
        resource: 'Deployment/team-a/a-web',
        container: 'web',
        before: 'registry.example.test/web:1.0',
        after: 'registry.example.test/web:1.1',
      },
    ],
    'web moved from 1.0 to 1.1; the metrics image is not listed',
  );
  t.equal((await change('b', c3)).changeRevision, c1, "B's change revision is still the first commit");

  const diff = await get<ApplicationDiff>(`/v1/applications/argocd/a/diff?revision=${c3}`);
  t.equal(diff.status, 200, 'the commit diff answers 200');
  t.equal(diff.body.base, c2, 'against the change revision before it');
  t.same(diff.body.resources[0]?.fields, ['spec.template.spec.containers[name=web].image'], 'the one field');
  const containers = (r: Json | null) =>
    ((r?.spec as Json).template as { spec: { containers: Array<{ image: string }> } }).spec.containers[0]!.image;
  t.equal(
    containers(diff.body.resources[0]!.before),
    'registry.example.test/web:1.0',
    'before: the whole object at 1.0',
  );
  t.equal(containers(diff.body.resources[0]!.after), 'registry.example.test/web:1.1', 'after: the whole object at 1.1');

  const untouched = await get<ApplicationDiff>(`/v1/applications/argocd/b/diff?revision=${c3}`);
  t.same(untouched.body.resources, [], 'the same commit changed nothing of B');
});

t.test('Git against the cluster, from Argo CD’s managed resources', async (t) => {
  const target = JSON.parse(
    JSON.stringify(parseAllDocuments(deploymentYaml(3, 'registry.example.test/web:1.1'))[0]!.toJS()),
  ) as { spec: { template: { spec: { containers: Array<{ image: string }> } } }; status?: Json };
  target.spec.template.spec.containers[0]!.image = 'registry.example.test/web:1.0';
  target.status = { readyReplicas: 3 };
  argo.setLive('Deployment/team-a/a-web', target);
  const diff = await get<ApplicationDiff>('/v1/applications/argocd/a/diff');
  t.equal(diff.status, 200, 'answers 200');
  t.equal(diff.body.base, 'live', 'base: the cluster');
  t.same(
    diff.body.resources.map((r) => [r.name, r.action, r.fields]),
    [['a-web', 'modified', ['spec.template.spec.containers[name=web].image']]],
    'the live image differs from Git; status is not a difference',
  );
});

t.test(
  'a preview: what a sync to a revision changes in what runs, and what the Git change does not cause',
  async (t) => {
    // Live (the test before): a-web runs 3 replicas of web:1.0 while Git (main, synced) says web:1.1.
    const back = await get<ApplicationPreview>(`/v1/applications/argocd/a/preview?revision=${c1}`);
    t.equal(back.status, 200, `answers 200: ${JSON.stringify(back.body).slice(0, 300)}`);
    t.equal(back.body.revision, c1, 'at the revision asked');
    t.equal(back.body.current, c3, 'against the synced revision');
    t.same(
      back.body.resources.map((r) => [r.kind, r.namespace, r.name, r.action, r.fields, r.notFromChange]),
      [['Deployment', 'team-a', 'a-web', 'modified', ['spec.replicas'], undefined]],
      'the first commit: 2 replicas, from the Git change; the image it names already runs (status is no change)',
    );
    const head = await get<ApplicationPreview>(`/v1/applications/argocd/a/preview?revision=${c3}`);
    t.same(
      head.body.resources.map((r) => [r.name, r.fields, r.notFromChange]),
      [['a-web', ['spec.template.spec.containers[name=web].image'], ['spec.template.spec.containers[name=web].image']]],
      'at the synced revision: the live image differs, and no Git change causes it (drift)',
    );
    const missingRevision = await get<{ error: { code: string; field: string } }>('/v1/applications/argocd/a/preview');
    t.equal(missingRevision.status, 400, 'without a revision: 400');
    t.equal(missingRevision.body.error.field, 'revision', 'naming the field');
  },
);

t.test('a commit Argo CD cannot render: its message, on /change and /diff', async (t) => {
  const broken = await monorepo.commit({ 'apps/a/deploy.yaml': 'apiVersion: apps/v1\nkind: [unclosed\n' }, 'break a', {
    author: ALICE,
  });
  const a = await change('a', broken);
  t.equal(a.changeRevision, broken, 'the broken commit is the change revision');
  t.match(a.error, /Manifest generation error/, "error is Argo CD's message");
  t.match(
    a.commit,
    { author: 'Alice Example <alice@example.test>', message: 'break a' },
    'the commit is still described',
  );
  const diff = await get<{ error: { code: string; message: string } }>(
    `/v1/applications/argocd/a/diff?revision=${broken}`,
  );
  t.equal(diff.status, 422, '/diff answers 422');
  t.equal(diff.body.error.code, 'MANIFEST_GENERATION_FAILED', 'naming the failure');
  t.match(diff.body.error.message, /Manifest generation error/, "with Argo CD's message");
});

t.test('resources whose manifests name no namespace are named where Argo CD put them', async (t) => {
  const yaml = (image: string) =>
    deploymentYaml(1, image).replace('  name: a-web\n  namespace: team-a\n', '  name: c-web\n');
  const first = await monorepo.commit({ 'apps/c/deploy.yaml': yaml('registry.example.test/web:1.0') }, 'c: first', {
    author: ALICE,
  });
  const second = await monorepo.commit({ 'apps/c/deploy.yaml': yaml('registry.example.test/web:2.0') }, 'c: web 2.0', {
    author: ALICE,
  });
  const c = await change('c', second);
  t.equal(c.previousChangeRevision, first, 'the change before it is the first commit to apps/c');
  t.same(
    c.resources.map((r) => [r.kind, r.namespace, r.name]),
    [['Deployment', 'team-c', 'c-web']],
    "the Deployment is named in the application's destination namespace, from Argo CD's managed resources",
  );
  t.same(
    c.images.map((i) => [i.resource, i.before, i.after]),
    [['Deployment/team-c/c-web', 'registry.example.test/web:1.0', 'registry.example.test/web:2.0']],
    'and so is the workload whose image moved',
  );
});

t.test('paths outside the source path: Helm value files and the manifest-generate-paths annotation', async (t) => {
  const first = await monorepo.commit(
    {
      'apps/h/cm.yaml': configMapYaml('info').replace('b-config', 'h-config'),
      'values/h-prod.yaml': 'replicas: 2\n',
      'values/other-prod.yaml': 'replicas: 1\n',
      'apps/k/cm.yaml': configMapYaml('info').replace('b-config', 'k-config'),
      'bases/web/cm.yaml': configMapYaml('info').replace('b-config', 'web-base'),
    },
    'h and k',
    { author: ALICE },
  );
  t.equal((await change('h', first)).changeRevision, first, "H's first commit");
  t.equal((await change('k', first)).changeRevision, first, "K's first commit");

  const values = await monorepo.commit({ 'values/h-prod.yaml': 'replicas: 5\n' }, 'h: 5 replicas in prod', {
    author: BOB,
  });
  const h = await change('h', values);
  t.equal(h.changeRevision, values, "a commit to H's value file outside apps/h moves H's change revision");
  t.equal(h.previousChangeRevision, first, 'the one before it is the first commit');
  t.match(
    h.commit,
    { author: 'Bob Example <bob@example.test>', message: 'h: 5 replicas in prod' },
    "with Bob's commit",
  );
  t.same(
    h.resources.map((r) => [r.kind, r.name, r.action, r.fields]),
    [['ConfigMap', 'values', 'modified', ['data.replicas']]],
    'what the value changed in the manifests Argo CD generated',
  );
  t.equal((await change('k', values)).changeRevision, first, "K's change revision stays");
  t.equal((await change('b', values)).changeRevision, c1, "B's change revision stays");

  const base = await monorepo.commit(
    { 'bases/web/cm.yaml': configMapYaml('debug').replace('b-config', 'web-base') },
    'web base: debug',
    { author: ALICE },
  );
  t.equal((await change('k', base)).changeRevision, base, "a commit to a path K's annotation names moves K's");
  t.equal((await change('h', base)).changeRevision, values, "H's stays at its value file's commit");

  const elsewhere = await monorepo.commit({ 'values/other-prod.yaml': 'replicas: 3\n' }, 'another value file', {
    author: ALICE,
  });
  t.equal((await change('h', elsewhere)).changeRevision, values, 'a value file H does not name moves nothing of H');
  t.equal((await change('k', elsewhere)).changeRevision, base, 'nor of K');
});

t.test('Kustomize: the bases an overlay builds on move its change revision, read from the Git server', async (t) => {
  const kBefore = (await change('k')).changeRevision;
  const first = await monorepo.commit(
    {
      'apps/ko/overlays/prod/kustomization.yaml': 'resources:\n  - ../../base\n  - cm.yaml\n',
      'apps/ko/overlays/prod/cm.yaml': configMapYaml('info').replace('b-config', 'ko-config'),
      'apps/ko/base/kustomization.yaml': 'resources:\n  - deploy.yaml\n  - ../../../bases/shared\n',
      'apps/ko/base/deploy.yaml': deploymentYaml(1, 'registry.example.test/ko:1.0'),
      'bases/shared/kustomization.yaml': 'resources: [cm.yaml]\n',
      'bases/shared/cm.yaml': configMapYaml('info').replace('b-config', 'shared-config'),
      'bases/unused/cm.yaml': configMapYaml('info').replace('b-config', 'unused-config'),
    },
    'ko: overlay and base',
    { author: ALICE },
  );
  t.equal((await change('ko', first)).changeRevision, first, "KO's first commit");

  const base = await monorepo.commit(
    { 'apps/ko/base/deploy.yaml': deploymentYaml(1, 'registry.example.test/ko:2.0') },
    'ko base: web 2.0',
    { author: BOB },
  );
  const ko = await change('ko', base);
  t.equal(ko.changeRevision, base, "a commit to the overlay's base (outside its path) moves its change revision");
  t.equal(ko.previousChangeRevision, first, 'the one before it is the first commit');
  t.match(ko.commit, { author: 'Bob Example <bob@example.test>', message: 'ko base: web 2.0' }, "with Bob's commit");

  const shared = await monorepo.commit(
    { 'bases/shared/cm.yaml': configMapYaml('debug').replace('b-config', 'shared-config') },
    'shared base: debug',
    { author: ALICE },
  );
  t.equal((await change('ko', shared)).changeRevision, shared, 'so does a commit to the base its base builds on');
  const diff = await get<ApplicationDiff>(`/v1/applications/argocd/ko/diff?revision=${shared}`);
  t.equal(diff.status, 200, 'the commit diff answers');
  t.equal(diff.body.base, base, 'against the change revision before it (the base commit, not the overlay’s last)');

  const unused = await monorepo.commit(
    { 'bases/unused/cm.yaml': configMapYaml('debug').replace('b-config', 'unused-config') },
    'a base KO does not use',
    { author: ALICE },
  );
  t.equal((await change('ko', unused)).changeRevision, shared, 'a base it does not name moves nothing of KO');
  t.equal(
    (await change('k', shared)).changeRevision,
    kBefore,
    "K's annotation says what K follows: its kustomization is not read",
  );
});

t.test(
  'a multi-source Application: the newest change revision of its sources, what it changed, its commit diff',
  async (t) => {
    const bBefore = (await change('b')).changeRevision!;
    const m1 = await monorepo.commit(
      { 'apps/m2/cm.yaml': configMapYaml('info').replace('b-config', 'm2-config') },
      'm2: first',
      { author: ALICE },
    );
    const first = await change('multi');
    t.equal(first.unsupported, undefined, 'a multi-source Application is followed');
    t.equal(first.changeRevision, m1, "the second source's commit is the newest change of the application");
    t.equal(first.previousChangeRevision, undefined, 'the first commit of that source path: none before it');
    t.match(
      first.commit,
      { author: 'Alice Example <alice@example.test>', message: 'm2: first' },
      "with Alice's commit",
    );
    t.same(
      first.resources.map((r) => [r.kind, r.name, r.action]).sort(),
      [
        ['ConfigMap', 'b-config', 'added'],
        ['ConfigMap', 'm2-config', 'added'],
      ],
      'no change before it: every resource of every source added, as for a first deployment',
    );

    const m2 = await monorepo.commit(
      { 'apps/m2/cm.yaml': configMapYaml('debug').replace('b-config', 'm2-config') },
      'm2: debug',
      { author: BOB },
    );
    argo.multiSourceAsks.length = 0;
    const second = await change('multi', m2);
    t.equal(second.revision, m2, "computed at the revision asked (the first source's synced revision)");
    t.equal(second.changeRevision, m2, "Bob's commit to the second source");
    t.equal(second.previousChangeRevision, m1, 'after the first');
    t.match(
      second.commit,
      { author: 'Bob Example <bob@example.test>', message: 'm2: debug' },
      "Argo CD's metadata of that source's commit",
    );
    t.same(
      second.resources.map((r) => [r.kind, r.name, r.action, r.fields]),
      [['ConfigMap', 'm2-config', 'modified', ['data.LOG_LEVEL']]],
      'one field of one resource',
    );
    t.same(
      argo.multiSourceAsks,
      [`1:${bBefore} 2:${m2}`],
      'Argo CD asked for the manifests with every source pinned, the first at its change revision (those before: cached from the first answer)',
    );

    const b2 = await monorepo.commit({ 'apps/b/config.yaml': configMapYaml('warn') }, 'b: warn', { author: ALICE });
    const third = await change('multi', b2);
    t.equal(third.changeRevision, b2, 'a commit to the first source is now the newest');
    t.equal(third.previousChangeRevision, bBefore, "after that path's last commit");
    t.same(
      third.resources.map((r) => [r.kind, r.name, r.fields]),
      [['ConfigMap', 'b-config', ['data.LOG_LEVEL']]],
      'the second source held at its change revision: only b-config changed',
    );
    const elsewhere = await monorepo.commit(
      { 'apps/a/other.yaml': configMapYaml('x').replace('b-config', 'a-other') },
      'a: other',
      {
        author: ALICE,
      },
    );
    t.equal((await change('multi', elsewhere)).changeRevision, b2, 'a commit to neither source moves nothing');

    const diff = await get<ApplicationDiff>(`/v1/applications/argocd/multi/diff?revision=${m2}`);
    t.equal(
      diff.status,
      200,
      `the commit diff of the second source's commit answers (${JSON.stringify(diff.body).slice(0, 200)})`,
    );
    t.equal(diff.body.base, m1, 'against that source’s change revision before it');
    t.same(
      diff.body.resources.map((r) => [r.kind, r.name, r.action]),
      [['ConfigMap', 'm2-config', 'modified']],
      'both sides of what it changed',
    );
    const bDiff = await get<ApplicationDiff>(`/v1/applications/argocd/multi/diff?revision=${b2}`);
    t.equal(bDiff.body.base, bBefore, 'a commit of the first source: against its own previous change');
    t.same(
      bDiff.body.resources.map((r) => r.name),
      ['b-config'],
      'and only what it changed',
    );

    const live = await get<ApplicationDiff>('/v1/applications/argocd/multi/diff');
    t.equal(
      live.status,
      200,
      `its diff against the cluster works: Argo CD compares every source (${JSON.stringify(live.body).slice(0, 300)})`,
    );
    t.equal(live.body.base, 'live', 'Git against the live objects');
    t.ok(
      live.body.resources.some((r) => r.kind === 'ConfigMap' && r.name === 'b-config'),
      'with the resources Argo CD generated from its sources',
    );

    // A preview: what runs is main of both sources (b-config at warn, m2-config at debug).
    for (const [name, level] of [
      ['b-config', 'warn'],
      ['m2-config', 'debug'],
    ] as const)
      argo.setLive(`ConfigMap/team-b/${name}`, {
        apiVersion: 'v1',
        kind: 'ConfigMap',
        metadata: { name, namespace: 'team-b' },
        data: { LOG_LEVEL: level },
      });
    argo.multiSourceAsks.length = 0;
    const preview = await get<ApplicationPreview>(`/v1/applications/argocd/multi/preview?revision=${m1}`);
    t.equal(preview.status, 200, `a multi-source preview answers 200: ${JSON.stringify(preview.body).slice(0, 300)}`);
    t.equal(preview.body.revision, m1, 'at the second source’s commit asked');
    t.equal(preview.body.current, elsewhere, 'against that source’s synced revision');
    t.same(
      preview.body.resources.map((r) => [r.kind, r.namespace, r.name, r.action, r.fields, r.notFromChange]),
      [['ConfigMap', 'team-b', 'm2-config', 'modified', ['data.LOG_LEVEL'], undefined]],
      'only the moved source’s ConfigMap changes, from the Git change; the first source held at its synced revision (b-config stays at warn)',
    );
    t.ok(
      argo.multiSourceAsks.includes(`1:${elsewhere} 2:${elsewhere}`) &&
        argo.multiSourceAsks.every((ask) => ask.startsWith(`1:${elsewhere} 2:`)),
      `Argo CD asked for both sources pinned, the held one at its synced revision (the commit's side was cached by the diff above): ${argo.multiSourceAsks.join(', ')}`,
    );
    argo.setLive('ConfigMap/team-b/b-config', {
      apiVersion: 'v1',
      kind: 'ConfigMap',
      metadata: { name: 'b-config', namespace: 'team-b' },
      data: { LOG_LEVEL: 'trace' },
    });
    const drifted = await get<ApplicationPreview>(`/v1/applications/argocd/multi/preview?revision=${m1}`);
    t.same(
      drifted.body.resources.map((r) => [r.name, r.fields, r.notFromChange]).sort(),
      [
        ['b-config', ['data.LOG_LEVEL'], ['data.LOG_LEVEL']],
        ['m2-config', ['data.LOG_LEVEL'], undefined],
      ],
      'a hand edit of the held source’s ConfigMap: listed as not caused by the change',
    );
  },
);

t.test('unknown Applications', async (t) => {
  const none = await get<{ error: { code: string; message: string } }>('/v1/applications/argocd/nope/change');
  t.equal(none.status, 404, 'an Application Argo CD does not know is 404');
  t.equal(none.body.error.code, 'APPLICATION_NOT_FOUND', 'APPLICATION_NOT_FOUND');
  t.match(none.body.error.message, /argocd\/nope/, 'naming it');
});

t.test('bad input is a 400 naming the field', async (t) => {
  for (const [path, field] of [
    ['/v1/applications/Bad_NS/a/change', 'namespace'],
    ['/v1/applications/argocd/a%20b/change', 'name'],
    ['/v1/applications/argocd/a/change?revision=--upload-pack%3Dtouch%20x', 'revision'],
    ['/v1/applications/argocd/a/diff?revision=main..HEAD', 'revision'],
    ['/v1/applications/argocd/a/change?rev=main', 'rev'],
  ] as const) {
    const r = await get<{ error: { code: string; field: string; requestId: string } }>(path);
    t.equal(r.status, 400, `${path}: 400`);
    t.match(r.body.error, { code: 'VALIDATION_FAILED', field }, `${path}: names '${field}'`);
    t.ok(r.body.error.requestId, `${path}: carries the request id`);
  }
  const unknown = await get<{ error: { code: string; field: string } }>(
    `/v1/applications/argocd/a/change?revision=${'0'.repeat(40)}`,
  );
  t.equal(unknown.status, 404, 'a commit the repository does not have: 404');
  t.match(unknown.body.error, { code: 'REVISION_NOT_FOUND', field: 'revision' }, 'REVISION_NOT_FOUND');
});

t.test('a session Argo CD forgot is renewed by one login', async (t) => {
  const before = argo.logins;
  argo.forgetSessions();
  t.equal((await change('b', c3)).changeRevision, c1, 'the request succeeds');
  t.equal(argo.logins, before + 1, 'after exactly one new login');
});

t.test('a wrong Git password: a clear 502, and no password in the log', async (t) => {
  const r = await get<{ error: { code: string; message: string } }>('/v1/applications/argocd/o/change');
  t.equal(r.status, 502, '502');
  t.equal(r.body.error.code, 'GIT_AUTHENTICATION_FAILED', 'GIT_AUTHENTICATION_FAILED');
  t.match(r.body.error.message, /refused the credentials/, 'says the Git server refused the credentials');
  t.match(r.body.error.message, /other\.git/, 'names the repository');
  t.notOk(r.body.error.message.includes(WRONG_GIT_PASSWORD), 'the answer does not carry the password');
  const log = logLines.join('');
  t.ok(log.includes('refused the credentials'), 'the refusal is logged');
  for (const [what, pw] of [
    ['wrong Git', WRONG_GIT_PASSWORD],
    ['Git', GIT_PASSWORD],
    ['Argo CD', ARGO_PASSWORD],
  ] as const)
    t.notOk(log.includes(pw), `the ${what} password is in no log line`);
});

t.test('Argo CD down: 503 with Retry-After', async (t) => {
  const closed = http.createServer();
  await new Promise<void>((ok) => closed.listen(0, '127.0.0.1', ok));
  const port = (closed.address() as AddressInfo).port;
  await new Promise<void>((ok) => closed.close(() => ok()));
  const down = await startSourceServer(`http://127.0.0.1:${port}`);
  for (const route of ['change', 'diff'])
    await t.test(route, async (t) => {
      const r = await down<{ error: { code: string; message: string } }>(`/v1/applications/argocd/a/${route}`);
      t.equal(r.status, 503, '503');
      t.equal(r.body.error.code, 'ARGOCD_UNAVAILABLE', 'ARGOCD_UNAVAILABLE');
      t.ok(Number(r.headers.get('retry-after')) > 0, 'with Retry-After');
    });
});

t.test('the Git server down: 503 with Retry-After', async (t) => {
  await gitServer.stop();
  gitStopped = true;
  const r = await get<{ error: { code: string } }>('/v1/applications/argocd/a/change');
  t.equal(r.status, 503, '503 (the branch head cannot be fetched)');
  t.equal(r.body.error.code, 'GIT_UNAVAILABLE', 'GIT_UNAVAILABLE');
  t.ok(Number(r.headers.get('retry-after')) > 0, 'with Retry-After');
  const cached = await get<ApplicationChange>(`/v1/applications/argocd/b/change?revision=${c3}`);
  t.equal(cached.status, 200, 'a commit the mirror holds is still answered');
  t.equal(cached.body.changeRevision, c1, 'from the mirror');
});
