/**
 * The agents' shared health endpoints (runtime/agents/common/health.ts), over a real server and
 * real loops: /healthz answers while the process runs; /readyz is 503 naming the loop whose round
 * hangs (stale) or fails, or the agent's check that says not ready, and 200 again once the loop
 * ran a round and the check recovered.
 */
import type { AddressInfo } from 'node:net';
import t, { type Test } from 'tap';
import { AgentHealth, healthServer } from '../../../runtime/agents/common/health.ts';
import { closeServer, listen } from '../../../runtime/agents/common/service.ts';
import { PeriodicLoop } from '../../../runtime/loops/periodic.ts';
import { until } from '../../../sandbox/until.ts';

interface ReadyBody {
  ready: boolean;
  notReady: string[];
  loops: Array<{ name: string; ready: boolean; reason?: string; rounds: number }>;
  [field: string]: unknown;
}

async function serve(t: Test, health: AgentHealth) {
  const server = healthServer(health);
  await listen(server, 0, '127.0.0.1');
  t.teardown(() => closeServer(server));
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return async (path: string, method = 'GET') => {
    const res = await fetch(`${base}${path}`, { method });
    const text = await res.text();
    return { status: res.status, body: text ? (JSON.parse(text) as ReadyBody) : undefined };
  };
}

/** A loop whose round waits for `release()` when `hang` is set, and throws while `fail` is set. */
function controlledLoop(name: string) {
  const ctl = { hang: false, fail: false, release: () => {} };
  const loop = new PeriodicLoop({
    name,
    round: async () => {
      if (ctl.hang) await new Promise<void>((r) => (ctl.release = r));
      if (ctl.fail) throw new Error('the control plane refused');
    },
    intervalMs: () => 20,
    retryMs: () => 20,
  });
  return { loop, ctl };
}

t.test('a stale loop makes /readyz 503 naming it; a round after it makes it 200 again', async (t) => {
  const { loop, ctl } = controlledLoop('upgrader');
  const health = new AgentHealth({ loops: [{ loop, staleAfterMs: () => 300 }] });
  const get = await serve(t, health);

  const before = await get('/readyz');
  t.equal(before.status, 503, 'not ready before the loop ran');
  t.match(before.body?.notReady, [/^loop upgrader: not running/]);

  await loop.start();
  t.teardown(() => {
    ctl.release();
    return loop.stop();
  });
  await until('ready once rounds end', 10_000, async () => (await get('/readyz')).status === 200);
  t.equal((await get('/healthz')).status, 200);

  ctl.hang = true;
  const stale = await until('503 once the hanging round is older than 300 ms', 10_000, async () => {
    const r = await get('/readyz');
    return r.status === 503 ? r : undefined;
  });
  t.match(stale.body?.notReady, [/^loop upgrader: stale: no round ended for [\d.]+ s \(expected within 0\.3 s\)$/]);
  t.match(stale.body?.loops, [{ name: 'upgrader', ready: false, reason: /^stale/ }]);
  t.same((await get('/healthz')).body, { status: 'ok' }, '/healthz: the process still answers');

  ctl.hang = false;
  ctl.release();
  const back = await until('200 once a round ended', 10_000, async () => {
    const r = await get('/readyz');
    return r.status === 200 ? r : undefined;
  });
  t.same(back.body?.notReady, []);
  t.match(back.body?.loops, [{ name: 'upgrader', ready: true }]);
});

t.test('a failing loop makes /readyz 503 naming it until a round succeeds', async (t) => {
  const { loop, ctl } = controlledLoop('promotions');
  const other = controlledLoop('digests');
  const health = new AgentHealth({
    loops: [
      { loop, staleAfterMs: () => 60_000 },
      { loop: other.loop, staleAfterMs: () => 60_000 },
    ],
  });
  const get = await serve(t, health);
  ctl.fail = true;
  await loop.start();
  await other.loop.start();
  t.teardown(() => Promise.all([loop.stop(), other.loop.stop()]));
  const failing = await until('503 while rounds fail', 10_000, async () => {
    const r = await get('/readyz');
    return r.body?.loops.every((l) => l.rounds > 0) && r.status === 503 ? r : undefined;
  });
  t.equal(failing.body?.notReady.length, 1, 'only the failing loop is named');
  t.match(failing.body?.notReady[0], /^loop promotions: failing: \d+ rounds? in a row failed$/);
  t.notMatch(JSON.stringify(failing.body), /refused/, 'no error text in the answer');
  ctl.fail = false;
  await until('200 once a round succeeded', 10_000, async () => (await get('/readyz')).status === 200);
});

t.test("the agent's own checks: their fields in the answer, 503 naming a check that is not ready", async (t) => {
  let connected = false;
  const health = new AgentHealth({
    checks: [
      {
        name: 'tunnel',
        read: () => ({
          ready: connected,
          ...(connected ? {} : { reason: 'disconnected' }),
          fields: { status: connected ? 'connected' : 'disconnected' },
        }),
      },
    ],
  });
  const get = await serve(t, health);
  const down = await get('/readyz');
  t.equal(down.status, 503);
  t.match(down.body, { ready: false, notReady: ['tunnel: disconnected'], status: 'disconnected', loops: [] });
  connected = true;
  const up = await get('/readyz');
  t.equal(up.status, 200);
  t.match(up.body, { ready: true, notReady: [], status: 'connected' });
  const head = await get('/readyz', 'HEAD');
  t.equal(head.status, 200, 'HEAD as GET');
  t.equal(head.body, undefined, 'without a body');
  t.equal((await get('/metrics')).status, 404, 'nothing else is served');
});

t.test('a loop turned off is not waited for; one ready before its first round is stale only after one', async (t) => {
  const off = new PeriodicLoop({ name: 'off', round: async () => {}, intervalMs: () => 1000, enabled: false });
  const late = new PeriodicLoop({
    name: 'late',
    round: async () => {},
    intervalMs: () => 60_000,
    firstDelayMs: () => 60_000,
  });
  await late.start();
  t.teardown(() => late.stop());
  const health = new AgentHealth({
    loops: [
      { loop: off, staleAfterMs: () => 1 },
      { loop: late, staleAfterMs: () => 1, readyBeforeFirstRound: true },
    ],
  });
  t.match(health.readiness(), {
    ready: true,
    loops: [
      { name: 'off', state: 'disabled' },
      { name: 'late', rounds: 0 },
    ],
  });
});
