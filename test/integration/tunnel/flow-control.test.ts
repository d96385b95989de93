import { randomUUID } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Readable } from 'node:stream';
import t from 'tap';
import WebSocket, { WebSocketServer } from 'ws';
import { SUBPROTOCOL } from '../../../runtime/protocol/frames.ts';
import { Mux } from '../../../runtime/protocol/mux.ts';
import { ready, request, startControlPlane, startRuntime, StubCallers, StubRuntimeTokens } from './harness.ts';
import { until } from '../../../sandbox/until.ts';

const WINDOW = 256 * 1024;
const CHUNK = 64 * 1024;

void t.test('a receiver that stops reading holds at most one window; the sender stops producing', async (t) => {
  const wss = new WebSocketServer({ port: 0, host: '127.0.0.1', handleProtocols: () => SUBPROTOCOL });
  await new Promise((resolve) => wss.once('listening', resolve));
  const port = (wss.address() as AddressInfo).port;
  const serverSide = new Promise<Mux>((resolve) => {
    wss.once('connection', (ws) =>
      resolve(
        new Mux(ws, {
          role: 'server',
          window: WINDOW,
          maxMessageBytes: 1 << 20,
          maxStreams: 10,
          maxHeaderBytes: 8192,
          idleTimeoutMs: 60_000,
        }),
      ),
    );
  });
  const ws = new WebSocket(`ws://127.0.0.1:${port}`, SUBPROTOCOL);
  // The Mux must exist before the server's hello can arrive: create it in the 'open' handler.
  const client = await new Promise<Mux>((resolve) =>
    ws.once('open', () =>
      resolve(
        new Mux(ws, {
          role: 'client',
          window: WINDOW,
          maxMessageBytes: 1 << 20,
          maxStreams: 10,
          maxHeaderBytes: 8192,
          idleTimeoutMs: 60_000,
        }),
      ),
    ),
  );
  const server = await serverSide;
  t.teardown(async () => {
    client.close(1000, 'done');
    await new Promise((resolve) => wss.close(resolve));
  });
  await until('hello exchanged', 10_000, () => server.ready && client.ready);

  let produced = 0;
  client.on('stream', (stream) => {
    stream.respond({ status: 200, headers: [] });
    stream.sendBody(
      new Readable({
        read() {
          if (produced >= 1024 * 1024 * 1024) {
            this.push(null);
            return;
          }
          produced += CHUNK;
          this.push(Buffer.alloc(CHUNK));
        },
      }),
    );
  });
  const stream = server.open({ method: 'GET', path: '/', headers: [] });
  await new Promise((resolve) => stream.once('response', resolve));
  // Nobody reads stream.body. Wait until the producer has stalled.
  let last = -1;
  let stableSince = Date.now();
  await until('producer stalled', 5000, () => {
    if (produced !== last) {
      last = produced;
      stableSince = Date.now();
    }
    return Date.now() - stableSince > 300;
  });
  // Bound: the window (credited, not yet handed on) + the body Readable's buffer (64 KiB + one chunk).
  t.ok(stream.bufferedBytes <= WINDOW + 2 * CHUNK, `receiver holds ${stream.bufferedBytes} bytes (window ${WINDOW})`);
  t.ok(produced <= WINDOW + 16 * 1024 + 2 * CHUNK, `sender produced ${produced} bytes of 1 GiB`);

  // A second stream on the same connection is not stalled by the first.
  const other = server.open({ method: 'GET', path: '/', headers: [] });
  await new Promise((resolve) => other.once('response', resolve));
  let got = 0;
  for await (const c of other.body) {
    got += (c as Buffer).length;
    if (got >= 4 * 1024 * 1024) break;
  }
  t.ok(got >= 4 * 1024 * 1024, 'another stream flows while the first is stalled');

  // Reading the stalled stream resumes it.
  const before = produced;
  let read = 0;
  for await (const c of stream.body) {
    read += (c as Buffer).length;
    if (read >= 2 * 1024 * 1024) break;
  }
  t.ok(produced > before, 'reading again resumes the sender');
});

void t.test('end to end: a caller that stops reading a 1 GiB response stalls only its own stream', async (t) => {
  const tokens = new StubRuntimeTokens();
  const callers = new StubCallers();
  const admin = { authorization: `Bearer ${callers.add('admin')}` };
  const cp = await startControlPlane({ tokens, callers });
  const tenantId = randomUUID();
  const runtime = await startRuntime(tenantId, cp, tokens.issue(tenantId).token);
  t.teardown(async () => {
    await runtime.close();
    await cp.close();
  });
  await ready(cp, runtime);

  const req = http.request(`${cp.base}/v1/tenants/${tenantId}/runtime/api/test/producer?size=${1024 * 1024 * 1024}`, {
    headers: admin,
  });
  const res = await new Promise<http.IncomingMessage>((resolve) => req.once('response', resolve).end());
  res.pause();
  t.equal(res.statusCode, 200);
  let last = -1;
  let stableSince = Date.now();
  let peakBuffered = 0;
  await until('producer stalled', 10_000, () => {
    peakBuffered = Math.max(peakBuffered, cp.tunnel.stats().bufferedBytes);
    if (runtime.state.produced !== last) {
      last = runtime.state.produced;
      stableSince = Date.now();
    }
    return Date.now() - stableSince > 500;
  });
  const limit = cp.tunnel.limits.streamWindow;
  t.ok(
    peakBuffered <= limit + 2 * CHUNK,
    `control plane held at most ${peakBuffered} bytes for the stalled stream (window ${limit})`,
  );
  // What remains in flight sits in kernel socket buffers of the four loopback hops, not in our processes.
  t.ok(
    runtime.state.produced < 64 * 1024 * 1024,
    `the runtime produced ${(runtime.state.produced / 1048576).toFixed(1)} MiB of 1024 MiB, then stopped`,
  );

  const other = await request(`${cp.base}/v1/tenants/${tenantId}/runtime/api/test/bytes?size=${2 * 1024 * 1024}`, {
    headers: admin,
  });
  t.equal(other.status, 200);
  t.equal(other.body.length, 2 * 1024 * 1024, 'other requests on the tunnel still flow');

  req.destroy();
  await until('the abandoned stream is reset', 10_000, () => (cp.tunnel.status(tenantId).activeStreams ?? 0) === 0);
  t.equal(cp.tunnel.status(tenantId).activeStreams ?? 0, 0, 'the abandoned stream was reset when the caller went away');
});
