/**
 * The application state runtimes report (docs/runtime.md "Stored application state"):
 *
 * - `POST /v1/runtime/events`: a runtime's event reporter sends an EventBatch (runtime key, its own
 *   tenant only; a hybrid runtime's key stores under that runtime, the hosted runtime's key under
 *   the tenant's hosted runtime), with a body limit of its own (MAX_BATCH_BYTES and a margin);
 * - `GET /v1/tenants/:id/{applications,rollouts,workflows}`: the hosted runtime's stored objects,
 *   filtered, paged;
 * - `GET /v1/tenants/:id/{applications,rollouts,workflows}/:namespace/:name`: one, with its object;
 * - `GET /v1/tenants/:id/runtimes/:name/objects/{applications,rollouts,workflows}[/:namespace/:objectName]`:
 *   the same for any runtime of the tenant by its name (`hosted` included);
 * - `GET /v1/tenants/:id/changes`: Server-Sent Events of the hosted runtime's changes, resumable
 *   with Last-Event-ID; `GET /v1/tenants/:id/runtimes/:name/objects/changes`: any runtime's.
 */
import { Type, type Static } from 'typebox';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { BoundedInteger, CONTROL_FREE, Revision, Semver, StringEnum, withErrors } from '../../api/schemas.ts';
import type { RuntimeObject, RuntimeObjectChangeEvents } from '../../api/types.ts';
import { authOf } from '../auth.ts';
import { decodeCursor, encodeCursor } from '../cursor.ts';
import { serveEventStream } from '../streams.ts';
import { decodeStreamCursor, encodeStreamCursor } from '../stream-cursor.ts';
import { AppError, errors } from '../../errors.ts';
import type { RuntimeObjectRow, RuntimeRef } from '../../store/runtime-objects.ts';
import {
  EVENTS_PATH,
  MAX_BATCH_BYTES,
  MAX_BATCH_ITEMS,
  MAX_DIGEST_MEMBERS,
  MAX_DIGESTS,
  MAX_OBJECT_BYTES,
  type EventBatch,
} from '../../../runtime/protocol/events.ts';
import { REPORTED_KIND_NAMES, type ReportedKind } from '../../../runtime/protocol/kinds.ts';
import {
  MAX_CHANGED_FIELDS,
  MAX_CHANGED_RESOURCES,
  MAX_COMMIT_MESSAGE_CHARS,
  MAX_IMAGE_CHANGES,
} from '../../../runtime/protocol/sources.ts';
import { endpoint } from '../api-routes.ts';
import { ChangesQuery, KIND_PATHS, KIND_FILTER, ObjectName, RuntimeObjectListQuery } from '../route-schemas.ts';
import type { AppContext } from '../context.ts';

/** The events route's body limit: a full batch and room for the JSON around it. */
export const EVENTS_BODY_LIMIT = MAX_BATCH_BYTES + 64 * 1024;
/** A reported object's namespace ('' for a cluster-scoped object, which the watched kinds are not). */
const Namespace = Type.String({ maxLength: 253, pattern: CONTROL_FREE });
const Kind = StringEnum(REPORTED_KIND_NAMES);
const Rv = Type.String({ minLength: 1, maxLength: 40, description: 'decimal resourceVersion (etcd revision)' });
/** Text of a report people read (a name, a path, an image): no control characters, bounded. */
const Shown = (maxLength: number) => Type.String({ maxLength, pattern: CONTROL_FREE });
/** What changed an Application, from the runtime's Source Server (runtime/protocol/sources.ts ApplicationChange). */
const Change = Type.Object(
  {
    revision: Revision,
    changeRevision: Type.Optional(Revision),
    previousChangeRevision: Type.Optional(Revision),
    commit: Type.Optional(
      Type.Object(
        {
          revision: Revision,
          author: Type.Optional(Shown(512)),
          date: Type.Optional(Type.String({ format: 'date-time' })),
          // A commit message has lines: any text but NUL, cut by the Source Server (and `…` appended).
          message: Type.Optional(Type.String({ maxLength: MAX_COMMIT_MESSAGE_CHARS + 1 })),
          tags: Type.Optional(Type.Array(Shown(256), { maxItems: 50 })),
          signatureInfo: Type.Optional(Type.String({ maxLength: 1024 })),
        },
        { additionalProperties: false },
      ),
    ),
    resources: Type.Array(
      Type.Object(
        {
          group: Shown(253),
          kind: Shown(63),
          namespace: Shown(253),
          name: Shown(253),
          action: StringEnum(['added', 'removed', 'modified'] as const),
          fields: Type.Array(Shown(1024), { maxItems: MAX_CHANGED_FIELDS }),
          fieldsTruncated: Type.Optional(Type.Boolean()),
        },
        { additionalProperties: false },
      ),
      { maxItems: MAX_CHANGED_RESOURCES },
    ),
    images: Type.Array(
      Type.Object(
        {
          resource: Shown(600),
          container: Shown(253),
          before: Type.Optional(Shown(1024)),
          after: Type.Optional(Shown(1024)),
        },
        { additionalProperties: false },
      ),
      { maxItems: MAX_IMAGE_CHANGES },
    ),
    truncated: Type.Boolean(),
    error: Type.Optional(Type.String({ maxLength: 4096 })),
    unsupported: Type.Optional(StringEnum(['multi-source', 'not-git'] as const)),
  },
  { additionalProperties: false },
);
const Item = Type.Object(
  {
    type: StringEnum(['upsert', 'delete'] as const),
    kind: Kind,
    namespace: Namespace,
    name: ObjectName,
    uid: Type.String({ minLength: 1, maxLength: 128, pattern: CONTROL_FREE }),
    resourceVersion: Rv,
    observedAt: Type.String({ format: 'date-time' }),
    generation: Type.Optional(BoundedInteger({ minimum: 0 })),
    summary: Type.Optional(Type.Record(Type.String(), Type.Unknown())),
    object: Type.Optional(Type.Record(Type.String(), Type.Unknown())),
    truncated: Type.Optional(Type.Boolean()),
    change: Type.Optional(Change),
  },
  { additionalProperties: false },
);
const Replica = Type.String({ minLength: 1, maxLength: 253, pattern: CONTROL_FREE });
const Count = Type.Integer({ minimum: 0, maximum: 2_147_483_647 });
const BatchBody = Type.Object(
  {
    replica: Replica,
    items: Type.Array(Item, { maxItems: MAX_BATCH_ITEMS }),
    heartbeat: Type.Optional(
      Type.Object(
        {
          replica: Replica,
          ownedObjects: Count,
          queueDepth: Count,
          oldestPendingSeconds: Type.Number({ minimum: 0, maximum: Number.MAX_SAFE_INTEGER }),
          runtimeVersion: Type.Optional(Semver),
          listed: Type.Optional(Type.Array(Kind, { maxItems: REPORTED_KIND_NAMES.length, uniqueItems: true })),
        },
        { additionalProperties: false },
      ),
    ),
    digests: Type.Optional(
      Type.Array(
        Type.Object(
          {
            replica: Replica,
            members: Type.Array(Replica, { minItems: 1, maxItems: MAX_DIGEST_MEMBERS }),
            kind: Kind,
            listResourceVersion: Rv,
            objects: Type.Array(
              Type.Object(
                {
                  namespace: Namespace,
                  name: ObjectName,
                  uid: Type.String({ maxLength: 128, pattern: CONTROL_FREE }),
                  resourceVersion: Rv,
                },
                { additionalProperties: false },
              ),
            ),
          },
          { additionalProperties: false },
        ),
        { maxItems: MAX_DIGESTS },
      ),
    ),
  },
  { additionalProperties: false },
);

function toItem(r: RuntimeObjectRow): RuntimeObject {
  return {
    kind: r.kind,
    namespace: r.namespace,
    name: r.name,
    uid: r.uid,
    resourceVersion: r.resource_version,
    generation: Number(r.generation),
    health: r.health,
    sync: r.sync,
    phase: r.phase,
    summary: r.summary,
    truncated: r.truncated,
    reportedBy: r.reported_by,
    observedAt: r.observed_at.toISOString(),
    updatedAt: r.updated_at.toISOString(),
    ageSeconds: Math.max(0, Math.round(r.age_seconds)),
  };
}
type ListQueryValue = Static<typeof RuntimeObjectListQuery>;
/** A change's sequence number: up to 18 digits, always within PostgreSQL's bigint. */

const READ = ['operator', 'tenant'] as const;

export const runtimeObjectRoutes =
  (ctx: AppContext): FastifyPluginAsyncTypebox =>
  async (app) => {
    const tenantMustExist = async (id: string): Promise<void> => {
      if (!(await ctx.reads.tenant(id))) throw errors.notFound('tenant', id);
    };
    /** The tenant's hosted runtime: what the tenant-level routes show. */
    const hostedOf = async (id: string): Promise<RuntimeRef> => {
      await tenantMustExist(id);
      const ref = await ctx.runtimeObjects.hostedRuntime(id);
      if (!ref) throw errors.notFound('tenant', id);
      return ref;
    };
    /** The tenant's runtime of that name (not removed). */
    const runtimeOf = async (id: string, name: string): Promise<RuntimeRef> => {
      await tenantMustExist(id);
      const ref = await ctx.runtimeObjects.runtime(id, name);
      if (!ref) throw errors.notFound('runtime', name);
      return ref;
    };
    const listPage = async (ref: RuntimeRef, path: keyof typeof KIND_PATHS, kind: ReportedKind, q: ListQueryValue) => {
      const limit = q.limit ?? 100;
      const after = q.cursor ? decodeCursor(ctx.box, path, q.cursor) : undefined;
      const rows = await ctx.runtimeObjects.list(ref, {
        kind,
        ...(q.health !== undefined ? { health: q.health } : {}),
        ...(q.sync !== undefined ? { sync: q.sync } : {}),
        ...(q.phase !== undefined ? { phase: q.phase } : {}),
        ...(q.namespace !== undefined ? { namespace: q.namespace } : {}),
        ...(q.namePrefix !== undefined ? { namePrefix: q.namePrefix } : {}),
        ...(after ? { after: { namespace: after.ts, name: after.id } } : {}),
        limit: limit + 1,
      });
      const page = rows.slice(0, limit);
      const last = page.at(-1);
      return {
        items: page.map(toItem),
        nextCursor:
          rows.length > limit && last ? encodeCursor(ctx.box, path, { ts: last.namespace, id: last.name }) : null,
      };
    };
    const detail = async (ref: RuntimeRef, kind: ReportedKind, namespace: string, name: string, whose: string) => {
      const row = await ctx.runtimeObjects.get(ref, kind, namespace, name);
      if (!row)
        throw new AppError(
          'RUNTIME_OBJECT_NOT_FOUND',
          `${kind} '${namespace}/${name}' was not reported by ${whose} (or it was deleted)`,
        );
      return { ...toItem(row), object: row.object ?? null };
    };

    app.post(
      EVENTS_PATH,
      {
        bodyLimit: EVENTS_BODY_LIMIT,
        config: { roles: ['runtime'] },
        schema: {
          summary: "A runtime's event reporter reports the state of its Argo objects (runtime keys only)",
          description:
            'Body: an EventBatch (runtime/protocol/events.ts). Each item is stored only when its resourceVersion is larger than the stored one; ' +
            'digests remove objects deleted while the control plane could not hear. The whole batch is applied or nothing.',
          tags: ['runtime state'],
          body: BatchBody,
          response: withErrors({
            200: Type.Object({ applied: Type.Integer(), stale: Type.Integer(), removedByDigest: Type.Integer() }),
          }),
        },
      },
      async (request) => {
        const auth = authOf(request);
        if (auth.role !== 'runtime' || !auth.tenantId)
          throw errors.forbidden(`only a runtime key reports events; role '${auth.role}' may not`);
        const length = Number(request.headers['content-length'] ?? Number.POSITIVE_INFINITY);
        return ctx.runtimeObjects.ingest(
          { tenantId: auth.tenantId, runtimeId: auth.runtimeId ?? null },
          request.body as EventBatch,
          !(length <= MAX_OBJECT_BYTES),
        );
      },
    );

    for (const [path, kind] of Object.entries(KIND_PATHS) as [keyof typeof KIND_PATHS, ReportedKind][]) {
      app.route({
        ...endpoint(`GET /v1/tenants/:id/${path}`, {
          summary: `List the ${kind}s the tenant's runtime reported`,
          description:
            'Deleted objects are not listed. Filters: health, sync, phase, namespace, namePrefix. ' +
            'Ordered by namespace and name; pass nextCursor back as cursor for the next page.',
          tags: ['runtime state'],
        }),
        config: { roles: READ },
        handler: async (request) => listPage(await hostedOf(request.params.id), path, kind, request.query),
      });

      app.route({
        ...endpoint(`GET /v1/tenants/:id/${path}/:namespace/:name`, {
          summary: `Get one ${kind} the tenant's runtime reported, with the stored object`,
          tags: ['runtime state'],
        }),
        config: { roles: READ },
        handler: async (request) => {
          const { id, namespace, name } = request.params;
          return detail(await hostedOf(id), kind, namespace, name, "the tenant's runtime");
        },
      });

      app.route({
        ...endpoint(`GET /v1/tenants/:id/runtimes/:name/objects/${path}`, {
          summary: `List the ${kind}s one runtime of the tenant reported (\`hosted\` or a hybrid runtime by name)`,
          description:
            'As the tenant-level listing, for the named runtime: its own objects only. Deleted objects are not listed. ' +
            'Filters: health, sync, phase, namespace, namePrefix. Ordered by namespace and name; pass nextCursor back as cursor.',
          tags: ['runtime state'],
        }),
        config: { roles: READ },
        handler: async (request) =>
          listPage(await runtimeOf(request.params.id, request.params.name), path, kind, request.query),
      });

      app.route({
        ...endpoint(`GET /v1/tenants/:id/runtimes/:name/objects/${path}/:namespace/:objectName`, {
          summary: `Get one ${kind} a runtime of the tenant reported, with the stored object`,
          tags: ['runtime state'],
        }),
        config: { roles: READ },
        handler: async (request) => {
          const { id, name, namespace, objectName } = request.params;
          return detail(await runtimeOf(id, name), kind, namespace, objectName, `runtime '${name}'`);
        },
      });
    }

    const changesDescription =
      'Each event is `change` with id = an opaque cursor (pass it back unchanged) and data {deleted, item}. Without Last-Event-ID or after, the stream starts with ' +
      'the next change; after=0 replays every live object first. Reconnect with Last-Event-ID to resume. ' +
      'Resuming from before a deletion whose tombstone was purged (PROVISIONER_TOMBSTONE_RETENTION_HOURS) starts with a `reset` event ' +
      '(drop what you hold) and replays every live object. ' +
      "Changes stored through any replica reach every replica's streams.";

    /**
     * Serves one runtime's change stream. `scope` binds the cursors to what the stream follows (the
     * tenant for the tenant-level route, as before; the runtime's id for a runtime's route), so a
     * cursor of one stream is refused by another.
     */
    const serveChanges = async (
      request: FastifyRequest<{ Querystring: Static<typeof ChangesQuery> }>,
      reply: FastifyReply,
      resolve: () => Promise<{ runtime: RuntimeRef; scope: string }>,
    ): Promise<void> => {
      const lastEventId = request.headers['last-event-id'];
      const auth = authOf(request);
      // Taken before the first await, so that a burst of opens cannot all pass the limit.
      const slot = ctx.streams.reserve(auth.keyId, ctx.config.sseStreamsPerKey);
      try {
        const { runtime, scope } = await resolve();
        const resumeAt =
          typeof lastEventId === 'string'
            ? decodeStreamCursor(ctx.box, scope, lastEventId, 'Last-Event-ID')
            : request.query.after !== undefined
              ? decodeStreamCursor(ctx.box, scope, request.query.after, 'after')
              : undefined;
        let afterSeq = resumeAt ?? (await ctx.runtimeObjects.latestSeq(runtime));
        // Resuming from before a purged tombstone: that deletion can no longer be sent, so the
        // stream starts over (a `reset` event, then every live object) rather than leave it out.
        const horizon = afterSeq === '0' ? undefined : await ctx.runtimeObjects.horizon(runtime);
        const reset = horizon !== undefined && BigInt(afterSeq) < BigInt(horizon.purgedSeq);
        if (reset) afterSeq = '0';
        const kind = request.query.kind ? KIND_FILTER[request.query.kind] : undefined;

        await serveEventStream<RuntimeObjectChangeEvents>(
          slot,
          request,
          reply,
          { log: 'change stream failed', message: 'change stream failed' },
          async (stream) => {
            // Tells the client where the stream starts (a comment: not an event).
            stream.comment(`after ${encodeStreamCursor(ctx.box, scope, afterSeq)}`);
            if (reset)
              stream.send('reset', {
                reason: 'TombstonesPurged',
                message:
                  'deletions since the given event were purged (older than the tombstone retention): drop what you hold; every live object follows',
              });
            for await (const row of ctx.runtimeObjects.follow(runtime, {
              afterSeq,
              signal: stream.signal,
              ...(kind ? { kind } : {}),
            })) {
              const id = encodeStreamCursor(ctx.box, scope, row.seq);
              if (!stream.send('change', { deleted: row.deleted, item: toItem(row) }, id)) await stream.drained();
            }
          },
        );
      } finally {
        slot.release();
      }
    };

    app.route({
      ...endpoint('GET /v1/tenants/:id/changes', {
        summary:
          "Server-Sent Events: changes to the applications, rollouts and workflows of the tenant's hosted runtime",
        description: changesDescription,
        tags: ['runtime state'],
      }),
      config: { roles: READ },
      handler: async (request, reply) => {
        const tenantId = request.params.id;
        await serveChanges(request, reply, async () => ({
          runtime: await hostedOf(tenantId),
          scope: `changes/${tenantId}`,
        }));
      },
    });

    app.route({
      ...endpoint('GET /v1/tenants/:id/runtimes/:name/objects/changes', {
        summary:
          'Server-Sent Events: changes to the objects one runtime of the tenant reported (`hosted` or a hybrid runtime by name)',
        description: changesDescription,
        tags: ['runtime state'],
      }),
      config: { roles: READ },
      handler: async (request, reply) => {
        const { id, name } = request.params;
        await serveChanges(request, reply, async () => {
          const runtime = await runtimeOf(id, name);
          return { runtime, scope: `changes/${runtime.runtimeId}` };
        });
      },
    });
  };
