/**
 * An ingress-based hybrid runtime reached by the control plane over https, every part real on
 * loopback: the runtime's request router in ingress mode behind an https server with a
 * certificate from a CA made here (openssl, sandbox/pki.ts), the real app-proxy behind it, and a
 * plain http server standing for the Argo Events webhook event source (the smallest upstream the
 * tunnel tests use). The control plane's side is the real ingress transport
 * (provisioner/tunnel/ingress.ts) with the real request signer, trusting that CA as an operator's
 * PROVISIONER_HYBRID_INGRESS_CA_FILE would.
 *
 * Asserted: a signed request is accepted by the router and the app-proxy; bodies stream both ways
 * intact; a request straight to the router without a token (or with another tenant's) is refused
 * 401 and nothing reaches the upstreams; an untrusted CA and a certificate for another host name
 * fail as RUNTIME_UNREACHABLE naming TLS; a loopback address without the operator's setting is
 * refused before any connection; one runtime's budget of requests in flight answers RUNTIME_BUSY
 * naming it while another runtime is still served; a runtime that does not answer in time is
 * RUNTIME_TIMEOUT.
 */
import { createHash, randomUUID } from 'node:crypto';
import { EventEmitter, once } from 'node:events';
import http from 'node:http';
import https from 'node:https';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import t from 'tap';
import { createCa, createServingCert } from '../../../sandbox/pki.ts';
import { createIngressTransport, type IngressTransport } from '../../../provisioner/tunnel/ingress.ts';
import { createRequestSigner, generateRequestSigningKeys } from '../../../provisioner/tunnel/request-token.ts';
import { TunnelError } from '../../../provisioner/tunnel/server.ts';
import { DEFAULT_TUNNEL_LIMITS } from '../../../provisioner/tunnel/limits.ts';
import { createRouter } from '../../../runtime/agents/request-router/router.ts';
import { buildAppProxy } from '../../../runtime/agents/app-proxy/app.ts';
import { loadPublicKey } from '../../../runtime/agents/app-proxy/request-token.ts';
import { staticRuntimeInfo } from '../../../runtime/agents/app-proxy/runtime-info.ts';
import { REQUEST_TOKEN_HEADER } from '../../../runtime/protocol/request-token.ts';

const keys = generateRequestSigningKeys();
const signer = createRequestSigner({ privateKeyPem: keys.privateKeyPem });
const tenantId = randomUUID();
const runtimeId = randomUUID();

const dir = await mkdtemp(join(tmpdir(), 'hybrid-ingress-'));
t.teardown(() => rm(dir, { recursive: true, force: true }));
const [trusted, rogue] = await Promise.all([
  createCa(join(dir, 'trusted'), 'customer-ingress-ca'),
  createCa(join(dir, 'rogue'), 'someone-else-ca'),
]);
// Serving certificates for 127.0.0.1 and localhost (not ::1), as sandbox/pki.ts makes them.
const [routerCert, rogueCert] = await Promise.all([
  createServingCert(trusted, 'ingress'),
  createServingCert(rogue, 'rogue'),
]);
const tlsOf = async (c: { certFile: string; keyFile: string }) => ({
  cert: await readFile(c.certFile),
  key: await readFile(c.keyFile),
});

const sha256 = (b: Buffer): string => createHash('sha256').update(b).digest('hex');
const pattern = (n: number): Buffer => Buffer.from(Array.from({ length: n }, (_, i) => (i * 7 + 3) % 251));

async function listen(server: http.Server | https.Server, host = '127.0.0.1'): Promise<number> {
  server.listen(0, host);
  await once(server, 'listening');
  return (server.address() as AddressInfo).port;
}
async function closeServer(server: http.Server | https.Server): Promise<void> {
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
}

// The event source: records what reaches it; /hold waits until the test releases it.
const seen: Array<{ url: string; bytes: number; sha256: string; token: boolean }> = [];
const held: Array<{ release: () => void }> = [];
const heldEvents = new EventEmitter();
const big = pattern(2 * 1024 * 1024 + 17);
const eventSource = http.createServer((req, res) => {
  const parts: Buffer[] = [];
  req.on('data', (c: Buffer) => parts.push(c));
  req.on('end', () => {
    const body = Buffer.concat(parts);
    seen.push({
      url: req.url ?? '',
      bytes: body.length,
      sha256: sha256(body),
      token: REQUEST_TOKEN_HEADER in req.headers,
    });
    if (req.url === '/big') {
      res.writeHead(200, { 'content-type': 'application/octet-stream' }).end(big);
    } else if (req.url === '/stall') {
      // A head and the start of a body, then nothing (the connection stays open).
      res.writeHead(200, { 'content-type': 'application/octet-stream' });
      res.write(Buffer.alloc(1024, 1));
      heldEvents.emit('stalled');
    } else if (req.url === '/hold') {
      held.push({ release: () => res.writeHead(200, { 'content-type': 'application/json' }).end('{"held":true}') });
      heldEvents.emit('held', held.length);
    } else {
      res
        .writeHead(200, { 'content-type': 'application/json' })
        .end(JSON.stringify({ bytes: body.length, sha256: sha256(body) }));
    }
  });
});
const eventPort = await listen(eventSource);
t.teardown(() => closeServer(eventSource));

// The app-proxy of this runtime (its token check is the real one).
const appProxy = await buildAppProxy({
  tenantId,
  runtimeId,
  publicKey: loadPublicKey(keys.publicKeyPem),
  runtimeInfo: staticRuntimeInfo({ runtimeVersion: '1.5.0', components: { argoCd: '8.0.17' } }),
});
await appProxy.listen({ port: 0, host: '127.0.0.1' });
t.teardown(() => appProxy.close());
const appProxyUrl = `http://127.0.0.1:${(appProxy.server.address() as AddressInfo).port}`;

/** The runtime's request router in ingress mode, served over https as the customer's ingress would. */
async function startIngress(
  cert: { certFile: string; keyFile: string },
  forRuntime: string,
): Promise<{ port: number; connections: () => number }> {
  const router = createRouter({
    appProxyUrl,
    eventSourceUrl: `http://127.0.0.1:${eventPort}`,
    requestTokens: { publicKey: loadPublicKey(keys.publicKeyPem), tenantId, runtimeId: forRuntime },
  });
  const server = https.createServer(await tlsOf(cert), router.handler);
  let connections = 0;
  server.on('connection', () => (connections += 1));
  // Both loopback families: ::1 is reached with a certificate that does not name it.
  const port = await listen(server, '::');
  t.teardown(async () => {
    router.close();
    await closeServer(server);
  });
  return { port, connections: () => connections };
}
const ingress = await startIngress(routerCert, runtimeId);
const otherRuntimeId = randomUUID();
const otherIngress = await startIngress(routerCert, otherRuntimeId);
const rogueIngress = await startIngress(rogueCert, runtimeId);

const loopbackPolicy = {
  allowedCidrs: ['127.0.0.0/8', '::1/128'],
  allowedCidrsVariable: 'PROVISIONER_HYBRID_INGRESS_ALLOWED_CIDRS',
} as const;
const limits = { ...DEFAULT_TUNNEL_LIMITS, requestTimeoutMs: 20_000 };
function transport(o: Partial<Parameters<typeof createIngressTransport>[0]> = {}): IngressTransport {
  const tr = createIngressTransport({
    signer,
    limits,
    policy: { ...loopbackPolicy, allowedCidrs: [...loopbackPolicy.allowedCidrs] },
    caPem: trusted.certPem,
    requestsPerRuntime: 2,
    ...o,
  });
  t.teardown(() => tr.close());
  return tr;
}
const control = transport();

async function call(
  tr: IngressTransport,
  o: { url?: string; method?: string; path: string; body?: Buffer; runtime?: string; signal?: AbortSignal },
): Promise<{ status: number; body: Buffer; headers: Map<string, string> }> {
  const res = await tr.forward({
    tenantId,
    runtimeId: o.runtime ?? runtimeId,
    ingressUrl: o.url ?? `https://localhost:${ingress.port}`,
    method: o.method ?? 'GET',
    path: o.path,
    headers: o.body ? [['content-type', 'application/octet-stream']] : [],
    body: o.body ? Readable.from([o.body.subarray(0, 1000), o.body.subarray(1000)]) : null,
    subject: 'key-123',
    signal: o.signal ?? new AbortController().signal,
  });
  const parts: Buffer[] = [];
  for await (const c of res.body) parts.push(c as Buffer);
  return { status: res.status, body: Buffer.concat(parts), headers: new Map(res.headers) };
}

async function failure(p: Promise<unknown>): Promise<TunnelError> {
  try {
    await p;
  } catch (err) {
    if (err instanceof TunnelError) return err;
    throw err;
  }
  throw new Error('the request succeeded where a failure was expected');
}

t.test('a signed request reaches the app-proxy through the https ingress and the router', async (t) => {
  const res = await call(control, { path: '/api/runtime' });
  t.equal(res.status, 200, 'the router and the app-proxy accepted the control plane token (200)');
  t.match(JSON.parse(res.body.toString()), { runtimeVersion: '1.5.0' }, "the app-proxy's answer came back");
});

t.test('bodies stream both ways intact', async (t) => {
  const body = pattern(3 * 1024 * 1024 + 5);
  const up = await call(control, { method: 'POST', path: '/webhooks/github/push', body });
  t.equal(up.status, 200);
  t.same(
    JSON.parse(up.body.toString()),
    { bytes: body.length, sha256: sha256(body) },
    'the 3 MiB request body arrived intact',
  );
  const down = await call(control, { path: '/webhooks/big' });
  t.equal(down.status, 200);
  t.equal(down.body.length, big.length, 'the whole 2 MiB response body came back');
  t.equal(sha256(down.body), sha256(big), 'the response body is intact');
});

t.test('straight to the router without a valid token: 401, nothing forwarded', async (t) => {
  const before = seen.length;
  const direct = async (path: string, headers: Record<string, string> = {}, method = 'POST') => {
    const req = https.request({
      host: '127.0.0.1',
      port: ingress.port,
      path,
      method,
      ca: trusted.certPem,
      headers,
      agent: false,
    });
    req.end(method === 'GET' ? undefined : 'payload');
    const [res] = (await once(req, 'response')) as [http.IncomingMessage];
    const parts: Buffer[] = [];
    for await (const c of res) parts.push(c as Buffer);
    return {
      status: res.statusCode,
      body: JSON.parse(Buffer.concat(parts).toString()) as { error: { code: string; message: string } },
    };
  };
  const unsigned = await direct('/webhooks/github/push');
  t.equal(unsigned.status, 401, 'an unsigned webhook is refused 401');
  t.equal(unsigned.body.error.code, 'UNAUTHENTICATED');
  t.match(unsigned.body.error.message, /request token/, 'the refusal says a request token is needed');
  const api = await direct('/api/runtime', {}, 'GET');
  t.equal(api.status, 401, 'an unsigned API call is refused 401');
  const otherTenant = signer.sign({ tenantId: randomUUID(), method: 'POST', path: '/webhooks/github/push' });
  const foreign = await direct('/webhooks/github/push', { [REQUEST_TOKEN_HEADER]: otherTenant });
  t.equal(foreign.status, 401, "another tenant's token is refused 401");
  t.equal(foreign.body.error.code, 'INVALID_REQUEST_TOKEN');
  for (const [what, token] of [
    ["the tenant's hosted runtime's token", signer.sign({ tenantId, method: 'POST', path: '/webhooks/github/push' })],
    [
      "another runtime's token",
      signer.sign({ tenantId, runtimeId: otherRuntimeId, method: 'POST', path: '/webhooks/github/push' }),
    ],
  ] as const) {
    const res = await direct('/webhooks/github/push', { [REQUEST_TOKEN_HEADER]: token });
    t.same([res.status, res.body.error.code], [401, 'INVALID_REQUEST_TOKEN'], `${what} is refused 401`);
  }
  const signed = signer.sign({ tenantId, runtimeId, method: 'POST', path: '/webhooks/github/push' });
  t.equal(
    (await direct('/webhooks/github/push', { [REQUEST_TOKEN_HEADER]: signed })).status,
    200,
    'its own token is accepted',
  );
  t.same(
    [(await direct('/webhooks/github/push', { [REQUEST_TOKEN_HEADER]: signed })).status, seen.length],
    [401, before + 1],
    'the same token again is refused 401 (used once), and only the accepted request reached the event source',
  );
  const wrongPath = await direct('/webhooks/other', {
    [REQUEST_TOKEN_HEADER]: signer.sign({ tenantId, runtimeId, method: 'POST', path: '/webhooks/github/push' }),
  });
  t.equal(wrongPath.status, 401, 'a token for another path is refused 401');
  t.equal(seen.length, before + 1, 'the event source saw none of the refused requests');
  const health = https.get({ host: '127.0.0.1', port: ingress.port, path: '/healthz', ca: trusted.certPem });
  const [healthRes] = (await once(health, 'response')) as [http.IncomingMessage];
  healthRes.resume();
  t.equal(healthRes.statusCode, 200, "the router's own /healthz needs no token (the kubelet's probes)");
});

t.test('a certificate from a CA the control plane does not trust: RUNTIME_UNREACHABLE naming TLS', async (t) => {
  const err = await failure(call(control, { url: `https://localhost:${rogueIngress.port}`, path: '/api/runtime' }));
  t.equal(err.code, 'RUNTIME_UNREACHABLE');
  t.equal(err.statusCode, 503);
  t.match(err.message, /TLS with runtime .* failed/, 'the message names TLS');
  t.match(err.message, /PROVISIONER_HYBRID_INGRESS_CA_FILE/, 'and the setting for an operator CA');
});

t.test('a certificate for another host name: RUNTIME_UNREACHABLE naming TLS', async (t) => {
  // The certificate names 127.0.0.1 and localhost, not ::1.
  const err = await failure(call(control, { url: `https://[::1]:${ingress.port}`, path: '/api/runtime' }));
  t.equal(err.code, 'RUNTIME_UNREACHABLE');
  t.match(err.message, /TLS with runtime .* failed \(ERR_TLS_CERT_ALTNAME_INVALID/, 'a host name mismatch');
});

t.test('loopback without the operator setting is refused before any connection', async (t) => {
  const strict = transport({
    policy: { allowedCidrs: [], allowedCidrsVariable: 'PROVISIONER_HYBRID_INGRESS_ALLOWED_CIDRS' },
  });
  const before = ingress.connections();
  for (const url of [`https://localhost:${ingress.port}`, `https://127.0.0.1:${ingress.port}`]) {
    const err = await failure(call(strict, { url, path: '/api/runtime' }));
    t.equal(err.code, 'RUNTIME_UNREACHABLE', `${url}: RUNTIME_UNREACHABLE`);
    t.match(
      err.message,
      /127\.0\.0\.1 is a loopback address.*PROVISIONER_HYBRID_INGRESS_ALLOWED_CIDRS/,
      `${url}: names the address and the setting`,
    );
  }
  t.equal(ingress.connections(), before, 'no connection was made to the ingress');
});

t.test("one runtime's budget of requests in flight: RUNTIME_BUSY naming it; other runtimes still served", async (t) => {
  const firstTwo = [call(control, { path: '/webhooks/hold' }), call(control, { path: '/webhooks/hold' })];
  // Both are in flight when the event source holds both.
  while (held.length < 2) await once(heldEvents, 'held');
  t.equal(control.inFlight(runtimeId), 2, 'two requests of the runtime in flight');
  const busy = await failure(call(control, { path: '/api/runtime' }));
  t.equal(busy.code, 'RUNTIME_BUSY', 'the third request of the runtime is refused');
  t.equal(busy.statusCode, 503);
  t.match(
    busy.message,
    /2 requests in flight.*PROVISIONER_HYBRID_INGRESS_REQUESTS_PER_RUNTIME/,
    'naming the budget and its setting',
  );
  const other = await call(control, {
    url: `https://localhost:${otherIngress.port}`,
    path: '/healthz',
    runtime: otherRuntimeId,
  });
  t.equal(other.status, 200, 'another runtime is served meanwhile');
  for (const h of held.splice(0)) h.release();
  const done = await Promise.all(firstTwo);
  t.same(
    done.map((d) => d.status),
    [200, 200],
    'the held requests finish',
  );
  t.equal(control.inFlight(runtimeId), 0, 'the budget is free again');
  t.equal((await call(control, { path: '/api/runtime' })).status, 200, 'and the runtime is served again');
});

t.test('a runtime that does not answer in time: RUNTIME_TIMEOUT', async (t) => {
  const impatient = transport({ limits: { ...limits, requestTimeoutMs: 300 } });
  const err = await failure(call(impatient, { path: '/webhooks/hold' }));
  t.equal(err.code, 'RUNTIME_TIMEOUT');
  t.match(err.message, /did not answer within 300 ms/, 'naming the bound it applies');
  t.equal(impatient.inFlight(runtimeId), 0, 'the timed-out request no longer counts against the budget');
  for (const h of held.splice(0)) h.release();
});

t.test('a response body without traffic for the idle timeout is cut off', async (t) => {
  const idle = transport({ limits: { ...limits, idleTimeoutMs: 300 } });
  const res = await idle.forward({
    tenantId,
    runtimeId,
    ingressUrl: `https://localhost:${ingress.port}`,
    method: 'GET',
    path: '/webhooks/stall',
    headers: [],
    body: null,
    signal: new AbortController().signal,
  });
  t.equal(res.status, 200, 'the head came');
  let received = 0;
  const outcome = await (async () => {
    for await (const c of res.body) received += (c as Buffer).length;
    return 'ended';
  })().catch((err: unknown) => `failed: ${err instanceof Error ? err.message : String(err)}`);
  t.match(outcome, /^failed/, 'the body fails instead of hanging');
  t.equal(received, 1024, 'after the part that was sent');
  t.equal(idle.inFlight(runtimeId), 0, 'the request no longer counts against the budget');
});

t.test('a caller that goes away cancels the request', async (t) => {
  const aborter = new AbortController();
  const before = held.length;
  const pending = call(control, { path: '/webhooks/hold', signal: aborter.signal });
  while (held.length <= before) await once(heldEvents, 'held');
  aborter.abort();
  const err = await failure(pending);
  t.equal(err.code, 'REQUEST_CANCELLED');
  t.equal(control.inFlight(runtimeId), 0, 'the cancelled request no longer counts against the budget');
  for (const h of held.splice(0)) h.release();
});
