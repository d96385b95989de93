/**
 * The Source Server's HTTP app (inside the runtime; the event reporter and the app-proxy call it,
 * nothing outside the runtime reaches it):
 *
 *  - `GET /healthz`, `GET /readyz` (runtime/agents/common/health.ts; it has no loops and is ready
 *    while it answers: when Argo CD or Git is down the Source Server still answers, with 503 and
 *    Retry-After, so it stays behind its Service and its callers hear why)
 *  - `GET /metrics`: Prometheus (cache hits, misses, bytes; answers by route and status)
 *  - `GET /v1/applications/:namespace/:name/change[?revision=R]` → ApplicationChange
 *  - `GET /v1/applications/:namespace/:name/diff[?revision=R]` → ApplicationDiff
 *  - `GET /v1/applications/:namespace/:name/preview?revision=R` → ApplicationPreview (what a sync
 *    to R would change in what runs now; the GitOps Operator's promotion dry runs ask it)
 *
 * Errors, in the platform's shape `{"error": {code, message, field?, requestId}}`:
 *  - 400 VALIDATION_FAILED naming the field (a namespace or name that is not a Kubernetes name, a
 *    revision that is not a plain revision);
 *  - 404 APPLICATION_NOT_FOUND (Argo CD does not know it, or does not let this account see it),
 *    REVISION_NOT_FOUND;
 *  - 409 UNSUPPORTED_SOURCE for a commit diff of an Application with no Git source over http(s);
 *  - 422 MANIFEST_GENERATION_FAILED for a commit diff Argo CD cannot generate (its message);
 *  - 502 GIT_AUTHENTICATION_FAILED / GIT_REPOSITORY_NOT_FOUND: the Git server refused what Argo
 *    CD's repository Secret holds, or has no such repository (waiting will not fix it);
 *  - 503 ARGOCD_UNAVAILABLE / GIT_UNAVAILABLE with Retry-After.
 */
import Fastify, {
  type FastifyInstance,
  type FastifyReply,
  type FastifyRequest,
  type FastifyServerOptions,
} from 'fastify';
import client from 'prom-client';
import { SOURCE_SERVER_PATH_PREFIX } from '../../protocol/sources.ts';
import { AgentHealth } from '../common/health.ts';
import { ArgoCdError } from './argocd.ts';
import { ManifestGenerationFailed, type SourceService, UnsupportedSource } from './change.ts';
import { GitError } from './git.ts';

/** Seconds a caller waits before asking again when Argo CD or the Git server cannot be reached. */
export const RETRY_AFTER_SECONDS = 10;

const NAME = /^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/;
const REVISION = /^[\x21-\x7e]{1,256}$/;

export interface SourceServerAppOptions {
  service: SourceService;
  logger?: FastifyServerOptions['logger'] | FastifyServerOptions['loggerInstance'];
}

class InvalidInput extends Error {
  readonly field: string;
  constructor(field: string, message: string) {
    super(message);
    this.field = field;
  }
}

function checkName(field: 'namespace' | 'name', value: string): void {
  if (value.length > 253 || !NAME.test(value))
    throw new InvalidInput(
      field,
      `'${value.slice(0, 80)}' is not an Application ${field} (a Kubernetes name: a-z, 0-9, '-', '.', at most 253)`,
    );
}

/** A revision as Argo CD and Git name one: printable, no leading `-` (an option to git), no `..` (a range). */
export function checkRevision(value: unknown): string | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'string' || !REVISION.test(value) || value.startsWith('-') || value.includes('..'))
    throw new InvalidInput(
      'revision',
      "'revision' must be a commit SHA, branch or tag: 1 to 256 printable characters without spaces, not starting with '-' and without '..'",
    );
  return value;
}

type Params = { namespace: string; name: string };
type Query = { revision?: string };

export async function buildSourceServer(opts: SourceServerAppOptions): Promise<FastifyInstance> {
  const logger = opts.logger;
  const app = Fastify({
    ...(logger !== undefined && typeof logger === 'object' && 'child' in logger
      ? { loggerInstance: logger }
      : { logger: logger ?? false }),
    bodyLimit: 1024,
    maxParamLength: 300,
  });
  const { service } = opts;

  const registry = new client.Registry();
  const registers = [registry];
  const answers = new client.Counter({
    name: 'source_server_answers_total',
    help: 'Answers by route and status',
    labelNames: ['route', 'status'] as const,
    registers,
  });
  for (const [name, help, pick] of [
    ['source_server_cache_hits', 'Cache hits (manifests and change answers)', 'hits'],
    ['source_server_cache_misses', 'Cache misses', 'misses'],
    ['source_server_cache_evictions', 'Entries evicted to stay within CACHE_MAX_BYTES', 'evictions'],
    ['source_server_cache_bytes', 'Bytes held by the cache', 'bytes'],
    ['source_server_cache_entries', 'Entries in the cache', 'entries'],
  ] as const) {
    new client.Gauge({
      name,
      help,
      registers,
      collect() {
        this.set(service.cache.stats()[pick]);
      },
    });
  }

  const fail = (
    request: FastifyRequest,
    reply: FastifyReply,
    status: number,
    body: { code: string; message: string; field?: string },
  ): FastifyReply => reply.code(status).send({ error: { ...body, requestId: request.id } });

  const handle = (err: unknown, request: FastifyRequest, reply: FastifyReply, target: string): FastifyReply => {
    if (err instanceof InvalidInput)
      return fail(request, reply, 400, { code: 'VALIDATION_FAILED', message: err.message, field: err.field });
    if (err instanceof UnsupportedSource)
      return fail(request, reply, 409, { code: 'UNSUPPORTED_SOURCE', message: `${target}: ${err.message}` });
    if (err instanceof ManifestGenerationFailed)
      return fail(request, reply, 422, {
        code: 'MANIFEST_GENERATION_FAILED',
        message: `Argo CD cannot generate the manifests of ${target}: ${err.message}`,
      });
    if (err instanceof ArgoCdError) {
      if (err.failure === 'not-found')
        return fail(request, reply, 404, {
          code: 'APPLICATION_NOT_FOUND',
          message: `${target} does not exist in Argo CD (or the source-server account may not read it)`,
        });
      if (err.failure === 'unavailable') {
        request.log.warn({ reason: err.message }, 'Argo CD cannot answer');
        reply.header('retry-after', String(RETRY_AFTER_SECONDS));
        return fail(request, reply, 503, {
          code: 'ARGOCD_UNAVAILABLE',
          message: `Argo CD's API server cannot answer right now (${err.message}); retry in ${RETRY_AFTER_SECONDS} s`,
        });
      }
      request.log.warn({ reason: err.message }, 'Argo CD refused the request');
      return fail(request, reply, 502, { code: 'ARGOCD_FAILED', message: `Argo CD: ${err.message}` });
    }
    if (err instanceof GitError) {
      switch (err.failure) {
        case 'revision-not-found':
          return fail(request, reply, 404, { code: 'REVISION_NOT_FOUND', message: err.message, field: 'revision' });
        case 'auth':
          request.log.warn({ reason: err.message }, 'the Git server refused the credentials');
          return fail(request, reply, 502, {
            code: 'GIT_AUTHENTICATION_FAILED',
            message: `${target}: ${err.message}; check the repository's credentials in Argo CD`,
          });
        case 'repository-not-found':
          return fail(request, reply, 502, { code: 'GIT_REPOSITORY_NOT_FOUND', message: `${target}: ${err.message}` });
        case 'unavailable':
          request.log.warn({ reason: err.message }, 'the Git server cannot be reached');
          reply.header('retry-after', String(RETRY_AFTER_SECONDS));
          return fail(request, reply, 503, {
            code: 'GIT_UNAVAILABLE',
            message: `${target}: the Git server cannot answer right now (${err.message}); retry in ${RETRY_AFTER_SECONDS} s`,
          });
        case 'failed':
          request.log.error({ reason: err.message }, 'git failed');
          return fail(request, reply, 500, { code: 'INTERNAL', message: 'git failed; see the Source Server log' });
      }
    }
    request.log.error({ err }, 'request failed');
    return fail(request, reply, 500, { code: 'INTERNAL', message: 'internal error' });
  };

  app.setNotFoundHandler((request, reply) =>
    fail(request, reply, 404, {
      code: 'ROUTE_NOT_FOUND',
      message: `no route ${request.method} ${request.url.split('?')[0]}: the Source Server serves GET ${SOURCE_SERVER_PATH_PREFIX}/:namespace/:name/change, …/diff and …/preview`,
    }),
  );
  app.setErrorHandler((err: Error & { statusCode?: number }, request, reply) => {
    const status = err.statusCode ?? 500;
    if (status >= 400 && status < 500)
      return fail(request, reply, status, { code: 'BAD_REQUEST', message: err.message });
    return handle(err, request, reply, 'the request');
  });

  const health = new AgentHealth();
  for (const path of ['/healthz', '/readyz'] as const)
    app.get(path, async (_request, reply) => {
      const { status, body } = health.answer(path);
      return reply.code(status).header('cache-control', 'no-store').send(body);
    });
  app.get('/metrics', async (_request, reply) =>
    reply.header('content-type', registry.contentType).send(await registry.metrics()),
  );

  for (const route of ['change', 'diff', 'preview'] as const) {
    app.get<{ Params: Params; Querystring: Query }>(
      `${SOURCE_SERVER_PATH_PREFIX}/:namespace/:name/${route}`,
      async (request, reply) => {
        const { namespace, name } = request.params;
        const target = `Application '${namespace.slice(0, 80)}/${name.slice(0, 80)}'`;
        let status = 200;
        try {
          checkName('namespace', namespace);
          checkName('name', name);
          for (const key of Object.keys(request.query))
            if (key !== 'revision')
              throw new InvalidInput(
                key,
                `'${key.slice(0, 40)}' is not a parameter of this route; it takes 'revision'`,
              );
          const revision = checkRevision(request.query.revision);
          if (route === 'preview') {
            if (revision === undefined)
              throw new InvalidInput('revision', "'revision' is required: the commit whose manifests are previewed");
            return await service.preview(namespace, name, revision);
          }
          return route === 'change'
            ? await service.change(namespace, name, revision)
            : await service.diff(namespace, name, revision);
        } catch (err) {
          const sent = handle(err, request, reply, target);
          status = sent.statusCode;
          return sent;
        } finally {
          answers.inc({ route, status: String(status) });
        }
      },
    );
  }

  return app;
}
