import type { FastifyRequest } from 'fastify';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { OperationLogEvents } from '../../api/types.ts';
import { authOf } from '../auth.ts';
import { serveEventStream } from '../streams.ts';
import { logLineForTenant } from '../../tenant-api/tenant-view.ts';
import { decodeCursor, encodeCursor } from '../cursor.ts';
import { errors } from '../../errors.ts';
import type { Operation } from '../../store/operations.ts';
import { endpoint } from '../api-routes.ts';
import type { AppContext } from '../context.ts';

const READ = ['operator', 'tenant'] as const;

export const operationRoutes =
  (ctx: AppContext): FastifyPluginAsyncTypebox =>
  async (app) => {
    /** The operation, when the caller may see it: tenant-bound keys get 404 for other tenants' operations. */
    const visibleOperation = async (request: FastifyRequest, id: string): Promise<Operation> => {
      const op = await ctx.tenants.operation(id);
      const auth = authOf(request);
      if (!op || ((auth.role === 'tenant' || auth.role === 'runtime') && auth.tenantId !== op.tenantId))
        throw errors.notFound('operation', id);
      return op;
    };

    app.route({
      ...endpoint('GET /v1/tenants/:id/operations', {
        summary: "List a tenant's operations, newest first",
        tags: ['operations'],
      }),
      config: { roles: READ },
      handler: async (request) => {
        const limit = request.query.limit ?? 50;
        const rows = await ctx.tenants.operations(request.params.id, {
          limit: limit + 1,
          ...(request.query.cursor ? { before: decodeCursor(ctx.box, 'operations', request.query.cursor) } : {}),
        });
        const page = rows.slice(0, limit);
        const last = page.at(-1);
        return {
          items: page.map(({ cursorTs: _c, ...op }) => op),
          nextCursor:
            rows.length > limit && last
              ? encodeCursor(ctx.box, 'operations', { ts: last.cursorTs, id: last.id })
              : null,
        };
      },
    });

    app.route({
      ...endpoint('GET /v1/operations/:id', {
        summary: 'Get an operation',
        tags: ['operations'],
      }),
      config: { roles: READ },
      handler: async (request) => visibleOperation(request, request.params.id),
    });

    app.route({
      ...endpoint('GET /v1/operations/:id/log', {
        summary: "An operation's log; with follow=1, a Server-Sent Events stream of new lines until the operation ends",
        description:
          'SSE events: `state` (data {state}) first, `line` (data {seq, stream, line, at}, id = seq) per line, `end` (data {state}) last. ' +
          'Reconnect with Last-Event-ID (or after=) to resume.',
        tags: ['operations'],
      }),
      config: { roles: READ },
      handler: async (request, reply) => {
        const lastEventId = Number(request.headers['last-event-id']);
        const after = request.query.after ?? (Number.isSafeInteger(lastEventId) && lastEventId > 0 ? lastEventId : 0);
        const follow = request.query.follow === '1' || request.query.follow === 'true';
        // A tenant's own key reads no operator remediation text (tenant-view.ts).
        const role = request.auth?.role;
        const forCaller = role === 'tenant' || role === 'runtime' ? logLineForTenant : <L>(l: L) => l;
        if (!follow) {
          const op = await visibleOperation(request, request.params.id);
          const items = (await ctx.tenants.operationLog(op.id, after, request.query.limit ?? 1000)).map(forCaller);
          return { items, state: op.state, nextAfter: items.at(-1)?.seq ?? after };
        }
        // Taken before the first await, so that a burst of opens cannot all pass the limit.
        const slot = ctx.streams.reserve(request.auth?.keyId, ctx.config.sseStreamsPerKey);
        try {
          const op = await visibleOperation(request, request.params.id);
          await serveEventStream<OperationLogEvents>(
            slot,
            request,
            reply,
            { log: 'log follow failed', message: 'log stream failed' },
            async (stream) => {
              stream.send('state', { state: op.state });
              for await (const line of ctx.logHub.follow(op.id, { afterSeq: after, signal: stream.signal })) {
                if (!stream.send('line', forCaller(line), line.seq)) await stream.drained();
              }
              if (!stream.signal.aborted)
                stream.send('end', { state: (await ctx.tenants.operation(op.id))?.state ?? 'unknown' });
            },
          );
        } finally {
          slot.release();
        }
      },
    });
  };
