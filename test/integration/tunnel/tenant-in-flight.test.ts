/**
 * Per-tenant budgets across all of a tenant's runtimes, so that registering more runtimes does
 * not multiply what one tenant may hold on a replica:
 *
 * - requests in flight through its tunnels (its hosted runtime's and its hybrid runtimes'
 *   together; this bounds the memory its streams hold): the real tunnel server on loopback with
 *   real tunnel clients, each in front of a TEST DOUBLE of a runtime's request router (a plain
 *   HTTP server that holds `/hold` until told and answers `/fast` at once; the real router and
 *   app-proxy are behind the tunnel in test/integration/tunnel/*.test.ts);
 * - requests in flight over its runtimes' ingresses: the real ingress transport over https to a
 *   loopback server with a certificate from a CA made here (sandbox/pki.ts), standing for the
 *   customers' ingresses (the real router behind one: test/integration/runtime/hybrid-ingress.test.ts).
 *
 * Asserted: past the tenant's budget a request is refused with 503 RUNTIME_BUSY naming the setting,
 * although the runtime it was for is within its own budget; another tenant is served meanwhile;
 * once requests finish or are cancelled, the tenant is served again.
 */
import { randomUUID } from 'node:crypto';
import { EventEmitter, once } from 'node:events';
import http from 'node:http';
import https from 'node:https';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { createCa, createServingCert } from '../../../sandbox/pki.ts';
import { createIngressTransport } from '../../../provisioner/tunnel/ingress.ts';
import { createRequestSigner, generateRequestSigningKeys } from '../../../provisioner/tunnel/request-token.ts';
import {
  createTunnelServer,
  TunnelError,
  type ForwardResponse,
  type TunnelIdentity,
} from '../../../provisioner/tunnel/server.ts';
import { DEFAULT_TUNNEL_LIMITS } from '../../../provisioner/tunnel/limits.ts';
import { startTunnelClient, type TunnelClient } from '../../../runtime/agents/tunnel-client/client.ts';

t.setTimeout(120_000);

async function listen(server: http.Server | https.Server): Promise<number> {
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return (server.address() as AddressInfo).port;
}
async function closeServer(server: http.Server | https.Server): Promise<void> {
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
}

/** `/hold` waits until released; anything else answers at once. Every request is counted. */
function holdingHandler() {
  const held: Array<() => void> = [];
  const events = new EventEmitter();
  const handler = (req: http.IncomingMessage, res: http.ServerResponse): void => {
    if (req.url === '/hold') {
      held.push(() => res.writeHead(200, { 'content-type': 'application/json' }).end('{"held":true}'));
      events.emit('held');
    } else res.writeHead(200, { 'content-type': 'application/json' }).end('{"fast":true}');
  };
  /** Resolves once `n` requests are held. */
  const holding = async (n: number): Promise<void> => {
    while (held.length < n) await once(events, 'held');
  };
  return { handler, held, holding };
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

async function drain(res: { body: NodeJS.ReadableStream }): Promise<string> {
  const parts: Buffer[] = [];
  for await (const c of res.body) parts.push(c as Buffer);
  return Buffer.concat(parts).toString('utf8');
}

t.test("the tunnels' budget covers all of a tenant's runtimes, hosted and hybrid", async (t) => {
  // TEST DOUBLE of the provisioner's runtime-key lookup (the real one reads api_keys).
  const identities = new Map<string, TunnelIdentity>();
  const tokenFor = (id: Omit<TunnelIdentity, 'keyId'>): string => {
    const token = `hrt_runtime_${randomUUID()}`;
    identities.set(token, { ...id, keyId: randomUUID() });
    return token;
  };
  const tunnel = createTunnelServer({
    authenticate: async (token) => identities.get(token) ?? null,
    maxStreams: 4,
    maxStreamsPerTenant: 3,
    requestTimeoutMs: 60_000,
  });
  const server = http.createServer((_req, res) => res.writeHead(404).end());
  server.on('upgrade', (req, socket, head: Buffer) => {
    if (!tunnel.handleUpgrade(req, socket, head)) socket.destroy();
  });
  const port = await listen(server);
  const upstream = holdingHandler();
  const routerDouble = http.createServer(upstream.handler);
  const upstreamPort = await listen(routerDouble);
  const clients: TunnelClient[] = [];
  t.teardown(async () => {
    for (const h of upstream.held.splice(0)) h();
    for (const c of clients) c.close();
    await tunnel.close();
    await closeServer(routerDouble);
    await closeServer(server);
  });

  const tenant = randomUUID();
  const other = randomUUID();
  const hybridRuntime = randomUUID();
  // The server announces each tunnel once it is registered: two hosted ones, one hybrid one.
  const connected = new Promise<void>((resolve) => {
    let left = 3;
    const one = (): void => {
      if (--left === 0) resolve();
    };
    tunnel.events.on('connect', one);
    tunnel.events.on('hybrid-connect', one);
  });
  for (const id of [{ tenantId: tenant }, { tenantId: tenant, runtimeId: hybridRuntime }, { tenantId: other }])
    clients.push(
      startTunnelClient({
        url: `ws://127.0.0.1:${port}/v1/tunnel`,
        token: tokenFor(id),
        upstream: `http://127.0.0.1:${upstreamPort}`,
        backoff: { initialMs: 50, maxMs: 200 },
      }),
    );
  await connected;
  t.ok(
    tunnel.status(tenant).connected && tunnel.runtimeStatus(hybridRuntime).connected && tunnel.status(other).connected,
    'precondition: the three tunnels are connected',
  );

  const get = (path: string, signal?: AbortSignal) => ({ method: 'GET', path, headers: [], body: null, signal });
  const cancel = new AbortController();
  const heldRequests: Array<Promise<ForwardResponse>> = [
    tunnel.forward(tenant, get('/hold', cancel.signal)),
    tunnel.forward(tenant, get('/hold')),
    tunnel.forwardRuntime(tenant, hybridRuntime, get('/hold')),
  ];
  const cancelled = failure(heldRequests[0]!);
  await upstream.holding(3);
  t.equal(
    tunnel.runtimeStatus(hybridRuntime).activeStreams,
    1,
    "the hybrid runtime's own tunnel has 1 of its 4 streams in use",
  );

  const busy = await failure(tunnel.forwardRuntime(tenant, hybridRuntime, get('/fast')));
  t.equal(busy.code, 'RUNTIME_BUSY', 'a fourth request of the tenant is refused, to a runtime within its own budget');
  t.equal(busy.statusCode, 503, 'with 503 (Retry-After is added by the API)');
  t.match(busy.message, /3 requests in flight.*PROVISIONER_TUNNEL_MAX_STREAMS_PER_TENANT/, 'naming the budget');
  t.equal(upstream.held.length, 3, 'nothing more reached a runtime');
  t.equal(tunnel.tenantStreams(tenant), 3, "three requests in flight through the tenant's two tunnels");

  const served = await tunnel.forward(other, get('/fast'));
  t.same([served.status, await drain(served)], [200, '{"fast":true}'], 'another tenant is served meanwhile');

  cancel.abort();
  t.equal((await cancelled).code, 'REQUEST_CANCELLED', 'one held request is cancelled by its caller');
  t.equal(tunnel.tenantStreams(tenant), 2, 'which frees its place in the budget');
  const again = await tunnel.forwardRuntime(tenant, hybridRuntime, get('/fast'));
  t.same([again.status, await drain(again)], [200, '{"fast":true}'], 'the tenant is served again');

  for (const h of upstream.held.splice(0)) h();
  for (const res of await Promise.allSettled(heldRequests.slice(1)))
    if (res.status === 'fulfilled') await drain(res.value);
  t.equal(tunnel.tenantStreams(tenant), 0, 'answered requests leave the budget');
});

t.test("the ingresses' budget covers all of a tenant's ingress-based runtimes", async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'tenant-budgets-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const ca = await createCa(join(dir, 'ca'), 'customer-ingress-ca');
  const cert = await createServingCert(ca, 'ingress');
  const upstream = holdingHandler();
  const ingress = https.createServer(
    { cert: await readFile(cert.certFile), key: await readFile(cert.keyFile) },
    upstream.handler,
  );
  const port = await listen(ingress);
  const transport = createIngressTransport({
    signer: createRequestSigner({ privateKeyPem: generateRequestSigningKeys().privateKeyPem }),
    limits: { ...DEFAULT_TUNNEL_LIMITS, requestTimeoutMs: 60_000 },
    policy: { allowedCidrs: ['127.0.0.0/8'], allowedCidrsVariable: 'PROVISIONER_HYBRID_INGRESS_ALLOWED_CIDRS' },
    caPem: ca.certPem,
    requestsPerRuntime: 2,
    requestsPerTenant: 3,
  });
  t.teardown(async () => {
    for (const h of upstream.held.splice(0)) h();
    transport.close();
    await closeServer(ingress);
  });

  const tenant = randomUUID();
  const other = randomUUID();
  const [first, second, othersRuntime] = [randomUUID(), randomUUID(), randomUUID()];
  const call = (tenantId: string, runtimeId: string, path: string) =>
    transport.forward({
      tenantId,
      runtimeId,
      ingressUrl: `https://localhost:${port}`,
      method: 'GET',
      path,
      headers: [],
      body: null,
      signal: new AbortController().signal,
    });

  const heldRequests = [call(tenant, first, '/hold'), call(tenant, first, '/hold'), call(tenant, second, '/hold')];
  await upstream.holding(3);
  t.equal(transport.inFlight(second), 1, 'the second runtime has 1 of its 2');

  const busy = await failure(call(tenant, second, '/fast'));
  t.equal(busy.code, 'RUNTIME_BUSY', 'a fourth request of the tenant is refused, to a runtime within its own budget');
  t.equal(busy.statusCode, 503, 'with 503');
  t.match(busy.message, /3 requests in flight.*PROVISIONER_HYBRID_INGRESS_REQUESTS_PER_TENANT/, 'naming the budget');
  t.equal(upstream.held.length, 3, 'nothing more reached an ingress');
  t.equal(transport.tenantInFlight(tenant), 3, "three requests in flight over the tenant's two runtimes");

  const served = await call(other, othersRuntime, '/fast');
  t.same([served.status, await drain(served)], [200, '{"fast":true}'], 'another tenant is served meanwhile');

  for (const h of upstream.held.splice(0)) h();
  for (const res of await Promise.all(heldRequests)) await drain(res);
  t.equal(transport.tenantInFlight(tenant), 0, 'answered requests leave the budget');
  const again = await call(tenant, second, '/fast');
  t.same([again.status, await drain(again)], [200, '{"fast":true}'], 'the tenant is served again');
});
