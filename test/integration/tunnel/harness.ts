/**
 * Test harness for the tunnel: a small control plane (fastify + the tunnel server + the route
 * plugin) with TEST DOUBLES for authentication, and a runtime (tunnel client → request router →
 * app-proxy, plus a stub Argo Events event source), all on real loopback sockets, port 0.
 */
import { createHash, randomUUID } from 'node:crypto';
import http, { type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Readable } from 'node:stream';
import type { BaseLogger } from 'pino';
import Fastify, {
  type FastifyError,
  type FastifyInstance,
  type FastifyPluginAsync,
  type FastifyRequest,
} from 'fastify';
import { AppError } from '../../../provisioner/errors.ts';
import { createTunnelServer, type TunnelServer, type TunnelServerOptions } from '../../../provisioner/tunnel/server.ts';
import { tunnelRoutes } from '../../../provisioner/tunnel/route.ts';
import { createRequestSigner, generateRequestSigningKeys } from '../../../provisioner/tunnel/request-token.ts';
import { buildAppProxy } from '../../../runtime/agents/app-proxy/app.ts';
import { loadPublicKey } from '../../../runtime/agents/app-proxy/request-token.ts';
import { staticRuntimeInfo } from '../../../runtime/agents/app-proxy/runtime-info.ts';
import { createRouter } from '../../../runtime/agents/request-router/router.ts';
import {
  startTunnelClient,
  type TunnelClient,
  type TunnelClientOptions,
} from '../../../runtime/agents/tunnel-client/client.ts';
import { until } from '../../../sandbox/until.ts';

export const KEYS = generateRequestSigningKeys();

type CallerRole = 'admin' | 'operator' | 'tenant' | 'runtime';
interface TestCaller {
  role: CallerRole;
  tenantId?: string;
  keyId: string;
}

/** TEST DOUBLE of the provisioner's runtime-token lookup (the real one reads api_keys). */
export class StubRuntimeTokens {
  readonly #tokens = new Map<string, { tenantId: string; keyId: string }>();
  readonly #revoked = new Set<string>();

  issue(tenantId: string): { token: string; keyId: string } {
    const token = `hrt_runtime_${randomUUID().replace(/-/g, '')}`;
    const keyId = randomUUID();
    this.#tokens.set(token, { tenantId, keyId });
    return { token, keyId };
  }

  revoke(keyId: string): void {
    this.#revoked.add(keyId);
  }

  authenticate = (token: string): Promise<{ tenantId: string; keyId: string } | null> => {
    const id = this.#tokens.get(token);
    return Promise.resolve(id && !this.#revoked.has(id.keyId) ? id : null);
  };
}

/** TEST DOUBLE of the app's API-key auth: bearer token → caller, set on the request. */
export class StubCallers {
  readonly byToken = new Map<string, TestCaller>();

  add(role: CallerRole, tenantId?: string): string {
    const token = `hrt_${role}_${randomUUID().replace(/-/g, '')}`;
    this.byToken.set(token, { role, keyId: randomUUID(), ...(tenantId ? { tenantId } : {}) });
    return token;
  }

  of(request: FastifyRequest): TestCaller | undefined {
    const m = /^Bearer (\S+)$/.exec(request.headers.authorization ?? '');
    return m ? this.byToken.get(m[1]!) : undefined;
  }

  /** TEST DOUBLE of canAccessTenant: admin/operator any tenant, tenant keys their own, runtime keys none. */
  canAccessTenant = (request: FastifyRequest, tenantId: string): boolean => {
    const c = this.of(request);
    if (!c) return false;
    if (c.role === 'admin' || c.role === 'operator') return true;
    return c.role === 'tenant' && c.tenantId === tenantId;
  };
}

export interface ControlPlane {
  app: FastifyInstance;
  tunnel: TunnelServer;
  port: number;
  base: string;
  wsUrl: string;
  close(): Promise<void>;
}

export async function startControlPlane(opts: {
  tokens: StubRuntimeTokens;
  callers: StubCallers;
  port?: number;
  limits?: Partial<TunnelServerOptions>;
}): Promise<ControlPlane> {
  const tunnel = createTunnelServer({
    authenticate: opts.tokens.authenticate,
    signer: createRequestSigner({ privateKeyPem: KEYS.privateKeyPem }),
    ...opts.limits,
  });
  const app = Fastify({ logger: false, forceCloseConnections: true });
  // TEST DOUBLE of the app's auth hook and error handler, in the app's error shape.
  app.addHook('onRequest', async (request) => {
    if (!opts.callers.of(request)) throw new AppError('UNAUTHENTICATED', 'missing or unknown API key');
  });
  app.setErrorHandler((err: FastifyError | AppError, _request, reply) => {
    const status = err.statusCode ?? 500;
    const code = err instanceof AppError ? err.code : err.validation ? 'VALIDATION_FAILED' : 'INTERNAL';
    return reply
      .status(status)
      .send({ error: { code, message: status >= 500 && !(err instanceof AppError) ? 'internal error' : err.message } });
  });
  await app.register(tunnelRoutes, {
    tunnel,
    canAccessTenant: opts.callers.canAccessTenant,
    subjectOf: (r) => opts.callers.of(r)?.keyId,
  });
  app.server.on('upgrade', (req: IncomingMessage, socket, head: Buffer) => {
    if (!tunnel.handleUpgrade(req, socket, head)) socket.destroy();
  });
  await app.listen({ port: opts.port ?? 0, host: '127.0.0.1' });
  const port = (app.server.address() as AddressInfo).port;
  return {
    app,
    tunnel,
    port,
    base: `http://127.0.0.1:${port}`,
    wsUrl: `ws://127.0.0.1:${port}/v1/tunnel`,
    async close() {
      await tunnel.close();
      await app.close();
    },
  };
}

const PERIOD = 256;
const BASE = Buffer.allocUnsafe(1024 * 1024 + PERIOD);
for (let i = 0; i < BASE.length; i++) BASE[i] = (i * 31 + 7) & 0xff;

/** Deterministic body bytes: byte i is (i * 31 + 7) & 0xff (period 256), cheap to make. */
export function pattern(size: number, offset = 0): Buffer {
  if (size <= 1024 * 1024) return BASE.subarray(offset % PERIOD, (offset % PERIOD) + size);
  const buf = Buffer.allocUnsafe(size);
  for (let done = 0; done < size;) {
    const n = Math.min(1024 * 1024, size - done);
    BASE.copy(buf, done, (offset + done) % PERIOD, ((offset + done) % PERIOD) + n);
    done += n;
  }
  return buf;
}

export function sha256(buf: Buffer): string {
  return createHash('sha256').update(buf).digest('hex');
}

/** Shared state of the test routes, so tests can observe the runtime side. */
export class TestRouteState {
  /** Bytes the slow-producer route generated so far. */
  produced = 0;
  barrierWaiting: Array<() => void> = [];
}

/** TEST DOUBLE routes on the app-proxy (behind its token check): bodies of any size, echo, barrier. */
export function testRoutes(state: TestRouteState): FastifyPluginAsync {
  return async (api) => {
    api.removeAllContentTypeParsers();
    api.addContentTypeParser('*', (_req, payload, done) => done(null, payload));
    api.get<{ Querystring: { size?: string } }>('/api/test/bytes', async (request, reply) => {
      const size = Number(request.query.size ?? '0');
      const chunk = 64 * 1024;
      let sent = 0;
      const body = new Readable({
        read() {
          if (sent >= size) {
            this.push(null);
            return;
          }
          const n = Math.min(chunk, size - sent);
          this.push(pattern(n, sent));
          sent += n;
        },
      });
      reply.header('content-type', 'application/octet-stream').header('content-length', String(size));
      return reply.send(body);
    });
    // Generates up to `size` bytes as fast as the reader takes them, counting what it produced.
    api.get<{ Querystring: { size?: string } }>('/api/test/producer', async (request, reply) => {
      const size = Number(request.query.size ?? '0');
      const chunk = Buffer.alloc(64 * 1024, 1);
      let sent = 0;
      const body = new Readable({
        read() {
          if (sent >= size) {
            this.push(null);
            return;
          }
          sent += chunk.length;
          state.produced += chunk.length;
          this.push(chunk);
        },
      });
      reply.header('content-type', 'application/octet-stream');
      return reply.send(body);
    });
    api.post('/api/test/echo', async (request, reply) => {
      reply.header('content-type', 'application/octet-stream');
      return reply.send(request.body);
    });
    api.post('/api/test/digest', async (request) => {
      const hash = createHash('sha256');
      let bytes = 0;
      for await (const c of request.body as Readable) {
        hash.update(c as Buffer);
        bytes += (c as Buffer).length;
      }
      return { bytes, sha256: hash.digest('hex'), contentType: request.headers['content-type'] ?? null };
    });
    api.get('/api/test/headers', async (request) => ({ headers: request.headers }));
    // Holds every request until `n` are waiting, then answers them all.
    api.get<{ Querystring: { n: string } }>('/api/test/barrier', async (request) => {
      const n = Number(request.query.n);
      await new Promise<void>((resolve) => {
        state.barrierWaiting.push(resolve);
        if (state.barrierWaiting.length >= n) {
          for (const r of state.barrierWaiting.splice(0)) r();
        }
      });
      return { ok: true };
    });
    api.get<{ Querystring: { headers?: string; size?: string } }>('/api/test/big-headers', async (request, reply) => {
      const count = Number(request.query.headers ?? '0');
      const size = Number(request.query.size ?? '100');
      for (let i = 0; i < count; i++) reply.header(`x-flood-${i}`, 'v'.repeat(size));
      return { ok: true };
    });
  };
}

export interface Runtime {
  tenantId: string;
  client: TunnelClient;
  appProxyBase: string;
  routerBase: string;
  state: TestRouteState;
  webhooks: Array<{ method: string; url: string; body: string; bytes: number; sha256: string }>;
  close(): Promise<void>;
}

function listen(server: http.Server): Promise<number> {
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve((server.address() as AddressInfo).port)));
}

/** The app-proxy with the TEST DOUBLE routes, on loopback (port 0). */
export async function startAppProxy(
  tenantId: string,
  publicKeyPem = KEYS.publicKeyPem,
): Promise<{ base: string; state: TestRouteState; close(): Promise<void> }> {
  const state = new TestRouteState();
  const appProxy = await buildAppProxy({
    tenantId,
    publicKey: loadPublicKey(publicKeyPem),
    runtimeInfo: staticRuntimeInfo({ runtimeVersion: '1.5.0', components: { argoCd: '8.0.17', argoEvents: '2.4.15' } }),
    routes: testRoutes(state),
  });
  await appProxy.listen({ port: 0, host: '127.0.0.1' });
  return {
    base: `http://127.0.0.1:${(appProxy.server.address() as AddressInfo).port}`,
    state,
    close: () => appProxy.close(),
  };
}

/** The request router in front of an app-proxy and an event source, on loopback (port 0). */
export async function startRequestRouter(
  appProxyUrl: string,
  eventSourceUrl: string,
): Promise<{ base: string; port: number; close(): Promise<void> }> {
  const router = createRouter({ appProxyUrl, eventSourceUrl, maxSockets: 2048 });
  const server = http.createServer(router.handler);
  const port = await listen(server);
  return {
    base: `http://127.0.0.1:${port}`,
    port,
    async close() {
      router.close();
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
    },
  };
}

/** app-proxy + stub event source + request router, without a tunnel client. */
export async function startRuntimeServices(
  tenantId: string,
  publicKeyPem = KEYS.publicKeyPem,
): Promise<Omit<Runtime, 'client'> & { routerPort: number }> {
  const appProxy = await startAppProxy(tenantId, publicKeyPem);
  const webhooks: Runtime['webhooks'] = [];
  const eventSource = http.createServer((req, res) => {
    const parts: Buffer[] = [];
    req.on('data', (c: Buffer) => parts.push(c));
    req.on('end', () => {
      const all = Buffer.concat(parts);
      webhooks.push({
        method: req.method ?? '',
        url: req.url ?? '',
        body: all.toString(),
        bytes: all.length,
        sha256: sha256(all),
      });
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ received: true, url: req.url }));
    });
  });
  const eventPort = await listen(eventSource);
  const router = await startRequestRouter(appProxy.base, `http://127.0.0.1:${eventPort}`);
  return {
    tenantId,
    appProxyBase: appProxy.base,
    routerBase: router.base,
    routerPort: router.port,
    state: appProxy.state,
    webhooks,
    async close() {
      eventSource.closeAllConnections();
      await Promise.all([router.close(), new Promise((r) => eventSource.close(r)), appProxy.close()]);
    },
  };
}

export async function startRuntime(
  tenantId: string,
  cp: { wsUrl: string },
  token: string,
  clientOpts: Partial<TunnelClientOptions> = {},
  publicKeyPem = KEYS.publicKeyPem,
): Promise<Runtime> {
  const services = await startRuntimeServices(tenantId, publicKeyPem);
  const client = startTunnelClient({
    url: cp.wsUrl,
    token,
    upstream: services.routerBase,
    maxUpstreamSockets: 2048,
    ...clientOpts,
  });
  return {
    ...services,
    client,
    async close() {
      await client.close();
      await services.close();
    },
  };
}

/** Resolves on the client's next 'connected' event (or at once if already connected), bounded. */
export function connected(client: TunnelClient, timeoutMs = 5000): Promise<void> {
  if (client.connected) return Promise.resolve();
  return new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`tunnel not connected within ${timeoutMs} ms`)), timeoutMs);
    client.events.once('connected', () => {
      clearTimeout(t);
      resolve();
    });
  });
}

/** Both ends see the tunnel: the client got the server's hello and the server registered the client's. */
export async function ready(cp: ControlPlane, runtime: Runtime, timeoutMs = 5000): Promise<void> {
  await connected(runtime.client, timeoutMs);
  await until('server sees the tunnel', timeoutMs, () => cp.tunnel.status(runtime.tenantId).connected);
}

export interface Res {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: Buffer;
}

export const agent = new http.Agent({ keepAlive: true, maxSockets: 2048 });

/** One HTTP request on loopback; the body may be a Buffer or a stream. */
export function request(
  url: string,
  opts: { method?: string; headers?: http.OutgoingHttpHeaders; body?: Buffer | Readable } = {},
): Promise<Res> {
  return new Promise((resolve, reject) => {
    const req = http.request(url, { method: opts.method ?? 'GET', headers: opts.headers, agent }, (res) => {
      const parts: Buffer[] = [];
      res.on('data', (c: Buffer) => parts.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(parts) }));
      res.on('error', reject);
    });
    req.on('error', reject);
    if (opts.body instanceof Readable) opts.body.pipe(req);
    else req.end(opts.body);
  });
}

export function json(res: Res): unknown {
  return JSON.parse(res.body.toString('utf8'));
}

/** A loopback port nothing listens on (bound, then closed): an upstream that refuses connections. */
export async function freedPort(): Promise<number> {
  const probe = http.createServer();
  await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', resolve));
  const port = (probe.address() as AddressInfo).port;
  await new Promise((resolve) => probe.close(resolve));
  return port;
}

/**
 * A logger that records the paths an agent logs a refused connection for (`refused`, at info)
 * and, at warn, a request that failed for good (`failed`).
 */
export function refusalLog(): { logger: BaseLogger; refused: string[]; failed: string[] } {
  const refused: string[] = [];
  const failed: string[] = [];
  const logger = {
    level: 'info',
    info: (o: { path?: string }, msg?: string) => {
      if (msg?.includes('refused the connection')) refused.push(o.path ?? '');
    },
    warn: (o: { path?: string }) => failed.push(o.path ?? ''),
    debug: () => {},
    error: () => {},
    fatal: () => {},
    trace: () => {},
    silent: () => {},
  } as unknown as BaseLogger;
  return { logger, refused, failed };
}
