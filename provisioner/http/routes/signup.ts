import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { endpoint } from '../api-routes.ts';
import type { AppContext } from '../context.ts';

export const signupRoutes =
  (ctx: AppContext): FastifyPluginAsyncTypebox =>
  async (app) => {
    app.route({
      ...endpoint('POST /v1/signup', {
        summary: 'Sign a new tenant up',
        description:
          'Creates the tenant and queues its provisioning. Honors Idempotency-Key (22+ random characters: a UUID or `openssl rand -hex 16`): the same key and body return the first answer within an hour.',
        tags: ['tenants'],
      }),
      config: {
        public: true,
        rateLimit: { max: ctx.config.signupRateLimit, timeWindow: 60_000 },
      },
      handler: async (request, reply) => {
        // The schema checked the key's form (IDEMPOTENCY_KEY).
        const key = request.headers['idempotency-key'];
        const { status, body } = await ctx.tenants.signup(request.body, key, request.id);
        ctx.onSignup(body.warm === true);
        return reply.status(status as 202).send(body);
      },
    });
  };
