/**
 * Builds the provisioner's HTTP API as a fastify instance (not listening): server.ts starts it,
 * tests call app.inject() or listen on port 0.
 */
import { randomUUID } from 'node:crypto';
import Fastify, { type FastifyBaseLogger, type FastifyInstance } from 'fastify';
import type { Logger } from 'pino';
import rateLimit from '@fastify/rate-limit';
import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type pg from 'pg';
import { advertiseUrl, type Config } from '../config.ts';
import type { SecretBox } from '../crypto.ts';
import { healthOf } from '../db/availability.ts';
import { errors } from '../errors.ts';
import type { Catalog } from '../../runtime/catalog.ts';
import { TenantService } from '../tenants/service.ts';
import { ClusterService } from '../clusters/service.ts';
import { KeyService } from '../keys/service.ts';
import { RuntimeVersionService } from '../runtime-versions/service.ts';
import { createHotReads, type BatchOptions } from '../store/batched-reads.ts';
import { OperationLogHub } from '../reconciler/log-follow.ts';
import { Notifications } from '../db/notifications.ts';
import { createRequestSigner, createTunnelServer, generateRequestSigningKeys, TunnelDirectory, tunnelRoutes, type TunnelLimits } from '../tunnel/index.ts';
import { KEY_REVOKED_CHANNEL } from '../store/keys.ts';
import { hashKeyBase64 } from '../auth/keys.ts';
import { KeyCache } from '../auth/key-cache.ts';
import { registerAuth } from './auth.ts';
import type { AppContext } from './context.ts';
import { installErrorHandler } from './error-handler.ts';
import { installValidation } from './validation.ts';
import { createMetrics, registerReadMetrics, registerTunnelMetrics } from './metrics.ts';
import { RequestLog } from './request-log.ts';
import { KeyStreams } from './streams.ts';
import { ApiKeyInfo, Cluster, ErrorBody, Operation, Tenant } from './schemas.ts';
import { auditRoutes } from './routes/audit.ts';
import { clusterRoutes } from './routes/clusters.ts';
import { healthRoutes } from './routes/health.ts';
import { keyRoutes } from './routes/keys.ts';
import { operationRoutes } from './routes/operations.ts';
import { runtimeVersionRoutes } from './routes/runtime-versions.ts';
import { signupRoutes } from './routes/signup.ts';
import { tenantRoutes } from './routes/tenants.ts';

export interface AppDeps {
  config: Config;
  pool: pg.Pool;
  box: SecretBox;
  catalog: Catalog;
  /** Ed25519 private key (PEM) that signs requests forwarded to runtimes; generated when absent (tests). */
  requestSigningKeyPem?: string;
  /** Tunnel limits (defaults in provisioner/tunnel). */
  tunnelLimits?: Partial<TunnelLimits>;
  /** A pino logger; no logging when absent. */
  logger?: Logger;
  /** This process's replica id in the tunnel directory (default: a new UUID). */
  replicaId?: string;
  /** Batching of the API's hot reads (defaults in store/batched-reads.ts). */
  hotReads?: BatchOptions;
  /** The process's notifications hub, started by the caller; absent: the app makes (and stops) its own. */
  notifications?: Notifications;
}

export async function buildApp(deps: AppDeps): Promise<{ app: FastifyInstance; ctx: AppContext }> {
  const app = Fastify({
    ...(deps.logger ? { loggerInstance: deps.logger as unknown as FastifyBaseLogger } : { logger: false }),
    bodyLimit: deps.config.bodyLimit,
    trustProxy: false,
    requestIdHeader: false,
    genReqId: () => crypto.randomUUID(),
    // One line per request, successful reads at debug level (see request-log.ts).
    logController: new RequestLog(),
    // Keep serving while shutting down (tunnels drain in preClose; a terminating pod still gets
    // traffic until the endpoints change): requests then fail, if at all, with our own errors.
    return503OnClosing: false,
  }).withTypeProvider<TypeBoxTypeProvider>();

  const ownHub = deps.notifications === undefined;
  const notifications = deps.notifications ?? new Notifications({
    pool: deps.pool,
    ...(deps.logger ? { logger: deps.logger.child({ component: 'notifications' }) } : {}),
  });
  const metrics = createMetrics(deps.pool);
  const keyCache = new KeyCache({ ttlMs: deps.config.keyCacheMs });
  const reads = createHotReads(deps.pool, deps.hotReads);
  const signer = createRequestSigner({ privateKeyPem: deps.requestSigningKeyPem ?? generateRequestSigningKeys().privateKeyPem });
  const tunnel = createTunnelServer({
    // Only runtime keys open tunnels, each for the one tenant it is bound to.
    authenticate: async (token) => {
      const id = await reads.key(hashKeyBase64(token));
      return id?.role === 'runtime' && id.tenantId ? { tenantId: id.tenantId, keyId: id.keyId } : null;
    },
    signer,
    ...(deps.logger ? { logger: deps.logger.child({ component: 'tunnel' }) } : {}),
    ...deps.config.tunnel,
    ...deps.tunnelLimits,
  });
  app.server.on('upgrade', (req, socket, head) => {
    if (!tunnel.handleUpgrade(req, socket, head)) socket.destroy();
  });
  const onRelay = registerTunnelMetrics(metrics, tunnel);
  const streams = new KeyStreams();
  /** A key was revoked (here, or through another replica): drop it from the cache, close its tunnel and its streams here. */
  const onKeyRevoked = (keyId: string): void => {
    keyCache.revoke(keyId);
    tunnel.disconnectKey(keyId);
    streams.closeKey(keyId);
  };
  notifications.subscribe(KEY_REVOKED_CHANNEL, onKeyRevoked);
  const tunnelDirectory = new TunnelDirectory({
    pool: deps.pool,
    notifications,
    tunnel,
    replicaId: deps.replicaId ?? randomUUID(),
    advertiseUrl: () => advertiseUrl(deps.config, app.server.address()),
    ...(deps.logger ? { logger: deps.logger.child({ component: 'tunnel-directory' }) } : {}),
  });
  await tunnelDirectory.start();
  if (ownHub) await notifications.start();
  // Tunnels are upgraded sockets the HTTP server would wait for: close them before it closes.
  app.addHook('preClose', async () => tunnel.close());
  app.addHook('onClose', async () => tunnelDirectory.stop());
  const ctx: AppContext = {
    config: deps.config,
    pool: deps.pool,
    box: deps.box,
    catalog: deps.catalog,
    tenants: new TenantService({ pool: deps.pool, box: deps.box, catalog: deps.catalog }),
    clusters: new ClusterService({ pool: deps.pool, box: deps.box, kubeconfigPolicy: deps.config.kubeconfig }),
    keys: new KeyService({ pool: deps.pool, onRevoked: onKeyRevoked }),
    runtimeVersions: new RuntimeVersionService({ pool: deps.pool, catalog: deps.catalog }),
    metrics,
    logHub: new OperationLogHub(deps.pool, notifications),
    notifications,
    tunnel,
    tunnelDirectory,
    requestSigningPublicKeyPem: signer.publicKeyPem,
    keyCache,
    reads,
    streams,
  };
  app.addHook('onClose', async () => ctx.logHub.close());
  app.addHook('onClose', async () => ctx.reads.close());
  if (ownHub) app.addHook('onClose', async () => notifications.stop());
  registerReadMetrics(metrics, ctx.reads);

  installErrorHandler(app, { health: healthOf(deps.pool) });
  installValidation(app);
  // JSON only: without this parser text/plain bodies would reach validation instead of a 415.
  app.removeContentTypeParser('text/plain');
  for (const schema of [ErrorBody, Tenant, Operation, Cluster, ApiKeyInfo]) app.addSchema(schema);

  await app.register(swagger, {
    openapi: {
      info: { title: 'Hosted runtimes provisioner', version: '1', description: 'Tenant signup, lifecycle, runtime versions and root clusters.' },
      components: { securitySchemes: { bearer: { type: 'http', scheme: 'bearer' } } },
      security: [{ bearer: [] }],
    },
  });
  app.addHook('onRoute', (route) => {
    if (route.url.startsWith('/docs')) route.config = { ...(route.config ?? {}), public: true };
  });
  await app.register(swaggerUi, { routePrefix: '/docs', uiConfig: { docExpansion: 'list' } });
  await app.register(rateLimit, {
    global: false,
    errorResponseBuilder: (_req, context) => errors.rateLimited(Math.ceil(context.ttl / 1000)),
  });

  app.addHook('onResponse', (request, reply, done) => {
    metrics.httpDuration.observe(
      { method: request.method, route: request.routeOptions.url ?? 'unmatched', status: String(reply.statusCode) },
      reply.elapsedTime / 1000,
    );
    done();
  });
  registerAuth(app, ctx.reads.key, keyCache);

  for (const routes of [healthRoutes, signupRoutes, tenantRoutes, operationRoutes, runtimeVersionRoutes, clusterRoutes, keyRoutes, auditRoutes]) {
    await app.register(routes(ctx));
  }
  await app.register(tunnelRoutes, {
    tunnel,
    // Checked before the handler, as for every /v1/tenants/:id route (http/auth.ts).
    canAccessTenant: () => true,
    routeConfig: { roles: ['operator', 'tenant'] },
    subjectOf: (request) => request.auth?.keyId,
    peers: { replicaId: tunnelDirectory.replicaId, owner: (tenantId) => tunnelDirectory.owner(tenantId), onRelay },
  });
  return { app, ctx };
}
