/**
 * The one error handler: AppErrors keep their code and status; fastify's own 4xx errors
 * (validation, content type, body size, JSON syntax) become AppErrors that name the field; a
 * database that cannot be reached is 503 DATABASE_UNAVAILABLE; everything else is a 500 whose
 * body says nothing about internals. Every 503 carries Retry-After and is logged as a warning
 * without a stack, at most one line per code every few seconds (an outage is one condition, not
 * an error per request).
 */
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { DATABASE_RETRY_AFTER_SECONDS, isConnectionError, type DatabaseHealth } from '../db/availability.ts';
import { AppError, errors, isAppError, type ErrorCode } from '../errors.ts';
import { RateLimitedLog } from '../logger.ts';

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

function fieldOf(e: AjvError, context: string | undefined): string | undefined {
  const path = (e.instancePath ?? '').split('/').filter(Boolean).join('.');
  const missing = e.params?.missingProperty ?? e.params?.additionalProperty;
  const name = [path, typeof missing === 'string' ? missing : ''].filter(Boolean).join('.');
  if (name) return name;
  return context === 'body' ? 'body' : context;
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
      return `${where} has an invalid format`;
    default:
      return `${where} ${e.message ?? 'is invalid'}`;
  }
}

export function toAppError(err: FastifyError & { validation?: AjvError[]; validationContext?: string }): AppError {
  if (isAppError(err)) return err;
  if (err.validation && err.validation.length > 0) {
    const first = err.validation[0]!;
    const ctx = err.validationContext;
    const field = fieldOf(first, ctx === 'querystring' || ctx === 'params' || ctx === 'headers' ? undefined : ctx);
    return errors.validation(describe(first, field), field);
  }
  switch (err.code) {
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
      return errors.unsupportedMediaType(String(err.message.split(': ').at(-1) ?? ''));
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
    return errors.badRequest(err.statusCode, err.message);
  }
  return errors.internal(err);
}

export function installErrorHandler(app: FastifyInstance, opts: { health?: DatabaseHealth } = {}): void {
  const unavailableLog = new RateLimitedLog(UNAVAILABLE_LOG_WINDOW_MS);
  app.setErrorHandler((raw: FastifyError, request: FastifyRequest, reply: FastifyReply) => {
    const err = toAppError(raw);
    if (err.code === 'DATABASE_UNAVAILABLE') opts.health?.down(err.cause ?? raw);
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
  app.setNotFoundHandler((request, reply) => {
    const err = errors.routeNotFound(request.method, request.url.split('?')[0]!);
    return reply
      .status(err.statusCode)
      .send({ error: { code: err.code, message: err.message, requestId: request.id } });
  });
}
