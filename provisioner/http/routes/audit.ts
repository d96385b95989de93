import { Type } from 'typebox';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { BoundedInteger, withErrors } from '../schemas.ts';
import type { AppContext } from '../context.ts';

const Entry = Type.Object({
  id: Type.Integer(),
  at: Type.String(),
  actor: Type.String(),
  actorRole: Type.String(),
  action: Type.String(),
  targetType: Type.String(),
  targetId: Type.String(),
  before: Type.Unknown(),
  after: Type.Unknown(),
  requestId: Type.Union([Type.String(), Type.Null()]),
});

export const auditRoutes =
  (ctx: AppContext): FastifyPluginAsyncTypebox =>
  async (app) => {
    app.get(
      '/v1/audit',
      {
        config: { roles: ['operator'] },
        schema: {
          summary: 'Audit log, newest first',
          tags: ['audit'],
          querystring: Type.Object(
            {
              targetType: Type.Optional(Type.String({ maxLength: 40 })),
              targetId: Type.Optional(Type.String({ maxLength: 100 })),
              before: Type.Optional(BoundedInteger({ minimum: 1, description: 'return entries with id below this' })),
              limit: Type.Optional(BoundedInteger({ minimum: 1, maximum: 500, default: 100 })),
            },
            { additionalProperties: false },
          ),
          response: withErrors({ 200: Type.Object({ items: Type.Array(Entry) }) }),
        },
      },
      async (request) => {
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
    );
  };
