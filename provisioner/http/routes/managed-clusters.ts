import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { requesterOf } from '../auth.ts';
import { endpoint } from '../api-routes.ts';
import { REGISTER_BODY_LIMIT } from '../route-schemas.ts';
import type { AppContext } from '../context.ts';
import { AppError, errors } from '../../errors.ts';
import type { IncomingMessage } from 'node:http';
import { Readable } from 'node:stream';
import { RELAY_HEADER, relayToReplica } from '../../tunnel/relay.ts';
import { runtimeResponseHeaders } from '../../tunnel/route.ts';

const ROLES = ['operator', 'tenant'] as const;

export const managedClusterRoutes =
  (ctx: AppContext): FastifyPluginAsyncTypebox =>
  async (app) => {
    app.route({
      ...endpoint('GET /v1/tenants/:id/managed-clusters', {
        summary: "List the tenant's managed clusters with their health",
        tags: ['managed clusters'],
      }),
      config: { roles: ROLES },
      handler: async (request) => ({ items: await ctx.managedClusters.list(request.params.id) }),
    });

    app.route({
      ...endpoint('GET /v1/tenants/:id/managed-clusters/:name', {
        summary: 'Get a managed cluster',
        tags: ['managed clusters'],
      }),
      config: { roles: ROLES },
      handler: async (request) => ctx.managedClusters.get(request.params.id, request.params.name),
    });

    app.route({
      ...endpoint('POST /v1/tenants/:id/managed-clusters', {
        summary:
          "Register a cluster the tenant's Argo CD deploys to (checked against the cluster first), or ask for a bootstrap token",
        description:
          "The cluster is checked before anything is written, within 10 s: reachable, a Kubernetes API server, the credentials accepted, and the permissions Argo CD needs in the listed namespaces (SelfSubjectAccessReview). The registration bumps the tenant's generation: the operation writes the Argo CD cluster Secret into the tenant's virtual cluster. With `bootstrap` instead of credentials: a single-use token valid for an hour, a Job manifest that creates a least-privilege ServiceAccount on the cluster and redeems the token (POST /v1/managed-clusters/redeem), and the equivalent `provisioner managed-clusters connect` command; nothing is registered until the token is redeemed.",
        tags: ['managed clusters'],
      }),
      config: { roles: ROLES },
      bodyLimit: Math.max(ctx.config.bodyLimit, REGISTER_BODY_LIMIT),
      handler: async (request, reply) => {
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
    });

    app.route({
      ...endpoint('DELETE /v1/tenants/:id/managed-clusters/:name', {
        summary: 'Remove a managed cluster (its Argo CD cluster Secret is deleted from the virtual cluster)',
        description:
          'Idempotent: 202 with the operation that removes it, 204 when there is no such registration (any more). The tokens the control plane requested are revoked first, with the credentials it holds: when a bootstrap created the ServiceAccount, the account is deleted (and with removeRbac=1 its Roles); otherwise the Secret the tokens are bound to is deleted. Either way they are refused from then on; `revocation` says whether that worked and, when the cluster could not be reached, the command that does it. A cluster that cannot be reached never fails the removal.',
        tags: ['managed clusters'],
      }),
      config: { roles: ROLES },
      handler: async (request, reply) => {
        const removeRbac = request.query.removeRbac === '1' || request.query.removeRbac === 'true';
        const out = await ctx.managedClusters.remove(request.params.id, request.params.name, requesterOf(request), {
          removeRbac,
        });
        return out ? reply.status(202).send(out) : reply.status(204).send(null);
      },
    });

    app.route({
      ...endpoint('POST /v1/managed-clusters/redeem', {
        summary: "Redeem a bootstrap token: register the cluster with the bootstrap's ServiceAccount",
        description:
          "Authenticated by the bootstrap token only (`Authorization: Bearer hrtb_…`), single-use: 401 for a token this service did not issue, 410 for one already redeemed or expired. The registration's checks all apply; a refused one leaves the token usable until it expires.",
        tags: ['managed clusters'],
      }),
      config: { public: true },
      bodyLimit: Math.max(ctx.config.bodyLimit, REGISTER_BODY_LIMIT),
      handler: async (request, reply) => {
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
    });
  };
