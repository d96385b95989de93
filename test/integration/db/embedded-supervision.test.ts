/**
 * The embedded PostgreSQL of `provisioner serve` (DATABASE_URL unset) is supervised, with the
 * provisioner run as its own process on a data dir of this test:
 * - the provisioner SIGKILLed leaves its server running; the next start stops that orphan and
 *   starts (it used to fail with `provisioner: undefined` until someone killed it by hand);
 * - the server SIGKILLed under the running provisioner is logged once at error level, restarted,
 *   and signups succeed again within 5 s.
 */
import t, { type Test } from 'tap';
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmod, mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { until } from '../../../sandbox/until.ts';
import { ApiClient } from '../../../provisioner/http/api-client.ts';

const bin = fileURLToPath(new URL('../../../bin/provisioner.ts', import.meta.url));
// Starts and kills several provisioners and PostgreSQL servers: more than tap's default file timeout on a loaded machine.
t.setTimeout(300_000);

interface LogLine {
  level?: number;
  msg?: string;
  url?: string;
  pid?: number;
}

interface Provisioner {
  child: ChildProcess;
  url: string;
  logs: LogLine[];
  exited: Promise<number | null>;
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

async function postmasterPid(dataDir: string): Promise<number> {
  return Number((await readFile(join(dataDir, 'postgres', 'pgdata', 'postmaster.pid'), 'utf8')).split('\n')[0]);
}

function startProvisioner(t: Test, env: Record<string, string>): Promise<Provisioner> {
  const child = spawn(process.execPath, [bin, 'serve'], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  t.teardown(() => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  });
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const logs: LogLine[] = [];
  let stderr = '';
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  return new Promise((resolve, reject) => {
    createInterface({ input: child.stdout }).on('line', (line) => {
      let entry: LogLine;
      try {
        entry = JSON.parse(line) as LogLine;
      } catch {
        return;
      }
      logs.push(entry);
      if (entry.msg === 'provisioner listening' && entry.url) resolve({ child, url: entry.url, logs, exited });
    });
    void exited.then((code) =>
      reject(new Error(`provisioner exited with ${String(code)} before listening: ${stderr}`)),
    );
  });
}

/** A signup through the one client at `url`: its status and answer or refusal, never thrown. */
const signup = (url: string, org: string) =>
  new ApiClient({ baseUrl: url }).request('POST /v1/signup', { body: { organization: org, email: 'o@example.com' } });

t.test(
  'a killed provisioner leaves its PostgreSQL behind; the next start stops it and serves; a killed PostgreSQL is restarted',
  async (t) => {
    const dataDir = await mkdtemp(join(tmpdir(), 'hrt-supervise-'));
    await chmod(dataDir, 0o755); // as root, PostgreSQL runs as the postgres user and must traverse it
    t.teardown(() => rm(dataDir, { recursive: true, force: true }));
    const adminToken = `hrt_admin_${randomBytes(24).toString('hex')}`;
    const env = {
      PORT: '0',
      PROVISIONER_DATA_DIR: dataDir,
      PROVISIONER_ENGINE: 'none',
      LOG_LEVEL: 'info',
      DATABASE_URL: '',
      PROVISIONER_SIGNUP_RATE_LIMIT: '100000',
      PROVISIONER_ADMIN_TOKEN: adminToken,
      PROVISIONER_ENCRYPTION_KEY: randomBytes(32).toString('hex'),
    };

    const first = await startProvisioner(t, env);
    const before = await signup(first.url, `before-${process.pid}`);
    t.equal(before.status, 202, 'a signup on the first provisioner');
    if (!before.ok) return;
    const { tenant } = before.body;
    const orphan = await postmasterPid(dataDir);
    first.child.kill('SIGKILL');
    await first.exited;
    t.ok(alive(orphan), `the PostgreSQL server ${orphan} outlives the killed provisioner (the orphan this is about)`);

    const second = await startProvisioner(t, env);
    t.teardown(async () => {
      if (second.child.exitCode === null) {
        second.child.kill('SIGTERM');
        await second.exited;
      }
    });
    t.notOk(alive(orphan), 'the orphan is gone');
    t.ok(
      second.logs.some((l) => l.level === 40 && /left running by a provisioner/.test(l.msg ?? '')),
      'the start-up said it stopped a left-over server',
    );
    const read = await new ApiClient({ baseUrl: second.url, token: adminToken }).request('GET /v1/tenants/:id', {
      params: { id: tenant.id },
    });
    t.equal(read.status, 200, 'the data of before the kill is served');

    const server = await postmasterPid(dataDir);
    t.not(server, orphan, 'a new server runs');
    const killedAt = Date.now();
    process.kill(server, 'SIGKILL');
    let recoveredAt = 0;
    let n = 0;
    const gap: number[] = [];
    await until('a signup succeeding after the PostgreSQL kill', 30_000, async () => {
      const res = await signup(second.url, `after-${process.pid}-${n++}`);
      if (res.status === 202) recoveredAt = Date.now();
      else gap.push(res.status);
      return res.status === 202;
    }).catch((err: unknown) => {
      t.comment(
        `provisioner log since the kill: ${JSON.stringify(second.logs.filter((l) => (l.level ?? 0) >= 40).slice(-10))}; answers: ${JSON.stringify(gap.slice(-5))}`,
      );
      throw err;
    });
    t.same(
      [...new Set(gap)].filter((s) => s !== 503),
      [],
      `while PostgreSQL restarted, signups answered 503 only (${gap.length} of them)`,
    );
    // The target is 5 s (docs/benchmarks.md records what this test measures); the bound leaves room for
    // a PostgreSQL start on a loaded shared machine, and still fails a restart that never comes.
    t.comment(`embedded PostgreSQL killed → signups succeed again after ${recoveredAt - killedAt} ms (target 5000)`);
    t.ok(
      recoveredAt - killedAt <= 10_000,
      `signups succeed again ${recoveredAt - killedAt} ms after PostgreSQL was killed (bound checked: 10 s)`,
    );
    const died = second.logs.filter((l) => /embedded PostgreSQL exited unexpectedly/.test(l.msg ?? ''));
    t.equal(died.length, 1, 'the death is logged once');
    t.equal(died[0]?.level, 50, 'at error level');
    t.ok(
      second.logs.some((l) => l.msg === 'embedded PostgreSQL restarted'),
      'the restart is logged',
    );
    t.ok(alive(await postmasterPid(dataDir)), 'a new server runs after the restart');

    const stoppingAt = Date.now();
    second.child.kill('SIGTERM');
    t.equal(await second.exited, 0, 'the provisioner shuts down cleanly afterwards');
    t.comment(`shutdown took ${Date.now() - stoppingAt} ms`);
    const left = await postmasterPid(dataDir).catch(() => undefined);
    t.ok(left === undefined || !alive(left), 'and stops its server');
  },
);

t.test('a start-up failure of the embedded PostgreSQL prints its real cause', async (t) => {
  const dataDir = await mkdtemp(join(tmpdir(), 'hrt-supervise-bad-'));
  await chmod(dataDir, 0o755);
  t.teardown(() => rm(dataDir, { recursive: true, force: true }));
  // A data dir PostgreSQL refuses: from a major version that does not exist.
  await mkdir(join(dataDir, 'postgres', 'pgdata'), { recursive: true, mode: 0o700 });
  await writeFile(join(dataDir, 'postgres', 'pgdata', 'PG_VERSION'), '99\n');
  const child = spawn(process.execPath, [bin, 'serve'], {
    env: {
      ...process.env,
      PORT: '0',
      PROVISIONER_DATA_DIR: dataDir,
      PROVISIONER_ENGINE: 'none',
      DATABASE_URL: '',
      LOG_LEVEL: 'silent',
    },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
  t.equal(code, 1, 'start-up fails with exit code 1');
  t.match(
    stderr,
    /provisioner: the embedded PostgreSQL in .* exited during start-up \(code \d+\): \S+/,
    `the message quotes PostgreSQL's own reason: ${stderr.trim()}`,
  );
  t.notMatch(stderr, /undefined/, 'never `undefined`');
});
