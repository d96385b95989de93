import { Type } from 'typebox';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { ClusterPutAnswer, CONTROL_FREE, DnsLabel, withErrors } from '../schemas.ts';
import { requesterOf } from '../auth.ts';
import type { AppContext } from '../context.ts';

/** The longest kubeconfig, in characters (real ones with inline certificates are 5 to 20 KiB). */
export const KUBECONFIG_MAX_LENGTH = 128 * 1024;
/**
 * The route's body limit: a kubeconfig of KUBECONFIG_MAX_LENGTH characters fits even when every
 * character is JSON-escaped (`\uXXXX`, 6 bytes), with room for the other fields; other routes keep
 * PROVISIONER_BODY_LIMIT.
 */
export const REGISTER_BODY_LIMIT = 6 * KUBECONFIG_MAX_LENGTH + 64 * 1024;

const NameParams = Type.Object({ name: DnsLabel }, { additionalProperties: false });

const RegisterBody = Type.Object(
  {
    name: DnsLabel,
    region: Type.String({ minLength: 1, maxLength: 63, pattern: '^[a-z0-9-]+$' }),
    capacity: Type.Integer({ minimum: 0, maximum: 100_000, description: 'maximum tenants placed on this cluster' }),
    labels: Type.Optional(
      Type.Unsafe<Record<string, string>>({
        type: 'object',
        propertyNames: { type: 'string', minLength: 1, maxLength: 63, pattern: CONTROL_FREE },
        additionalProperties: { type: 'string', maxLength: 63, pattern: CONTROL_FREE },
        maxProperties: 32,
        description: 'names and values without control characters',
      }),
    ),
    plans: Type.Optional(
      Type.Array(Type.String({ maxLength: 40 }), { maxItems: 16, description: 'plans allowed here; empty means all' }),
    ),
    kubeconfig: Type.String({
      minLength: 1,
      maxLength: KUBECONFIG_MAX_LENGTH,
      description: `kubeconfig contents (YAML or JSON); stored encrypted. The request body may be up to ${REGISTER_BODY_LIMIT} bytes`,
    }),
    force: Type.Optional(
      Type.Boolean({
        description:
          'store the cluster even when its API server cannot be reached, refuses the credentials or lacks permissions the tenants program needs (422 CLUSTER_UNREACHABLE, CLUSTER_UNAUTHORIZED, CLUSTER_PERMISSIONS_MISSING otherwise); the kubeconfig policy applies either way',
      }),
    ),
  },
  { additionalProperties: false },
);

/** The registration of `PUT /v1/clusters/:name`: the name comes from the path. */
const PutBody = Type.Omit(RegisterBody, ['name'], { additionalProperties: false });

export const clusterRoutes =
  (ctx: AppContext): FastifyPluginAsyncTypebox =>
  async (app) => {
    app.get(
      '/v1/clusters',
      {
        config: { roles: ['operator'] },
        schema: {
          summary: 'List root clusters with their load',
          tags: ['clusters'],
          response: withErrors({ 200: Type.Object({ items: Type.Array(Type.Ref('Cluster')) }) }),
        },
      },
      async () => ({ items: await ctx.clusters.list() }),
    );

    app.get(
      '/v1/clusters/:name',
      {
        config: { roles: ['operator'] },
        schema: {
          summary: 'Get a root cluster',
          tags: ['clusters'],
          params: NameParams,
          response: withErrors({ 200: Type.Ref('Cluster') }),
        },
      },
      async (request) => ctx.clusters.get(request.params.name),
    );

    app.post(
      '/v1/clusters',
      {
        config: { roles: ['operator'] },
        bodyLimit: Math.max(ctx.config.bodyLimit, REGISTER_BODY_LIMIT),
        schema: {
          summary: 'Register a root cluster',
          description:
            "Before storing, the kubeconfig's API server is probed: it must answer, accept the credentials and grant (SelfSubjectAccessReview, all namespaces) every permission the tenants program needs; otherwise 422 naming what is wrong, unless `force` is true.",
          tags: ['clusters'],
          body: RegisterBody,
          response: withErrors({ 201: Type.Ref('Cluster') }),
        },
      },
      async (request, reply) => reply.status(201).send(await ctx.clusters.register(request.body, requesterOf(request))),
    );

    app.put(
      '/v1/clusters/:name',
      {
        config: { roles: ['operator'] },
        bodyLimit: Math.max(ctx.config.bodyLimit, REGISTER_BODY_LIMIT),
        schema: {
          summary: 'Register a root cluster, or update its registration (idempotent)',
          description:
            'Creates the cluster (201) or brings its region, capacity, labels, plans and kubeconfig to the body (200), ' +
            'saying which fields changed. Labels and plans left out keep their value; the cordon is not touched. ' +
            'A cluster holding tenants keeps its region (409 CLUSTER_IN_USE). `provisioner clusters import` uses it.',
          tags: ['clusters'],
          params: NameParams,
          body: PutBody,
          response: withErrors({ 200: ClusterPutAnswer, 201: ClusterPutAnswer }),
        },
      },
      async (request, reply) => {
        const result = await ctx.clusters.put({ ...request.body, name: request.params.name }, requesterOf(request));
        return reply.status(result.created ? 201 : 200).send(result);
      },
    );

    for (const action of ['cordon', 'uncordon'] as const) {
      app.post(
        `/v1/clusters/:name/${action}`,
        {
          config: { roles: ['operator'] },
          schema: {
            summary: action === 'cordon' ? 'Cordon a cluster: no new tenants are placed on it' : 'Uncordon a cluster',
            tags: ['clusters'],
            params: NameParams,
            response: withErrors({ 200: Type.Ref('Cluster') }),
          },
        },
        async (request) => ctx.clusters.setCordoned(request.params.name, action === 'cordon', requesterOf(request)),
      );
    }
  };
