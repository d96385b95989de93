/**
 * Applications' history and diffs (docs/api.md "Application history"):
 *
 * - `GET /v1/tenants/:id/applications/:namespace/:name/history`: the hosted runtime's application's
 *   deployments, newest first, paged; `GET /v1/tenants/:id/runtimes/:name/objects/applications/
 *   :namespace/:objectName/history`: the same for any runtime of the tenant by its name;
 * - `…/history/stream`: Server-Sent Events, one `entry` per history entry created or updated,
 *   resumable with Last-Event-ID: the notification of an application's changes, scoped by its
 *   change revision (a monorepo commit that touched another application sends nothing here);
 * - `…/diff[?revision=R]`: what the commit R changed in the application's manifests (without R: Git
 *   against the cluster), fetched on demand from the runtime's Source Server through its tunnel
 *   (app-history/diff.ts).
 */
import { type Static } from 'typebox';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { ApplicationHistoryEntry, ApplicationHistoryEvents } from '../../api/types.ts';
import { authOf, requesterOf } from '../auth.ts';
import { RELAY_HEADER } from '../../tunnel/relay.ts';
import { decodeCursor, encodeCursor } from '../cursor.ts';
import { serveEventStream } from '../streams.ts';
import { decodeStreamCursor, encodeStreamCursor } from '../stream-cursor.ts';
import { AppError, errors } from '../../errors.ts';
import type { ApplicationRef, HistoryRow } from '../../store/application-history.ts';
import type { DiffRuntime } from '../../app-history/diff.ts';
import { endpoint } from '../api-routes.ts';
import { HistoryQuery, HistoryStreamQuery } from '../route-schemas.ts';
import type { AppContext } from '../context.ts';

const READ = ['operator', 'tenant'] as const;

const iso = (d: Date | null): string | null => (d === null ? null : d.toISOString());

function toEntry(r: HistoryRow, runtime: string): ApplicationHistoryEntry {
  return {
    id: r.id,
    runtime,
    application: { namespace: r.namespace, name: r.name },
    changeRevision: r.change_revision,
    revision: r.revision,
    previousChangeRevision: r.previous_change_revision,
    author: r.author,
    date: iso(r.date),
    message: r.message,
    tags: r.tags,
    images: r.images,
    resources: r.resources,
    truncated: r.truncated,
    result: r.result,
    resultMessage: r.result_message,
    startedAt: iso(r.started_at),
    finishedAt: iso(r.finished_at),
    durationMs: r.duration_ms === null ? null : Number(r.duration_ms),
    recordedAt: r.recorded_at.toISOString(),
    updatedAt: r.updated_at.toISOString(),
  };
}

/** An application of a runtime, as the routes resolve it. */
interface Resolved {
  app: ApplicationRef;
  runtime: DiffRuntime;
  /** How messages name the runtime. */
  whose: string;
}

export const appHistoryRoutes =
  (ctx: AppContext): FastifyPluginAsyncTypebox =>
  async (app) => {
    const tenantMustExist = async (id: string): Promise<void> => {
      if (!(await ctx.reads.tenant(id))) throw errors.notFound('tenant', id);
    };
    const hostedApp = async (id: string, namespace: string, name: string): Promise<Resolved> => {
      await tenantMustExist(id);
      const ref = await ctx.runtimeObjects.hostedRuntime(id);
      if (!ref) throw errors.notFound('tenant', id);
      return {
        app: { ...ref, namespace, name },
        runtime: {
          tenantId: id,
          name: 'hosted',
          mode: 'hosted',
          id: ref.runtimeId,
          access: null,
          ingressUrl: null,
          state: null,
        },
        whose: "the tenant's runtime",
      };
    };
    const runtimeApp = async (id: string, runtimeName: string, namespace: string, name: string): Promise<Resolved> => {
      await tenantMustExist(id);
      const runtime = await ctx.appHistory.runtime(id, runtimeName);
      if (!runtime) throw errors.notFound('runtime', runtimeName);
      return {
        app: { tenantId: id, runtimeId: runtime.id, namespace, name },
        runtime,
        whose: `runtime '${runtimeName}'`,
      };
    };

    /**
     * A page of the history, sent as the JSON text Postgres built for each entry (store:
     * listHistoryJson) with the page around it: no parse and re-serialization of the entries'
     * jsonb and timestamps (docs/benchmarks.md "Change revisions and application history").
     * The shape is ApplicationHistoryPage's (test/integration/api/app-history.test.ts compares it
     * with the stream's entries, which go through the schema's serializer).
     */
    const historyPage = async (reply: FastifyReply, r: Resolved, q: Static<typeof HistoryQuery>) => {
      const limit = q.limit ?? 50;
      const kind = `app-history/${r.app.runtimeId}/${r.app.namespace}/${r.app.name}`;
      const after = q.cursor ? decodeCursor(ctx.box, kind, q.cursor) : undefined;
      const rows = await ctx.appHistory.listJson(
        r.app,
        r.runtime.name,
        limit + 1,
        after ? { recordedKey: after.ts, id: after.id } : undefined,
      );
      if (rows.length === 0 && !after && !(await ctx.appHistory.reported(r.app)))
        throw new AppError(
          'RUNTIME_OBJECT_NOT_FOUND',
          `Application '${r.app.namespace}/${r.app.name}' was never reported by ${r.whose}`,
        );
      const page = rows.slice(0, limit);
      const last = page.at(-1);
      const nextCursor =
        rows.length > limit && last ? encodeCursor(ctx.box, kind, { ts: last.recorded_key, id: last.id }) : null;
      // A JSON string with a JSON content type is sent as it is (the response schema's serializer is for objects).
      return reply
        .type('application/json; charset=utf-8')
        .send(`{"items":[${page.map((row) => row.entry).join(',')}],"nextCursor":${JSON.stringify(nextCursor)}}`);
    };

    const historyDescription =
      'The deployments of the application, newest first: one entry per change revision (the commit that last changed the ' +
      "application's source path, from the runtime's Source Server), with its commit, the images and resources it changed, " +
      'and its result (pending, running, succeeded, failed). Pass nextCursor back as cursor for the next page. ' +
      '404 RUNTIME_OBJECT_NOT_FOUND when the runtime never reported the application.';

    app.route({
      ...endpoint('GET /v1/tenants/:id/applications/:namespace/:name/history', {
        summary: "An application's history: its deployments by change revision (the tenant's hosted runtime)",
        description: historyDescription,
        tags: ['runtime state'],
      }),
      config: { roles: READ },
      handler: async (request, reply) => {
        const { id, namespace, name } = request.params;
        return historyPage(reply, await hostedApp(id, namespace, name), request.query);
      },
    });

    app.route({
      ...endpoint('GET /v1/tenants/:id/runtimes/:name/objects/applications/:namespace/:objectName/history', {
        summary: "An application's history in one runtime of the tenant (`hosted` or a hybrid runtime by name)",
        description: historyDescription,
        tags: ['runtime state'],
      }),
      config: { roles: READ },
      handler: async (request, reply) => {
        const { id, name, namespace, objectName } = request.params;
        return historyPage(reply, await runtimeApp(id, name, namespace, objectName), request.query);
      },
    });

    const diffDescription =
      "Fetched on demand from the runtime's Source Server through its tunnel (the same request signing and limits as " +
      'every proxied call). With revision: what that commit changed in the manifests Argo CD generates (`base` is the ' +
      'change revision before it); without: Git against the cluster, per managed resource (`base` is `live`). ' +
      '503 RUNTIME_UNREACHABLE (Retry-After) when the runtime is not connected; 409 SOURCE_SERVER_NOT_INSTALLED for a ' +
      'runtime before version 1.7.0; 404 RUNTIME_OBJECT_NOT_FOUND when the runtime has no such Application.';

    const serveDiff = async (
      request: FastifyRequest,
      reply: FastifyReply,
      r: Resolved,
      revision: string | undefined,
      routePath: string,
    ) => {
      const q = revision === undefined ? '' : `?${new URLSearchParams({ revision }).toString()}`;
      // A diff is asked of the runtime: activity, and it wakes a sleeping one (docs/operations.md "Sleep").
      if (r.runtime.mode === 'hosted' && request.headers[RELAY_HEADER] === undefined)
        await ctx.sleep.beforeForward(r.runtime.tenantId, requesterOf(request));
      const result = await ctx.appHistory.diff(request, r.runtime, {
        namespace: r.app.namespace,
        name: r.app.name,
        revision,
        routePath: `${routePath}${q}`,
        subject: authOf(request).keyId,
      });
      if ('diff' in result) return result.diff;
      // Another replica's answer, already in this API's shape.
      reply.code(result.relayed.status).header('content-type', 'application/json; charset=utf-8');
      if (result.relayed.retryAfter !== undefined) reply.header('retry-after', result.relayed.retryAfter);
      return reply.send(result.relayed.body);
    };
    const seg = encodeURIComponent;

    app.route({
      ...endpoint('GET /v1/tenants/:id/applications/:namespace/:name/diff', {
        summary: "An application's diff from its runtime's Source Server (the tenant's hosted runtime)",
        description: diffDescription,
        tags: ['runtime state'],
      }),
      config: { roles: READ },
      handler: async (request, reply) => {
        const { id, namespace, name } = request.params;
        return serveDiff(
          request,
          reply,
          await hostedApp(id, namespace, name),
          request.query.revision,
          `/v1/tenants/${id}/applications/${seg(namespace)}/${seg(name)}/diff`,
        );
      },
    });

    app.route({
      ...endpoint('GET /v1/tenants/:id/runtimes/:name/objects/applications/:namespace/:objectName/diff', {
        summary: "An application's diff from the Source Server of one runtime of the tenant",
        description: diffDescription,
        tags: ['runtime state'],
      }),
      config: { roles: READ },
      handler: async (request, reply) => {
        const { id, name, namespace, objectName } = request.params;
        return serveDiff(
          request,
          reply,
          await runtimeApp(id, name, namespace, objectName),
          request.query.revision,
          `/v1/tenants/${id}/runtimes/${name}/objects/applications/${seg(namespace)}/${seg(objectName)}/diff`,
        );
      },
    });

    const streamDescription =
      'Each event is `entry` with id = an opaque cursor (pass it back unchanged) and data {item}: a history entry created ' +
      'or updated (its result moved). Without Last-Event-ID or after, the stream starts with the next write; after=0 ' +
      'sends every entry first. Only this application: a commit that changed another application sends nothing here. ' +
      "Entries stored through any replica reach every replica's streams.";

    const serveStream = async (
      request: FastifyRequest<{ Querystring: Static<typeof HistoryStreamQuery> }>,
      reply: FastifyReply,
      resolve: () => Promise<Resolved>,
    ): Promise<void> => {
      const lastEventId = request.headers['last-event-id'];
      const auth = authOf(request);
      // Taken before the first await, so that a burst of opens cannot all pass the limit.
      const slot = ctx.streams.reserve(auth.keyId, ctx.config.sseStreamsPerKey);
      try {
        const r = await resolve();
        const scope = `app-history/${r.app.runtimeId}/${r.app.namespace}/${r.app.name}`;
        const resumeAt =
          typeof lastEventId === 'string'
            ? decodeStreamCursor(ctx.box, scope, lastEventId, 'Last-Event-ID')
            : request.query.after !== undefined
              ? decodeStreamCursor(ctx.box, scope, request.query.after, 'after')
              : undefined;
        const afterSeq = resumeAt ?? (await ctx.appHistory.latestSeq(r.app));
        await serveEventStream<ApplicationHistoryEvents>(
          slot,
          request,
          reply,
          { log: 'application history stream failed', message: 'application history stream failed' },
          async (stream) => {
            // Tells the client where the stream starts (a comment: not an event).
            stream.comment(`after ${encodeStreamCursor(ctx.box, scope, afterSeq)}`);
            for await (const row of ctx.appHistory.follow(r.app, { afterSeq, signal: stream.signal })) {
              const id = encodeStreamCursor(ctx.box, scope, row.seq);
              if (!stream.send('entry', { item: toEntry(row, r.runtime.name) }, id)) await stream.drained();
            }
          },
        );
      } finally {
        slot.release();
      }
    };

    app.route({
      ...endpoint('GET /v1/tenants/:id/applications/:namespace/:name/history/stream', {
        summary: "Server-Sent Events: an application's history entries as they are created or updated (hosted runtime)",
        description: streamDescription,
        tags: ['runtime state'],
      }),
      config: { roles: READ },
      handler: async (request, reply) => {
        const { id, namespace, name } = request.params;
        await serveStream(request, reply, () => hostedApp(id, namespace, name));
      },
    });

    app.route({
      ...endpoint('GET /v1/tenants/:id/runtimes/:name/objects/applications/:namespace/:objectName/history/stream', {
        summary: "Server-Sent Events: an application's history entries in one runtime of the tenant",
        description: streamDescription,
        tags: ['runtime state'],
      }),
      config: { roles: READ },
      handler: async (request, reply) => {
        const { id, name, namespace, objectName } = request.params;
        await serveStream(request, reply, () => runtimeApp(id, name, namespace, objectName));
      },
    });
  };
