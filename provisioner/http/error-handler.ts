/**
 * The one error handler: AppErrors keep their code and status; fastify's own 4xx errors
 * (validation, content type, body size, JSON syntax) become AppErrors that name the field;
 * everything else is a 500 whose body says nothing about internals.
 */
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { AppError, errors, isAppError } from '../errors.ts';

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
  if (err instanceof SyntaxError && err.statusCode === 400) return errors.invalidJson('body is not valid JSON');
  if (typeof err.statusCode === 'number' && err.statusCode >= 400 && err.statusCode < 500) {
    if (err.statusCode === 429) return new AppError('RATE_LIMITED', err.message);
    return errors.badRequest(err.statusCode, err.message);
  }
  return errors.internal(err);
}

export function installErrorHandler(app: FastifyInstance): void {
  app.setErrorHandler((raw: FastifyError, request: FastifyRequest, reply: FastifyReply) => {
    const err = toAppError(raw);
    if (err.statusCode >= 500) request.log.error({ err: raw }, 'request failed');
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
    return reply.status(err.statusCode).send({ error: { code: err.code, message: err.message, requestId: request.id } });
  });
}
