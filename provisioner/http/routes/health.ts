import { Type } from 'typebox';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { migrationsApplied } from '../../db/migrate.ts';
import type { AppContext } from '../context.ts';

const Check = Type.Object({ status: Type.String(), checks: Type.Optional(Type.Record(Type.String(), Type.String())) });

export const healthRoutes = (ctx: AppContext): FastifyPluginAsyncTypebox => async (app) => {
  app.get('/healthz', { config: { public: true }, schema: { hide: true, response: { 200: Check } } }, async () => ({ status: 'ok' }));

  app.get('/readyz', { config: { public: true }, schema: { hide: true, response: { 200: Check, 503: Check } } }, async (_req, reply) => {
    const checks: Record<string, string> = {};
    try {
      await ctx.pool.query('SELECT 1');
      checks.database = 'ok';
      checks.migrations = (await migrationsApplied(ctx.pool)) ? 'ok' : 'pending';
    } catch {
      checks.database = 'unreachable';
      checks.migrations = 'unknown';
    }
    const ready = Object.values(checks).every((v) => v === 'ok');
    return reply.status(ready ? 200 : 503).send({ status: ready ? 'ready' : 'not ready', checks });
  });

  app.get('/metrics', { config: { public: true }, schema: { hide: true } }, async (_req, reply) => {
    const body = await ctx.metrics.registry.metrics();
    return reply.type(ctx.metrics.registry.contentType).send(body);
  });
};
