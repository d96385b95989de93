import { Type } from 'typebox';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { describeConnectionError, healthOf, isConnectionError, pingDatabase } from '../../db/availability.ts';
import { migrationsApplied } from '../../db/migrate.ts';
import type { AppContext } from '../context.ts';

const Check = Type.Object({
  status: Type.String(),
  checks: Type.Optional(Type.Record(Type.String(), Type.String())),
  /** Why the provisioner is not ready, in words. */
  reason: Type.Optional(Type.String()),
});

export const healthRoutes =
  (ctx: AppContext): FastifyPluginAsyncTypebox =>
  async (app) => {
    app.get(
      '/healthz',
      {
        config: { public: true },
        schema: { summary: 'Liveness: the process serves', tags: ['health'], response: { 200: Check } },
      },
      async () => ({ status: 'ok' }),
    );

    app.get(
      '/readyz',
      {
        config: { public: true },
        schema: {
          summary: 'Readiness: the database answers and its migrations are applied (503 with the reason otherwise)',
          tags: ['health'],
          response: { 200: Check, 503: Check },
        },
      },
      async (_req, reply) => {
        const checks: Record<string, string> = {};
        const health = healthOf(ctx.pool);
        let reason: string | undefined;
        try {
          await health.track(pingDatabase(ctx.pool));
          checks.database = 'ok';
          checks.migrations = (await migrationsApplied(ctx.pool)) ? 'ok' : 'pending';
          if (checks.migrations !== 'ok')
            reason = 'database migrations are pending: run `provisioner migrate` or restart a replica';
        } catch (err) {
          checks.database = isConnectionError(err) ? 'unreachable' : 'failing';
          checks.migrations = 'unknown';
          const since = health.outage?.since;
          reason = `database ${checks.database}${since ? ` since ${since.toISOString()}` : ''}: ${describeConnectionError(err)}`;
        }
        const ready = Object.values(checks).every((v) => v === 'ok');
        if (!ready) reply.header('retry-after', '2');
        return reply
          .status(ready ? 200 : 503)
          .send({ status: ready ? 'ready' : 'not ready', checks, ...(reason ? { reason } : {}) });
      },
    );

    const metricsSchema = {
      summary: 'Prometheus metrics (text exposition format)',
      tags: ['health'],
      response: {
        200: { description: 'Prometheus text format', content: { 'text/plain': { schema: Type.String() } } },
      },
    };
    app.get('/metrics', { config: { public: true }, schema: metricsSchema }, async (_req, reply) => {
      const body = await ctx.metrics.registry.metrics();
      return reply.type(ctx.metrics.registry.contentType).send(body);
    });
  };
