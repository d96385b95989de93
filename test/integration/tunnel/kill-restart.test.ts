/**
 * A runtime's tunnel client whose control plane is killed (SIGKILL: no drain, no goodbye) and
 * started again reconnects once the control plane listens again, and requests go through it
 * (issue 13's fault test). The control plane is the real `provisioner serve`, its own process on a
 * database of this test; the client is the runtime's real tunnel client with its production
 * backoff. The times are printed, not asserted: how soon is bench/reconnect.bench.ts's figure.
 */
import t, { type Test } from 'tap';
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { createTestDatabase } from '../../helpers/postgres.ts';
import { portOutsideEphemeralRange } from '../../helpers/ports.ts';
import { startTunnelClient } from '../../../runtime/agents/tunnel-client/client.ts';
import { until } from '../../../sandbox/until.ts';
import { ApiClient } from '../../../provisioner/http/api-client.ts';

const bin = fileURLToPath(new URL('../../../bin/provisioner.ts', import.meta.url));
t.setTimeout(180_000);

interface Serving {
  child: ChildProcess;
  url: string;
  /** When it logged that it listens. */
  listeningAt: number;
  exited: Promise<unknown>;
}

function serve(t: Test, env: Record<string, string>): Promise<Serving> {
  const child = spawn(process.execPath, [bin, 'serve'], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  t.teardown(async () => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    const gone = once(child, 'exit');
    child.kill('SIGTERM');
    await gone;
  });
  const exited = new Promise((r) => child.once('exit', r));
  let stderr = '';
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  return new Promise((resolve, reject) => {
    createInterface({ input: child.stdout }).on('line', (line) => {
      try {
        const entry = JSON.parse(line) as { msg?: string; url?: string };
        if (entry.msg === 'provisioner listening' && entry.url)
          resolve({ child, url: entry.url, listeningAt: Date.now(), exited });
      } catch {
        // not a JSON log line
      }
    });
    void exited.then(() => reject(new Error(`provisioner exited before listening: ${stderr}`)));
  });
}

t.test('a tunnel client reconnects to its SIGKILLed control plane once it listens again', async (t) => {
  const db = await createTestDatabase({ migrate: false });
  t.teardown(() => db.drop());
  const dataDir = await mkdtemp(join(tmpdir(), 'hrt-tunnel-kill-'));
  t.teardown(() => rm(dataDir, { recursive: true, force: true }));
  const admin = `hrt_admin_${randomBytes(24).toString('hex')}`;
  const env = {
    PATH: process.env.PATH ?? '',
    HOME: dataDir,
    // The restart listens on the same port, as a restarted pod's Service would: one outside the
    // ephemeral range, which nothing else takes between the kill and the restart.
    PORT: String(await portOutsideEphemeralRange()),
    DATABASE_URL: db.url,
    PROVISIONER_DATA_DIR: dataDir, // keeps the request-signing key across the restart
    PROVISIONER_ADMIN_TOKEN: admin,
    PROVISIONER_ENCRYPTION_KEY: randomBytes(32).toString('hex'),
    PROVISIONER_ENGINE: 'none',
    LOG_LEVEL: 'info', // the 'provisioner listening' line gives the URL
  };
  let cp = await serve(t, env);

  const upstream = http.createServer((_req, res) => {
    res.setHeader('content-type', 'application/json');
    res.end('{"runtime":"ok"}');
  });
  upstream.listen(0, '127.0.0.1');
  await once(upstream, 'listening');
  t.teardown(() => new Promise<void>((r) => upstream.close(() => r())));

  // The mapped routes through the typed client at the provisioner's socket.
  const signup = await new ApiClient({ baseUrl: cp.url }).call('POST /v1/signup', {
    body: { organization: `tunnel-kill-${process.pid}`, email: 't@example.com' },
  });
  const tenantId = signup.tenant.id;
  const runtimeKey = await new ApiClient({ baseUrl: cp.url, token: admin }).call('POST /v1/keys', {
    body: { role: 'runtime', name: 'runtime', tenantId },
  });
  // The production backoff (DEFAULT_BACKOFF: 200 ms doubling to 4 s, full jitter).
  const client = startTunnelClient({
    url: `${cp.url.replace('http', 'ws')}/v1/tunnel`,
    token: runtimeKey.key,
    upstream: `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`,
  });
  t.teardown(() => client.close({ graceMs: 0 }));
  if (!client.connected) await once(client.events, 'connected');
  const through = () =>
    fetch(`${cp.url}/v1/tenants/${tenantId}/runtime/api/runtime`, {
      headers: { authorization: `Bearer ${admin}` },
      signal: AbortSignal.timeout(5000),
    }).then(
      (r) => r.status,
      () => 0,
    );
  t.equal(await through(), 200, 'a request reaches the runtime through the tunnel');

  let reconnectedAt = 0;
  client.events.on('connected', () => (reconnectedAt ||= Date.now()));
  const killedAt = Date.now();
  cp.child.kill('SIGKILL');
  await cp.exited;
  cp = await serve(t, env);
  // Waits with generous bounds (the production backoff caps at 4 s): a wait, not a claim about speed.
  await until('the tunnel client reconnected to the restarted control plane', 60_000, () => reconnectedAt > 0);
  t.ok(reconnectedAt > 0, 'the tunnel client reconnected to the restarted control plane');
  const servedAt = await until(
    'a request through the tunnel served',
    60_000,
    async () => (await through()) === 200 && Date.now(),
    50,
  );
  const reconnectMs = reconnectedAt - cp.listeningAt;
  const servedMs = servedAt - cp.listeningAt;
  t.comment(
    `control plane killed, restarted in ${cp.listeningAt - killedAt} ms; tunnel reconnected ${reconnectMs} ms after it listened again, first request through it served after ${servedMs} ms`,
  );
  t.equal(await through(), 200, 'requests go through the tunnel to the restarted control plane');
});
