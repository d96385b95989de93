import { Type } from 'typebox';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { CreatedKey, DisplayText, IdParams, Identity, StringEnum, Uuid, withErrors } from '../schemas.ts';
import { authOf, requesterOf } from '../auth.ts';
import type { AppContext } from '../context.ts';

const CreateBody = Type.Object(
  {
    role: StringEnum(['admin', 'operator', 'tenant', 'runtime'] as const),
    name: DisplayText({ minLength: 1, maxLength: 100 }),
    tenantId: Type.Optional(Uuid),
  },
  { additionalProperties: false },
);

/** API key management: admin only (admin passes every role check, so `roles` is empty). */
export const keyRoutes =
  (ctx: AppContext): FastifyPluginAsyncTypebox =>
  async (app) => {
    app.get(
      '/v1/whoami',
      {
        config: { roles: ['operator', 'tenant', 'runtime'] },
        schema: {
          summary: 'The calling API key: its id, role and tenant',
          description: 'What a client (the console) shows and hides by role; any valid key may call it.',
          tags: ['keys'],
          response: withErrors({
            200: Identity,
          }),
        },
      },
      async (request) => {
        const a = authOf(request);
        return { keyId: a.keyId, role: a.role, tenantId: a.tenantId };
      },
    );

    app.post(
      '/v1/keys',
      {
        config: { roles: [] },
        schema: {
          summary: 'Create an API key (shown once)',
          tags: ['keys'],
          body: CreateBody,
          response: withErrors({ 201: CreatedKey }),
        },
      },
      async (request, reply) => reply.status(201).send(await ctx.keys.create(request.body, requesterOf(request))),
    );

    app.get(
      '/v1/keys',
      {
        config: { roles: [] },
        schema: {
          summary: 'List API keys (never the keys themselves)',
          tags: ['keys'],
          querystring: Type.Object(
            { tenantId: Type.Optional(Uuid), includeRevoked: Type.Optional(Type.Boolean()) },
            { additionalProperties: false },
          ),
          response: withErrors({ 200: Type.Object({ items: Type.Array(Type.Ref('ApiKey')) }) }),
        },
      },
      async (request) => ({
        items: await ctx.keys.list({
          tenantId: request.query.tenantId,
          includeRevoked: request.query.includeRevoked ?? false,
        }),
      }),
    );

    app.delete(
      '/v1/keys/:id',
      {
        config: { roles: [] },
        schema: {
          summary: 'Revoke an API key',
          tags: ['keys'],
          params: IdParams,
          response: withErrors({ 200: Type.Ref('ApiKey') }),
        },
      },
      async (request) => ctx.keys.revoke(request.params.id, requesterOf(request)),
    );
  };
