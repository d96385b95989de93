import { Type } from 'typebox';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { RuntimeVersionInfo, StringEnum, withErrors } from '../schemas.ts';
import { actorOf } from '../auth.ts';
import { errors } from '../../errors.ts';
import { withTx } from '../../db/tx.ts';
import { writeAudit } from '../../store/audit.ts';
import { AVAILABILITIES, availabilityMap, availabilityOf, setAvailability } from '../../store/versions.ts';
import { listRegions } from '../../store/clusters.ts';
import { PLANS } from '../../../tenants/plans.ts';
import type { AppContext } from '../context.ts';

export const runtimeVersionRoutes = (ctx: AppContext): FastifyPluginAsyncTypebox => async (app) => {
  const describe = (version: string, availability: (typeof AVAILABILITIES)[number]) => {
    const v = ctx.catalog.get(version)!;
    return {
      version: v.version,
      releaseDate: v.releaseDate,
      channel: v.channel,
      availability,
      default: v.version === ctx.catalog.defaultVersion('stable'),
      components: { ...v.components },
      upgrade: v.upgrade.minFrom ? { minFrom: v.upgrade.minFrom } : {},
    };
  };

  app.get('/v1/runtime-versions', {
    config: { public: true },
    schema: {
      summary: 'The runtime version catalog with availability', tags: ['runtime versions'],
      response: withErrors({ 200: Type.Object({ items: Type.Array(RuntimeVersionInfo), defaultVersion: Type.String() }) }),
    },
  }, async () => {
    const overrides = await availabilityMap(ctx.pool);
    return {
      items: ctx.catalog.versions.map((v) => describe(v.version, overrides.get(v.version) ?? 'available')),
      defaultVersion: ctx.catalog.defaultVersion('stable'),
    };
  });

  app.put('/v1/runtime-versions/:version/availability', {
    config: { roles: ['operator'] },
    schema: {
      summary: 'Mark a runtime version available, deprecated or withdrawn', tags: ['runtime versions'],
      params: Type.Object({ version: Type.String({ maxLength: 32 }) }, { additionalProperties: false }),
      body: Type.Object({ availability: StringEnum(AVAILABILITIES) }, { additionalProperties: false }),
      response: withErrors({ 200: RuntimeVersionInfo }),
    },
  }, async (request) => {
    const { version } = request.params;
    if (!ctx.catalog.get(version)) throw errors.notFound('runtime version', version);
    const { availability } = request.body;
    await withTx(ctx.pool, async (tx) => {
      const before = await availabilityOf(tx, version);
      await setAvailability(tx, version, availability, actorOf(request).id);
      await writeAudit(tx, actorOf(request), {
        action: 'runtime_version.availability', targetType: 'runtime_version', targetId: version,
        before: { availability: before }, after: { availability }, requestId: request.id,
      });
    });
    return describe(version, availability);
  });

  const Resources = Type.Object({ cpu: Type.String(), memory: Type.String() });
  const PlanInfo = Type.Object({
    name: Type.String(),
    quota: Type.Object({
      cpu: Type.String(), memory: Type.String(), limits: Resources, pods: Type.Integer(), storage: Type.String(), pvcs: Type.Integer(),
    }),
    container: Type.Object({ defaultRequest: Resources, default: Resources, max: Resources }),
  });
  app.get('/v1/plans', {
    config: { public: true },
    schema: { summary: 'Plans and what they include', tags: ['tenants'], response: withErrors({ 200: Type.Object({ items: Type.Array(PlanInfo) }) }) },
  }, async () => ({ items: Object.values(PLANS).map((p) => ({ name: p.name, quota: p.quota, container: p.container })) }));

  const RegionInfo = Type.Object({
    name: Type.String(),
    accepting: Type.Boolean({ description: 'a root cluster of the region has room for a new tenant' }),
  });
  app.get('/v1/regions', {
    config: { public: true },
    schema: {
      summary: 'Regions a signup may ask for (the regions of the registered root clusters)', tags: ['tenants'],
      response: withErrors({ 200: Type.Object({ items: Type.Array(RegionInfo) }) }),
    },
  }, async () => ({ items: await listRegions(ctx.pool) }));
};
