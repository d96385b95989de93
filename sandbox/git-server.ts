/**
 * A Git server for the sandbox and the e2e tier: Git's own smart HTTP server (`git http-backend`,
 * run as CGI for each request, as web servers run it) over the repositories of one folder,
 * listening on one address. The tenants' Argo CD clones from it as from any Git host over HTTP.
 *
 * Without credentials it is read-only (anonymous pushes are refused by http-backend itself). With
 * `credentials` every request needs them (HTTP Basic, 401 with a challenge otherwise, as hosted
 * Git providers answer for a private repository), http-backend is told the user (`REMOTE_USER`),
 * and pushes are accepted: `repository(name).commit` then pushes over HTTP as a developer would.
 *
 * `repository(name)` makes a repository there and commits files to it.
 */
import { execFile, spawn } from 'node:child_process';
import { timingSafeEqual } from 'node:crypto';
import { mkdir, writeFile } from 'node:fs/promises';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { dirname, join } from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);

export interface CommitAuthor {
  name: string;
  email: string;
}

export interface CommitOptions {
  /** The commit's author (default `sandbox <sandbox@example.test>`). */
  author?: CommitAuthor;
  /** Paths to delete in the same commit. */
  remove?: string[];
}

export interface GitRepository {
  /** Clone URL, `http://<host>:<port>/<name>.git`. */
  url: string;
  /** Writes the files, commits them, pushes the commit and returns its SHA. */
  commit(files: Record<string, string>, message: string, options?: CommitOptions): Promise<string>;
}

export interface GitCredentials {
  username: string;
  password: string;
}

export interface GitServerOptions {
  /** Require these (HTTP Basic) for every request, and accept pushes from whoever presents them. */
  credentials?: GitCredentials;
}

export interface GitServer {
  url: string;
  repository(name: string): Promise<GitRepository>;
  /** Requests answered 401 for missing or wrong credentials. */
  readonly refused: number;
  stop(): Promise<void>;
}

function sameText(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}

/** The user of a request's Basic credentials when they are `credentials`, else undefined. */
function authenticatedUser(header: string | undefined, credentials: GitCredentials): string | undefined {
  const m = /^Basic ([A-Za-z0-9+/=]+)$/.exec(header ?? '');
  if (!m) return undefined;
  const text = Buffer.from(m[1]!, 'base64').toString('utf8');
  const at = text.indexOf(':');
  if (at < 0) return undefined;
  const user = text.slice(0, at);
  return sameText(user, credentials.username) && sameText(text.slice(at + 1), credentials.password) ? user : undefined;
}

/**
 * A git credential helper that answers from the environment (GIT_SERVER_USERNAME and
 * GIT_SERVER_PASSWORD), so that the password is in no command line and no file.
 */
const ENV_CREDENTIAL_HELPER =
  '!f() { test "$1" = get && printf "username=%s\\npassword=%s\\n" "$GIT_SERVER_USERNAME" "$GIT_SERVER_PASSWORD"; }; f';

/** Starts the server on `host` (a free port) over `root` (created when missing). */
export async function startGitServer(root: string, host: string, options: GitServerOptions = {}): Promise<GitServer> {
  await mkdir(root, { recursive: true });
  const credentials = options.credentials;
  let refused = 0;
  const server = http.createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://git.invalid');
    // Repositories are `<name>.git` folders directly under root; nothing else is served.
    if (!/^\/[a-z0-9][a-z0-9-]*\.git\/(info\/refs|git-upload-pack|git-receive-pack|HEAD)$/.test(url.pathname)) {
      res.writeHead(404).end();
      return;
    }
    let user: string | undefined;
    if (credentials) {
      user = authenticatedUser(req.headers.authorization, credentials);
      if (user === undefined) {
        refused++;
        req.resume();
        res
          .writeHead(401, { 'www-authenticate': 'Basic realm="git"', 'content-type': 'text/plain' })
          .end('authentication required\n');
        return;
      }
    }
    const cgi = spawn('git', ['http-backend'], {
      env: {
        PATH: process.env.PATH ?? '/usr/bin:/bin',
        GIT_PROJECT_ROOT: root,
        GIT_HTTP_EXPORT_ALL: '1',
        PATH_INFO: url.pathname,
        QUERY_STRING: url.search.slice(1),
        REQUEST_METHOD: req.method ?? 'GET',
        CONTENT_TYPE: req.headers['content-type'] ?? '',
        REMOTE_ADDR: req.socket.remoteAddress ?? '',
        // An authenticated user may push (http-backend enables receive-pack when REMOTE_USER is set).
        ...(user !== undefined ? { REMOTE_USER: user } : {}),
        ...(req.headers['git-protocol'] ? { GIT_PROTOCOL: String(req.headers['git-protocol']) } : {}),
        ...(req.headers['content-encoding'] ? { HTTP_CONTENT_ENCODING: String(req.headers['content-encoding']) } : {}),
      },
      stdio: ['pipe', 'pipe', 'ignore'],
    });
    req.pipe(cgi.stdin);
    cgi.stdin.on('error', () => undefined);
    let head = Buffer.alloc(0);
    let headersDone = false;
    cgi.stdout.on('data', (chunk: Buffer) => {
      if (headersDone) {
        res.write(chunk);
        return;
      }
      head = Buffer.concat([head, chunk]);
      const end = head.indexOf('\r\n\r\n');
      if (end < 0) return;
      headersDone = true;
      let status = 200;
      for (const line of head.subarray(0, end).toString('latin1').split('\r\n')) {
        const at = line.indexOf(':');
        if (at < 0) continue;
        const name = line.slice(0, at).trim();
        const value = line.slice(at + 1).trim();
        if (name.toLowerCase() === 'status') status = Number.parseInt(value, 10) || 200;
        else res.setHeader(name, value);
      }
      res.writeHead(status);
      res.write(head.subarray(end + 4));
    });
    cgi.stdout.on('end', () => {
      if (!headersDone) res.writeHead(502);
      res.end();
    });
    cgi.on('error', () => {
      if (!res.headersSent) res.writeHead(500);
      res.end();
    });
  });
  await new Promise<void>((ok, fail) => {
    server.once('error', fail);
    server.listen(0, host, () => ok());
  });
  const { port } = server.address() as AddressInfo;
  const base = `http://${host.includes(':') ? `[${host}]` : host}:${port}`;
  return {
    url: base,
    get refused() {
      return refused;
    },
    async repository(name) {
      if (!/^[a-z0-9][a-z0-9-]*$/.test(name)) throw new Error(`repository name ${JSON.stringify(name)}`);
      const work = join(root, '.work', name);
      const bare = join(root, `${name}.git`);
      const env = {
        PATH: process.env.PATH ?? '/usr/bin:/bin',
        HOME: work,
        GIT_TERMINAL_PROMPT: '0',
        GIT_CONFIG_NOSYSTEM: '1',
        ...(credentials
          ? { GIT_SERVER_USERNAME: credentials.username, GIT_SERVER_PASSWORD: credentials.password }
          : {}),
      };
      const git = async (cwd: string, args: string[], author?: CommitAuthor) =>
        (
          await run(
            'git',
            [
              '-c',
              `user.name=${author?.name ?? 'sandbox'}`,
              '-c',
              `user.email=${author?.email ?? 'sandbox@example.test'}`,
              '-c',
              'commit.gpgsign=false',
              '-c',
              `credential.helper=${ENV_CREDENTIAL_HELPER}`,
              ...args,
            ],
            { cwd, timeout: 30_000, env },
          )
        ).stdout.trim();
      await mkdir(work, { recursive: true });
      await git(work, ['init', '-q', '-b', 'main']);
      await git(root, ['init', '-q', '--bare', '-b', 'main', bare]);
      const url = `${base}/${name}.git`;
      // With credentials, pushes go over HTTP through http-backend (receive-pack); without, to the folder.
      await git(work, ['remote', 'add', 'origin', credentials ? url : bare]);
      return {
        url,
        async commit(files, message, opts = {}) {
          // On top of what others pushed since (a GitOps Operator's promotions).
          if ((await git(work, ['ls-remote', 'origin', 'refs/heads/main'])).trim() !== '') {
            await git(work, ['fetch', '-q', 'origin', 'main']);
            await git(work, ['reset', '-q', '--hard', 'FETCH_HEAD']);
          }
          for (const [path, content] of Object.entries(files)) {
            await mkdir(dirname(join(work, path)), { recursive: true });
            await writeFile(join(work, path), content);
          }
          for (const path of opts.remove ?? []) await git(work, ['rm', '-q', '-r', '--', path]);
          await git(work, ['add', '-A']);
          await git(work, ['commit', '-q', '-m', message], opts.author);
          await git(work, ['push', '-q', 'origin', 'main']);
          return git(work, ['rev-parse', 'HEAD']);
        },
      };
    },
    stop: () =>
      new Promise<void>((ok) => {
        server.closeAllConnections();
        server.close(() => ok());
      }),
  };
}
