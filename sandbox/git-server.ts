/**
 * A Git server for the sandbox and the e2e tier: Git's own smart HTTP server (`git http-backend`,
 * run as CGI for each request, as web servers run it) over the repositories of one folder,
 * read-only (anonymous pushes are refused by http-backend itself), listening on one address.
 * The tenants' Argo CD clones from it as from any Git host over HTTP.
 *
 * `repository(name)` makes a repository there and commits files to it.
 */
import { execFile, spawn } from 'node:child_process';
import { mkdir, writeFile } from 'node:fs/promises';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { dirname, join } from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);

export interface GitRepository {
  /** Clone URL, `http://<host>:<port>/<name>.git`. */
  url: string;
  /** Writes the files, commits them (author `sandbox`) and returns the commit's SHA. */
  commit(files: Record<string, string>, message: string): Promise<string>;
}

export interface GitServer {
  url: string;
  repository(name: string): Promise<GitRepository>;
  stop(): Promise<void>;
}

/** Starts the server on `host` (a free port) over `root` (created when missing). */
export async function startGitServer(root: string, host: string): Promise<GitServer> {
  await mkdir(root, { recursive: true });
  const server = http.createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://git.invalid');
    // Repositories are `<name>.git` folders directly under root; nothing else is served.
    if (!/^\/[a-z0-9][a-z0-9-]*\.git\/(info\/refs|git-upload-pack|HEAD)$/.test(url.pathname)) {
      res.writeHead(404).end();
      return;
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
    async repository(name) {
      if (!/^[a-z0-9][a-z0-9-]*$/.test(name)) throw new Error(`repository name ${JSON.stringify(name)}`);
      const work = join(root, '.work', name);
      const bare = join(root, `${name}.git`);
      const git = async (cwd: string, ...args: string[]) =>
        (
          await run(
            'git',
            ['-c', 'user.name=sandbox', '-c', 'user.email=sandbox@example.test', '-c', 'commit.gpgsign=false', ...args],
            { cwd, timeout: 30_000 },
          )
        ).stdout.trim();
      await mkdir(work, { recursive: true });
      await git(work, 'init', '-q', '-b', 'main');
      await git(root, 'init', '-q', '--bare', '-b', 'main', bare);
      await git(work, 'remote', 'add', 'origin', bare);
      return {
        url: `${base}/${name}.git`,
        async commit(files, message) {
          for (const [path, content] of Object.entries(files)) {
            await mkdir(dirname(join(work, path)), { recursive: true });
            await writeFile(join(work, path), content);
          }
          await git(work, 'add', '-A');
          await git(work, 'commit', '-q', '-m', message);
          await git(work, 'push', '-q', 'origin', 'main');
          return git(work, 'rev-parse', 'HEAD');
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
