/**
 * The notifications hub on a real Postgres: one LISTEN connection for every subscriber of a
 * process, LISTEN/UNLISTEN following the subscriptions, a resync after every reconnect (also when
 * the server ends the connection), and a provisioner process with one such connection in all.
 */
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { loadConfig } from '../../../provisioner/config.ts';
import { Notifications, NOTIFICATIONS_APPLICATION_NAME } from '../../../provisioner/db/notifications.ts';
import { startServer } from '../../../provisioner/server.ts';
import { createTestDatabase } from '../../helpers/postgres.ts';
import { until } from '../../../sandbox/until.ts';
import { ApiClient } from '../../../provisioner/http/api-client.ts';

const db = await createTestDatabase();
t.teardown(() => db.drop());

/** Backends of this test's database: how many carry the hub's application_name, and how many last ran a LISTEN. */
async function backends(): Promise<{ hub: number; listening: number; hubPids: number[] }> {
  const { rows } = await db.pool.query<{ pid: number; application_name: string; query: string }>(
    `SELECT pid, application_name, query FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`,
  );
  const hub = rows.filter((r) => r.application_name === NOTIFICATIONS_APPLICATION_NAME);
  return {
    hub: hub.length,
    hubPids: hub.map((r) => r.pid),
    listening: rows.filter((r) => /^\s*LISTEN/i.test(r.query)).length,
  };
}

function collector(): { got: string[]; fn: (payload: string) => void } {
  const got: string[] = [];
  return { got, fn: (payload) => got.push(payload) };
}

t.test(
  'subscribers of several channels share one connection; unsubscribing stops delivery and UNLISTENs the channel',
  async (t) => {
    const hub = new Notifications({ pool: db.pool });
    t.teardown(() => hub.stop());
    const a = collector();
    const b = collector();
    const c = collector();
    const offA = hub.subscribe('chan_a', a.fn);
    hub.subscribe('chan_b', b.fn);
    await hub.start();
    t.ok(
      hub.listening('chan_a') && hub.listening('chan_b'),
      'both channels subscribed before start are listened after it',
    );
    const offC = hub.subscribe('chan_a', c.fn);
    await db.pool.query(`SELECT pg_notify('chan_a', 'one'), pg_notify('chan_b', 'two')`);
    await until('both delivered', 10_000, async () => a.got.length === 1 && b.got.length === 1 && c.got.length === 1);
    t.same([a.got, b.got, c.got], [['one'], ['two'], ['one']], "each subscriber got its own channel's payloads");
    t.equal((await backends()).hub, 1, 'one connection for all three subscriptions');

    offA();
    t.ok(hub.listening('chan_a'), 'chan_a is still listened while another subscriber has it');
    offC();
    t.notOk(hub.listening('chan_a'), 'chan_a is no longer listened once its last subscriber left');
    await db.pool.query(`SELECT pg_notify('chan_a', 'late'), pg_notify('chan_b', 'three')`);
    await until('chan_b delivered', 10_000, async () => b.got.length === 2);
    t.same([a.got, c.got], [['one'], ['one']], 'nothing is delivered after unsubscribing');
  },
);

t.test('a subscriber failing does not stop the others', async (t) => {
  const hub = new Notifications({ pool: db.pool });
  t.teardown(() => hub.stop());
  const ok = collector();
  hub.subscribe('chan_fail', () => {
    throw new Error('subscriber bug');
  });
  hub.subscribe('chan_fail', ok.fn);
  await hub.start();
  await db.pool.query(`SELECT pg_notify('chan_fail', 'x')`);
  await until('the second subscriber got it', 10_000, async () => ok.got.length === 1);
  t.ok(hub.connected, 'the connection stays up');
});

t.test('after a lost connection the hub reconnects, listens again and tells subscribers to resync', async (t) => {
  const hub = new Notifications({ pool: db.pool, maxBackoffMs: 200 });
  t.teardown(() => hub.stop());
  const n = collector();
  let resyncs = 0;
  hub.subscribe('chan_r', n.fn, () => {
    resyncs += 1;
  });
  await hub.start();
  t.equal(resyncs, 1, 'told once when listening started');

  hub.simulateDisconnect();
  t.notOk(hub.listening('chan_r'), 'not listening while disconnected');
  await until('resynced after the simulated disconnect', 5000, async () => resyncs === 2);
  t.ok(hub.listening('chan_r'), 'listening again');

  // The server ends the connection (an error event on the client): handled, replaced.
  const { hubPids } = await backends();
  t.equal(hubPids.length, 1, 'one hub connection before the server ends it');
  await db.pool.query('SELECT pg_terminate_backend($1)', [hubPids[0]]);
  await until('resynced after the server ended the connection', 5000, async () => resyncs === 3);
  const after = await backends();
  t.equal(after.hub, 1, 'one hub connection after the reconnect');
  t.not(after.hubPids[0], hubPids[0], 'a new backend');
  await db.pool.query(`SELECT pg_notify('chan_r', 'after')`);
  await until('delivered on the new connection', 5000, async () => n.got.includes('after'));
  t.equal(n.got.filter((x) => x === 'after').length, 1, 'delivered once after reconnecting');
});

t.test(
  'a provisioner process opens one LISTEN connection for the reconciler, the tunnel directory, key revocations and log followers',
  async (t) => {
    const dataDir = await mkdtemp(join(tmpdir(), 'hrt-notify-'));
    t.teardown(() => rm(dataDir, { recursive: true, force: true }));
    const adminToken = `hrt_admin_${randomBytes(24).toString('hex')}`;
    const config = loadConfig({
      DATABASE_URL: db.url,
      PORT: '0',
      LOG_LEVEL: 'silent',
      PROVISIONER_DATA_DIR: dataDir,
      PROVISIONER_ENCRYPTION_KEY: randomBytes(32).toString('hex'),
      PROVISIONER_ADMIN_TOKEN: adminToken,
      PULUMI_CONFIG_PASSPHRASE: 'test-passphrase',
      PROVISIONER_PULUMI_CLI_DIR: join(dataDir, 'no-cli-here'),
    });
    const running = await startServer(config, { out: () => {} });
    t.teardown(() => running.close());
    await until('the reconciler listens for due tenants', 5000, async () => running.reconciler?.listening === true);
    // The mapped routes through the typed client at the server's socket.
    const { operationId, apiKey } = await new ApiClient({ baseUrl: running.url }).call('POST /v1/signup', {
      body: { organization: `org-${randomBytes(3).toString('hex')}`, email: 'a@example.com' },
    });
    // A live log follower (the operation stays queued: no engine can run it).
    const abort = new AbortController();
    const follow = await new ApiClient({ baseUrl: running.url, token: apiKey }).fetch('GET /v1/operations/:id/log', {
      params: { id: operationId },
      query: { follow: '1' },
      accept: 'text/event-stream',
      signal: abort.signal,
    });
    t.equal(follow.status, 200, 'the log follow started');
    await until("the log followers' channel is listened", 5000, async () => {
      const { rows } = await db.pool.query<{ query: string }>(
        `SELECT query FROM pg_stat_activity WHERE datname = current_database() AND application_name = $1`,
        [NOTIFICATIONS_APPLICATION_NAME],
      );
      return rows.some((r) => r.query.includes('operation_log'));
    });
    const seen = await backends();
    t.equal(seen.hub, 1, 'one notifications connection');
    t.equal(seen.listening, 1, 'no other backend of the process ran LISTEN');
    abort.abort();
    await follow.body?.cancel().catch(() => {});
  },
);
