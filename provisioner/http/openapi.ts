/**
 * The OpenAPI document (`/docs/json`), generated from the routes' schemas by @fastify/swagger,
 * with what the schemas cannot say added here, so the document tells the truth about every
 * answer the server gives (the fuzzer, scripts/fuzz.sh, checks the server against it):
 *
 * - public routes (signup, plans, regions, runtime versions, health, metrics) need no key;
 * - `GET /v1/operations/{id}/log?follow=1`, `GET /v1/tenants/{id}/changes` and `GET /v1/tenants/events` answer `text/event-stream`;
 * - `/v1/tenants/{id}/runtime/{path}` answers whatever the runtime answers, or the API's errors;
 * - `/metrics` answers Prometheus' text format.
 */
import type { FastifyDynamicSwaggerOptions } from '@fastify/swagger';
import type { FastifyInstance } from 'fastify';

type Json = Record<string, unknown>;

const errorContent = { 'application/json': { schema: { $ref: '#/components/schemas/Error' } } };
const errorResponse = (description: string) => ({ description, content: errorContent });

/** The tunnel route's answers: the runtime's own, or the API's errors (docs/tunnel.md). */
const RUNTIME_RESPONSES: Json = {
  default: { description: "the runtime's answer, any status and content type", content: { '*/*': { schema: {} } } },
  '400': errorResponse('malformed request, or the caller cancelled it (REQUEST_CANCELLED)'),
  '401': errorResponse('no key, or not a valid one'),
  '403': errorResponse('the role may not call the runtime'),
  '404': errorResponse('no such tenant (or another tenant, for a tenant key)'),
  '413': errorResponse("the body is over the tunnel's request body limit"),
  '414': errorResponse('a path parameter is longer than 256 characters'),
  '431': errorResponse('the headers do not fit a tunnel frame'),
  '502': errorResponse('RUNTIME_BAD_RESPONSE, RUNTIME_UPSTREAM_ERROR or RUNTIME_DISCONNECTED'),
  '503': errorResponse('RUNTIME_UNREACHABLE (no tunnel), RUNTIME_BUSY or SHUTTING_DOWN; with Retry-After'),
  '504': errorResponse('RUNTIME_TIMEOUT'),
};

/** Errors any /v1 route can answer (the error handler's; routes list the others they give). */
const COMMON_ERRORS: Record<string, string> = {
  '400': 'the request is not valid (`field` names the input at fault)',
  '401': 'no key, or not a valid one',
  '403': 'the role may not call the route',
  '404': 'not found',
  '413': 'the body is over the limit',
  '414': 'a path parameter is longer than 256 characters',
  '415': 'the body is not JSON',
  '429': 'too many requests',
  '500': 'internal error',
  '503': 'the database (or another dependency) is unavailable; with Retry-After',
};

function transformObject(doc: Json): Json {
  const paths = (doc.paths ?? {}) as Record<string, Record<string, Json>>;
  for (const [url, item] of Object.entries(paths)) {
    if (!url.startsWith('/v1/')) continue;
    for (const op of Object.values(item)) {
      const responses = (op.responses ?? {}) as Record<string, Json>;
      for (const [status, description] of Object.entries(COMMON_ERRORS))
        responses[status] ??= errorResponse(description);
      op.responses = responses;
    }
  }
  // The wildcard is a path parameter named `path` (the router calls it `*`).
  for (const [url, item] of Object.entries(paths)) {
    if (!url.endsWith('/{*}')) continue;
    delete paths[url];
    for (const op of Object.values(item)) {
      op.parameters = ((op.parameters ?? []) as Json[]).map((p) =>
        p.name === '*' ? { ...p, name: 'path', description: "the path on the tenant's runtime", schema: p.schema } : p,
      );
      const { '200': _generated, ...common } = op.responses as Record<string, Json>;
      const byName = url.includes('/runtimes/{name}/proxy/');
      op.responses = {
        ...common,
        ...RUNTIME_RESPONSES,
        ...(byName
          ? {
              '404': errorResponse('no such tenant (or another tenant, for a tenant key), or no runtime of that name'),
              '409': errorResponse('RUNTIME_NOT_INSTALLED: the hybrid runtime is awaiting install'),
            }
          : {}),
      };
      op.summary = byName
        ? "Forward a request to one of the tenant's runtimes (`hosted`, or a hybrid runtime by name) through its tunnel or ingress"
        : "Forward a request to the tenant's runtime through its tunnel";
      op.tags = ['runtime'];
    }
    paths[url.replace(/\{\*\}$/, '{path}')] = item;
  }
  const stream = (path: string, description: string, events: string[]) => {
    const ok = (paths[path]?.get?.responses as Record<string, Json> | undefined)?.['200'];
    if (!ok) return;
    ok.description = description;
    ok.content = {
      ...(ok.content as Json),
      'text/event-stream': {
        schema: {
          type: 'object',
          description: `one Server-Sent Event: ${description}`,
          required: ['event', 'data'],
          properties: {
            event: { type: 'string', enum: events },
            data: { type: 'string', description: 'JSON' },
            id: { type: 'string' },
          },
        },
      },
    };
  };
  // Links from what creates a resource to what reads or removes it (the fuzzer's stateful phase
  // follows them; so can a client generator).
  const link = (path: string, method: string, status: string, links: Record<string, [string, string, string]>) => {
    const answer = (paths[path]?.[method]?.responses as Record<string, Json> | undefined)?.[status];
    if (!answer) return;
    answer.links = Object.fromEntries(
      Object.entries(links).map(([name, [target, targetMethod, from]]) => [
        name,
        {
          operationRef: `#/paths/${target.replaceAll('~', '~0').replaceAll('/', '~1')}/${targetMethod}`,
          parameters: { [/\{(\w+)\}/.exec(target)![1]!]: from },
        },
      ]),
    );
  };
  link('/v1/signup', 'post', '202', {
    GetTenant: ['/v1/tenants/{id}', 'get', '$response.body#/tenant/id'],
    GetOperation: ['/v1/operations/{id}', 'get', '$response.body#/operationId'],
    GetOperationLog: ['/v1/operations/{id}/log', 'get', '$response.body#/operationId'],
  });
  link('/v1/keys', 'post', '201', { RevokeKey: ['/v1/keys/{id}', 'delete', '$response.body#/info/id'] });
  link('/v1/clusters', 'post', '201', {
    GetCluster: ['/v1/clusters/{name}', 'get', '$response.body#/name'],
    CordonCluster: ['/v1/clusters/{name}/cordon', 'post', '$response.body#/name'],
  });
  stream(
    '/v1/operations/{id}/log',
    'the log (JSON), or with follow=1 a Server-Sent Events stream: `state` first, `line` (id = seq) per line, `end` or `error` last',
    ['state', 'line', 'end', 'error'],
  );
  stream(
    '/v1/tenants/events',
    'a Server-Sent Events stream: `ready` first, `tenant` (id = change number) per change, or `error`',
    ['ready', 'tenant', 'error'],
  );
  stream('/v1/tenants/{id}/changes', 'a Server-Sent Events stream: `change` (id = sequence number), or `error`', [
    'change',
    'error',
  ]);
  return doc;
}

export function swaggerOptions(): FastifyDynamicSwaggerOptions {
  return {
    openapi: {
      info: {
        title: 'Hosted runtimes provisioner',
        version: '1',
        description: 'Tenant signup, lifecycle, runtime versions and root clusters.',
      },
      components: { securitySchemes: { bearer: { type: 'http', scheme: 'bearer' } } },
      security: [{ bearer: [] }],
    },
    // Shared schemas keep their $id as their name in the document (`Error`, `Tenant`, …).
    refResolver: {
      buildLocalReference: (json, _base, _fragment, i) => (typeof json.$id === 'string' ? json.$id : `def-${i}`),
    },
    transformObject: (documentObject) =>
      'openapiObject' in documentObject ? transformObject(documentObject.openapiObject) : documentObject.swaggerObject,
  };
}

/** Public routes (`config.public`) say so in the document: no bearer requirement. */
export function documentPublicRoutes(app: FastifyInstance): void {
  app.addHook('onRoute', (route) => {
    if (route.url.startsWith('/docs')) route.config = { ...(route.config ?? {}), public: true };
    if (route.config?.public) route.schema = { ...(route.schema ?? {}), security: [] };
  });
}
