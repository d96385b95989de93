import { Type } from 'typebox';
import type { FastifyRequest } from 'fastify';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Accepted, BoundedInteger, CONTROL_FREE, IdParams, Semver, StringEnum, withErrors } from '../schemas.ts';
import { authOf, requesterOf } from '../auth.ts';
import { decodeCursor, encodeCursor } from '../cursor.ts';
import { errors, isAppError } from '../../errors.ts';
import { PHASES, listTenants, toTenant, type TenantRow } from '../../store/tenants.ts';
import type { SpecChangeRequest } from '../../tenants/service.ts';
import type { AppContext } from '../context.ts';

const ListQuery = Type.Object(
  {
    phase: Type.Optional(StringEnum(PHASES)),
    runtimeVersion: Type.Optional(Semver),
    cluster: Type.Optional(Type.String({ maxLength: 63 })),
    plan: Type.Optional(Type.String({ maxLength: 40 })),
    region: Type.Optional(Type.String({ maxLength: 63 })),
    limit: Type.Optional(BoundedInteger({ minimum: 1, maximum: 200, default: 50 })),
    cursor: Type.Optional(Type.String({ maxLength: 512 })),
  },
  { additionalProperties: false },
);

const PatchBody = Type.Object(
  {
    plan: Type.Optional(Type.String({ minLength: 1, maxLength: 40 })),
    runtimeVersion: Type.Optional(Semver),
    suspended: Type.Optional(Type.Boolean()),
  },
  { additionalProperties: false, minProperties: 1 },
);

const UpgradeBody = Type.Object({ version: Semver }, { additionalProperties: false });
/** The suspend route's body is optional (no body at all is the common case): checked here, not by the schema. */
function suspendReason(body: unknown): string | undefined {
  if (body === undefined || body === null) return undefined;
  if (typeof body !== 'object' || Array.isArray(body))
    throw errors.validation('the body, when sent, must be an object such as {"reason": "…"}', 'body');
  for (const key of Object.keys(body))
    if (key !== 'reason') throw errors.validation(`'${key}' is not a field of a suspension; only reason is`, key);
  const reason = (body as { reason?: unknown }).reason;
  if (reason === undefined) return undefined;
  if (typeof reason !== 'string' || reason.length < 1 || reason.length > 500)
    throw errors.validation('reason must be a string of 1 to 500 characters', 'reason');
  if (!new RegExp(CONTROL_FREE, 'u').test(reason))
    throw errors.validation("'reason' must not contain control characters", 'reason');
  return reason;
}

const READ = ['operator', 'tenant'] as const;

type TenantView = ReturnType<typeof toTenant> & { status: { tunnel?: { connected: boolean; since: string | null } } };

/** The caller of a spec change, with its role (which versions it may install depends on it). */
function changerOf(request: FastifyRequest): SpecChangeRequest['by'] {
  return { actor: { id: authOf(request).keyId, role: authOf(request).role }, requestId: request.id };
}

/** The upgrade body calls the spec's runtimeVersion `version`: errors about it name that field. */
function asVersionField(err: unknown): never {
  throw isAppError(err) && err.field === 'runtimeVersion' ? err.withField('version') : err;
}

export const tenantRoutes =
  (ctx: AppContext): FastifyPluginAsyncTypebox =>
  async (app) => {
    /**
     * The tenant with whether its runtime's tunnel is connected, to any replica, and since when:
     * this process knows its own tunnels exactly; another replica's comes from the directory row
     * read with the tenant (a row of this replica is ignored: it may be a close not yet written).
     */
    const withTunnel = (row: TenantRow): TenantView => {
      const t = toTenant(row);
      const s = ctx.tunnel.status(t.id);
      const elsewhere =
        !s.connected &&
        row.tunnel_replica != null &&
        row.tunnel_replica !== ctx.tunnelDirectory.replicaId &&
        row.tunnel_since != null;
      const tunnel = s.connected
        ? { connected: true, since: s.since ?? null }
        : elsewhere
          ? { connected: true, since: row.tunnel_since!.toISOString() }
          : { connected: false, since: null };
      return { ...t, status: { ...t.status, tunnel } };
    };

    app.get(
      '/v1/tenants',
      {
        config: { roles: READ },
        schema: {
          summary: 'List tenants',
          tags: ['tenants'],
          querystring: ListQuery,
          response: withErrors({
            200: Type.Object({
              items: Type.Array(Type.Ref('Tenant')),
              nextCursor: Type.Union([Type.String(), Type.Null()]),
            }),
          }),
        },
      },
      async (request) => {
        const q = request.query;
        const auth = authOf(request);
        const limit = q.limit ?? 50;
        const rows = await listTenants(ctx.pool, {
          ...(q.phase ? { phase: q.phase } : {}),
          ...(q.runtimeVersion ? { runtimeVersion: q.runtimeVersion } : {}),
          ...(q.cluster ? { cluster: q.cluster } : {}),
          ...(q.plan ? { plan: q.plan } : {}),
          ...(q.region ? { region: q.region } : {}),
          ...(auth.role === 'tenant' && auth.tenantId ? { onlyId: auth.tenantId } : {}),
          ...(q.cursor ? { after: decodeCursor(ctx.box, 'tenants', q.cursor) } : {}),
          limit: limit + 1,
        });
        const page = rows.slice(0, limit);
        const last = page.at(-1);
        return {
          items: page.map((r) => withTunnel(r)),
          nextCursor:
            rows.length > limit && last ? encodeCursor(ctx.box, 'tenants', { ts: last.cursor_ts, id: last.id }) : null,
        };
      },
    );

    app.get(
      '/v1/tenants/:id',
      {
        config: { roles: READ },
        schema: {
          summary: 'Get a tenant',
          tags: ['tenants'],
          params: IdParams,
          response: withErrors({ 200: Type.Ref('Tenant') }),
        },
      },
      async (request) => {
        const row = await ctx.reads.tenant(request.params.id);
        if (!row) throw errors.notFound('tenant', request.params.id);
        return withTunnel(row);
      },
    );

    app.patch(
      '/v1/tenants/:id',
      {
        config: { roles: READ },
        schema: {
          summary: 'Change a tenant spec (plan, runtimeVersion, suspended)',
          tags: ['tenants'],
          params: IdParams,
          body: PatchBody,
          response: withErrors({ 202: Accepted }),
        },
      },
      async (request, reply) => {
        const by = changerOf(request);
        if (by.actor.role === 'tenant' && request.body.plan !== undefined) {
          throw errors.forbidden('a tenant key cannot change its plan; contact an operator');
        }
        const out = await ctx.tenants.change({ tenantId: request.params.id, change: request.body, kind: 'update', by });
        return reply.status(202).send(out);
      },
    );

    app.post(
      '/v1/tenants/:id/upgrade',
      {
        config: { roles: READ },
        schema: {
          summary: 'Upgrade (or roll back) the tenant runtime',
          tags: ['tenants'],
          params: IdParams,
          body: UpgradeBody,
          response: withErrors({ 202: Accepted }),
        },
      },
      async (request, reply) => {
        const out = await ctx.tenants
          .change({
            tenantId: request.params.id,
            change: { runtimeVersion: request.body.version },
            kind: 'upgrade',
            by: changerOf(request),
          })
          .catch(asVersionField);
        return reply.status(202).send(out);
      },
    );

    app.post(
      '/v1/tenants/:id/suspend',
      {
        config: { roles: READ },
        schema: {
          summary: 'Suspend a tenant',
          tags: ['tenants'],
          description:
            'Optional body {"reason": "…"} (operators only; the tenant sees it). An operator\'s suspension can only be lifted by an operator; a tenant\'s own by either.',
          params: IdParams,
          response: withErrors({ 202: Accepted }),
        },
      },
      async (request, reply) => {
        const by = changerOf(request);
        const reason = suspendReason(request.body);
        if (reason !== undefined && by.actor.role === 'tenant')
          throw errors.validation('only an operator gives a reason for a suspension', 'reason');
        const out = await ctx.tenants.change({
          tenantId: request.params.id,
          change: { suspended: true },
          kind: 'suspend',
          by,
          reason,
        });
        return reply.status(202).send(out);
      },
    );

    app.post(
      '/v1/tenants/:id/resume',
      {
        config: { roles: READ },
        schema: {
          summary: 'Resume a tenant',
          tags: ['tenants'],
          description:
            'A tenant key resumes only a suspension the tenant applied itself (403 SUSPENDED_BY_OPERATOR otherwise).',
          params: IdParams,
          response: withErrors({ 202: Accepted }),
        },
      },
      async (request, reply) => {
        const out = await ctx.tenants.change({
          tenantId: request.params.id,
          change: { suspended: false },
          kind: 'resume',
          by: changerOf(request),
        });
        return reply.status(202).send(out);
      },
    );

    app.post(
      '/v1/tenants/:id/retry',
      {
        config: { roles: READ },
        schema: {
          summary: 'Retry a stalled or failing tenant now',
          tags: ['tenants'],
          params: IdParams,
          response: withErrors({ 202: Accepted }),
        },
      },
      async (request, reply) =>
        reply.status(202).send(await ctx.tenants.retry(request.params.id, requesterOf(request))),
    );

    app.delete(
      '/v1/tenants/:id',
      {
        config: { roles: READ },
        schema: {
          summary: 'Delete a tenant (a tombstone is kept)',
          tags: ['tenants'],
          params: IdParams,
          response: withErrors({ 202: Accepted }),
        },
      },
      async (request, reply) => {
        const out = await ctx.tenants.change({
          tenantId: request.params.id,
          change: { deleted: true },
          kind: 'delete',
          by: changerOf(request),
        });
        return reply.status(202).send(out);
      },
    );
  };
