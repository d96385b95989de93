import { Type } from 'typebox';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { DnsLabel, Semver, withErrors } from '../schemas.ts';
import { errors } from '../../errors.ts';
import type { AppContext } from '../context.ts';

const SignupBody = Type.Object({
  organization: DnsLabel,
  email: Type.String({ format: 'email', maxLength: 254 }),
  plan: Type.Optional(Type.String({ minLength: 1, maxLength: 40, description: 'plan name (GET /v1/plans)' })),
  region: Type.Optional(Type.String({
    minLength: 1, maxLength: 63, pattern: '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$',
    description: 'place the runtime on a root cluster of this region (GET /v1/regions lists them); default: any region',
  })),
  runtimeVersion: Type.Optional(Semver),
}, { additionalProperties: false });

const SignupResponse = Type.Object({
  tenant: Type.Ref('Tenant'),
  apiKey: Type.String({ description: 'the tenant API key; shown only in this response' }),
  operationId: Type.String({ format: 'uuid' }),
});

const IDEMPOTENCY_KEY = /^[\x21-\x7e]{1,255}$/;

export const signupRoutes = (ctx: AppContext): FastifyPluginAsyncTypebox => async (app) => {
  app.post('/v1/signup', {
    config: {
      public: true,
      rateLimit: { max: ctx.config.signupRateLimit, timeWindow: 60_000 },
    },
    schema: {
      summary: 'Sign a new tenant up',
      description: 'Creates the tenant and queues its provisioning. Honors Idempotency-Key: the same key and body return the first answer.',
      tags: ['tenants'],
      body: SignupBody,
      headers: Type.Object({ 'idempotency-key': Type.Optional(Type.String()) }),
      response: withErrors({ 202: SignupResponse }),
    },
  }, async (request, reply) => {
    const key = request.headers['idempotency-key'];
    if (key !== undefined && !IDEMPOTENCY_KEY.test(key)) {
      throw errors.validation('Idempotency-Key must be 1 to 255 printable ASCII characters', 'Idempotency-Key');
    }
    const { status, body } = await ctx.tenants.signup(request.body, key, request.id);
    return reply.status(status as 202).send(body);
  });
};
