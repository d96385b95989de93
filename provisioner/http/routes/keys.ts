import { Type } from 'typebox';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { IdParams, StringEnum, Uuid, withErrors } from '../schemas.ts';
import { actorOf } from '../auth.ts';
import { errors } from '../../errors.ts';
import { withTx } from '../../db/tx.ts';
import { writeAudit } from '../../store/audit.ts';
import { createKey, getKey, listKeys, revokeKey } from '../../store/keys.ts';
import { getTenantRow } from '../../store/tenants.ts';
import type { AppContext } from '../context.ts';

const CreateBody = Type.Object({
  role: StringEnum(['admin', 'operator', 'tenant', 'runtime'] as const),
  name: Type.String({ minLength: 1, maxLength: 100 }),
  tenantId: Type.Optional(Uuid),
}, { additionalProperties: false });

/** API key management: admin only (admin passes every role check, so `roles` is empty). */
export const keyRoutes = (ctx: AppContext): FastifyPluginAsyncTypebox => async (app) => {

  app.post('/v1/keys', {
    config: { roles: [] },
    schema: {
      summary: 'Create an API key (shown once)', tags: ['keys'], body: CreateBody,
      response: withErrors({ 201: Type.Object({ key: Type.String(), info: Type.Ref('ApiKey') }) }),
    },
  }, async (request, reply) => {
    const b = request.body;
    const bound = b.role === 'tenant' || b.role === 'runtime';
    if (bound && !b.tenantId) throw errors.validation(`a ${b.role} key needs tenantId`, 'tenantId');
    if (!bound && b.tenantId) throw errors.validation(`an ${b.role} key cannot be bound to a tenant`, 'tenantId');
    const out = await withTx(ctx.pool, async (tx) => {
      if (b.tenantId) {
        const t = await getTenantRow(tx, b.tenantId);
        if (!t) throw errors.notFound('tenant', b.tenantId);
        if (t.deleted) throw errors.tenantDeleted(b.tenantId);
      }
      const created = await createKey(tx, { role: b.role, tenantId: b.tenantId ?? null, name: b.name, createdBy: actorOf(request).id });
      await writeAudit(tx, actorOf(request), { action: 'key.create', targetType: 'api_key', targetId: created.info.id, after: created.info, requestId: request.id });
      return created;
    });
    return reply.status(201).send(out);
  });

  app.get('/v1/keys', {
    config: { roles: [] },
    schema: {
      summary: 'List API keys (never the keys themselves)', tags: ['keys'],
      querystring: Type.Object({ tenantId: Type.Optional(Uuid), includeRevoked: Type.Optional(Type.Boolean()) }, { additionalProperties: false }),
      response: withErrors({ 200: Type.Object({ items: Type.Array(Type.Ref('ApiKey')) }) }),
    },
  }, async (request) => ({
    items: await listKeys(ctx.pool, {
      ...(request.query.tenantId ? { tenantId: request.query.tenantId } : {}),
      includeRevoked: request.query.includeRevoked ?? false,
    }),
  }));

  app.delete('/v1/keys/:id', {
    config: { roles: [] },
    schema: { summary: 'Revoke an API key', tags: ['keys'], params: IdParams, response: withErrors({ 200: Type.Ref('ApiKey') }) },
  }, async (request) => {
    const info = await withTx(ctx.pool, async (tx) => {
      const before = await getKey(tx, request.params.id);
      if (!before) throw errors.notFound('API key', request.params.id);
      if (before.id === request.auth?.keyId) throw errors.cannotRevokeOwnKey();
      const after = (await revokeKey(tx, request.params.id))!;
      await writeAudit(tx, actorOf(request), { action: 'key.revoke', targetType: 'api_key', targetId: after.id, before, after, requestId: request.id });
      return after;
    });
    ctx.onKeyRevoked(info.id);
    return info;
  });
};
