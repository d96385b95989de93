/**
 * Git webhooks at a public per-tenant URL (provisioner/webhooks/service.ts): the URL's minting
 * (operator or the tenant) and the public route a Git provider posts to. The body is kept as the
 * provider sent it, byte for byte (signatures are over those bytes), up to PROVISIONER_WEBHOOK_MAX_BYTES.
 */
import { Type } from 'typebox';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Uuid, withErrors } from '../../api/schemas.ts';
import { requesterOf } from '../auth.ts';
import { errors } from '../../errors.ts';
import { proxiedPathProblem } from '../../request-target-rules.ts';
import { keptHeaders } from '../../webhooks/service.ts';
import { endpoint } from '../api-routes.ts';
import type { AppContext } from '../context.ts';

const READ = ['operator', 'tenant'] as const;
const SECRET = '^[A-Za-z0-9_-]{43}$';

export const webhookRoutes =
  (ctx: AppContext): FastifyPluginAsyncTypebox =>
  async (app) => {
    app.route({
      ...endpoint('POST /v1/tenants/:id/webhook-url', {
        summary: "A new webhook URL for the tenant's Git provider (the previous one stops working)",
        tags: ['tenants'],
        description:
          'The URL holds a secret shown only in this answer. Webhooks posted under it are kept by the control plane and delivered to the runtime\'s event source (its `/webhooks/*`), also when the tenant was asleep (docs/operations.md "Webhooks while asleep").',
      }),
      config: { roles: [...READ] },
      handler: async (request, reply) => {
        const base = ctx.config.hybrid.publicUrl ?? `${request.protocol}://${request.host}`;
        return reply.status(201).send(await ctx.webhooks.mintUrl(request.params.id, base, requesterOf(request)));
      },
    });

    await app.register(async (scope) => {
      scope.removeAllContentTypeParsers();
      scope.addContentTypeParser(
        '*',
        { parseAs: 'buffer', bodyLimit: ctx.config.webhooks.maxBytes },
        (_request, body, done) => done(null, body),
      );
      scope.post<{ Params: { tenantId: string; secret: string; '*': string } }>(
        '/v1/webhooks/:tenantId/:secret/*',
        {
          // Public: per client address, as signup is; the tenant's queue budget bounds what is kept.
          config: { public: true, rateLimit: { max: 600, timeWindow: 60_000 } },
          bodyLimit: ctx.config.webhooks.maxBytes,
          schema: {
            summary: "Deliver a Git webhook to the tenant's runtime (public: the URL's secret is the credential)",
            tags: ['tenants'],
            description:
              "Kept and answered 202 at once; delivered to the runtime's event source (`/webhooks/<path>`) in the order received, once its runtime is connected; a sleeping tenant is woken. 404 for an unknown tenant or a URL that is not its current one; 413 over PROVISIONER_WEBHOOK_MAX_BYTES; 503 WEBHOOK_QUEUE_FULL past the tenant's budget.",
            params: Type.Object({
              tenantId: Uuid,
              secret: Type.String({ pattern: SECRET }),
              '*': Type.String(),
            }),
            response: withErrors({
              202: Type.Object({
                queued: Type.Literal(true),
                id: Type.String({ description: 'the kept webhook' }),
                waking: Type.Boolean({ description: 'the tenant was asleep and is being woken for it' }),
              }),
            }),
          },
        },
        async (request, reply) => {
          const raw = request.raw.url ?? '';
          const base = `/v1/webhooks/${request.params.tenantId}/${request.params.secret}`;
          const path = raw.startsWith(base) ? raw.slice(base.length) || '/' : '/';
          const body = Buffer.isBuffer(request.body) ? request.body : Buffer.alloc(0);
          if (path.length > 2048) throw errors.validation('the webhook path is longer than 2048 characters', 'path');
          // Passed on to the runtime as every proxied path is: no encoded slash or backslash (dot
          // segments are refused for every request before routing, request-target-rules.ts).
          const problem = proxiedPathProblem(path);
          if (problem !== undefined) throw errors.badRequest(400, problem);
          const { id, waking } = await ctx.webhooks.receive(request.params.tenantId, request.params.secret, {
            path,
            headers: keptHeaders(request.headers),
            body,
            requestId: request.id,
          });
          return reply.status(202).send({ queued: true, id, waking });
        },
      );
    });
  };
