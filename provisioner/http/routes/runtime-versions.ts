import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { requesterOf } from '../auth.ts';
import { PLANS } from '../../../tenants/plans.ts';
import { endpoint } from '../api-routes.ts';
import type { AppContext } from '../context.ts';

export const runtimeVersionRoutes =
  (ctx: AppContext): FastifyPluginAsyncTypebox =>
  async (app) => {
    app.route({
      ...endpoint('GET /v1/runtime-versions', {
        summary: 'The runtime version catalog with availability',
        tags: ['runtime versions'],
      }),
      config: { public: true },
      handler: async () => ctx.runtimeVersions.list(),
    });

    app.route({
      ...endpoint('PUT /v1/runtime-versions/:version/availability', {
        summary: 'Mark a runtime version available, deprecated or withdrawn',
        tags: ['runtime versions'],
      }),
      config: { roles: ['operator'] },
      handler: async (request) =>
        ctx.runtimeVersions.setAvailability(request.params.version, request.body.availability, requesterOf(request)),
    });

    app.route({
      ...endpoint('GET /v1/runtime-versions/paths', {
        summary: 'Upgrade and rollback paths between every two catalog versions',
        description:
          'For every ordered pair of catalog versions: whether the catalog allows the move directly (the edges of the upgrade graph) and, when not, the path to follow; the same rules POST /v1/tenants/:id/upgrade enforces (availability aside).',
        tags: ['runtime versions'],
      }),
      config: { public: true },
      handler: async () => {
        const versions = ctx.catalog.versions.map((v) => v.version);
        const items = versions.flatMap((from) =>
          versions
            .filter((to) => to !== from)
            .map((to) => {
              const a = ctx.catalog.upgradePath(from, to);
              return { from, to, allowed: a.allowed, path: a.path, ...(a.allowed ? {} : { reason: a.reason }) };
            }),
        );
        return { items };
      },
    });

    app.route({
      ...endpoint('GET /v1/plans', {
        summary: 'Plans and what they include',
        tags: ['tenants'],
      }),
      config: { public: true },
      handler: async () => ({
        items: Object.values(PLANS).map((p) => ({ name: p.name, quota: p.quota, container: p.container })),
      }),
    });

    app.route({
      ...endpoint('GET /v1/regions', {
        summary: 'Regions a signup may ask for (the regions of the registered root clusters)',
        tags: ['tenants'],
      }),
      config: { public: true },
      handler: async () => ({ items: await ctx.clusters.regions() }),
    });
  };
