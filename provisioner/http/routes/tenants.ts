import { type Static } from 'typebox';
import type { FastifyRequest } from 'fastify';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { CONTROL_FREE, TenantSettingsSchema } from '../../api/schemas.ts';
import type { TenantStreamEvents } from '../../api/types.ts';
import { authOf, requesterOf } from '../auth.ts';
import { decodeCursor, encodeCursor } from '../cursor.ts';
import { errors, isAppError } from '../../errors.ts';
import { toTenant, type TenantFilter, type TenantRow, type TenantSort } from '../../store/tenants.ts';
import { serveEventStream } from '../streams.ts';
import { conditionsWithRuntime, tunnelView } from '../../tenant-api/tenant-view.ts';
import { decodeStreamCursor, encodeStreamCursor } from '../stream-cursor.ts';

import type { SpecChangeRequest } from '../../tenant-api/service.ts';
import { endpoint } from '../api-routes.ts';
import { TenantListQuery } from '../route-schemas.ts';
import type { AppContext } from '../context.ts';

/** The scope of the tenant events stream's ids (one sequence for every tenant). */
const TENANT_EVENTS = 'tenants';
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

type TenantView = ReturnType<typeof toTenant> & {
  status: { tunnel?: { connected: boolean; since: string | null }; observedAt: string | null; stale: boolean };
};

/** Settled phases, whose status the periodic resync renews: only these can go stale. */
const SETTLED = new Set<string>(['Ready', 'Suspended']);

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
    /** The tenant with whether its runtime's tunnel is connected, to any replica, and since when (tunnelView). */
    const withTunnel = (row: TenantRow, request: FastifyRequest): TenantView => {
      const t = toTenant(row);
      const tunnel = tunnelView(ctx.tunnel.status(t.id), row, ctx.tunnelDirectory.replicaId);
      // Freshness: a settled tenant is observed again by every resync; one whose last observation
      // is older than two resync periods is shown as stale, not as healthy (docs/decisions.md).
      const observedAt = row.last_reconciled_at ?? null;
      const bound = 2 * ctx.config.reconciler.resyncSeconds * 1000;
      const stale =
        bound > 0 && SETTLED.has(t.status.phase) && Date.now() - (observedAt ?? row.updated_at).getTime() > bound;
      // With RuntimeConnected while Ready; a tenant's own key reads no operator remediation text (tenant-view.ts).
      const role = request.auth?.role;
      const conditions = conditionsWithRuntime(t, tunnel, role === 'tenant' || role === 'runtime');
      return {
        ...t,
        status: { ...t.status, conditions, tunnel, observedAt: observedAt?.toISOString() ?? null, stale },
      };
    };

    /** The filters of a listing query, and what a tenant key restricts them to. */
    const filterOf = (request: FastifyRequest, q: Static<typeof TenantListQuery>): TenantFilter => {
      const auth = authOf(request);
      return {
        ...(q.phase ? { phase: q.phase } : {}),
        ...(q.runtimeVersion ? { runtimeVersion: q.runtimeVersion } : {}),
        ...(q.cluster ? { cluster: q.cluster } : {}),
        ...(q.plan ? { plan: q.plan } : {}),
        ...(q.region ? { region: q.region } : {}),
        ...(q.q ? { search: q.q } : {}),
        ...((auth.role === 'tenant' || auth.role === 'runtime') && auth.tenantId ? { onlyId: auth.tenantId } : {}),
      };
    };
    /** A cursor belongs to one order: one of another order is refused (INVALID_CURSOR). */
    const cursorKind = (sort: TenantSort, order: 'asc' | 'desc') =>
      sort === 'createdAt' && order === 'asc' ? 'tenants' : `tenants:${sort}:${order}`;

    app.route({
      ...endpoint('GET /v1/tenants', {
        summary: 'List tenants',
        tags: ['tenants'],
      }),
      config: { roles: READ },
      handler: async (request) => {
        const q = request.query;
        const limit = q.limit ?? 50;
        const sort = q.sort ?? 'createdAt';
        const order = q.order ?? 'asc';
        const kind = cursorKind(sort, order);
        const rows = await ctx.tenants.list({
          ...filterOf(request, q),
          sort,
          order,
          ...(q.cursor ? { after: decodeCursor(ctx.box, kind, q.cursor) } : {}),
          limit: limit + 1,
        });
        const page = rows.slice(0, limit);
        const last = page.at(-1);
        return {
          items: page.map((r) => withTunnel(r, request)),
          nextCursor:
            rows.length > limit && last ? encodeCursor(ctx.box, kind, { ts: last.sort_key, id: last.id }) : null,
        };
      },
    });

    app.route({
      ...endpoint('GET /v1/tenants/summary', {
        summary: 'Count tenants by phase, suspension and runtime version',
        description:
          'The tenants the same filters as GET /v1/tenants select (phase aside), counted by phase, and their total (Deleted tenants included in the phase counts, not in the total). ' +
          '`suspended` counts the tenants whose spec is suspended, also those whose suspension is not applied yet (their phase is still the one before); `runtimeVersions` counts per version the tenants whose spec names it and those running it.',
        tags: ['tenants'],
      }),
      config: { roles: READ },
      handler: async (request) => {
        const counts = await ctx.tenants.count(filterOf(request, request.query));
        const total = Object.entries(counts.phases).reduce((n, [p, c]) => (p === 'Deleted' ? n : n + c), 0);
        return { phases: counts.phases, total, suspended: counts.suspended, runtimeVersions: counts.runtimeVersions };
      },
    });

    app.route({
      ...endpoint('GET /v1/tenants/events', {
        summary: 'Server-Sent Events: tenants as they change',
        description:
          'Each event is `tenant` with id = an opaque cursor (pass it back unchanged) and data the tenant (as GET /v1/tenants/:id answers it), sent at its latest change. ' +
          'Starts with a `ready` event {after} and then the next change, or after `after=` or Last-Event-ID to resume. ' +
          '`id=` follows one tenant. A tenant key sees its own tenant only. Changes written by any replica reach every stream.',
        tags: ['tenants'],
      }),
      config: { roles: READ },
      handler: async (request, reply) => {
        const auth = authOf(request);
        const lastEventId = request.headers['last-event-id'];
        const resumeAt =
          typeof lastEventId === 'string'
            ? decodeStreamCursor(ctx.box, TENANT_EVENTS, lastEventId, 'Last-Event-ID')
            : request.query.after !== undefined
              ? decodeStreamCursor(ctx.box, TENANT_EVENTS, request.query.after, 'after')
              : undefined;
        const own = (auth.role === 'tenant' || auth.role === 'runtime') && auth.tenantId ? auth.tenantId : undefined;
        const wanted = request.query.id;
        if (own && wanted && wanted !== own) throw errors.notFound('tenant', wanted);
        // Taken before the first await, so that a burst of opens cannot all pass the limit.
        const slot = ctx.streams.reserve(auth.keyId, ctx.config.sseStreamsPerKey);
        try {
          if (wanted && !(await ctx.reads.tenant(wanted))) throw errors.notFound('tenant', wanted);
          const afterSeq = resumeAt ?? (await ctx.tenantChanges.latestSeq());
          const onlyId = own ?? wanted;
          await serveEventStream<TenantStreamEvents>(
            slot,
            request,
            reply,
            { log: 'tenant change stream failed', message: 'tenant change stream failed' },
            async (stream) => {
              stream.send('ready', { after: encodeStreamCursor(ctx.box, TENANT_EVENTS, afterSeq) });
              for await (const row of ctx.tenantChanges.follow({
                afterSeq,
                signal: stream.signal,
                ...(onlyId ? { onlyId } : {}),
              })) {
                const id = encodeStreamCursor(ctx.box, TENANT_EVENTS, row.change_seq ?? '0');
                if (!stream.send('tenant', withTunnel(row, request), id)) await stream.drained();
              }
            },
          );
        } finally {
          slot.release();
        }
      },
    });

    app.route({
      ...endpoint('GET /v1/tenants/:id', {
        summary: 'Get a tenant',
        tags: ['tenants'],
      }),
      config: { roles: READ },
      handler: async (request) => {
        const row = await ctx.reads.tenant(request.params.id);
        if (!row) throw errors.notFound('tenant', request.params.id);
        return withTunnel(row, request);
      },
    });

    app.route({
      ...endpoint('PATCH /v1/tenants/:id', {
        summary: `Change a tenant spec (plan, runtimeVersion, suspended) or its settings (${Object.keys(TenantSettingsSchema.properties).join(', ')})`,
        tags: ['tenants'],
      }),
      config: { roles: READ },
      handler: async (request, reply) => {
        const by = changerOf(request);
        if (by.actor.role === 'tenant' && request.body.plan !== undefined) {
          throw errors.forbidden('a tenant key cannot change its plan; contact an operator');
        }
        // The spec's fields; every other field of the body is a setting (store/tenant-shapes.ts).
        const { plan, runtimeVersion, suspended, ...settings } = request.body;
        const out = await ctx.tenants.change({
          tenantId: request.params.id,
          change: { plan, runtimeVersion, suspended },
          kind: 'update',
          by,
          settings,
        });
        return reply.status(202).send(out);
      },
    });

    app.route({
      ...endpoint('POST /v1/tenants/:id/upgrade', {
        summary: 'Upgrade (or roll back) the tenant runtime',
        tags: ['tenants'],
      }),
      config: { roles: READ },
      handler: async (request, reply) => {
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
    });

    app.route({
      ...endpoint('POST /v1/tenants/:id/suspend', {
        summary: 'Suspend a tenant',
        tags: ['tenants'],
        description:
          'Optional body {"reason": "…"} (operators only; the tenant sees it). An operator\'s suspension can only be lifted by an operator; a tenant\'s own by either.',
      }),
      config: { roles: READ },
      handler: async (request, reply) => {
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
    });

    app.route({
      ...endpoint('POST /v1/tenants/:id/resume', {
        summary: 'Resume a tenant',
        tags: ['tenants'],
        description:
          'A tenant key resumes only a suspension the tenant applied itself (403 SUSPENDED_BY_OPERATOR otherwise).',
      }),
      config: { roles: READ },
      handler: async (request, reply) => {
        const out = await ctx.tenants.change({
          tenantId: request.params.id,
          change: { suspended: false },
          kind: 'resume',
          by: changerOf(request),
        });
        return reply.status(202).send(out);
      },
    });

    app.route({
      ...endpoint('POST /v1/tenants/:id/sleep', {
        summary: "Put a tenant's runtime to sleep now",
        tags: ['tenants'],
        description:
          'As the idle loop does after the plan\'s idle time (docs/operations.md "Sleep"): a `sleep` operation scales the vcluster\'s control plane to zero and deletes the pods it synced; the data stays. Only a Ready, awake tenant that is not suspended or in a fleet upgrade (409 NOT_SLEEPABLE names why). The next request to its runtime, `POST …/wake` or any spec change wakes it. Asleep already: 202 with `queued: false`.',
      }),
      config: { roles: READ },
      handler: async (request, reply) =>
        reply.status(202).send(await ctx.sleep.sleep(request.params.id, requesterOf(request))),
    });

    app.route({
      ...endpoint('POST /v1/tenants/:id/wake', {
        summary: "Wake a sleeping tenant's runtime",
        tags: ['tenants'],
        description:
          'Queues a `wake` operation (phase Waking, then Ready once the vcluster and its runtime run again). Not asleep: 202 with `queued: false` and its last operation.',
      }),
      config: { roles: READ },
      handler: async (request, reply) =>
        reply.status(202).send(await ctx.sleep.wake(request.params.id, requesterOf(request), 'asked through the API')),
    });

    app.route({
      ...endpoint('POST /v1/tenants/:id/retry', {
        summary: 'Retry a stalled or failing tenant now',
        tags: ['tenants'],
      }),
      config: { roles: READ },
      handler: async (request, reply) =>
        reply.status(202).send(await ctx.tenants.retry(request.params.id, requesterOf(request))),
    });

    app.route({
      ...endpoint('DELETE /v1/tenants/:id', {
        summary: 'Delete a tenant (a tombstone is kept)',
        tags: ['tenants'],
      }),
      config: { roles: READ },
      handler: async (request, reply) => {
        const out = await ctx.tenants.change({
          tenantId: request.params.id,
          change: { deleted: true },
          kind: 'delete',
          by: changerOf(request),
        });
        return reply.status(202).send(out);
      },
    });
  };
