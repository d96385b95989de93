/**
 * Where relayToReplica sends a request, on its own (the API refuses such request targets before
 * routing; this is the layer behind that): a loopback "front" server relays every request it gets
 * to an "owner replica" server, and an "internal service" records whatever reaches it. Whatever
 * the caller's request target (an absolute URL naming the internal service, dot segments), the
 * relay connects to the owner's origin only and sends the path it was given; a path that would
 * change the host (`//host/…`) is refused before any connection.
 */
import { once } from 'node:events';
import http from 'node:http';
import net, { type AddressInfo } from 'node:net';
import t from 'tap';
import { relayToReplica } from '../../../provisioner/tunnel/relay.ts';

async function recorder(): Promise<{ server: http.Server; port: number; seen: string[] }> {
  const seen: string[] = [];
  const server = http.createServer((req, res) => {
    seen.push(req.url ?? '');
    res.writeHead(200, { 'content-type': 'text/plain' }).end('ok');
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  t.teardown(() => {
    server.closeAllConnections();
    server.close();
  });
  return { server, port: (server.address() as AddressInfo).port, seen };
}

const owner = await recorder();
const internal = await recorder();

/** The path the front relays with, per request (the route builds it from its parameters). */
let relayPath = '/v1/tenants/t1/runtime/api/runtime';
const outcomes: string[] = [];
const front = http.createServer((req, res) => {
  relayToReplica({
    // A path and query in the owner's URL are not where the relay goes: only its origin is.
    owner: { replicaId: 'replica-b', url: `http://127.0.0.1:${owner.port}/somewhere/else?x=1`, since: new Date() },
    tenantId: 't1',
    replicaId: 'replica-a',
    raw: req,
    path: relayPath,
    body: null,
    requestId: 'r1',
    timeoutMs: 10_000,
    idleTimeoutMs: 10_000,
    signal: new AbortController().signal,
  }).then(
    (answer) => {
      outcomes.push(`relayed ${answer.status}`);
      answer.body.resume();
      res.writeHead(answer.status).end();
    },
    (err: Error) => {
      outcomes.push(`refused: ${err.message}`);
      res.writeHead(502).end();
    },
  );
});
front.listen(0, '127.0.0.1');
await once(front, 'listening');
const frontPort = (front.address() as AddressInfo).port;
t.teardown(() => {
  front.closeAllConnections();
  front.close();
});

/** Sends a request line as it is to the front and waits for its answer's status. */
async function send(requestLine: string): Promise<number> {
  const socket = net.connect(frontPort, '127.0.0.1');
  let data = '';
  socket.setEncoding('latin1');
  socket.on('data', (d: string) => (data += d));
  socket.write(`${requestLine} HTTP/1.1\r\nhost: front\r\nconnection: close\r\n\r\n`);
  await once(socket, 'end');
  return Number(data.split(' ')[1]);
}

t.test("an absolute-form target does not choose the relay's host or path", async (t) => {
  const status = await send(`GET http://127.0.0.1:${internal.port}/latest/meta-data/iam/security-credentials/role`);
  t.equal(status, 200, 'the front answered with the relayed status');
  t.same(owner.seen, ['/v1/tenants/t1/runtime/api/runtime'], 'the owner replica got the path the route built');
  t.same(internal.seen, [], 'the internal service got nothing');
});

t.test('dot segments in the target are not resolved into another path', async (t) => {
  owner.seen.length = 0;
  await send('GET /v1/tenants/t1/runtime/../../../latest/meta-data');
  t.same(owner.seen, ['/v1/tenants/t1/runtime/api/runtime'], 'the owner got the given path, not a resolved one');
});

t.test('a path that would name another host is refused before any connection', async (t) => {
  owner.seen.length = 0;
  outcomes.length = 0;
  relayPath = `//127.0.0.1:${internal.port}/latest/meta-data`;
  const status = await send('GET /v1/tenants/t1/runtime/api/runtime');
  t.equal(status, 502, 'the front got a failure');
  t.match(outcomes, [/refused: relay path must start with a single '\/'/], 'the relay refused the path');
  t.same([owner.seen, internal.seen], [[], []], 'nothing reached the owner or the internal service');
});
