import { Type } from 'typebox';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { DnsLabel, NUL_FREE, Uuid, withErrors } from '../schemas.ts';
import { requesterOf } from '../auth.ts';
import type { AppContext } from '../context.ts';
import { KUBECONFIG_MAX_LENGTH, REGISTER_BODY_LIMIT } from './clusters.ts';

const ROLES = ['operator', 'tenant'] as const;

const TenantParams = Type.Object({ id: Uuid }, { additionalProperties: false });
const NameParams = Type.Object({ id: Uuid, name: DnsLabel }, { additionalProperties: false });

const Namespace = Type.String({
  minLength: 1,
  maxLength: 63,
  pattern: '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$',
  description: 'a namespace name',
});

const RegisterBody = Type.Object(
  {
    name: DnsLabel,
    namespaces: Type.Optional(
      Type.Array(Namespace, {
        maxItems: 32,
        uniqueItems: true,
        description:
          'namespaces Argo CD manages on the cluster; the credentials must be allowed every verb on every resource there. Empty or absent: the whole cluster',
      }),
    ),
    kubeconfig: Type.Optional(
      Type.String({
        minLength: 1,
        maxLength: KUBECONFIG_MAX_LENGTH,
        description:
          'kubeconfig contents (YAML or JSON) with inline credentials (token, client certificate, CA); exec, auth-provider and file paths are refused. Or give server and token',
      }),
    ),
    server: Type.Optional(
      Type.String({ minLength: 1, maxLength: 2048, pattern: NUL_FREE, description: 'https URL of the API server' }),
    ),
    token: Type.Optional(
      Type.String({ minLength: 1, maxLength: 16 * 1024, pattern: NUL_FREE, description: 'bearer token (with server)' }),
    ),
    caData: Type.Optional(
      Type.String({
        minLength: 1,
        maxLength: 64 * 1024,
        pattern: NUL_FREE,
        description: "the API server's CA certificate: PEM, or base64 of PEM (with server)",
      }),
    ),
  },
  { additionalProperties: false },
);

export const managedClusterRoutes =
  (ctx: AppContext): FastifyPluginAsyncTypebox =>
  async (app) => {
    app.get(
      '/v1/tenants/:id/managed-clusters',
      {
        config: { roles: ROLES },
        schema: {
          summary: "List the tenant's managed clusters with their health",
          tags: ['managed clusters'],
          params: TenantParams,
          response: withErrors({ 200: Type.Object({ items: Type.Array(Type.Ref('ManagedCluster')) }) }),
        },
      },
      async (request) => ({ items: await ctx.managedClusters.list(request.params.id) }),
    );

    app.get(
      '/v1/tenants/:id/managed-clusters/:name',
      {
        config: { roles: ROLES },
        schema: {
          summary: 'Get a managed cluster',
          tags: ['managed clusters'],
          params: NameParams,
          response: withErrors({ 200: Type.Ref('ManagedCluster') }),
        },
      },
      async (request) => ctx.managedClusters.get(request.params.id, request.params.name),
    );

    app.post(
      '/v1/tenants/:id/managed-clusters',
      {
        config: { roles: ROLES },
        bodyLimit: Math.max(ctx.config.bodyLimit, REGISTER_BODY_LIMIT),
        schema: {
          summary: "Register a cluster the tenant's Argo CD deploys to (checked against the cluster first)",
          description:
            "The cluster is checked before anything is written, within 10 s: reachable, a Kubernetes API server, the credentials accepted, and the permissions Argo CD needs in the listed namespaces (SelfSubjectAccessReview). The registration bumps the tenant's generation: the operation writes the Argo CD cluster Secret into the tenant's virtual cluster.",
          tags: ['managed clusters'],
          params: TenantParams,
          body: RegisterBody,
          response: withErrors({
            201: Type.Object({ managedCluster: Type.Ref('ManagedCluster'), operationId: Uuid }),
          }),
        },
      },
      async (request, reply) => {
        const out = await ctx.managedClusters.register(request.params.id, request.body, requesterOf(request));
        return reply
          .status(201)
          .header('location', `/v1/tenants/${request.params.id}/managed-clusters/${out.managedCluster.name}`)
          .send(out);
      },
    );

    app.delete(
      '/v1/tenants/:id/managed-clusters/:name',
      {
        config: { roles: ROLES },
        schema: {
          summary: 'Remove a managed cluster (its Argo CD cluster Secret is deleted from the virtual cluster)',
          description:
            'Idempotent: 202 with the operation that removes it, 204 when there is no such registration (any more).',
          tags: ['managed clusters'],
          params: NameParams,
          response: withErrors({
            202: Type.Object({ operationId: Uuid }),
            204: Type.Null({ description: 'no such registration (any more): nothing to do' }),
          }),
        },
      },
      async (request, reply) => {
        const out = await ctx.managedClusters.remove(request.params.id, request.params.name, requesterOf(request));
        return out ? reply.status(202).send(out) : reply.status(204).send(null);
      },
    );
  };
