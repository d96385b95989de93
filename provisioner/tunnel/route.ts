/**
 * `ANY /v1/tenants/:id/runtime/*`: forwards the request through the tenant's tunnel to its
 * hosted runtime's request router and streams the response back (`ANY /v1/tenants/:id/argo-cd/*`,
 * a tenant's `argoCdUrl`, to the router's `/argo-cd/*`: Argo CD's API server); `ANY
 * /v1/tenants/:id/runtimes/:name/proxy/*` does the same for any of the tenant's runtimes — `hosted`,
 * or a hybrid runtime through its own tunnel or, registered with `access: ingress`, over https
 * (ingress.ts). Both go through one forwarder (forwardTo) with a resolved target. Bodies are
 * streamed both ways, never buffered whole. The caller's own credentials (Authorization, Cookie)
 * never reach the runtime; the control plane's signed request token, bound to that runtime, does.
 *
 * Register without fastify-plugin: the plugin replaces the content-type parsers in its own scope
 * only, so that bodies of any type stream through untouched.
 */
import type { OutgoingHttpHeaders } from 'node:http';
import { Transform, type Readable } from 'node:stream';
import type { FastifyContextConfig, FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import { AppError, errors } from '../errors.ts';
import { headerListFrom, headersObject } from '../../runtime/protocol/headers.ts';
import { REQUEST_TOKEN_HEADER } from '../../runtime/protocol/request-token.ts';
import { runtimeActionOf, type RuntimeAction } from '../../runtime/protocol/actions.ts';
import type { TunnelOwner } from './directory.ts';
import { RELAY_HEADER, relayToReplica } from './relay.ts';
import { proxiedPathProblem, requestTargetProblem } from '../request-target-rules.ts';
import { TunnelError, type ForwardRequest, type TunnelServer } from './server.ts';
import type { HeaderList } from '../../runtime/protocol/frames.ts';
import type { IngressForwarder } from './ingress.ts';

/** A tenant's runtime as the proxy route needs it (provisioner/store/runtimes.ts's row, not removed). */
export interface ProxiedRuntime {
  id: string;
  name: string;
  mode: 'hosted' | 'hybrid';
  access: 'tunnel' | 'ingress' | null;
  ingressUrl: string | null;
  state: 'awaiting-install' | 'installed' | 'removed' | null;
}

export interface TunnelRouteOptions {
  tunnel: TunnelServer;
  /** May the caller act on this tenant? (tenant keys: own tenant only; admin, operator: any; runtime keys: none). */
  canAccessTenant: (request: FastifyRequest, tenantId: string) => boolean | Promise<boolean>;
  /** Extra route config, e.g. `{ roles: ['tenant', 'operator'] }` for the app's auth hook. */
  routeConfig?: FastifyContextConfig;
  /** The caller's identity recorded in the request token (e.g. its API key id). */
  subjectOf?: (request: FastifyRequest) => string | undefined;
  /**
   * Audits the actions on a runtime's Argo objects (runtime/protocol/actions.ts) that this replica
   * forwards through its own tunnel (a relayed request is audited by the replica that serves it):
   * called before forwarding — when it fails the request is refused and nothing reaches the
   * runtime — and the function it returns is told the outcome.
   */
  auditAction?: (
    request: FastifyRequest,
    tenantId: string,
    action: RuntimeAction,
    /** A hybrid runtime's name (none: the tenant's hosted runtime). */
    runtime?: string,
  ) => Promise<(outcome: { status: number; error?: string }) => Promise<void>>;
  /**
   * The tenant's runtime of that name that is not removed (undefined: none). Without it the proxy
   * route is not served.
   */
  runtimeByName?: (tenantId: string, name: string) => Promise<ProxiedRuntime | undefined>;
  /**
   * Called before a request goes to the tenant's hosted runtime (not for a relayed one, which the
   * relaying replica checked): records the activity and wakes a sleeping runtime, waiting for it
   * within a bound, or throws (503 TENANT_WAKING). provisioner/sleep/service.ts.
   */
  beforeHosted?: (request: FastifyRequest, tenantId: string) => Promise<void>;
  /** How runtimes registered with `access: ingress` are reached; without it they answer 503 RUNTIME_UNREACHABLE. */
  ingress?: IngressForwarder;
  /**
   * The other provisioner replicas: when the runtime's tunnel is not held here, the request is
   * relayed to the replica that holds it (see relay.ts). Without it, such requests get 503.
   */
  peers?: {
    replicaId: string;
    owner: (tenantId: string) => Promise<TunnelOwner | undefined>;
    /** The replica holding a hybrid runtime's tunnel (the directory's runtimeOwner). */
    runtimeOwner?: (runtimeId: string) => Promise<TunnelOwner | undefined>;
    /** Told of every relay attempt (metrics). */
    onRelay?: (outcome: 'relayed' | 'unreachable') => void;
  };
}

/** Caller headers that never cross into a runtime (the forwarding headers are set by this hop, from the address it trusts). */
const DROP = new Set([
  'host',
  'authorization',
  'cookie',
  REQUEST_TOKEN_HEADER,
  'expect',
  RELAY_HEADER,
  'x-forwarded-for',
  'x-forwarded-host',
  'x-forwarded-proto',
  'x-real-ip',
  'forwarded',
]);

/**
 * A runtime's response headers that reach the caller: content and caching headers, and the
 * runtime's own `x-` headers. Never cookies (the control plane's origin is not the runtime's),
 * CORS, HSTS or security policies (the API sets its own), nor the headers a proxy in front of the
 * API acts on (`X-Accel-*`: ingress-nginx serves the file or location `X-Accel-Redirect` names;
 * `X-Sendfile`). `Location` only as a path on the runtime's own route (locationOn).
 */
const RESPONSE_HEADERS = new Set([
  'content-type',
  'content-length',
  'content-encoding',
  'content-language',
  'content-range',
  'content-disposition',
  'accept-ranges',
  'cache-control',
  'etag',
  'last-modified',
  'expires',
  'vary',
  'retry-after',
  'date',
]);
const NEVER_X = /^x-(forwarded-|frame-options|xss-protection|content-type-options|accel-|sendfile|lighttpd-send-file)/;

/** A dot segment, plain or percent-encoded, that a browser resolves upwards. */
const DOT_SEGMENT = /(?:^|\/)(?:\.|%2e){1,2}(?:[/?#]|$)/i;

/**
 * A `Location` a forwarded answer may carry: an absolute path (no scheme, host or `//`, no dot
 * segments, no backslash or control character), under `base` (the route the answer came through:
 * `/v1/tenants/:id/runtime`); a path outside it is taken as the runtime's own path and put under
 * it. Anything else is dropped (undefined): a runtime cannot send a caller elsewhere.
 */
export function locationOn(value: string, base: string): string | undefined {
  // eslint-disable-next-line no-control-regex -- refusing control characters is the point
  if (!value.startsWith('/') || value.startsWith('//') || /[\\\u0000-\u0020\u007f]/.test(value)) return undefined;
  if (DOT_SEGMENT.test(value)) return undefined;
  return value === base || value.startsWith(`${base}/`) || value.startsWith(`${base}?`) ? value : `${base}${value}`;
}
/** Content types the API origin serves as they are; anything else (HTML, SVG, XML, scripts) is served as a download. */
const SAFE_TYPES =
  /^(application\/([\w.+-]+\+)?json|application\/(octet-stream|x-ndjson|yaml|x-yaml|gzip|zip|x-tar|grpc(\+proto)?|protobuf|x-protobuf)|text\/(plain|event-stream|csv)|image\/(png|jpeg|gif|webp))\s*(;|$)/i;

export function runtimeResponseHeaders(headers: OutgoingHttpHeaders, base: string): OutgoingHttpHeaders {
  const out: OutgoingHttpHeaders = {};
  for (const [name, value] of Object.entries(headers)) {
    const key = name.toLowerCase();
    if (key === 'location') {
      const location = typeof value === 'string' ? locationOn(value, base) : undefined;
      if (location !== undefined) out.location = location;
      continue;
    }
    if (value === undefined || !(RESPONSE_HEADERS.has(key) || (key.startsWith('x-') && !NEVER_X.test(key)))) continue;
    out[key] = value;
  }
  const type = out['content-type'];
  if (type !== undefined && !SAFE_TYPES.test(String(type))) {
    out['content-type'] = 'application/octet-stream';
    out['content-disposition'] = 'attachment';
  }
  return out;
}

const UUID = '^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$';
/** A runtime's name (the runtimes routes' DnsLabel). */
const RUNTIME_NAME = '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$';
const METHODS = ['DELETE', 'GET', 'HEAD', 'PATCH', 'POST', 'PUT', 'OPTIONS'];

/**
 * The runtime-side path: everything after the route's base in the raw (undecoded) URL; `segments`
 * is the number of the base's segments (4: /v1/tenants/:id/runtime; 6: /v1/tenants/:id/runtimes/:name/proxy).
 */
export function runtimePath(rawUrl: string, segments = 4): string {
  const q = rawUrl.indexOf('?');
  const pathname = q === -1 ? rawUrl : rawUrl.slice(0, q);
  const query = q === -1 ? '' : rawUrl.slice(q);
  let idx = -1;
  for (let i = 0; i <= segments; i++) {
    idx = pathname.indexOf('/', idx + 1);
    if (idx === -1) break;
  }
  const rest = idx === -1 ? '/' : pathname.slice(idx);
  return (rest === '' ? '/' : rest) + query;
}

/** 413 naming the limit (PAYLOAD_TOO_LARGE, as for the provisioner's own JSON bodies). */
export function requestBodyTooLarge(limit: number, declared?: number): AppError {
  const size = declared === undefined ? 'request body is' : `request body of ${declared} bytes is`;
  return errors.payloadTooLarge(
    `${size} larger than the limit of ${limit} bytes for requests forwarded to a runtime`,
    limit,
  );
}

class BodyTooLarge extends Error {}

/** Passes `body` through, failing it as soon as more than `limit` bytes have gone by. */
function limitBody(body: Readable, limit: number): Readable {
  let seen = 0;
  const counter = new Transform({
    transform(chunk: Buffer, _enc, cb) {
      seen += chunk.length;
      if (seen > limit) cb(new BodyTooLarge(`request body is larger than the limit of ${limit} bytes`));
      else cb(null, chunk);
    },
  });
  body.on('error', (err) => counter.destroy(err));
  return body.pipe(counter);
}

export function appErrorFromTunnel(err: TunnelError): AppError {
  if (err.code === 'RUNTIME_UNREACHABLE') return errors.runtimeUnreachable(err.message);
  return new AppError(err.code, err.message, { cause: err });
}

/** Where a request goes, resolved by its route. */
interface ForwardTarget {
  tenantId: string;
  /** A hybrid runtime (none: the tenant's hosted runtime). */
  runtime?: { id: string; name: string };
  /** The route's base path: what the runtime path follows, and where a Location is put under. */
  base: string;
  /** Number of segments of `base` (runtimePath). */
  segments: number;
  /** Put before the runtime path (the router's route for it: `/argo-cd` for Argo CD's API server). */
  prefix?: string;
  /** Whether this replica can serve it without a relay (holds the tunnel; an ingress runtime: always). */
  servedHere: () => boolean;
  /** The replica holding the tunnel, when another one does. */
  owner: () => Promise<TunnelOwner | undefined>;
  forward: (
    request: ForwardRequest & { signal: AbortSignal },
  ) => Promise<{ status: number; headers: HeaderList; body: Readable }>;
}

export const tunnelRoutes: FastifyPluginAsync<TunnelRouteOptions> = async (app, opts) => {
  app.removeAllContentTypeParsers();
  // Leave every body unread: the handler streams request.raw itself.
  app.addContentTypeParser('*', (_request, _payload, done) => done(null));

  const checkTenant = async (request: FastifyRequest, tenantId: string): Promise<void> => {
    if (!(await opts.canAccessTenant(request, tenantId))) throw errors.notFound('tenant', tenantId);
  };

  const beforeHosted = async (request: FastifyRequest, tenantId: string): Promise<void> => {
    if (opts.beforeHosted && request.raw.headers[RELAY_HEADER] === undefined)
      await opts.beforeHosted(request, tenantId);
  };

  /** The tenant's hosted runtime, through the tenant's tunnel. */
  const hostedTarget = (tenantId: string, base: string, segments: number, prefix?: string): ForwardTarget => ({
    tenantId,
    base,
    segments,
    ...(prefix ? { prefix } : {}),
    servedHere: () => opts.tunnel.accepting && opts.tunnel.status(tenantId).connected,
    owner: async () => opts.peers?.owner(tenantId),
    forward: (request) => opts.tunnel.forward(tenantId, request),
  });

  /** One forwarder for every target: limits, header rules, relay, audit, response filtering. */
  const forwardTo = async (request: FastifyRequest, reply: FastifyReply, target: ForwardTarget) => {
    const { tenantId } = target;
    const raw = request.raw;
    // The server refuses most such targets before routing (request-target-rules.ts); checked here
    // too, as this path is passed on and this plugin may be served without that check.
    const targetProblem = requestTargetProblem(raw.url ?? '') ?? proxiedPathProblem(raw.url ?? '');
    if (targetProblem !== undefined) throw errors.badRequest(400, targetProblem);
    /** Path and query as the runtime sees them: what follows the route's base in the request target. */
    const path = runtimePath(raw.url ?? '/', target.segments);
    const hasBody =
      (raw.headers['content-length'] !== undefined && raw.headers['content-length'] !== '0') ||
      raw.headers['transfer-encoding'] !== undefined;
    const limit = opts.tunnel.limits.maxRequestBodyBytes;
    const declared = raw.headers['content-length'] === undefined ? undefined : Number(raw.headers['content-length']);
    if (limit > 0 && declared !== undefined && declared > limit) {
      // The body is never read: close the connection rather than drain it.
      reply.header('connection', 'close');
      throw requestBodyTooLarge(limit, declared);
    }
    // A declared length is enforced by Node's parser; a chunked body is counted as it streams.
    const body = !hasBody ? null : limit > 0 && declared === undefined ? limitBody(raw, limit) : raw;
    const aborter = new AbortController();
    reply.raw.once('close', () => {
      if (!reply.raw.writableFinished) aborter.abort();
    });
    const logged = { tenantId, ...(target.runtime ? { runtime: target.runtime.name } : {}) };
    /** Rethrows a failure before the response head, as 413 when the body outgrew the limit. */
    const failed = (err: unknown): never => {
      if (body !== null && body !== raw && body.errored instanceof BodyTooLarge) {
        reply.header('connection', 'close');
        throw requestBodyTooLarge(limit);
      }
      throw err instanceof TunnelError ? appErrorFromTunnel(err) : err;
    };
    /** Streams the runtime's answer back; a break mid-body cannot change the status any more. */
    const answer = (status: number, headers: OutgoingHttpHeaders, resBody: Readable, via?: string) => {
      reply.code(status);
      reply.headers(runtimeResponseHeaders(headers, target.base));
      resBody.on('error', (err) =>
        request.log.warn(
          { err: err.message, ...logged, ...(via ? { replica: via } : {}) },
          'runtime response broke off',
        ),
      );
      return reply.send(resBody);
    };

    // Held by another replica: relay there (once; a relayed request is served here or not at all).
    // (While this replica shuts down, its tunnels drain: a runtime that reconnected elsewhere is relayed to.)
    if (opts.peers && (!opts.tunnel.accepting || !target.servedHere()) && raw.headers[RELAY_HEADER] === undefined) {
      const owner = await target.owner();
      if (owner) {
        // Never the query (it may hold a caller's secret), never a header; reads at debug level,
        // as the request log writes them.
        const level = request.method === 'GET' || request.method === 'HEAD' ? 'debug' : 'info';
        request.log[level](
          {
            ...logged,
            replica: owner.replicaId,
            method: request.method,
            path: path.split('?', 1)[0],
            action: runtimeActionOf(request.method, path)?.auditAction,
          },
          'request relayed to the replica holding the tunnel',
        );
        const res = await relayToReplica({
          owner,
          tenantId,
          replicaId: opts.peers.replicaId,
          raw,
          // Rebuilt from the route's validated parameters, never the request target as it came.
          path: `${target.base}${path}`,
          body,
          requestId: request.id,
          timeoutMs: opts.tunnel.limits.requestTimeoutMs + 5000,
          idleTimeoutMs: opts.tunnel.limits.idleTimeoutMs + 5000,
          signal: aborter.signal,
        }).catch((err: unknown) => {
          opts.peers?.onRelay?.('unreachable');
          return failed(err);
        });
        opts.peers.onRelay?.('relayed');
        return answer(res.status, res.headers, res.body, owner.replicaId);
      }
    }
    const headers = headerListFrom(raw.rawHeaders, DROP);
    headers.push(['x-request-id', request.id]);
    headers.push(['x-forwarded-for', request.ip]);
    const subject = opts.subjectOf?.(request);
    /** The path the runtime's request router is asked for. */
    const routed = `${target.prefix ?? ''}${path}`;
    const action = opts.auditAction ? runtimeActionOf(request.method, routed) : undefined;
    const finish =
      action && opts.auditAction ? await opts.auditAction(request, tenantId, action, target.runtime?.name) : undefined;
    const record = async (outcome: { status: number; error?: string }): Promise<void> => {
      if (!finish) return;
      // The action has happened (or not) whatever the database says now: answer anyway.
      await finish(outcome).catch((err: unknown) =>
        request.log.error(
          { err, ...logged, action: action?.auditAction },
          'could not record the outcome of a runtime action',
        ),
      );
    };
    const res = await target
      .forward({
        method: request.method,
        path: routed,
        headers,
        body,
        signal: aborter.signal,
        ...(subject !== undefined ? { subject } : {}),
      })
      .catch(async (err: unknown) => {
        try {
          return failed(err);
        } catch (mapped) {
          if (mapped instanceof AppError) await record({ status: mapped.statusCode, error: mapped.code });
          throw mapped;
        }
      });
    await record({ status: res.status });
    return answer(res.status, headersObject(res.headers), res.body);
  };

  // The tenant's hosted runtime (its request router's whole surface), and the tenant's `argoCdUrl`:
  // its Argo CD API server through the router's `/argo-cd/*`. Argo CD's own authentication applies
  // there; the caller's credentials for this API never reach it.
  for (const [segment, prefix] of [
    ['runtime', undefined],
    ['argo-cd', '/argo-cd'],
  ] as const) {
    app.route<{ Params: { id: string } }>({
      method: METHODS,
      url: `/v1/tenants/:id/${segment}/*`,
      ...(opts.routeConfig ? { config: opts.routeConfig } : {}),
      schema: {
        params: {
          type: 'object',
          properties: { id: { type: 'string', pattern: UUID }, '*': { type: 'string' } },
          required: ['id'],
        },
      },
      handler: async (request, reply) => {
        const tenantId = request.params.id;
        await checkTenant(request, tenantId);
        await beforeHosted(request, tenantId);
        return forwardTo(request, reply, hostedTarget(tenantId, `/v1/tenants/${tenantId}/${segment}`, 4, prefix));
      },
    });
  }

  const runtimeByName = opts.runtimeByName;
  if (!runtimeByName) return;
  app.route<{ Params: { id: string; name: string } }>({
    method: METHODS,
    url: '/v1/tenants/:id/runtimes/:name/proxy/*',
    ...(opts.routeConfig ? { config: opts.routeConfig } : {}),
    schema: {
      params: {
        type: 'object',
        properties: {
          id: { type: 'string', pattern: UUID },
          name: { type: 'string', minLength: 1, maxLength: 40, pattern: RUNTIME_NAME },
          '*': { type: 'string' },
        },
        required: ['id', 'name'],
      },
    },
    handler: async (request, reply) => {
      const { id: tenantId, name } = request.params;
      await checkTenant(request, tenantId);
      const base = `/v1/tenants/${tenantId}/runtimes/${name}/proxy`;
      const runtime = await runtimeByName(tenantId, name);
      if (!runtime) throw errors.notFound('runtime', name);
      if (runtime.mode === 'hosted') {
        await beforeHosted(request, tenantId);
        return forwardTo(request, reply, hostedTarget(tenantId, base, 6));
      }
      if (runtime.state !== 'installed')
        throw new AppError(
          'RUNTIME_NOT_INSTALLED',
          `runtime '${name}' is not installed yet: apply its install bundle in your cluster (its bootstrap Job exchanges the token); requests reach it once its agents are running`,
        );
      const hybrid = { id: runtime.id, name: runtime.name };
      if (runtime.access === 'ingress') {
        const ingress = opts.ingress;
        const ingressUrl = runtime.ingressUrl;
        return forwardTo(request, reply, {
          tenantId,
          runtime: hybrid,
          base,
          segments: 6,
          // Every replica calls the customer's ingress itself: never relayed.
          servedHere: () => true,
          owner: async () => undefined,
          forward: async (r) => {
            if (!ingress || ingressUrl === null)
              throw errors.runtimeUnreachable(
                `runtime '${name}' is reached through its ingress, which this control plane is not configured to call; ask the operator`,
              );
            return ingress.forward({ tenantId, runtimeId: runtime.id, ingressUrl, ...r });
          },
        });
      }
      return forwardTo(request, reply, {
        tenantId,
        runtime: hybrid,
        base,
        segments: 6,
        servedHere: () => opts.tunnel.accepting && opts.tunnel.runtimeStatus(runtime.id).connected,
        owner: async () => opts.peers?.runtimeOwner?.(runtime.id),
        forward: (r) =>
          opts.tunnel.forwardRuntime(tenantId, runtime.id, r).catch((err: unknown) => {
            // Name the runtime as the caller knows it.
            if (err instanceof TunnelError && err.code === 'RUNTIME_UNREACHABLE')
              throw new TunnelError(
                'RUNTIME_UNREACHABLE',
                `runtime '${name}' is not connected to the control plane: its tunnel client may be starting, or check the tunnel-client Deployment in its cluster; retry later`,
                err,
              );
            throw err;
          }),
      });
    },
  });
};
