import { Type } from 'typebox';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { DnsLabel, ManagedClusterRegistered, NUL_FREE, StringEnum, Uuid, withErrors } from '../schemas.ts';
import { requesterOf } from '../auth.ts';
import type { AppContext } from '../context.ts';
import { AppError, errors } from '../../errors.ts';
import { KUBECONFIG_MAX_LENGTH, REGISTER_BODY_LIMIT } from './clusters.ts';
import type { IncomingMessage } from 'node:http';
import { Readable } from 'node:stream';
import { RELAY_HEADER, relayToReplica } from '../../tunnel/relay.ts';
import { runtimeResponseHeaders } from '../../tunnel/route.ts';

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
    reach: Type.Optional(
      StringEnum(['controlPlane', 'runtime'] as const, {
        description:
          "where the cluster is reached from: `controlPlane` (default; the control plane connects to it, within its address policy) or `runtime` (only the tenant's runtime reaches it: the checks and the health probes go through the runtime's tunnel, which must be connected)",
      }),
    ),
    bootstrap: Type.Optional(
      Type.Object(
        {
          namespaces: Type.Optional(
            Type.Array(Namespace, {
              maxItems: 32,
              uniqueItems: true,
              description: 'namespaces where the ServiceAccount gets a Role with every verb on every resource',
            }),
          ),
          clusterWide: Type.Optional(
            Type.Boolean({ description: 'a ClusterRole instead of namespaced Roles: only when asked for explicitly' }),
          ),
          server: Type.Optional(
            Type.String({
              minLength: 1,
              maxLength: 2048,
              pattern: NUL_FREE,
              description: "the URL the control plane reaches the cluster's API server at (written into the Job)",
            }),
          ),
        },
        { additionalProperties: false },
      ),
    ),
  },
  { additionalProperties: false },
);

const IssuedBootstrap = Type.Object({
  bootstrap: Type.Object({
    name: Type.String(),
    token: Type.String({ description: 'single-use bootstrap token; shown once, stored hashed' }),
    expiresAt: Type.String({ format: 'date-time' }),
    namespaces: Type.Array(Type.String()),
    clusterWide: Type.Boolean(),
    job: Type.String({
      description: 'manifest (YAML) to apply on the cluster: ServiceAccount, RBAC, the redeeming Job',
    }),
    command: Type.String({ description: "the same from the tenant's machine with its kubeconfig" }),
  }),
});

const RedeemBody = Type.Object(
  {
    server: Type.String({
      minLength: 1,
      maxLength: 2048,
      pattern: NUL_FREE,
      description: "https URL the control plane reaches the cluster's API server at",
    }),
    token: Type.String({
      minLength: 1,
      maxLength: 16 * 1024,
      pattern: NUL_FREE,
      description: "a token of the bootstrap's own ServiceAccount (argocd-manager/argocd-manager-<id>)",
    }),
    caData: Type.Optional(
      Type.String({
        minLength: 1,
        maxLength: 64 * 1024,
        pattern: NUL_FREE,
        description: "the API server's CA certificate: PEM, or base64 of PEM",
      }),
    ),
  },
  { additionalProperties: false },
);

const RemoveQuery = Type.Object(
  {
    removeRbac: Type.Optional(
      Type.Union([Type.Literal('1'), Type.Literal('true'), Type.Literal('0'), Type.Literal('false')], {
        description: 'also delete the Roles and bindings a bootstrap created (1 or true)',
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
          summary:
            "Register a cluster the tenant's Argo CD deploys to (checked against the cluster first), or ask for a bootstrap token",
          description:
            "The cluster is checked before anything is written, within 10 s: reachable, a Kubernetes API server, the credentials accepted, and the permissions Argo CD needs in the listed namespaces (SelfSubjectAccessReview). The registration bumps the tenant's generation: the operation writes the Argo CD cluster Secret into the tenant's virtual cluster. With `bootstrap` instead of credentials: a single-use token valid for an hour, a Job manifest that creates a least-privilege ServiceAccount on the cluster and redeems the token (POST /v1/managed-clusters/redeem), and the equivalent `provisioner managed-clusters connect` command; nothing is registered until the token is redeemed.",
          tags: ['managed clusters'],
          params: TenantParams,
          body: RegisterBody,
          response: withErrors({ 201: Type.Union([ManagedClusterRegistered, IssuedBootstrap]) }),
        },
      },
      async (request, reply) => {
        const { bootstrap, ...registration } = request.body;
        if (bootstrap) {
          const extra = (['namespaces', 'kubeconfig', 'server', 'token', 'caData', 'reach'] as const).find(
            (k) => registration[k] !== undefined,
          );
          if (extra)
            throw errors.validation(
              `give either bootstrap or credentials, not both (${extra} with bootstrap; namespaces go in bootstrap.namespaces)`,
              extra,
            );
          const issued = await ctx.managedClusters.issueBootstrap(
            request.params.id,
            { name: registration.name, ...bootstrap },
            requesterOf(request),
            `${ctx.config.engine.publicUrl.replace(/\/+$/, '')}/v1/managed-clusters/redeem`,
          );
          return reply.status(201).send({ bootstrap: issued });
        }
        // A cluster only the runtime reaches is checked through the runtime's tunnel: when another
        // replica holds it, the registration is relayed there as it came (once), as the runtime
        // routes are (docs/tunnel.md "Several provisioner replicas").
        const tenantId = request.params.id;
        if (
          registration.reach === 'runtime' &&
          !ctx.tunnel.status(tenantId).connected &&
          request.raw.headers[RELAY_HEADER] === undefined
        ) {
          const owner = await ctx.tunnelDirectory.owner(tenantId);
          if (owner) {
            const payload = Buffer.from(JSON.stringify(request.body));
            const rawHeaders: string[] = [];
            for (let i = 0; i + 1 < request.raw.rawHeaders.length; i += 2) {
              const name = request.raw.rawHeaders[i]!.toLowerCase();
              if (name !== 'content-length' && name !== 'transfer-encoding')
                rawHeaders.push(request.raw.rawHeaders[i]!, request.raw.rawHeaders[i + 1]!);
            }
            rawHeaders.push('content-length', String(payload.length));
            const aborter = new AbortController();
            reply.raw.once('close', () => {
              if (!reply.raw.writableFinished) aborter.abort();
            });
            const res = await relayToReplica({
              owner,
              tenantId,
              replicaId: ctx.tunnelDirectory.replicaId,
              // The request as parsed (its body is re-sent as JSON with its own length).
              raw: { method: 'POST', rawHeaders } as IncomingMessage,
              // This route's own path from its validated tenant id, never the request target.
              path: `/v1/tenants/${tenantId}/managed-clusters`,
              body: Readable.from([payload]),
              requestId: request.id,
              timeoutMs: 30_000,
              idleTimeoutMs: 30_000,
              signal: aborter.signal,
            });
            return reply
              .code(res.status as 201)
              .headers(runtimeResponseHeaders(res.headers, `/v1/tenants/${tenantId}/managed-clusters`))
              .send(res.body);
          }
        }
        const out = await ctx.managedClusters.register(tenantId, request.body, requesterOf(request));
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
            'Idempotent: 202 with the operation that removes it, 204 when there is no such registration (any more). The tokens the control plane requested are revoked first, with the credentials it holds: when a bootstrap created the ServiceAccount, the account is deleted (and with removeRbac=1 its Roles); otherwise the Secret the tokens are bound to is deleted. Either way they are refused from then on; `revocation` says whether that worked and, when the cluster could not be reached, the command that does it. A cluster that cannot be reached never fails the removal.',
          tags: ['managed clusters'],
          params: NameParams,
          querystring: RemoveQuery,
          response: withErrors({
            202: Type.Object({
              operationId: Uuid,
              revocation: Type.Optional(
                Type.Object(
                  {
                    serviceAccount: Type.String({
                      description: '`namespace/name` of the ServiceAccount whose tokens the control plane held',
                    }),
                    revoked: Type.Boolean({
                      description:
                        "the tokens issued no longer work: the bootstrap's ServiceAccount, or the Secret they are bound to, is gone",
                    }),
                    removed: Type.Array(Type.String(), { description: 'the RBAC objects removed' }),
                    binding: Type.Optional(
                      Type.String({ description: '`namespace/name` of the Secret the tokens were bound to' }),
                    ),
                    command: Type.Optional(
                      Type.String({ description: 'when not revoked: the command that revokes them on the cluster' }),
                    ),
                    validUntil: Type.Optional(
                      Type.String({
                        format: 'date-time',
                        description:
                          'tokens that were not bound: when the last one issued expires (it works until then)',
                      }),
                    ),
                    error: Type.Optional(Type.String({ description: 'why the revocation did not complete' })),
                  },
                  { description: 'absent when the credentials were kept as given (nothing was issued)' },
                ),
              ),
            }),
            204: Type.Null({ description: 'no such registration (any more): nothing to do' }),
          }),
        },
      },
      async (request, reply) => {
        const removeRbac = request.query.removeRbac === '1' || request.query.removeRbac === 'true';
        const out = await ctx.managedClusters.remove(request.params.id, request.params.name, requesterOf(request), {
          removeRbac,
        });
        return out ? reply.status(202).send(out) : reply.status(204).send(null);
      },
    );

    app.post(
      '/v1/managed-clusters/redeem',
      {
        config: { public: true },
        bodyLimit: Math.max(ctx.config.bodyLimit, REGISTER_BODY_LIMIT),
        schema: {
          summary: "Redeem a bootstrap token: register the cluster with the bootstrap's ServiceAccount",
          description:
            "Authenticated by the bootstrap token only (`Authorization: Bearer hrtb_…`), single-use: 401 for a token this service did not issue, 410 for one already redeemed or expired. The registration's checks all apply; a refused one leaves the token usable until it expires.",
          tags: ['managed clusters'],
          body: RedeemBody,
          response: withErrors({ 201: ManagedClusterRegistered }),
        },
      },
      async (request, reply) => {
        const header = request.headers.authorization ?? '';
        const m = /^Bearer\s+(\S+)$/i.exec(header);
        if (!m)
          throw new AppError('BOOTSTRAP_TOKEN_INVALID', 'give the bootstrap token as Authorization: Bearer <token>', {
            field: 'authorization',
          });
        const out = await ctx.managedClusters.redeem(m[1]!, request.body, request.id);
        return reply
          .status(201)
          .header('location', `/v1/tenants/${out.tenantId}/managed-clusters/${out.managedCluster.name}`)
          .send({ managedCluster: out.managedCluster, operationId: out.operationId });
      },
    );
  };
