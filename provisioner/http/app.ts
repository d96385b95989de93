/**
 * Builds the provisioner's HTTP API over the process's services (services.ts) as a fastify
 * instance, not listening: it registers plugins, hooks and routes, and nothing else. server.ts
 * starts it, tests call app.inject() or listen on port 0.
 */
import Fastify, { type FastifyBaseLogger, type FastifyInstance } from 'fastify';
import rateLimit from '@fastify/rate-limit';
import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { healthOf } from '../db/availability.ts';
import { errors } from '../errors.ts';
import type { Services } from '../services.ts';
import { tunnelRoutes } from '../tunnel/index.ts';
import { actorOf, registerAuth, requesterOf } from './auth.ts';
import { clientErrorHandler, frameworkErrorHandler, installErrorHandler } from './error-handler.ts';
import { installRequestRules } from './request-rules.ts';
import { checkRequestTargets } from './request-target.ts';
import { documentPublicRoutes, swaggerOptions } from './openapi.ts';
import { schemaController } from './schema-controller.ts';
import { RequestLog } from './request-log.ts';
import { installSecurityHeaders } from './security-headers.ts';
import http from 'node:http';
import {
  ApiKeyInfo,
  Cluster,
  DoctorCheck,
  DoctorReport,
  ErrorBody,
  ManagedCluster,
  MAX_PATH_PARAM_LENGTH,
  Operation,
  Runtime,
  Tenant,
} from '../api/schemas.ts';
import { auditRoutes } from './routes/audit.ts';
import { consoleRoutes } from './routes/console.ts';
import { clusterRoutes } from './routes/clusters.ts';
import { doctorRoutes } from './routes/doctor.ts';
import { healthRoutes } from './routes/health.ts';
import { keyRoutes } from './routes/keys.ts';
import { managedClusterRoutes } from './routes/managed-clusters.ts';
import { runtimeRoutes } from './routes/runtimes.ts';
import { operationRoutes } from './routes/operations.ts';
import { runtimeObjectRoutes } from './routes/runtime-objects.ts';
import { appHistoryRoutes } from './routes/app-history.ts';
import { runtimeVersionRoutes } from './routes/runtime-versions.ts';
import { signupRoutes } from './routes/signup.ts';
import { tenantRoutes } from './routes/tenants.ts';
import { webhookRoutes } from './routes/webhooks.ts';
import { capacityRoutes } from './routes/capacity.ts';
import { fleetUpgradeRoutes } from './routes/fleet-upgrades.ts';

export async function buildApp(services: Services): Promise<FastifyInstance> {
  const app = Fastify({
    ...(services.logger ? { loggerInstance: services.logger as unknown as FastifyBaseLogger } : { logger: false }),
    bodyLimit: services.config.bodyLimit,
    // The client address as the ingress reports it (X-Forwarded-For), only from listed proxies:
    // the signup rate limit keys on it.
    trustProxy: services.config.trustedProxies.length > 0 ? services.config.trustedProxies : false,
    // A caller gets requestTimeoutMs to send a whole request (headers and body), checked every
    // second; answers (event streams, forwarded downloads) are not limited by it.
    serverFactory: (handler) =>
      http.createServer(
        {
          requestTimeout: services.config.requestTimeoutMs,
          headersTimeout: Math.min(services.config.requestTimeoutMs, 20_000),
          connectionsCheckingInterval: 1000,
        },
        // Before routing: origin-form targets without dot segments only (request-target.ts).
        checkRequestTargets(handler, services.logger),
      ),
    requestIdHeader: false,
    genReqId: () => crypto.randomUUID(),
    // One line per request, successful reads at debug level (see request-log.ts).
    logController: new RequestLog(),
    // Keep serving while shutting down (tunnels drain in preClose; a terminating pod still gets
    // traffic until the endpoints change): requests then fail, if at all, with our own errors.
    return503OnClosing: false,
    routerOptions: { maxParamLength: MAX_PATH_PARAM_LENGTH },
    // Request validators and response serializers compiled once per distinct schema, at first use,
    // in every context of the app (schema-controller.ts).
    schemaController,
    // Errors raised before a route runs, by fastify's router and by Node's HTTP parser, answer in
    // the API's error shape too (error-handler.ts).
    frameworkErrors: frameworkErrorHandler,
    clientErrorHandler,
  }).withTypeProvider<TypeBoxTypeProvider>();

  // Tunnels arrive as upgrades of this server; close them before it closes (it would wait for them).
  services.attachHttpServer(app.server);
  app.addHook('preClose', async () => services.tunnel.close());
  installErrorHandler(app, { health: healthOf(services.pool) });
  installRequestRules(app);
  // JSON only: without this parser text/plain bodies would reach validation instead of a 415.
  app.removeContentTypeParser('text/plain');
  for (const schema of [
    ErrorBody,
    Tenant,
    Operation,
    Cluster,
    ManagedCluster,
    ApiKeyInfo,
    DoctorCheck,
    DoctorReport,
    Runtime,
  ])
    app.addSchema(schema);

  await app.register(swagger, swaggerOptions());
  documentPublicRoutes(app);
  installSecurityHeaders(app);
  // Swagger UI's own CSP (hashes of its inline assets), scoped to /docs, replaces the API's there.
  await app.register(swaggerUi, {
    routePrefix: '/docs',
    uiConfig: { docExpansion: 'list' },
    staticCSP: true,
    transformStaticCSP: (header) =>
      header.replace(/\s*upgrade-insecure-requests;?/, '').replace("frame-ancestors 'self'", "frame-ancestors 'none'"),
  });
  await app.register(rateLimit, {
    global: false,
    errorResponseBuilder: (_req, context) => errors.rateLimited(Math.ceil(context.ttl / 1000)),
  });

  app.addHook('onResponse', (request, reply, done) => {
    services.metrics.httpDuration.observe(
      { method: request.method, route: request.routeOptions.url ?? 'unmatched', status: String(reply.statusCode) },
      reply.elapsedTime / 1000,
    );
    done();
  });
  registerAuth(app, services.reads.key, services.keyCache);

  for (const routes of [
    healthRoutes,
    signupRoutes,
    tenantRoutes,
    managedClusterRoutes,
    runtimeRoutes,
    operationRoutes,
    runtimeVersionRoutes,
    clusterRoutes,
    keyRoutes,
    auditRoutes,
    runtimeObjectRoutes,
    appHistoryRoutes,
    fleetUpgradeRoutes,
    doctorRoutes,
    webhookRoutes,
    capacityRoutes,
  ]) {
    await app.register(routes(services));
  }
  await app.register(consoleRoutes());
  const { tunnel, tunnelDirectory, onRelay } = services;
  await app.register(tunnelRoutes, {
    tunnel,
    // Access is checked before the handler, as for every /v1/tenants/:id route (http/auth.ts);
    // here the tenant must exist, so an unknown id is a 404 as on every other tenant route.
    canAccessTenant: async (_request, tenantId) => (await services.reads.tenant(tenantId)) !== undefined,
    routeConfig: { roles: ['operator', 'tenant'] },
    subjectOf: (request) => request.auth?.keyId,
    beforeHosted: (request, tenantId) => services.sleep.beforeForward(tenantId, requesterOf(request)),
    auditAction: async (request, tenantId, action, runtime) => {
      const finish = await services.audit.beginRuntimeAction(actorOf(request), {
        action: action.auditAction,
        tenantId,
        ...(runtime !== undefined ? { runtime } : {}),
        target: { kind: action.kind, namespace: action.namespace, name: action.name },
        requestId: request.id,
      });
      return async (outcome) => {
        services.onRuntimeAction(action.auditAction, outcome.status);
        await finish(outcome);
      };
    },
    runtimeByName: (tenantId, name) => services.runtimes.proxied(tenantId, name),
    ingress: services.ingress,
    peers: {
      replicaId: tunnelDirectory.replicaId,
      owner: (tenantId) => tunnelDirectory.owner(tenantId),
      runtimeOwner: (runtimeId) => tunnelDirectory.runtimeOwner(runtimeId),
      onRelay,
    },
  });
  return app;
}
