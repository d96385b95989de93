import { Type } from 'typebox';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { IdParams, withErrors } from '../schemas.ts';
import { assertTenantAccess } from '../auth.ts';
import { decodeCursor, encodeCursor } from '../cursor.ts';
import { errors } from '../../errors.ts';
import { getOperation, listOperations } from '../../store/operations.ts';
import { getTenantRow } from '../../store/tenants.ts';
import type { AppContext } from '../context.ts';

const READ = ['operator', 'tenant'] as const;

export const operationRoutes = (ctx: AppContext): FastifyPluginAsyncTypebox => async (app) => {
  app.get('/v1/tenants/:id/operations', {
    config: { roles: READ },
    schema: {
      summary: "List a tenant's operations, newest first", tags: ['operations'], params: IdParams,
      querystring: Type.Object({
        limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 200, default: 50 })),
        cursor: Type.Optional(Type.String({ maxLength: 512 })),
      }, { additionalProperties: false }),
      response: withErrors({ 200: Type.Object({ items: Type.Array(Type.Ref('Operation')), nextCursor: Type.Union([Type.String(), Type.Null()]) }) }),
    },
  }, async (request) => {
    assertTenantAccess(request, request.params.id);
    if (!(await getTenantRow(ctx.pool, request.params.id))) throw errors.notFound('tenant', request.params.id);
    const limit = request.query.limit ?? 50;
    const rows = await listOperations(ctx.pool, request.params.id, {
      limit: limit + 1,
      ...(request.query.cursor ? { before: decodeCursor(ctx.box, 'operations', request.query.cursor) } : {}),
    });
    const page = rows.slice(0, limit);
    const last = page.at(-1);
    return {
      items: page.map(({ cursorTs: _c, ...op }) => op),
      nextCursor: rows.length > limit && last ? encodeCursor(ctx.box, 'operations', { ts: last.cursorTs, id: last.id }) : null,
    };
  });

  app.get('/v1/operations/:id', {
    config: { roles: READ },
    schema: { summary: 'Get an operation', tags: ['operations'], params: IdParams, response: withErrors({ 200: Type.Ref('Operation') }) },
  }, async (request) => {
    const op = await getOperation(ctx.pool, request.params.id);
    const auth = request.auth;
    if (!op || ((auth?.role === 'tenant' || auth?.role === 'runtime') && auth.tenantId !== op.tenantId)) {
      throw errors.notFound('operation', request.params.id);
    }
    assertTenantAccess(request, op.tenantId);
    return op;
  });
};
