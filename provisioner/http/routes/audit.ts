import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { endpoint } from '../api-routes.ts';
import type { AppContext } from '../context.ts';

export const auditRoutes =
  (ctx: AppContext): FastifyPluginAsyncTypebox =>
  async (app) => {
    app.route({
      ...endpoint('GET /v1/audit', {
        summary: 'Audit log, newest first',
        tags: ['audit'],
      }),
      config: { roles: ['operator'] },
      handler: async (request) => {
        const q = request.query;
        return {
          items: await ctx.audit.list({
            ...(q.targetType ? { targetType: q.targetType } : {}),
            ...(q.targetId ? { targetId: q.targetId } : {}),
            ...(q.before ? { beforeId: q.before } : {}),
            limit: q.limit ?? 100,
          }),
        };
      },
    });
  };
