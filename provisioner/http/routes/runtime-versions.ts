import { Type } from 'typebox';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import {
  PathInfo,
  PlanInfo,
  RegionInfo,
  RuntimeVersionInfo,
  RuntimeVersionList,
  StringEnum,
  withErrors,
} from '../schemas.ts';
import { requesterOf } from '../auth.ts';
import { AVAILABILITIES } from '../../store/states.ts';
import { PLANS } from '../../../tenants/plans.ts';
import type { AppContext } from '../context.ts';

export const runtimeVersionRoutes =
  (ctx: AppContext): FastifyPluginAsyncTypebox =>
  async (app) => {
    app.get(
      '/v1/runtime-versions',
      {
        config: { public: true },
        schema: {
          summary: 'The runtime version catalog with availability',
          tags: ['runtime versions'],
          response: withErrors({
            200: RuntimeVersionList,
          }),
        },
      },
      async () => ctx.runtimeVersions.list(),
    );

    app.put(
      '/v1/runtime-versions/:version/availability',
      {
        config: { roles: ['operator'] },
        schema: {
          summary: 'Mark a runtime version available, deprecated or withdrawn',
          tags: ['runtime versions'],
          params: Type.Object({ version: Type.String({ maxLength: 32 }) }, { additionalProperties: false }),
          body: Type.Object({ availability: StringEnum(AVAILABILITIES) }, { additionalProperties: false }),
          response: withErrors({ 200: RuntimeVersionInfo }),
        },
      },
      async (request) =>
        ctx.runtimeVersions.setAvailability(request.params.version, request.body.availability, requesterOf(request)),
    );

    app.get(
      '/v1/runtime-versions/paths',
      {
        config: { public: true },
        schema: {
          summary: 'Upgrade and rollback paths between every two catalog versions',
          description:
            'For every ordered pair of catalog versions: whether the catalog allows the move directly (the edges of the upgrade graph) and, when not, the path to follow; the same rules POST /v1/tenants/:id/upgrade enforces (availability aside).',
          tags: ['runtime versions'],
          response: withErrors({ 200: Type.Object({ items: Type.Array(PathInfo) }) }),
        },
      },
      async () => {
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
    );

    app.get(
      '/v1/plans',
      {
        config: { public: true },
        schema: {
          summary: 'Plans and what they include',
          tags: ['tenants'],
          response: withErrors({ 200: Type.Object({ items: Type.Array(PlanInfo) }) }),
        },
      },
      async () => ({
        items: Object.values(PLANS).map((p) => ({ name: p.name, quota: p.quota, container: p.container })),
      }),
    );

    app.get(
      '/v1/regions',
      {
        config: { public: true },
        schema: {
          summary: 'Regions a signup may ask for (the regions of the registered root clusters)',
          tags: ['tenants'],
          response: withErrors({ 200: Type.Object({ items: Type.Array(RegionInfo) }) }),
        },
      },
      async () => ({ items: await ctx.clusters.regions() }),
    );
  };
