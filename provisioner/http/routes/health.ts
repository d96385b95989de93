import { Type, type Static } from 'typebox';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { describeConnectionError, healthOf, isConnectionError, pingDatabase } from '../../db/availability.ts';
import { migrationsApplied } from '../../db/migrate.ts';
import type { AppContext } from '../context.ts';
import type { LoopStatus } from '../../../runtime/loops/health.ts';

/** A background loop as /readyz shows it: no error text (the route is public; GET /v1/doctor has it). */
const LoopView = Type.Object({
  name: Type.String({ description: 'the loop, as in docs/architecture.md "Background loops"' }),
  state: Type.String({
    description: 'idle (not started yet), running, stopping, stopped, disabled (turned off by configuration)',
  }),
  rounds: Type.Integer({ description: 'rounds since start, successful or not' }),
  failures: Type.Integer({ description: 'failed rounds since start' }),
  consecutiveFailures: Type.Integer({ description: 'failed rounds in a row up to now (0: the last round succeeded)' }),
  lastRoundAt: Type.Optional(Type.String({ format: 'date-time' })),
  lastSuccessAt: Type.Optional(Type.String({ format: 'date-time' })),
  lastErrorAt: Type.Optional(Type.String({ format: 'date-time' })),
});

const Check = Type.Object({
  status: Type.String(),
  checks: Type.Optional(Type.Record(Type.String(), Type.String())),
  /** Why the provisioner is not ready, in words. */
  reason: Type.Optional(Type.String()),
  /** /readyz: this replica's background loops in start order (informational: they do not decide readiness). */
  loops: Type.Optional(Type.Array(LoopView)),
});

/** The loops' statuses without their error text, dates as ISO strings. */
function loopViews(statuses: LoopStatus[]): Static<typeof LoopView>[] {
  const iso = (d: Date | undefined) => d?.toISOString();
  return statuses.map((s) => ({
    name: s.name,
    state: s.state,
    rounds: s.rounds,
    failures: s.failures,
    consecutiveFailures: s.consecutiveFailures,
    ...(s.lastRoundAt ? { lastRoundAt: iso(s.lastRoundAt) } : {}),
    ...(s.lastSuccessAt ? { lastSuccessAt: iso(s.lastSuccessAt) } : {}),
    ...(s.lastErrorAt ? { lastErrorAt: iso(s.lastErrorAt) } : {}),
  }));
}

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
          summary:
            'Readiness: the database answers and its migrations are applied (503 with the reason otherwise); with each background loop by name',
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
        return reply.status(ready ? 200 : 503).send({
          status: ready ? 'ready' : 'not ready',
          checks,
          ...(reason ? { reason } : {}),
          loops: loopViews(ctx.loops.status()),
        });
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
