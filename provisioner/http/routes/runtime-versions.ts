import { Type } from 'typebox';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { RuntimeVersionInfo, StringEnum, withErrors } from '../schemas.ts';
import { requesterOf } from '../auth.ts';
import { AVAILABILITIES } from '../../store/versions.ts';
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
            200: Type.Object({ items: Type.Array(RuntimeVersionInfo), defaultVersion: Type.String() }),
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

    const Resources = Type.Object({ cpu: Type.String(), memory: Type.String() });
    const PlanInfo = Type.Object({
      name: Type.String(),
      quota: Type.Object({
        cpu: Type.String(),
        memory: Type.String(),
        limits: Resources,
        pods: Type.Integer(),
        storage: Type.String(),
        pvcs: Type.Integer(),
      }),
      container: Type.Object({ defaultRequest: Resources, default: Resources, max: Resources }),
    });
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

    const RegionInfo = Type.Object({
      name: Type.String(),
      accepting: Type.Boolean({ description: 'a root cluster of the region has room for a new tenant' }),
    });
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
