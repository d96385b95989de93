/**
 * The app-proxy's HTTP app. Every route but /healthz and /readyz (its probes' paths,
 * runtime/agents/common/health.ts; no loops: ready while it answers) requires the control plane's request token
 * (x-hrt-request-token): a request that did not come through the control plane gets 401. The
 * routes: runtime information, the actions on Argo objects, the managed-cluster check
 * (managed-clusters.ts) and an Application's diff from the Source Server (diff.ts).
 */
import type { KeyObject } from 'node:crypto';
import Fastify, {
  type FastifyInstance,
  type FastifyPluginAsync,
  type FastifyRequest,
  type FastifyServerOptions,
} from 'fastify';
import { AgentHealth } from '../common/health.ts';
import { REQUEST_TOKEN_HEADER } from '../../protocol/request-token.ts';
import { actionRoutes } from './actions.ts';
import { diffRoutes } from './diff.ts';
import type { ArgoObjects } from './kube.ts';
import { managedClusterRoutes } from './managed-clusters.ts';
import { ReplayCache, verifyRequestToken } from './request-token.ts';
import type { RuntimeInfoSource } from './runtime-info.ts';

export interface AppProxyOptions {
  tenantId: string;
  /** A hybrid runtime's id: tokens for the tenant's hosted runtime or its other runtimes are refused. */
  runtimeId?: string | undefined;
  /** The control plane's Ed25519 public key. */
  publicKey: KeyObject;
  runtimeInfo: RuntimeInfoSource;
  logger?: FastifyServerOptions['logger'] | FastifyServerOptions['loggerInstance'];
  now?: () => number;
  skewSeconds?: number;
  /** The vcluster's Argo objects the actions act on; without it, the action routes are not served. */
  objects?: ArgoObjects;
  /** The runtime's Source Server (SOURCE_SERVER_URL); without it, diffs are answered 404 SOURCE_SERVER_NOT_INSTALLED. */
  sourceServerUrl?: string | undefined;
  /** Longest wait for the Source Server (default diff.ts's). */
  sourceServerTimeoutMs?: number;
  /** Extra routes under the same token check (used by the benchmark). */
  routes?: FastifyPluginAsync;
}

function unauthorized(code: string, message: string): { error: { code: string; message: string } } {
  return { error: { code, message } };
}

export async function buildAppProxy(opts: AppProxyOptions): Promise<FastifyInstance> {
  const now = opts.now ?? Date.now;
  const replay = new ReplayCache();
  /** The caller (request token subject) of each accepted request. */
  const callers = new WeakMap<FastifyRequest, string>();
  const logger = opts.logger;
  const app = Fastify({
    ...(logger !== undefined && typeof logger === 'object' && 'child' in logger
      ? { loggerInstance: logger }
      : { logger: logger ?? false }),
    bodyLimit: 1024 * 1024,
  });

  const health = new AgentHealth();
  for (const path of ['/healthz', '/readyz'] as const)
    app.get(path, async (_request, reply) => {
      const { status, body } = health.answer(path);
      return reply.code(status).header('cache-control', 'no-store').send(body);
    });

  await app.register(async (api) => {
    api.addHook('onRequest', async (request, reply) => {
      const raw = request.headers[REQUEST_TOKEN_HEADER];
      if (typeof raw !== 'string' || raw === '') {
        return reply
          .code(401)
          .send(
            unauthorized(
              'UNAUTHENTICATED',
              `request did not come through the control plane: ${REQUEST_TOKEN_HEADER} is missing`,
            ),
          );
      }
      const nowMs = now();
      const result = verifyRequestToken(raw, {
        publicKey: opts.publicKey,
        tenantId: opts.tenantId,
        runtimeId: opts.runtimeId,
        method: request.method,
        path: request.url,
        nowMs,
        ...(opts.skewSeconds !== undefined ? { skewSeconds: opts.skewSeconds } : {}),
      });
      if (!result.ok) {
        request.log.warn({ reason: result.reason }, 'request token refused');
        return reply.code(401).send(unauthorized('INVALID_REQUEST_TOKEN', `request token refused: ${result.reason}`));
      }
      if (!replay.use(result.claims.jti, result.claims.exp, nowMs)) {
        return reply.code(401).send(unauthorized('INVALID_REQUEST_TOKEN', 'request token refused: already used'));
      }
      request.log.debug({ caller: result.claims.sub, jti: result.claims.jti }, 'request token accepted');
      if (result.claims.sub !== undefined) callers.set(request, result.claims.sub);
      return undefined;
    });

    api.get('/api/runtime', async (_request, reply) => {
      try {
        return await opts.runtimeInfo();
      } catch (err) {
        app.log.error({ err }, 'runtime info unavailable');
        return reply.code(503).send({
          error: { code: 'RUNTIME_INFO_UNAVAILABLE', message: 'runtime information cannot be read right now' },
        });
      }
    });

    await api.register(managedClusterRoutes, { subjectOf: (request) => callers.get(request) });
    if (opts.objects)
      await api.register(actionRoutes, { objects: opts.objects, subjectOf: (request) => callers.get(request) });
    await api.register(diffRoutes, {
      sourceServerUrl: opts.sourceServerUrl,
      ...(opts.sourceServerTimeoutMs !== undefined ? { timeoutMs: opts.sourceServerTimeoutMs } : {}),
    });
    if (opts.routes) await api.register(opts.routes);
  });

  return app;
}
