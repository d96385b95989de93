import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { requesterOf } from '../auth.ts';
import { endpoint } from '../api-routes.ts';
import { REGISTER_BODY_LIMIT } from '../route-schemas.ts';
import type { AppContext } from '../context.ts';

export const clusterRoutes =
  (ctx: AppContext): FastifyPluginAsyncTypebox =>
  async (app) => {
    app.route({
      ...endpoint('GET /v1/clusters', {
        summary: 'List root clusters with their load',
        tags: ['clusters'],
      }),
      config: { roles: ['operator'] },
      handler: async () => ({ items: await ctx.clusters.list() }),
    });

    app.route({
      ...endpoint('GET /v1/clusters/:name', {
        summary: 'Get a root cluster',
        tags: ['clusters'],
      }),
      config: { roles: ['operator'] },
      handler: async (request) => ctx.clusters.get(request.params.name),
    });

    app.route({
      ...endpoint('POST /v1/clusters', {
        summary: 'Register a root cluster',
        description:
          "Before storing, the kubeconfig's API server is probed: it must answer, accept the credentials and grant (SelfSubjectAccessReview, all namespaces) every permission the tenants program needs; otherwise 422 naming what is wrong, unless `force` is true.",
        tags: ['clusters'],
      }),
      config: { roles: ['operator'] },
      bodyLimit: Math.max(ctx.config.bodyLimit, REGISTER_BODY_LIMIT),
      handler: async (request, reply) =>
        reply.status(201).send(await ctx.clusters.register(request.body, requesterOf(request))),
    });

    app.route({
      ...endpoint('PUT /v1/clusters/:name', {
        summary: 'Register a root cluster, or update its registration (idempotent)',
        description:
          'Creates the cluster (201) or brings its region, capacity, labels, plans and kubeconfig to the body (200), ' +
          'saying which fields changed. Labels and plans left out keep their value; the cordon is not touched. ' +
          'A cluster holding tenants keeps its region (409 CLUSTER_IN_USE). `provisioner clusters import` uses it.',
        tags: ['clusters'],
      }),
      config: { roles: ['operator'] },
      bodyLimit: Math.max(ctx.config.bodyLimit, REGISTER_BODY_LIMIT),
      handler: async (request, reply) => {
        const result = await ctx.clusters.put({ ...request.body, name: request.params.name }, requesterOf(request));
        return reply.status(result.created ? 201 : 200).send(result);
      },
    });

    for (const action of ['cordon', 'uncordon'] as const) {
      app.route({
        ...endpoint(`POST /v1/clusters/:name/${action}`, {
          summary: action === 'cordon' ? 'Cordon a cluster: no new tenants are placed on it' : 'Uncordon a cluster',
          tags: ['clusters'],
        }),
        config: { roles: ['operator'] },
        handler: async (request) =>
          ctx.clusters.setCordoned(request.params.name, action === 'cordon', requesterOf(request)),
      });
    }
  };
