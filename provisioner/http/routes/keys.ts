import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { authOf, requesterOf } from '../auth.ts';
import { endpoint } from '../api-routes.ts';
import type { AppContext } from '../context.ts';

export const keyRoutes =
  (ctx: AppContext): FastifyPluginAsyncTypebox =>
  async (app) => {
    app.route({
      ...endpoint('GET /v1/whoami', {
        summary: 'The calling API key: its id, role and tenant',
        description: 'What a client (the console) shows and hides by role; any valid key may call it.',
        tags: ['keys'],
      }),
      config: { roles: ['operator', 'tenant', 'runtime'] },
      handler: async (request) => {
        const a = authOf(request);
        return { keyId: a.keyId, role: a.role, tenantId: a.tenantId };
      },
    });

    app.route({
      ...endpoint('POST /v1/keys', {
        summary: 'Create an API key (shown once)',
        tags: ['keys'],
      }),
      config: { roles: [] },
      handler: async (request, reply) =>
        reply.status(201).send(await ctx.keys.create(request.body, requesterOf(request))),
    });

    app.route({
      ...endpoint('GET /v1/keys', {
        summary: 'List API keys (never the keys themselves)',
        tags: ['keys'],
      }),
      config: { roles: [] },
      handler: async (request) => ({
        items: await ctx.keys.list({
          tenantId: request.query.tenantId,
          includeRevoked: request.query.includeRevoked ?? false,
        }),
      }),
    });

    app.route({
      ...endpoint('DELETE /v1/keys/:id', {
        summary: 'Revoke an API key',
        tags: ['keys'],
      }),
      config: { roles: [] },
      handler: async (request) => ctx.keys.revoke(request.params.id, requesterOf(request)),
    });
  };
