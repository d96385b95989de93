/**
 * The relay between provisioner replicas cannot be aimed: two real replicas (two apps, each with
 * its own pool, on one database, on loopback), a hybrid runtime whose real tunnel client is
 * connected to replica B (its real request router and app-proxy behind it, the router recording
 * every request that reaches the runtime), a tenant key, and a loopback "internal service" that
 * records every request it gets (standing for a metadata endpoint or another internal API the
 * replicas can reach).
 *
 * Asserted over raw sockets (fetch would resolve dot segments itself): a request whose target is
 * an absolute URL (`GET http://host/... HTTP/1.1`) or `*` is refused with 400 in the API's error
 * shape before any route runs, on every route, and the internal service gets nothing; dot
 * segments, plain or percent-encoded, and encoded slashes or backslashes in a proxied path are
 * refused with 400 naming the problem, on the replica that would relay and on the one that holds
 * the tunnel, and the runtime gets nothing; a normal relayed request still works, with its query;
 * an action relayed from A to B is audited exactly once, with the caller's key, and A logs the
 * relay without the caller's credentials.
 */
import t from 'tap';
import http from 'node:http';
import net from 'node:net';
import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import { Writable } from 'node:stream';
import pino from 'pino';
import { createTestApi, startReplica } from '../../helpers/api.ts';
import { createPool } from '../../../provisioner/db/database.ts';
import { generateRequestSigningKeys } from '../../../provisioner/tunnel/index.ts';
import { startTunnelClient } from '../../../runtime/agents/tunnel-client/client.ts';
import { createRouter } from '../../../runtime/agents/request-router/router.ts';
import { buildAppProxy } from '../../../runtime/agents/app-proxy/app.ts';
import { loadPublicKey } from '../../../runtime/agents/app-proxy/request-token.ts';
import { staticRuntimeInfo } from '../../../runtime/agents/app-proxy/runtime-info.ts';
import type { RuntimeBootstrapAnswer } from '../../../provisioner/api/types.ts';
import { ApiClient } from '../../../provisioner/http/api-client.ts';
import { auditRows } from '../../helpers/audit.ts';

t.setTimeout(180_000);

/** Replica A's log lines, parsed (to check what it says about a relay). */
const linesOfA: Array<Record<string, unknown>> = [];
const logOfA = pino(
  { level: 'debug' },
  new Writable({
    write(chunk: Buffer, _enc, cb) {
      for (const line of chunk.toString('utf8').split('\n').filter(Boolean))
        linesOfA.push(JSON.parse(line) as Record<string, unknown>);
      cb();
    },
  }),
);
// Every replica signs with the same key (docs/tunnel.md): the runtime holds one public key.
const a = await createTestApi({
  env: {
    PROVISIONER_PUBLIC_URL: 'https://cp.example.test',
    PROVISIONER_REQUEST_SIGNING_KEY: generateRequestSigningKeys().privateKeyPem,
  },
  logger: logOfA,
});
const baseA = await a.app.listen({ port: 0, host: '127.0.0.1' });
const portA = (a.app.server.address() as AddressInfo).port;
const poolB = createPool(a.db.url, 5);
const b = await startReplica(a.config, { pool: poolB, url: a.db.url }, { replicaId: 'replica-b' });
await b.app.listen({ port: 0, host: '127.0.0.1' });
const portB = (b.app.server.address() as AddressInfo).port;
t.teardown(async () => {
  await b.close().catch(() => undefined);
  await poolB.end();
  await a.close();
});

// The internal service an attacker would aim the relay at: records whatever reaches it.
const internalSeen: Array<{ method: string; url: string; authorization: string | undefined }> = [];
const internal = http.createServer((req, res) => {
  internalSeen.push({ method: req.method ?? '', url: req.url ?? '', authorization: req.headers.authorization });
  res.writeHead(200, { 'content-type': 'text/plain' }).end('role-credentials');
});
internal.listen(0, '127.0.0.1');
await once(internal, 'listening');
const internalPort = (internal.address() as AddressInfo).port;
t.teardown(() => {
  internal.closeAllConnections();
  internal.close();
});

const tenant = await a.signup();
const auth = { authorization: `Bearer ${tenant.apiKey}` };
/** The tenant's client at replica A's socket, for the mapped routes. */
const atA = new ApiClient({ baseUrl: baseA, token: tenant.apiKey });
/** The runtimes' own routes (outside the route map), at replica A's socket. */
async function call<T>(method: string, path: string, key: string, body?: unknown) {
  const res = await fetch(baseA + path, {
    method,
    headers: { authorization: `Bearer ${key}`, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
  const text = await res.text();
  return { status: res.status, body: (text ? JSON.parse(text) : null) as T };
}

// The hybrid runtime 'plant', registered and its bootstrap token exchanged as the install's Job does.
const registered = await atA.call('POST /v1/tenants/:id/runtimes', {
  params: { id: tenant.tenantId },
  body: { name: 'plant', mode: 'hybrid', access: 'tunnel', argo: 'new' },
});
const exchange = await call<RuntimeBootstrapAnswer>('POST', '/v1/runtimes/bootstrap', registered.bootstrapToken, {});
if (exchange.status !== 200) throw new Error(`bootstrap exchange answered ${exchange.status}`);
const answer = exchange.body;

// Its agents: the app-proxy (this runtime's tokens only) behind the request router, which
// records every request reaching the runtime; the tunnel client connected to B.
const runtimeSeen: string[] = [];
const appProxy = await buildAppProxy({
  tenantId: answer.tenantId,
  runtimeId: answer.runtimeId,
  publicKey: loadPublicKey(answer.publicKey),
  runtimeInfo: staticRuntimeInfo({ runtimeVersion: 'plant', components: {} }),
  routes: async (api) => {
    api.get('/api/echo', async (request) => ({ url: request.url }));
  },
});
const appProxyUrl = await appProxy.listen({ port: 0, host: '127.0.0.1' });
const router = createRouter({ appProxyUrl, eventSourceUrl: `http://127.0.0.1:${internalPort}` });
const routerServer = http.createServer((req, res) => {
  runtimeSeen.push(req.url ?? '');
  router.handler(req, res);
});
routerServer.listen(0, '127.0.0.1');
await once(routerServer, 'listening');
const client = startTunnelClient({
  url: `ws://127.0.0.1:${portB}/v1/tunnel`,
  token: answer.runtimeToken,
  upstream: `http://127.0.0.1:${(routerServer.address() as AddressInfo).port}`,
  backoff: { initialMs: 50, maxMs: 200 },
});
if (!client.connected) await once(client.events, 'connected');
t.teardown(async () => {
  client.close();
  router.close();
  routerServer.close();
  await appProxy.close();
});
// The directory row is written right after the tunnel connects; renew() waits for pending writes.
await b.services.tunnelDirectory.renew();

interface RawAnswer {
  status: number;
  headers: Record<string, string>;
  body: { error?: { code: string; message: string; requestId?: string } } | null;
}

/** Sends a request line as it is, with `headers`, on a new connection, and reads the whole answer. */
function raw(port: number, requestLine: string, headers: Record<string, string> = auth): Promise<RawAnswer> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1');
    let data = '';
    socket.setEncoding('latin1');
    socket.on('data', (d: string) => (data += d));
    socket.on('error', reject);
    socket.on('end', () => {
      const [head = '', body = ''] = data.split('\r\n\r\n', 2);
      const [statusLine = '', ...lines] = head.split('\r\n');
      const hs: Record<string, string> = {};
      for (const l of lines) {
        const i = l.indexOf(':');
        hs[l.slice(0, i).toLowerCase()] = l.slice(i + 1).trim();
      }
      let parsed: RawAnswer['body'];
      try {
        parsed = body ? (JSON.parse(body) as RawAnswer['body']) : null;
      } catch {
        parsed = null;
      }
      resolve({ status: Number(statusLine.split(' ')[1]), headers: hs, body: parsed });
    });
    const lines = Object.entries({ host: `127.0.0.1:${port}`, ...headers, connection: 'close' }).map(
      ([k, v]) => `${k}: ${v}`,
    );
    socket.write(`${requestLine} HTTP/1.1\r\n${lines.join('\r\n')}\r\n\r\n`);
  });
}

const proxyBase = `/v1/tenants/${tenant.tenantId}/runtimes/plant/proxy`;

t.test('precondition: B holds the tunnel, A relays to it', async (t) => {
  t.equal(a.services.tunnel.runtimeStatus(answer.runtimeId).connected, false, 'A does not hold the tunnel');
  t.equal(b.services.tunnel.runtimeStatus(answer.runtimeId).connected, true, 'B holds it');
});

t.test('an absolute-form request target is refused before routing; the relay is not aimed anywhere', async (t) => {
  const attacks = [
    `GET http://127.0.0.1:${internalPort}${proxyBase}/../../../../../../latest/meta-data/iam/security-credentials/role`,
    `GET http://127.0.0.1:${internalPort}${proxyBase}/api/runtime`,
    `GET https://127.0.0.1:${internalPort}${proxyBase}/api/runtime`,
    `POST http://127.0.0.1:${internalPort}${proxyBase}/api/applications/apps/guestbook/refresh`,
  ];
  for (const line of attacks) {
    const res = await raw(portA, line);
    t.equal(res.status, 400, `${line}: 400`);
    t.equal(res.body?.error?.code, 'BAD_REQUEST', `${line}: the API's error code`);
    t.match(res.body?.error?.message, /absolute URL|origin-form/, `${line}: the message says what is wrong`);
    t.match(res.body?.error?.requestId, /^[0-9a-f-]{36}$/, `${line}: the answer carries a request id`);
  }
  t.same(internalSeen, [], 'the internal service got no request');
  t.same(runtimeSeen, [], 'the runtime got no request either');
});

t.test('every route refuses a target that is not a path, with the error shape and security headers', async (t) => {
  for (const line of [
    `GET http://127.0.0.1:${portA}/v1/whoami`,
    `GET http://example.test/healthz`,
    'OPTIONS *',
    `GET 127.0.0.1:${portA}/v1/whoami`,
  ]) {
    const res = await raw(portA, line);
    t.equal(res.status, 400, `${line}: 400`);
    t.equal(res.body?.error?.code, 'BAD_REQUEST', `${line}: BAD_REQUEST`);
    t.equal(res.headers['content-type'], 'application/json; charset=utf-8', `${line}: a JSON answer`);
    t.equal(res.headers['x-content-type-options'], 'nosniff', `${line}: with the API's security headers`);
  }
  t.equal((await raw(portA, 'GET /v1/whoami')).status, 200, 'the same route, origin-form: 200');
});

t.test('dot segments and encoded separators in a proxied path are refused on both replicas', async (t) => {
  const paths = [
    '/api/../../../../../../latest/meta-data',
    '/api/./runtime',
    '/api/%2e%2e/%2E%2E/webhooks/x',
    '/api/.%2e/webhooks/x',
    '/api/%2e./webhooks/x',
    '/api/%2e/runtime',
    '/..',
    '/api/..%2f..%2fwebhooks/x',
    '/api/..%2F..%2Fwebhooks/x',
    '/api/..%5c..%5cwebhooks/x',
    '/api/..\\..\\webhooks/x',
  ];
  for (const port of [portA, portB]) {
    for (const path of paths) {
      const res = await raw(port, `GET ${proxyBase}${path}`);
      const where = `${port === portA ? 'A (relays)' : 'B (holds the tunnel)'}: ${path}`;
      t.equal(res.status, 400, `${where}: 400`);
      t.equal(res.body?.error?.code, 'BAD_REQUEST', `${where}: BAD_REQUEST`);
      t.match(
        res.body?.error?.message,
        /dot segment|encoded slash|backslash/,
        `${where}: the message names the problem`,
      );
    }
  }
  t.same(runtimeSeen, [], 'the runtime got no request');
  t.same(internalSeen, [], 'nor did anything else');
  // A dot in a name is not a dot segment.
  const ok = await raw(portA, `GET ${proxyBase}/api/echo?file=../x.y`);
  t.equal(ok.status, 200, 'dots in the query and within names are fine');
});

t.test('a normal relayed request still reaches the runtime, with its path and query', async (t) => {
  runtimeSeen.length = 0;
  const res = await fetch(`${baseA}${proxyBase}/api/echo?x=1&y=%2F`, { headers: auth });
  t.equal(res.status, 200, 'relayed from A to B and through the tunnel');
  t.same(await res.json(), { url: '/api/echo?x=1&y=%2F' }, 'the runtime got the path and query as sent');
  t.same(runtimeSeen, ['/api/echo?x=1&y=%2F'], 'exactly that request reached the runtime');
});

t.test('an action relayed from A to B is audited once, with the caller, and A logs the relay', async (t) => {
  const whoami = await atA.call('GET /v1/whoami');
  const count = async () =>
    (await auditRows(a.db.pool, { targetId: tenant.tenantId, action: 'runtime.application.refresh' }))
      .filter((r) => r.after?.runtime === 'plant')
      .map((r) => ({ actor: r.actor, actor_role: r.actorRole, status: r.after?.status }));
  const before = (await count()).length;
  const res = await fetch(`${baseA}${proxyBase}/api/applications/apps/guestbook/refresh`, {
    method: 'POST',
    headers: auth,
  });
  // This app-proxy has no Argo objects to act on: it answers 404; the attempt is audited all the same.
  t.equal(res.status, 404, "the runtime's own answer comes back through the relay");
  const rows = await count();
  t.equal(rows.length, before + 1, 'one audit row for the one action (B serves it; A relays it and does not audit)');
  t.match(
    rows.at(-1),
    { actor: whoami.keyId, actor_role: 'tenant', status: 404 },
    "the row names the caller's key and the runtime's answer",
  );
  const relayLine = linesOfA.find(
    (l) => l.msg === 'request relayed to the replica holding the tunnel' && l.method === 'POST',
  );
  t.match(
    relayLine,
    {
      replica: 'replica-b',
      tenantId: tenant.tenantId,
      runtime: 'plant',
      path: '/api/applications/apps/guestbook/refresh',
      action: 'runtime.application.refresh',
    },
    'A logs the relay: where to, for which tenant, runtime and action',
  );
  t.notMatch(JSON.stringify(linesOfA), tenant.apiKey, "no log line of A holds the caller's key");
});
