import { randomUUID } from 'node:crypto';
import t from 'tap';
import WebSocket, { WebSocketServer } from 'ws';
import {
  CloseCode,
  decodeFrame,
  encodeFrame,
  PROTOCOL_VERSION,
  SUBPROTOCOL,
} from '../../../runtime/protocol/frames.ts';
import { startTunnelClient } from '../../../runtime/agents/tunnel-client/client.ts';
import {
  connected,
  json,
  ready,
  request,
  startControlPlane,
  startRuntime,
  StubCallers,
  StubRuntimeTokens,
} from './harness.ts';
import { portOutsideEphemeralRange } from '../../helpers/ports.ts';
import { until } from '../../../sandbox/until.ts';

const tokens = new StubRuntimeTokens();
const callers = new StubCallers();
const admin = { authorization: `Bearer ${callers.add('admin')}` };

/**
 * A control plane and a connected runtime with one request held at the runtime's barrier route
 * (released by the test through `rt.state.barrierWaiting`).
 */
async function heldRequest(
  t: { teardown(fn: () => unknown): void },
  limits: Parameters<typeof startControlPlane>[0]['limits'] = {},
) {
  const tenantId = randomUUID();
  const cp = await startControlPlane({ tokens, callers, limits });
  t.teardown(() => cp.close());
  const { token } = tokens.issue(tenantId);
  const rt = await startRuntime(tenantId, cp, token);
  t.teardown(() => rt.close());
  await ready(cp, rt);
  const headers = { authorization: `Bearer ${callers.add('admin')}` };
  const base = `${cp.base}/v1/tenants/${tenantId}/runtime`;
  const held = request(`${base}/api/test/barrier?n=1000`, { headers });
  await until('request held at the runtime', 10_000, () => rt.state.barrierWaiting.length === 1);
  return { tenantId, token, cp, rt, headers, base, held };
}

void t.test('after a control-plane restart the client is reconnected and serving within 5 s', async (t) => {
  const tenantId = randomUUID();
  // Restarted on the same port: one outside the ephemeral range, which nothing else takes meanwhile.
  const port = await portOutsideEphemeralRange();
  let cp = await startControlPlane({ tokens, callers, port });
  const runtime = await startRuntime(tenantId, cp, tokens.issue(tenantId).token);
  t.teardown(async () => {
    await runtime.close();
    await cp.close();
  });
  await ready(cp, runtime);
  // A closing control plane tells the runtime to go away (it redials at once) and closes the drained tunnel.
  const down = new Promise<void>((resolve) => runtime.client.events.once('draining', () => resolve()));
  await cp.close();
  await down;
  const restartedAt = Date.now();
  cp = await startControlPlane({ tokens, callers, port });
  await ready(cp, runtime, 5000);
  const res = await request(`${cp.base}/v1/tenants/${tenantId}/runtime/api/runtime`, { headers: admin });
  const elapsed = Date.now() - restartedAt;
  t.equal(res.status, 200, 'serving through the new control plane');
  t.ok(elapsed < 5000, `reconnected and served in ${elapsed} ms`);
});

void t.test('a new connection of the same runtime replaces the old one with a clear close code', async (t) => {
  const tenantId = randomUUID();
  const cp = await startControlPlane({ tokens, callers });
  const { token } = tokens.issue(tenantId);
  const first = await startRuntime(tenantId, cp, token);
  t.teardown(async () => {
    await first.close();
    await cp.close();
  });
  await ready(cp, first);
  const since1 = cp.tunnel.status(tenantId).since!;
  const replacedCode = new Promise<number>((resolve) =>
    first.client.events.once('disconnected', (code) => resolve(code)),
  );
  const replaced = new Promise<void>((resolve) => cp.tunnel.events.once('replace', () => resolve()));
  const second = await startRuntime(tenantId, cp, token);
  t.teardown(() => second.close());
  await connected(second.client);
  await replaced;
  t.equal(await replacedCode, CloseCode.replaced, 'old connection closed with 4001 (replaced)');
  const status = cp.tunnel.status(tenantId);
  t.equal(status.connected, true);
  t.ok(Date.parse(status.since!) >= Date.parse(since1), "since is the new connection's");
  const res = await request(`${cp.base}/v1/tenants/${tenantId}/runtime/webhooks/hook`, {
    method: 'POST',
    headers: admin,
    body: Buffer.from('x'),
  });
  t.equal(res.status, 200);
  t.equal(second.webhooks.length, 1, 'the new runtime serves');
  t.equal(first.webhooks.length, 0, 'the old one does not');
  t.equal(first.client.connected, false, 'the replaced client does not fight back at once');
});

void t.test('the server terminates a runtime that stops answering heartbeats', async (t) => {
  const tenantId = randomUUID();
  const cp = await startControlPlane({ tokens, callers, limits: { heartbeatIntervalMs: 100 } });
  t.teardown(() => cp.close());
  const ws = new WebSocket(cp.wsUrl, SUBPROTOCOL, {
    headers: { authorization: `Bearer ${tokens.issue(tenantId).token}` },
    autoPong: false,
  });
  ws.on('error', () => {});
  await new Promise((resolve) => ws.once('open', resolve));
  ws.send(
    encodeFrame({
      type: 'hello',
      streamId: 0,
      hello: { version: PROTOCOL_VERSION, window: 65536, maxMessageBytes: 1 << 20, maxStreams: 10 },
    }),
  );
  const gone = new Promise<number>((resolve) => cp.tunnel.events.once('disconnect', (_id, code) => resolve(code)));
  const started = Date.now();
  await gone;
  t.ok(Date.now() - started < 2000, `terminated after ${Date.now() - started} ms`);
  t.equal(cp.tunnel.status(tenantId).connected, false);
});

void t.test('the client drops a control plane that stops answering heartbeats and redials', async (t) => {
  const wss = new WebSocketServer({ port: 0, host: '127.0.0.1', autoPong: false, handleProtocols: () => SUBPROTOCOL });
  await new Promise((resolve) => wss.once('listening', resolve));
  let connections = 0;
  wss.on('connection', (ws) => {
    connections++;
    ws.on('message', (data: Buffer) => void decodeFrame(data));
    ws.send(
      encodeFrame({
        type: 'hello',
        streamId: 0,
        hello: { version: PROTOCOL_VERSION, window: 65536, maxMessageBytes: 1 << 20, maxStreams: 10 },
      }),
    );
  });
  const port = (wss.address() as { port: number }).port;
  const client = startTunnelClient({
    url: `ws://127.0.0.1:${port}/v1/tunnel`,
    token: 'hrt_runtime_xxxxxxxxxxxxxxxxxxxxxxxx',
    upstream: 'http://127.0.0.1:1',
    heartbeatIntervalMs: 100,
  });
  t.teardown(async () => {
    await client.close();
    for (const c of wss.clients) c.terminate();
    await new Promise((resolve) => wss.close(resolve));
  });
  await connected(client);
  await new Promise<void>((resolve) => client.events.once('disconnected', () => resolve()));
  await connected(client);
  t.ok(connections >= 2, 'redialled after the missed heartbeat');
});

void t.test(
  'closing the tunnel server tells the runtime to go away and closes the drained tunnel with going-away',
  async (t) => {
    const tenantId = randomUUID();
    const cp = await startControlPlane({ tokens, callers });
    const rt = await startRuntime(tenantId, cp, tokens.issue(tenantId).token);
    t.teardown(() => rt.close());
    await ready(cp, rt);
    const told = new Promise<string>((resolve) => rt.client.events.once('draining', resolve));
    const closed = new Promise<[number, string]>((resolve) =>
      cp.tunnel.events.once('disconnect', (_id, code, reason) => resolve([code, reason])),
    );
    await cp.close();
    t.match(await told, /shutting down; reconnect/);
    t.same(await closed, [CloseCode.goingAway, 'drained'], 'nothing was in flight: closed at once');
    const again = await request(`${cp.base}/healthz`).catch((e: Error) => e);
    t.ok(again instanceof Error, 'the control plane is down');
  },
);

void t.test(
  'on shutdown, requests in flight finish (drain), new ones get 503 SHUTTING_DOWN, new tunnels are refused',
  async (t) => {
    const { tenantId, cp, rt, headers, base, held } = await heldRequest(t);
    const told = new Promise<string>((resolve) => rt.client.events.once('draining', resolve));
    const closing = cp.tunnel.close();
    await told;
    const later = await request(`${base}/api/runtime`, { headers });
    t.equal(later.status, 503, 'a new request is not started on a draining tunnel');
    t.equal((json(later) as { error: { code: string } }).error.code, 'SHUTTING_DOWN');
    // The runtime redials at once; this replica refuses it with 503 (the load balancer would pick another).
    const rejected = await new Promise<number>((resolve) => rt.client.events.once('rejected', resolve));
    t.equal(rejected, 503);
    t.equal(cp.tunnel.status(tenantId).activeStreams, 1, 'the request in flight is still carried');
    for (const release of rt.state.barrierWaiting.splice(0)) release();
    const inFlight = await held;
    t.equal(inFlight.status, 200, 'the request in flight finished');
    t.same(json(inFlight), { ok: true });
    await closing;
    t.equal(cp.tunnel.status(tenantId).connected, false);
  },
);

void t.test('the drain ends after drainTimeoutMs: requests still in flight get 503 SHUTTING_DOWN', async (t) => {
  const { cp, rt, held } = await heldRequest(t, { drainTimeoutMs: 300 });
  await cp.tunnel.close();
  const cut = await held;
  t.equal(cut.status, 503);
  t.equal((json(cut) as { error: { code: string } }).error.code, 'SHUTTING_DOWN');
  for (const release of rt.state.barrierWaiting.splice(0)) release();
});

void t.test('a runtime that does not understand goaway is closed with going-away at once', async (t) => {
  const tenantId = randomUUID();
  const cp = await startControlPlane({ tokens, callers });
  t.teardown(() => cp.close());
  const ws = new WebSocket(cp.wsUrl, SUBPROTOCOL, {
    headers: { authorization: `Bearer ${tokens.issue(tenantId).token}` },
  });
  ws.binaryType = 'nodebuffer';
  await new Promise((resolve) => ws.once('open', resolve));
  // A hello without `features`, as a runtime of an earlier release sends it.
  ws.send(
    encodeFrame({
      type: 'hello',
      streamId: 0,
      hello: { version: PROTOCOL_VERSION, window: 65536, maxMessageBytes: 1 << 20, maxStreams: 8 },
    }),
  );
  await until('tunnel up', 10_000, () => cp.tunnel.status(tenantId).connected);
  const frames: string[] = [];
  ws.on('message', (data: Buffer) => frames.push(decodeFrame(data).type));
  const code = new Promise<number>((resolve) => ws.once('close', resolve));
  await cp.tunnel.close();
  t.equal(await code, CloseCode.goingAway);
  t.notOk(frames.includes('goaway'), 'no frame it does not know was sent');
});

void t.test(
  'a replaced connection finishes its open requests, takes no new ones, then closes as replaced',
  async (t) => {
    const { tenantId, token, cp, rt: first, headers, base, held } = await heldRequest(t);
    const closedAs = new Promise<number>((resolve) => first.client.events.once('disconnected', resolve));
    let redialled = false;
    first.client.events.on('draining', () => (redialled = true));
    const second = await startRuntime(tenantId, cp, token);
    t.teardown(() => second.close());
    await connected(second.client);
    await until(
      'the second runtime holds the tunnel',
      10_000,
      () => cp.tunnel.status(tenantId).connected && second.client.connected,
    );
    const fresh = await request(`${base}/webhooks/hook`, { method: 'POST', headers, body: Buffer.from('x') });
    t.equal(fresh.status, 200);
    t.equal(second.webhooks.length, 1, 'new requests go to the new connection');
    t.equal(first.webhooks.length, 0);
    for (const release of first.state.barrierWaiting.splice(0)) release();
    const done = await held;
    t.equal(done.status, 200, 'the request open on the replaced connection finished');
    t.equal(await closedAs, CloseCode.replaced, 'then the old connection closed as replaced');
    t.equal(redialled, false, 'the replaced runtime was told not to redial');
  },
);

void t.test('a runtime closing with a grace lets its open requests finish first', async (t) => {
  const { tenantId, cp, rt, headers, base, held } = await heldRequest(t);
  const closing = rt.client.close({ graceMs: 5000 });
  await until('the control plane routes nothing new to it', 10_000, () => !cp.tunnel.status(tenantId).connected);
  const fresh = await request(`${base}/api/runtime`, { headers });
  t.equal(fresh.status, 503, 'a new request is not sent to a runtime that is going away');
  t.equal((json(fresh) as { error: { code: string } }).error.code, 'RUNTIME_UNREACHABLE');
  t.equal(rt.state.barrierWaiting.length, 1, 'the open request is still being served');
  for (const release of rt.state.barrierWaiting.splice(0)) release();
  t.equal((await held).status, 200);
  await closing;
  t.equal(rt.client.connected, false, 'then the tunnel closed');
});
