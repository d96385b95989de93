import { randomUUID } from 'node:crypto';
import net from 'node:net';
import t from 'tap';
import WebSocket from 'ws';
import { CloseCode, encodeFrame, PROTOCOL_VERSION, SUBPROTOCOL } from '../../../runtime/protocol/frames.ts';
import { Readable } from 'node:stream';
import {
  json,
  pattern,
  ready,
  request,
  startControlPlane,
  startRuntime,
  StubCallers,
  StubRuntimeTokens,
} from './harness.ts';
import { until } from '../../../sandbox/until.ts';

const tokens = new StubRuntimeTokens();
const callers = new StubCallers();
const admin = { authorization: `Bearer ${callers.add('admin')}` };
// The request timeout is long here so that requests the tests hold at the runtime cannot time out
// on a loaded machine; the timeout itself is tested on a control plane of its own (below).
const cp = await startControlPlane({
  tokens,
  callers,
  limits: {
    maxPayload: 256 * 1024,
    maxStreams: 5,
    requestTimeoutMs: 60_000,
    maxHeaderBytes: 4096,
    maxRequestBodyBytes: 64 * 1024,
  },
});
const tenantId = randomUUID();
const runtime = await startRuntime(tenantId, cp, tokens.issue(tenantId).token);
const base = `${cp.base}/v1/tenants/${tenantId}/runtime`;
t.teardown(async () => {
  await runtime.close();
  await cp.close();
});
await ready(cp, runtime);

const code = (res: { body: Buffer }): string => (json(res as never) as { error: { code: string } }).error.code;
const stillServing = async (): Promise<number> => (await request(`${base}/api/runtime`, { headers: admin })).status;

/** An authenticated raw tunnel connection that has said hello. */
async function rawTunnel(): Promise<WebSocket> {
  const other = randomUUID();
  const ws = new WebSocket(cp.wsUrl, SUBPROTOCOL, {
    headers: { authorization: `Bearer ${tokens.issue(other).token}` },
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
  await until('raw tunnel registered', 10_000, () => cp.tunnel.status(other).connected);
  return ws;
}

const closeCode = (ws: WebSocket): Promise<number> => new Promise((resolve) => ws.once('close', (c) => resolve(c)));

void t.test('no tunnel connected → 503 RUNTIME_UNREACHABLE', async (t) => {
  const res = await request(`${cp.base}/v1/tenants/${randomUUID()}/runtime/api/runtime`, { headers: admin });
  t.equal(res.status, 503);
  t.equal(code(res), 'RUNTIME_UNREACHABLE');
  t.match((json(res) as { error: { message: string } }).error.message, /not connected/);
});

void t.test('an oversize frame closes that tunnel with 1009 and nothing else', async (t) => {
  const ws = await rawTunnel();
  const closed = closeCode(ws);
  ws.send(Buffer.alloc(512 * 1024, 1));
  t.equal(await closed, CloseCode.messageTooBig);
  t.equal(await stillServing(), 200, 'the server and other tunnels carry on');
});

void t.test('a malformed frame closes the tunnel with a protocol-error code', async (t) => {
  const ws = await rawTunnel();
  const closed = closeCode(ws);
  ws.send(Buffer.from([PROTOCOL_VERSION, 99, 0, 0, 0, 1]));
  t.equal(await closed, CloseCode.protocolError);
  const ws2 = await rawTunnel();
  const closed2 = closeCode(ws2);
  ws2.send('text frames are not the protocol');
  t.equal(await closed2, CloseCode.protocolError);
  t.equal(await stillServing(), 200);
});

void t.test('a header flood on the upgrade is refused by the HTTP server', async (t) => {
  const sock = net.connect(cp.port, '127.0.0.1');
  const reply = new Promise<string>((resolve) => {
    let buf = '';
    sock.on('data', (d) => (buf += d.toString()));
    sock.on('close', () => resolve(buf));
    sock.on('error', () => resolve(buf));
  });
  const flood = Array.from({ length: 2000 }, (_, i) => `x-flood-${i}: ${'v'.repeat(40)}`).join('\r\n');
  sock.write(`GET /v1/tunnel HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n${flood}\r\n\r\n`);
  t.match(await reply, /^HTTP\/1\.1 431/);
  t.equal(await stillServing(), 200);
});

void t.test('request headers over the tunnel limit → 431 on that request only', async (t) => {
  const headers: Record<string, string> = { ...admin };
  for (let i = 0; i < 60; i++) headers[`x-big-${i}`] = 'v'.repeat(100);
  const res = await request(`${base}/api/runtime`, { headers });
  t.equal(res.status, 431);
  t.equal(code(res), 'REQUEST_HEADERS_TOO_LARGE');
  t.equal(await stillServing(), 200);
});

void t.test('a response head over the limit from the runtime → 502, the tunnel stays up', async (t) => {
  const res = await request(`${base}/api/test/big-headers?headers=80&size=100`, { headers: admin });
  t.equal(res.status, 502);
  t.equal(code(res), 'RUNTIME_BAD_RESPONSE');
  t.equal(cp.tunnel.status(tenantId).connected, true);
  t.equal(await stillServing(), 200);
});

void t.test('more concurrent requests than maxStreams → 503 RUNTIME_BUSY for the extra one', async (t) => {
  const held = Array.from({ length: 5 }, () => request(`${base}/api/test/barrier?n=1000`, { headers: admin }));
  await until('five requests held at the runtime', 10_000, () => runtime.state.barrierWaiting.length === 5);
  const extra = await request(`${base}/api/runtime`, { headers: admin });
  t.equal(extra.status, 503);
  t.equal(code(extra), 'RUNTIME_BUSY');
  for (const release of runtime.state.barrierWaiting.splice(0)) release();
  const statuses = (await Promise.all(held)).map((r) => r.status);
  t.same(statuses, [200, 200, 200, 200, 200], 'the five held requests are answered normally');
  await until('streams released', 10_000, () => (cp.tunnel.status(tenantId).activeStreams ?? 0) === 0);
  t.equal(await stillServing(), 200);
});

void t.test('no response head within the request timeout → 504 RUNTIME_TIMEOUT', async (t) => {
  const timeoutMs = 300;
  const short = await startControlPlane({ tokens, callers, limits: { requestTimeoutMs: timeoutMs } });
  const other = randomUUID();
  const held = await startRuntime(other, short, tokens.issue(other).token);
  t.teardown(async () => {
    for (const release of held.state.barrierWaiting.splice(0)) release();
    await held.close();
    await short.close();
  });
  await ready(short, held);
  const started = Date.now();
  const res = await request(`${short.base}/v1/tenants/${other}/runtime/api/test/barrier?n=1000`, { headers: admin });
  const elapsed = Date.now() - started;
  t.equal(res.status, 504);
  t.equal(code(res), 'RUNTIME_TIMEOUT');
  t.equal(
    held.state.barrierWaiting.length,
    1,
    'answered while the runtime still held the request (nothing released it)',
  );
  t.ok(elapsed >= timeoutMs - 5, `not answered before the ${timeoutMs} ms timeout (${elapsed} ms)`);
});

const LIMIT = 64 * 1024;
const postDigest = (body: Buffer | Readable): ReturnType<typeof request> =>
  request(`${base}/api/test/digest`, {
    method: 'POST',
    headers: { ...admin, 'content-type': 'application/octet-stream' },
    body,
  });

void t.test('a request body at the limit is forwarded whole', async (t) => {
  const res = await postDigest(pattern(LIMIT));
  t.equal(res.status, 200);
  t.equal((json(res) as { bytes: number }).bytes, LIMIT);
});

void t.test('a declared Content-Length over the limit → 413 naming the limit, nothing forwarded', async (t) => {
  const streamsBefore = cp.tunnel.status(tenantId).activeStreams;
  const res = await postDigest(pattern(LIMIT + 1));
  t.equal(res.status, 413);
  t.equal(code(res), 'PAYLOAD_TOO_LARGE');
  const message = (json(res) as { error: { message: string } }).error.message;
  t.match(message, `${LIMIT + 1} bytes`);
  t.match(message, `limit of ${LIMIT} bytes`);
  t.equal(res.headers.connection, 'close');
  t.equal(cp.tunnel.status(tenantId).activeStreams, streamsBefore);
  t.equal(await stillServing(), 200);
});

void t.test('a chunked request body that grows past the limit → 413 naming the limit', async (t) => {
  const chunks = Array.from({ length: 8 }, (_, i) => pattern(16 * 1024, i * 16 * 1024));
  const res = await postDigest(Readable.from(chunks));
  t.equal(res.status, 413);
  t.equal(code(res), 'PAYLOAD_TOO_LARGE');
  t.match((json(res) as { error: { message: string } }).error.message, `limit of ${LIMIT} bytes`);
  await until('the stream was reset', 10_000, () => (cp.tunnel.status(tenantId).activeStreams ?? 0) === 0);
  t.equal(cp.tunnel.status(tenantId).connected, true);
  t.equal(await stillServing(), 200);
});

void t.test('a chunked request body within the limit is forwarded whole', async (t) => {
  const chunks = Array.from({ length: 4 }, (_, i) => pattern(16 * 1024, i * 16 * 1024));
  const res = await postDigest(Readable.from(chunks));
  t.equal(res.status, 200);
  t.equal((json(res) as { bytes: number }).bytes, LIMIT);
});

void t.test(
  'authenticated connections of one tenant waiting for their hello are bounded; other tenants are not affected',
  async (t) => {
    const perTenant = cp.tunnel.limits.maxPendingHandshakesPerTenant;
    const flooder = randomUUID();
    const { token } = tokens.issue(flooder);
    /** Opens a tunnel socket with the tenant's token and never says hello; resolves with the upgrade's answer. */
    const silent = (tok: string): Promise<{ ws: WebSocket; status: number; code?: string }> =>
      new Promise((resolve) => {
        const ws = new WebSocket(cp.wsUrl, SUBPROTOCOL, { headers: { authorization: `Bearer ${tok}` } });
        ws.on('error', () => {});
        ws.once('open', () => resolve({ ws, status: 101 }));
        ws.once('unexpected-response', (_req, res) => {
          let body = '';
          res.on('data', (d: Buffer) => (body += d.toString()));
          res.on('end', () =>
            resolve({
              ws,
              status: res.statusCode ?? 0,
              code: (JSON.parse(body) as { error: { code: string } }).error.code,
            }),
          );
        });
      });
    const held: WebSocket[] = [];
    t.teardown(() => {
      for (const ws of held) ws.terminate();
    });
    for (let i = 0; i < perTenant; i++) {
      const r = await silent(token);
      held.push(r.ws);
      t.equal(r.status, 101, `silent connection ${i + 1} of ${perTenant} is upgraded`);
    }
    const refused = await silent(token);
    t.equal(refused.status, 429, `connection ${perTenant + 1} of the same tenant is refused`);
    t.equal(refused.code, 'TOO_MANY_TUNNEL_HANDSHAKES');
    const bystander = randomUUID();
    const other = await silent(tokens.issue(bystander).token);
    held.push(other.ws);
    t.equal(other.status, 101, "another tenant's upgrade is accepted meanwhile");
    // One waiting connection goes away: there is room again for this tenant.
    const gone = new Promise((resolve) => held[0]!.once('close', resolve));
    held[0]!.close();
    await gone;
    // The server sees the close a moment after the client: the upgrade is retried until it is accepted.
    let again = await silent(token);
    if (again.status !== 101)
      again = await until('an upgrade of that tenant accepted again', 10_000, async () => {
        const a = await silent(token);
        return a.status === 101 && a;
      });
    held.push(again.ws);
    t.equal(again.status, 101, 'after one of them closed, a new connection of that tenant is upgraded');
    t.equal(await stillServing(), 200);
  },
);
