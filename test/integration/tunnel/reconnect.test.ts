/**
 * Runtimes come back quickly after a long control-plane outage, and a flood of handshakes is shed
 * with an answer the client retries.
 */
import { randomUUID } from 'node:crypto';
import http from 'node:http';
import t from 'tap';
import { request, startControlPlane, startRuntime, ready, StubCallers, StubRuntimeTokens } from './harness.ts';
import { SUBPROTOCOL } from '../../../runtime/protocol/frames.ts';
import { portOutsideEphemeralRange } from '../../helpers/ports.ts';
import { until } from '../../../sandbox/until.ts';

const tokens = new StubRuntimeTokens();
const callers = new StubCallers();
const admin = { authorization: `Bearer ${callers.add('admin')}` };

/** The issue's scenario: 60 s without a control plane (the client's backoff has long reached its cap). */
const OUTAGE_MS = 60_000;

void t.test(
  'after 60 s with the control plane down, requests go through the tunnel again once it listens again',
  { timeout: OUTAGE_MS + 60_000 },
  async (t) => {
    const tenantId = randomUUID();
    // The control plane listens on the same port again after the outage: one outside the
    // ephemeral range, which no other process's connection or listen(0) takes meanwhile.
    const port = await portOutsideEphemeralRange();
    let cp = await startControlPlane({ tokens, callers, port });
    const runtime = await startRuntime(tenantId, cp, tokens.issue(tenantId).token);
    t.teardown(async () => {
      await runtime.close();
      await cp.close();
    });
    await ready(cp, runtime);
    let attempts = 0;
    runtime.client.events.on('reconnecting', () => attempts++);
    await cp.close();
    // The outage itself (the scenario's length, not a wait for something to happen).
    await new Promise((r) => setTimeout(r, OUTAGE_MS));
    t.ok(attempts >= 10, `the client kept redialling during the outage (${attempts} attempts)`);

    cp = await startControlPlane({ tokens, callers, port });
    const listening = Date.now();
    const served = await until(
      'a request through the tunnel answered 200',
      30_000,
      async () => {
        const res = await request(`${cp.base}/v1/tenants/${tenantId}/runtime/api/runtime`, { headers: admin });
        return res.status === 200 && Date.now();
      },
      50,
    );
    // A wait with a generous bound, not a claim about speed: the figure is bench/reconnect.bench.ts's.
    t.ok(served >= listening, 'a request through the tunnel succeeded after the control plane listened again');
    t.comment(
      `the first request through the tunnel succeeded ${served - listening} ms after the control plane listened again`,
    );
  },
);

void t.test(
  'handshakes beyond maxPendingHandshakes are shed with 503 and Retry-After; the runtime connects once there is room',
  async (t) => {
    let release: () => void = () => {};
    const gate = new Promise<void>((resolve) => (release = resolve));
    let entered: () => void = () => {};
    const pending = new Promise<void>((resolve) => (entered = resolve));
    // The token double's check waits for the test's gate: the first handshake stays pending.
    const slow = new StubRuntimeTokens();
    const check = slow.authenticate;
    slow.authenticate = async (token) => {
      entered();
      await gate;
      return check(token);
    };
    const held = slow.issue(randomUUID());
    const cp = await startControlPlane({ tokens: slow, callers, limits: { maxPendingHandshakes: 1 } });
    t.teardown(() => cp.close());
    const upgrade = (token: string) =>
      new Promise<http.IncomingMessage>((resolve, reject) => {
        const req = http.request({
          host: '127.0.0.1',
          port: cp.port,
          path: '/v1/tunnel',
          headers: {
            connection: 'Upgrade',
            upgrade: 'websocket',
            'sec-websocket-version': '13',
            'sec-websocket-key': 'dGhlIHNhbXBsZSBub25jZQ==',
            'sec-websocket-protocol': SUBPROTOCOL,
            authorization: `Bearer ${token}`,
          },
        });
        req.on('response', resolve);
        req.on('upgrade', (res, socket) => {
          socket.destroy();
          resolve(res);
        });
        req.on('error', reject);
        req.end();
      });
    const first = upgrade(held.token);
    await pending; // the first handshake is in authentication, held by the gate
    const shed = await upgrade(slow.issue(randomUUID()).token);
    t.equal(shed.statusCode, 503, 'a handshake beyond the limit is answered 503 at once');
    t.equal(shed.headers['retry-after'], '1', 'with Retry-After: 1');
    release();
    t.equal((await first).statusCode, 101, 'the handshake that was in progress completes');
    const tenantId = randomUUID();
    const runtime = await startRuntime(tenantId, cp, slow.issue(tenantId).token);
    t.teardown(() => runtime.close());
    await ready(cp, runtime);
    const through = await request(`${cp.base}/v1/tenants/${tenantId}/runtime/api/runtime`, { headers: admin });
    t.equal(
      through.status,
      200,
      'a runtime connects once the pending handshake is done: a request through its tunnel answers 200',
    );
  },
);
