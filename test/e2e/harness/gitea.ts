/**
 * A real Gitea (scripts/gitea.sh: v1.26.0 built from its Go module) on loopback, as the Git
 * provider of the pull-request tests: its own work folder, a database of its own in the tests'
 * PostgreSQL (TEST_PG_URL; the build has no SQLite: CGO is off), the templates and options the
 * build copied beside the binary, no SSH, no mail, no cron. An admin user and an access token are
 * made with Gitea's own CLI (`gitea admin user create`, `generate-access-token`).
 *
 * HRT_GITEA_BIN (test/e2e/prepare.sh exports it) names the folder; without it the script's cache
 * folder for the current pins is used when it is complete. `giteaUnavailable()` says why not.
 */
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { fileURLToPath } from 'node:url';
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { serverPort, startProcess, until, type ManagedProcess } from '../../../sandbox/processes.ts';
import { refuseInEarlyPhase } from './phase.ts';

const run = promisify(execFile);
const ROOT = fileURLToPath(new URL('../../../', import.meta.url));

export interface Gitea {
  /** `http://127.0.0.1:PORT` */
  url: string;
  /** `http://127.0.0.1:PORT/api/v1` */
  apiUrl: string;
  user: string;
  password: string;
  /** An access token of the admin user, all scopes. */
  token: string;
  process: ManagedProcess;
  stop(): Promise<void>;
}

async function giteaBin(): Promise<string | undefined> {
  if (process.env.HRT_GITEA_BIN) return process.env.HRT_GITEA_BIN;
  try {
    const { stdout } = await run('bash', [join(ROOT, 'scripts/gitea.sh'), '--print-dir']);
    return join(stdout.trim(), 'bin');
  } catch {
    return undefined;
  }
}

/** Why a real Gitea cannot run here, or undefined. */
export async function giteaUnavailable(): Promise<string | undefined> {
  refuseInEarlyPhase('Gitea');
  if (process.env.HRT_GITEA_SKIP) return process.env.HRT_GITEA_SKIP;
  if (!process.env.TEST_PG_URL) return 'TEST_PG_URL is not set (Gitea keeps its data in the tests’ PostgreSQL)';
  const bin = await giteaBin();
  if (!bin || !existsSync(join(bin, 'gitea')) || !existsSync(join(bin, 'static', 'templates')))
    return `${process.env.HRT_GITEA_BIN ? `HRT_GITEA_BIN=${process.env.HRT_GITEA_BIN}` : (bin ?? 'the cache folder')} lacks gitea and its static files: run bash scripts/gitea.sh, or the tier through scripts/test.sh e2e`;
  return undefined;
}

export async function startGitea(dir: string): Promise<Gitea> {
  const bin = (await giteaBin())!;
  const pgUrl = new URL(process.env.TEST_PG_URL!);
  const database = `gitea_${randomBytes(6).toString('hex')}`;
  const admin = new pg.Client({ connectionString: pgUrl.toString() });
  await admin.connect();
  try {
    await admin.query(`CREATE DATABASE ${database}`);
  } finally {
    await admin.end();
  }
  const port = await serverPort();
  await mkdir(join(dir, 'custom', 'conf'), { recursive: true });
  const config = join(dir, 'custom', 'conf', 'app.ini');
  await writeFile(
    config,
    [
      // The tests run as root; Gitea refuses that unless told.
      'I_AM_BEING_UNSAFE_RUNNING_AS_ROOT = true',
      'APP_NAME = promotions-test',
      'RUN_MODE = prod',
      `WORK_PATH = ${dir}`,
      '[database]',
      'DB_TYPE = postgres',
      `HOST = ${pgUrl.host}`,
      `NAME = ${database}`,
      `USER = ${decodeURIComponent(pgUrl.username)}`,
      `PASSWD = ${decodeURIComponent(pgUrl.password)}`,
      'SSL_MODE = disable',
      '[server]',
      'HTTP_ADDR = 127.0.0.1',
      `HTTP_PORT = ${port}`,
      `ROOT_URL = http://127.0.0.1:${port}/`,
      'DISABLE_SSH = true',
      'START_SSH_SERVER = false',
      'OFFLINE_MODE = true',
      'LFS_START_SERVER = false',
      `STATIC_ROOT_PATH = ${join(bin, 'static')}`,
      `APP_DATA_PATH = ${join(dir, 'data')}`,
      '[security]',
      'INSTALL_LOCK = true',
      `SECRET_KEY = ${randomBytes(24).toString('hex')}`,
      '[service]',
      'DISABLE_REGISTRATION = true',
      '[repository]',
      `ROOT = ${join(dir, 'repos')}`,
      '[log]',
      'MODE = console',
      'LEVEL = warn',
      '[cron]',
      'ENABLED = false',
      '[mailer]',
      'ENABLED = false',
      '',
    ].join('\n'),
    { mode: 0o600 },
  );
  const env = { PATH: process.env.PATH ?? '', HOME: dir, GITEA_WORK_DIR: dir };
  const proc = startProcess('gitea', join(bin, 'gitea'), ['web', '--config', config], join(dir, 'gitea.log'), {
    env,
    cwd: dir,
  });
  const url = `http://127.0.0.1:${port}`;
  await until('Gitea answers /api/v1/version', 180_000, async () => {
    if (!proc.running()) throw new Error(`gitea exited: ${await proc.tail(20)}`);
    return (await fetch(`${url}/api/v1/version`).catch(() => undefined))?.ok ?? false;
  });
  const cli = async (...args: string[]) =>
    (await run(join(bin, 'gitea'), ['--config', config, ...args], { env, cwd: dir })).stdout.trim();
  const user = 'acme';
  const password = `pw-${randomBytes(12).toString('hex')}`;
  await cli(
    'admin',
    'user',
    'create',
    '--username',
    user,
    '--password',
    password,
    '--email',
    'acme@example.test',
    '--admin',
    '--must-change-password=false',
  );
  const token = (
    await cli(
      'admin',
      'user',
      'generate-access-token',
      '--username',
      user,
      '--token-name',
      'operator',
      '--scopes',
      'all',
      '--raw',
    )
  )
    .split('\n')
    .at(-1)!
    .trim();
  return { url, apiUrl: `${url}/api/v1`, user, password, token, process: proc, stop: () => proc.stop() };
}
