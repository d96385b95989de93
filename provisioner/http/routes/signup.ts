import { Type } from 'typebox';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { DnsLabel, IDEMPOTENCY_KEY, Semver, SignupResponse, StringEnum, withErrors } from '../schemas.ts';
import { PLAN_NAMES } from '../../../tenants/plans.ts';
import type { AppContext } from '../context.ts';

const SignupBody = Type.Object(
  {
    organization: DnsLabel,
    email: Type.String({ format: 'email', maxLength: 254 }),
    plan: Type.Optional(StringEnum(PLAN_NAMES, { description: 'plan name (GET /v1/plans)' })),
    region: Type.Optional(
      Type.String({
        minLength: 1,
        maxLength: 63,
        pattern: '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$',
        description:
          'place the runtime on a root cluster of this region (GET /v1/regions lists them); default: any region',
      }),
    ),
    runtimeVersion: Type.Optional(Semver),
  },
  { additionalProperties: false },
);

export const signupRoutes =
  (ctx: AppContext): FastifyPluginAsyncTypebox =>
  async (app) => {
    app.post(
      '/v1/signup',
      {
        config: {
          public: true,
          rateLimit: { max: ctx.config.signupRateLimit, timeWindow: 60_000 },
        },
        schema: {
          summary: 'Sign a new tenant up',
          description:
            'Creates the tenant and queues its provisioning. Honors Idempotency-Key (22+ random characters: a UUID or `openssl rand -hex 16`): the same key and body return the first answer within an hour.',
          tags: ['tenants'],
          body: SignupBody,
          headers: Type.Object({
            'idempotency-key': Type.Optional(
              Type.String({
                pattern: IDEMPOTENCY_KEY,
                description:
                  'a secret of 22 to 255 characters of A-Z, a-z, 0-9, - and _ (a UUID or `openssl rand -hex 16`): the same key and body replay the first answer, with its API key, for an hour; the same key with another body is 409 IDEMPOTENCY_KEY_REUSED, and while the first request runs 409 IDEMPOTENCY_KEY_IN_PROGRESS',
              }),
            ),
          }),
          response: withErrors({ 202: SignupResponse }),
        },
      },
      async (request, reply) => {
        // The schema checked the key's form (IDEMPOTENCY_KEY).
        const key = request.headers['idempotency-key'];
        const { status, body } = await ctx.tenants.signup(request.body, key, request.id);
        ctx.onSignup(body.warm === true);
        return reply.status(status as 202).send(body);
      },
    );
  };
