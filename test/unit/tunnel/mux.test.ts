/**
 * The stream multiplexer over a real WebSocket pair on loopback: how body chunks become frames.
 */
import { createHash } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import { PassThrough } from 'node:stream';
import t from 'tap';
import WebSocket, { WebSocketServer } from 'ws';
import { decodeFrame } from '../../../runtime/protocol/frames.ts';
import { Mux, type TunnelStream } from '../../../runtime/protocol/mux.ts';

const options = {
  window: 256 * 1024,
  maxMessageBytes: 1024 * 1024,
  maxStreams: 8,
  maxHeaderBytes: 4096,
  idleTimeoutMs: 10_000,
  maxChunkBytes: 64 * 1024,
};

/** A server mux and a client mux over one loopback WebSocket; `sizes` records each data frame the client receives. */
async function pair(t: { teardown(fn: () => unknown): void }): Promise<{ server: Mux; client: Mux; sizes: number[] }> {
  const wss = new WebSocketServer({ port: 0, host: '127.0.0.1', perMessageDeflate: false });
  await new Promise((resolve) => wss.once('listening', resolve));
  const accepted = new Promise<WebSocket>((resolve) => wss.once('connection', resolve));
  const ws = new WebSocket(`ws://127.0.0.1:${(wss.address() as AddressInfo).port}`, { perMessageDeflate: false });
  const sizes: number[] = [];
  ws.on('message', (data: Buffer) => {
    const f = decodeFrame(data);
    if (f.type === 'data') sizes.push(f.chunk.length);
  });
  await new Promise((resolve) => ws.once('open', resolve));
  const server = new Mux(await accepted, { role: 'server', ...options });
  const client = new Mux(ws, { role: 'client', ...options });
  await Promise.all([new Promise((r) => server.once('ready', r)), new Promise((r) => client.once('ready', r))]);
  t.teardown(async () => {
    client.close(1000, 'done');
    await new Promise((resolve) => wss.close(resolve));
  });
  return { server, client, sizes };
}

async function collect(stream: TunnelStream): Promise<Buffer> {
  const parts: Buffer[] = [];
  for await (const c of stream.body) parts.push(c as Buffer);
  return Buffer.concat(parts);
}

void t.test('small chunks written in one event-loop turn travel as one frame', async (t) => {
  const { server, client, sizes } = await pair(t);
  const received = new Promise<Buffer>((resolve) => client.once('stream', (s) => void collect(s).then(resolve)));
  const stream = server.open({ method: 'POST', path: '/x', headers: [] });
  const body = new PassThrough();
  stream.sendBody(body);
  const chunks = Array.from({ length: 10 }, (_, i) => Buffer.alloc(4096, i));
  for (const c of chunks) body.write(c);
  body.end();
  t.same(await received, Buffer.concat(chunks));
  t.same(sizes, [40960], 'ten 4 KiB chunks, one frame');
});

void t.test('a large body is cut into frames of at most maxChunkBytes, within credit, bytes intact', async (t) => {
  const { server, client, sizes } = await pair(t);
  const received = new Promise<Buffer>((resolve) => client.once('stream', (s) => void collect(s).then(resolve)));
  const stream = server.open({ method: 'POST', path: '/x', headers: [] });
  const body = new PassThrough();
  stream.sendBody(body);
  const data = Buffer.alloc(3 * 1024 * 1024 + 123);
  for (let i = 0; i < data.length; i++) data[i] = (i * 7 + 3) & 0xff;
  // Uneven pieces, so frames gather parts of several chunks.
  for (let off = 0; off < data.length; off += 10_007)
    body.write(data.subarray(off, Math.min(data.length, off + 10_007)));
  body.end();
  const got = await received;
  t.equal(createHash('sha256').update(got).digest('hex'), createHash('sha256').update(data).digest('hex'));
  t.ok(
    sizes.every((n) => n <= 64 * 1024),
    'no frame over maxChunkBytes',
  );
  t.equal(
    sizes.reduce((a, b) => a + b, 0),
    data.length,
  );
  t.ok(sizes.length < Math.ceil(data.length / 10_007), 'fewer frames than source chunks');
  t.equal(stream.error, null);
});

void t.test(
  'goaway: the client hears it, the open stream finishes, no new stream opens, the connection then closes with 1001',
  async (t) => {
    const { server, client } = await pair(t);
    t.same(client.peer?.features, ['goaway'], 'each end announces the optional frames it understands');
    let served: TunnelStream | undefined;
    client.on('stream', (s) => (served = s));
    const stream = server.open({ method: 'GET', path: '/slow', headers: [] });
    stream.sendBody(null);
    await new Promise((r) => setImmediate(r));
    const heard = new Promise<string>((resolve) => client.once('goaway', resolve));
    t.equal(server.goAway('replica going away'), true);
    t.equal(await heard, 'replica going away');
    t.ok(server.draining && client.draining);
    t.throws(
      () => server.open({ method: 'GET', path: '/new', headers: [] }),
      { code: 'CONNECTION_LOST' },
      'no new stream on a draining connection',
    );
    const closed = new Promise<number>((resolve) => client.once('close', resolve));
    served!.respond({ status: 200, headers: [] });
    served!.sendBody(null);
    const head = await new Promise<{ status: number }>((resolve) => stream.once('response', resolve));
    t.equal(head.status, 200, 'the open stream was answered after the goaway');
    await collect(stream);
    t.equal(await closed, 1001, 'closed once the last stream ended');
  },
);

void t.test('goAway() returns false and sends nothing to a peer that did not announce it', async (t) => {
  const { server } = await pair(t);
  (server.peer as { features?: string[] }).features = undefined;
  t.equal(server.goAway('x'), false);
  t.equal(server.draining, false);
  t.equal(server.ready, true, 'the connection is left to the caller');
});
