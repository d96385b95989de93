import { Type } from 'typebox';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { FastifyRequest } from 'fastify';
import { NUL_FREE, Semver, StringEnum, UpgraderAssignment, withErrors } from '../../api/schemas.ts';
import { UPGRADER_PATH, UPGRADER_REPORTS } from '../../../runtime/protocol/upgrade.ts';
import { authOf, requesterOf } from '../auth.ts';
import { endpoint } from '../api-routes.ts';
import type { AppContext } from '../context.ts';
import { decodeCursor, encodeCursor } from '../cursor.ts';
import { AppError } from '../../errors.ts';
import { INSTALL_PATH_PREFIX } from '../../../runtime/hybrid/install.ts';
import type { Reader } from '../../runtime-registry/service.ts';

const ROLES = ['operator', 'tenant'] as const;

const UpgraderReportBody = Type.Object(
  {
    to: Semver,
    phase: StringEnum(UPGRADER_REPORTS),
    message: Type.Optional(Type.String({ maxLength: 2000, pattern: NUL_FREE })),
  },
  { additionalProperties: false },
);

const InstallParams = Type.Object(
  {
    file: Type.String({
      maxLength: 256,
      pattern: '^[A-Za-z0-9_-]+\\.yaml$',
      description: 'the bootstrap token of the registration and `.yaml`: `hrth_….yaml`',
    }),
  },
  { additionalProperties: false },
);

/** A tenant's own key reads the hosted runtime's conditions as it reads its tenant's (tenant-view.ts). */
const readerOf = (request: FastifyRequest): Reader => (authOf(request).role === 'tenant' ? 'tenant' : 'operator');

export const runtimeRoutes =
  (ctx: AppContext): FastifyPluginAsyncTypebox =>
  async (app) => {
    app.route({
      ...endpoint('GET /v1/tenants/:id/runtimes', {
        summary: "List the tenant's runtimes: the hosted one and the hybrid ones not removed",
        tags: ['runtimes'],
      }),
      config: { roles: ROLES },
      handler: async (request) => ({ items: await ctx.runtimes.list(request.params.id, readerOf(request)) }),
    });

    app.route({
      ...endpoint('GET /v1/tenants/:id/runtimes/:name', {
        summary: 'Get a runtime (`hosted`, or a hybrid runtime by its name)',
        tags: ['runtimes'],
      }),
      config: { roles: ROLES },
      handler: async (request) => ctx.runtimes.get(request.params.id, request.params.name, readerOf(request)),
    });

    app.route({
      ...endpoint('POST /v1/tenants/:id/runtimes', {
        summary: "Register a hybrid runtime, installed in the customer's own cluster",
        description:
          "The answer holds a single-use bootstrap token (stored hashed; valid for PROVISIONER_HYBRID_BOOTSTRAP_TTL_SECONDS, default a day) and the install: the manifests (the only secret in them is the bootstrap token), the Argo charts for argo=new, the one command that applies them, and the command that removes them. The bundle's Job exchanges the token for the runtime key inside the cluster (POST /v1/runtimes/bootstrap). Honors Idempotency-Key: the same key and body answer the first answer again for an hour. At most PROVISIONER_HYBRID_REGISTRATIONS_PER_HOUR registrations per tenant (replays included): more, 429 RATE_LIMITED with Retry-After.",
        tags: ['runtimes'],
      }),
      config: { roles: ROLES },
      handler: async (request, reply) => {
        const { status, body } = await ctx.runtimes.register(
          request.params.id,
          request.body,
          request.headers['idempotency-key'],
          requesterOf(request),
          readerOf(request),
        );
        return reply
          .status(status as 201)
          .header('location', `/v1/tenants/${request.params.id}/runtimes/${body.runtime.name}`)
          .send(body);
      },
    });

    app.route({
      ...endpoint('DELETE /v1/tenants/:id/runtimes/:name', {
        summary: 'Remove a hybrid runtime',
        description:
          "Revokes the runtime's key (every replica drops it and closes what it holds open) and marks it removed; the answer holds the command that deletes what the install created in the customer's cluster (the control plane holds no credentials there). The hosted runtime goes with its tenant: 409 HOSTED_RUNTIME_NOT_REMOVABLE.",
        tags: ['runtimes'],
      }),
      config: { roles: ROLES },
      handler: async (request) =>
        ctx.runtimes.remove(request.params.id, request.params.name, requesterOf(request), readerOf(request)),
    });

    app.route({
      ...endpoint('GET /v1/tenants/:id/runtimes/:name/bundle', {
        summary: "A hybrid runtime's upgrade bundle at a catalog version, with its diff",
        description:
          "The bundle the customer applies over the installed runtime (no bootstrap token or Job), the command that applies it, and what it changes against `from`: a unified diff and the objects and Argo charts added, changed and removed. Changes nothing. The hosted runtime has none: 409 HOSTED_RUNTIME_NO_BUNDLE. A withdrawn version's bundle is refused (422 RUNTIME_VERSION_UNAVAILABLE), and a deprecated one's for a tenant key unless the runtime runs it, as an upgrade to it would be. Within the tenant's and the runtime's bundle rates (PROVISIONER_HYBRID_BUNDLES_PER_MINUTE, PROVISIONER_HYBRID_BUNDLES_PER_RUNTIME_PER_MINUTE, shared with the upgrade route): more, 429 RATE_LIMITED with Retry-After.",
        tags: ['runtimes'],
      }),
      config: { roles: ROLES },
      handler: async (request) =>
        ctx.runtimes.bundle(request.params.id, request.params.name, request.query, readerOf(request)),
    });

    app.route({
      ...endpoint('POST /v1/tenants/:id/runtimes/:name/upgrade', {
        summary: 'Upgrade (or roll back) a hybrid runtime: the customer applies the answered bundle',
        description:
          "Checked like a tenant's own upgrade (the catalog's upgrade paths and stepping stones; a rollback only to the version before, where the catalog allows it; not withdrawn, and not deprecated for a tenant key) and recorded as the version the runtime's customer is asked to run. The control plane holds no credentials to the customer's cluster: the answer's upgrade bundle and command are for the customer to apply; the runtime's agents then report the new version (`reportedVersion`, `versionSkew`). The version the runtime already has answers 200 with `changed: false`. Counts against the bundle rates like GET …/bundle (429 RATE_LIMITED with Retry-After).",
        tags: ['runtimes'],
      }),
      config: { roles: ROLES },
      handler: async (request) =>
        ctx.runtimes.upgrade(
          request.params.id,
          request.params.name,
          request.body.version,
          requesterOf(request),
          readerOf(request),
        ),
    });

    app.route({
      ...endpoint('GET /v1/runtimes', {
        summary: "Every tenant's runtimes, hosted and hybrid, not removed",
        description: 'In creation order; pass nextCursor back as cursor for the next page.',
        tags: ['runtimes'],
      }),
      config: { roles: ['operator'] },
      handler: async (request) => {
        const q = request.query;
        const page = await ctx.runtimes.listAll({
          after: q.cursor ? decodeCursor(ctx.box, 'runtimes', q.cursor) : undefined,
          limit: q.limit ?? 50,
          mode: q.mode,
        });
        return {
          items: page.items,
          nextCursor: page.more && page.last ? encodeCursor(ctx.box, 'runtimes', page.last) : null,
        };
      },
    });

    app.get(
      UPGRADER_PATH,
      {
        config: { roles: ['runtime'] },
        schema: {
          summary:
            "A hybrid runtime's in-cluster upgrader pulls the upgrade it is to apply (runtime keys of runtimes with upgrades=agent)",
          description:
            "The version the runtime is to run and, while an upgrade by the upgrader is pending or applying, its plan: the objects to server-side apply in order and the same objects as the version before had them (the rollback). 403 UPGRADER_NOT_OPTED_IN for any other key. Within the tenant's and the runtime's poll rates (PROVISIONER_HYBRID_UPGRADER_POLLS_PER_MINUTE, PROVISIONER_HYBRID_UPGRADER_POLLS_PER_RUNTIME_PER_MINUTE): more, 429 RATE_LIMITED with Retry-After.",
          tags: ['runtimes'],
          response: withErrors({ 200: UpgraderAssignment }),
        },
      },
      async (request) => {
        const auth = authOf(request);
        ctx.runtimes.admitUpgraderPoll(auth.tenantId, auth.runtimeId);
        return ctx.runtimes.upgraderAssignment(auth.runtimeId);
      },
    );

    app.post(
      UPGRADER_PATH,
      {
        config: { roles: ['runtime'] },
        schema: {
          summary: "A hybrid runtime's in-cluster upgrader reports how the upgrade goes",
          description:
            "`applying` once it starts; then `succeeded`, `rolled-back` (the rollout failed and it put the version before back: that becomes the runtime's version again) or `failed` (the rollback failed too, or the plan was refused unapplied: then straight from `pending`). Each phase audited. 409 UPGRADE_SUPERSEDED when the upgrade to `to` is not the one asked now or already ended; 409 UPGRADE_PHASE_OUT_OF_ORDER for a phase out of that order.",
          tags: ['runtimes'],
          body: UpgraderReportBody,
          response: withErrors({ 200: Type.Object({ runtime: Type.Ref('Runtime') }) }),
        },
      },
      async (request) => ctx.runtimes.upgraderReport(authOf(request).runtimeId, request.body, requesterOf(request)),
    );

    app.get(
      `${INSTALL_PATH_PREFIX}:file`,
      {
        config: { public: true, rateLimit: { max: ctx.config.signupRateLimit, timeWindow: 60_000 } },
        schema: {
          summary: "A hybrid runtime's complete install as YAML, for `kubectl apply --server-side -f <this URL>`",
          description:
            "The registration's install URL (`install.url`): the runtime's namespace, agents, bootstrap Secret and Job and, with argo=new, the Argo charts rendered by the control plane at the catalog's versions (namespaces and CRDs first). Authenticated by the bootstrap token in the path, like the Job's exchange: served while the runtime awaits install and the token is unexpired, any number of times; fetching it does not redeem the token (the Job's exchange does). 404 INSTALL_NOT_FOUND for a token not issued here, of a removed runtime or a deleted tenant; 410 BOOTSTRAP_TOKEN_USED once the runtime is installed; 410 BOOTSTRAP_TOKEN_EXPIRED after the token's life; 409 INSTALL_CHARTS_UNAVAILABLE when the control plane cannot render the Argo charts (argo=new; the registration then gave no URL). Rate-limited per client address like signup and within the runtime's and tenant's bundle rates (429 RATE_LIMITED with Retry-After). The token is never logged: the request log shows the path without it.",
          tags: ['runtimes'],
          params: InstallParams,
          response: withErrors({
            200: {
              description: 'the install, multi-document YAML',
              content: { 'application/yaml': { schema: Type.String() } },
            },
            410: Type.Ref('Error'),
          }),
        },
      },
      async (request, reply) => {
        const text = await ctx.runtimes.installText(request.params.file.replace(/\.yaml$/, ''));
        return reply
          .header('content-type', 'application/yaml; charset=utf-8')
          .header('cache-control', 'no-store')
          .send(text);
      },
    );

    app.route({
      ...endpoint('POST /v1/runtimes/bootstrap', {
        summary: "Exchange a hybrid runtime's bootstrap token for its runtime key (the install's bootstrap Job)",
        description:
          'Authenticated by the bootstrap token only (`Authorization: Bearer hrth_…`), single-use: the exchange that redeems it makes the runtime key and marks the runtime installed, at once. 401 BOOTSTRAP_TOKEN_INVALID for a token that is unknown, expired, already redeemed or of a removed runtime (one answer for all). Rate-limited per client address like signup.',
        tags: ['runtimes'],
      }),
      config: { public: true, rateLimit: { max: ctx.config.signupRateLimit, timeWindow: 60_000 } },
      handler: async (request) => {
        const m = /^Bearer\s+(\S+)$/i.exec(request.headers.authorization ?? '');
        if (!m)
          throw new AppError('BOOTSTRAP_TOKEN_INVALID', 'give the bootstrap token as Authorization: Bearer <token>', {
            field: 'authorization',
          });
        return ctx.runtimes.redeem(m[1]!, request.id);
      },
    });
  };
