/**
 * The one error handler: AppErrors keep their code and status; fastify's own 4xx errors
 * (validation, content type, body size, JSON syntax) become AppErrors that name the field; a
 * database that cannot be reached is 503 DATABASE_UNAVAILABLE; everything else is a 500 whose
 * body says nothing about internals. Every 503 carries Retry-After and is logged as a warning
 * without a stack, at most one line per code every few seconds (an outage is one condition, not
 * an error per request).
 */
import { randomUUID } from 'node:crypto';
import http from 'node:http';
import type { Socket } from 'node:net';
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { DATABASE_RETRY_AFTER_SECONDS, isConnectionError, type DatabaseHealth } from '../db/availability.ts';
import { AppError, errors, isAppError, quoted, type ErrorCode } from '../errors.ts';
import { RateLimitedLog } from '../logger.ts';
import { PATTERN_MEANINGS } from '../api/schemas.ts';
import { API_CSP } from './security-headers.ts';

/** Retry-After of each 503 code (seconds); others get DEFAULT_RETRY_AFTER_SECONDS. */
const RETRY_AFTER: Partial<Record<ErrorCode, number>> = { DATABASE_UNAVAILABLE: DATABASE_RETRY_AFTER_SECONDS };
const DEFAULT_RETRY_AFTER_SECONDS = 5;
/** One warning per 503 code in this window; the next one says how many were left out. */
const UNAVAILABLE_LOG_WINDOW_MS = 10_000;

interface AjvError {
  instancePath?: string;
  keyword?: string;
  message?: string;
  params?: Record<string, unknown>;
}

/** `idempotency-key` → `Idempotency-Key`, as the API documents headers. */
const headerName = (name: string) =>
  name.replace(/(^|-)([a-z])/g, (_m, dash: string, c: string) => dash + c.toUpperCase());

function fieldOf(e: AjvError, context: string | undefined): string | undefined {
  const path = (e.instancePath ?? '').split('/').filter(Boolean).join('.');
  const missing = e.params?.missingProperty ?? e.params?.additionalProperty ?? e.params?.propertyName;
  const name = [path, typeof missing === 'string' ? missing : ''].filter(Boolean).join('.');
  if (name) return context === 'headers' ? headerName(name) : name;
  return context === 'body' ? 'body' : undefined;
}

function describe(e: AjvError, field: string | undefined): string {
  const where = field ? `'${field}'` : 'request';
  switch (e.keyword) {
    case 'additionalProperties':
      return `${where} is not a known field`;
    case 'required':
      return `${where} is required`;
    case 'enum':
      return `${where} must be one of: ${(e.params?.allowedValues as unknown[] | undefined)?.join(', ') ?? '?'}`;
    case 'format':
      return `${where} must be a valid ${String(e.params?.format)}`;
    case 'pattern':
      return `${where} ${PATTERN_MEANINGS[String(e.params?.pattern)] ?? 'has an invalid format'}`;
    case 'propertyNames':
      return `${where} has a key that is not allowed (keys: 1 to 63 characters, no control characters)`;
    default:
      return `${where} ${e.message ?? 'is invalid'}`;
  }
}

/** Statuses of errors from fastify, its plugins and Node's parser, and the code each answers with. */
const STATUS_CODES: Partial<Record<number, ErrorCode>> = {
  403: 'ROUTE_NOT_FOUND',
  404: 'ROUTE_NOT_FOUND',
  405: 'METHOD_NOT_ALLOWED',
  408: 'REQUEST_TIMEOUT',
  414: 'URI_TOO_LONG',
  431: 'REQUEST_HEADERS_TOO_LARGE',
};

export function toAppError(
  err: FastifyError & { validation?: AjvError[]; validationContext?: string },
  request?: FastifyRequest,
): AppError {
  if (isAppError(err)) return err;
  if (err.validation && err.validation.length > 0) {
    const first = err.validation[0]!;
    const field = fieldOf(first, err.validationContext);
    return errors.validation(describe(first, field), field);
  }
  switch (err.code) {
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
      return errors.unsupportedMediaType(quoted(request?.headers['content-type'] ?? '(none)'));
    case 'FST_ERR_MAX_PARAM_LENGTH':
      return new AppError('URI_TOO_LONG', 'a path parameter is longer than 256 characters');
    case 'FST_ERR_BAD_URL':
      return errors.badRequest(400, 'the URL is not valid (bad percent-encoding)');
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return errors.payloadTooLarge();
    case 'FST_ERR_CTP_EMPTY_JSON_BODY':
      return errors.invalidJson("body is empty but content-type is 'application/json': send a JSON object");
    case 'FST_ERR_CTP_INVALID_JSON_BODY':
      return errors.invalidJson('body is not valid JSON');
    case 'FST_ERR_CTP_INVALID_CONTENT_LENGTH':
      return errors.invalidContentLength();
    default:
  }
  if (isConnectionError(err)) return errors.databaseUnavailable(DATABASE_RETRY_AFTER_SECONDS, err);
  if (err instanceof SyntaxError && err.statusCode === 400) return errors.invalidJson('body is not valid JSON');
  if (typeof err.statusCode === 'number' && err.statusCode >= 400 && err.statusCode < 500) {
    if (err.statusCode === 429) return new AppError('RATE_LIMITED', err.message);
    const code = STATUS_CODES[err.statusCode];
    if (code === 'ROUTE_NOT_FOUND') return new AppError(code, 'not found');
    if (code) return new AppError(code, err.message);
    return errors.badRequest(err.statusCode, err.message);
  }
  return errors.internal(err);
}

export function installErrorHandler(app: FastifyInstance, opts: { health?: DatabaseHealth } = {}): void {
  const unavailableLog = new RateLimitedLog(UNAVAILABLE_LOG_WINDOW_MS);
  app.setErrorHandler((raw: FastifyError, request: FastifyRequest, reply: FastifyReply) => {
    // No route matched: whatever fastify found wrong with the request on its way to the 404
    // handler (a QUERY without Content-Type, a body it cannot parse), the answer is the 404 or 405.
    if (request.is404) return notFound(request, reply);
    const err = toAppError(raw, request);
    if (err.code === 'DATABASE_UNAVAILABLE') opts.health?.down(err.cause ?? raw);
    const retryAfter = err.details?.retryAfterSeconds;
    if (
      (err.statusCode === 429 || err.statusCode === 503) &&
      typeof retryAfter === 'number' &&
      !reply.hasHeader('retry-after')
    )
      reply.header('retry-after', String(retryAfter));
    if (err.statusCode === 503) {
      if (!reply.hasHeader('retry-after'))
        reply.header('retry-after', String(RETRY_AFTER[err.code] ?? DEFAULT_RETRY_AFTER_SECONDS));
      unavailableLog.maybe(err.code, (suppressed) =>
        request.log.warn(
          { code: err.code, url: request.routeOptions.url, ...(suppressed > 0 ? { suppressed } : {}) },
          suppressed > 0
            ? `${err.message} (and ${suppressed} more like it in the last ${UNAVAILABLE_LOG_WINDOW_MS / 1000} s)`
            : err.message,
        ),
      );
    } else if (err.statusCode >= 500) request.log.error({ err: raw }, 'request failed');
    else request.log.info({ code: err.code, field: err.field }, err.message);
    return reply.status(err.statusCode).send({
      error: {
        code: err.code,
        message: err.message,
        ...(err.field ? { field: err.field } : {}),
        ...(err.details ? { details: err.details } : {}),
        requestId: request.id,
      },
    });
  });
  // Every route's path as a pattern, with its methods: a path that exists with other methods is a 405.
  const paths = new Map<string, { pattern: RegExp; methods: Set<string> }>();
  app.addHook('onRoute', (route) => {
    const entry = paths.get(route.url) ?? { pattern: pathPattern(route.url), methods: new Set<string>() };
    for (const m of [route.method].flat()) entry.methods.add(m);
    paths.set(route.url, entry);
  });
  // A path that is a route of its own (GET /v1/tenants/summary) is matched by a parametric route
  // of another method only by its shape (PATCH /v1/tenants/:id with id "summary"): a 405 too.
  app.addHook('onRequest', async (request, reply) => {
    const matched = request.routeOptions.url;
    if (!matched?.includes(':')) return;
    const own = paths.get(request.url.split('?')[0]!);
    if (!own || own.methods.has(request.method)) return;
    const allowed = [...own.methods].sort();
    const err = errors.methodNotAllowed(request.method, allowed);
    return reply
      .status(err.statusCode)
      .header('allow', allowed.join(', '))
      .send({ error: { code: err.code, message: err.message, requestId: request.id } });
  });
  const notFound = (request: FastifyRequest, reply: FastifyReply) => {
    const path = request.url.split('?')[0]!;
    // A path that is a route of its own has its own methods, not those of parametric routes its
    // shape also matches (/v1/tenants/summary is not /v1/tenants/:id).
    const own = paths.get(path);
    const allowed = new Set<string>(own?.methods ?? []);
    if (!own)
      for (const { pattern, methods } of paths.values())
        if (pattern.test(path)) for (const m of methods) allowed.add(m);
    // A route of this method that found nothing (a file under /docs) is a 404 like any other.
    if (allowed.has(request.method)) allowed.clear();
    const err =
      allowed.size > 0
        ? errors.methodNotAllowed(request.method, [...allowed].sort())
        : errors.routeNotFound(request.method, quoted(path));
    if (allowed.size > 0) reply.header('allow', [...allowed].sort().join(', '));
    return reply
      .status(err.statusCode)
      .send({ error: { code: err.code, message: err.message, requestId: request.id } });
  };
  app.setNotFoundHandler(notFound);
}

/** `/v1/tenants/:id/runtime/*` → a RegExp matching the paths the router sends there. */
function pathPattern(url: string): RegExp {
  const source = url
    .split('/')
    .map((seg) => (seg === '*' ? '.*' : seg.startsWith(':') ? '[^/]+' : seg.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')))
    .join('/');
  return new RegExp(`^${source}$`);
}

/**
 * The answer to errors fastify raises before a route is found (fastify's `frameworkErrors`): a
 * path parameter over the router's length limit (414) or a URL that is not valid percent-encoding
 * (400), in the API's error shape, never echoing the path.
 */
export function frameworkErrorHandler(err: FastifyError, request: FastifyRequest, reply: FastifyReply): void {
  const e = toAppError(err, request);
  void reply.status(e.statusCode).send({ error: { code: e.code, message: e.message, requestId: request.id } });
}

/** Node's parser errors (fastify's `clientErrorHandler`), each the status and code of its answer. */
function clientErrorOf(err: NodeJS.ErrnoException): AppError {
  switch (err.code) {
    case 'ERR_HTTP_REQUEST_TIMEOUT':
      return new AppError('REQUEST_TIMEOUT', 'the request did not arrive in time');
    case 'HPE_HEADER_OVERFLOW':
      return new AppError('REQUEST_HEADERS_TOO_LARGE', 'the request line and headers are larger than 16 KiB');
    case 'HPE_UNEXPECTED_CONTENT_LENGTH':
    case 'HPE_INVALID_TRANSFER_ENCODING':
      if (/Content-Length/i.test(err.message))
        return errors.badRequest(400, 'a request may not have both Content-Length and Transfer-Encoding');
      return errors.badRequest(400, 'the Transfer-Encoding is not valid');
    case 'HPE_INVALID_CONTENT_LENGTH':
      return errors.invalidContentLength();
    default: {
      // llhttp's reasons are fixed texts, never the request's bytes.
      const reason = (err as { reason?: unknown }).reason;
      return errors.badRequest(
        400,
        `the request is not valid HTTP/1.1${typeof reason === 'string' ? `: ${quoted(reason)}` : ''}`,
      );
    }
  }
}

/**
 * Writes the answer to a request Node's HTTP parser refused (before fastify sees it: a header
 * over the limit, both Content-Length and Transfer-Encoding, a timeout, malformed HTTP) in the
 * API's error shape, then closes the connection. A reset connection gets nothing.
 */
export function clientErrorHandler(err: NodeJS.ErrnoException, socket: Socket): void {
  if (err.code === 'ECONNRESET' || socket.destroyed) return;
  const e = clientErrorOf(err);
  if (socket.writable) {
    const body = JSON.stringify({ error: { code: e.code, message: e.message, requestId: randomUUID() } });
    socket.write(
      `HTTP/1.1 ${e.statusCode} ${http.STATUS_CODES[e.statusCode] ?? 'Error'}\r\n` +
        `content-type: application/json; charset=utf-8\r\ncontent-length: ${Buffer.byteLength(body)}\r\n` +
        `x-content-type-options: nosniff\r\ncontent-security-policy: ${API_CSP}\r\nconnection: close\r\n\r\n${body}`,
    );
  }
  socket.destroy();
}
