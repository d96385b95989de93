/**
 * One error type for the whole provisioner. Every failure a client can see has a stable `code`,
 * an HTTP status and a message that says what was wrong and what to do; `field` names the input
 * at fault where there is one. 5xx details stay in the logs (see http/error-handler.ts).
 */
export class AppError extends Error {
  readonly code: string;
  readonly statusCode: number;
  readonly field: string | undefined;
  readonly details: Record<string, unknown> | undefined;

  constructor(
    code: string,
    statusCode: number,
    message: string,
    opts: { field?: string; details?: Record<string, unknown>; cause?: unknown } = {},
  ) {
    super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.name = 'AppError';
    this.code = code;
    this.statusCode = statusCode;
    this.field = opts.field;
    this.details = opts.details;
  }
}

type Opts = { field?: string; details?: Record<string, unknown>; cause?: unknown };

/** Factories, one per stable code. The code strings are part of the public API: never rename. */
export const errors = {
  validation: (message: string, field?: string, details?: Record<string, unknown>) =>
    new AppError('VALIDATION_FAILED', 400, message, { ...(field ? { field } : {}), ...(details ? { details } : {}) }),
  invalidJson: (message: string) => new AppError('INVALID_JSON', 400, message),
  unsupportedMediaType: (type: string) =>
    new AppError('UNSUPPORTED_MEDIA_TYPE', 415, `content type '${type}' is not supported: send application/json`),
  payloadTooLarge: (limit: number) =>
    new AppError('PAYLOAD_TOO_LARGE', 413, `request body is larger than the limit of ${limit} bytes`),
  invalidCursor: () =>
    new AppError('INVALID_CURSOR', 400, 'cursor is not valid: pass back the nextCursor value from a previous page unchanged', { field: 'cursor' }),
  unauthenticated: (message = 'missing or malformed Authorization header: send "Authorization: Bearer <api key>"') =>
    new AppError('UNAUTHENTICATED', 401, message),
  invalidKey: () => new AppError('INVALID_API_KEY', 401, 'API key is not valid or has been revoked'),
  forbidden: (message: string) => new AppError('FORBIDDEN', 403, message),
  notFound: (what: string, id: string) => new AppError(`${what.toUpperCase().replace(/[^A-Z]+/g, '_')}_NOT_FOUND`, 404, `${what} '${id}' was not found`),
  routeNotFound: (method: string, url: string) => new AppError('ROUTE_NOT_FOUND', 404, `no route ${method} ${url}`),
  conflict: (code: string, message: string, opts: Opts = {}) => new AppError(code, 409, message, opts),
  tenantDeleted: (id: string) =>
    new AppError('TENANT_DELETED', 409, `tenant '${id}' has been deleted; only reads are allowed on a deleted tenant`),
  organizationTaken: (org: string) =>
    new AppError('ORGANIZATION_TAKEN', 409, `organization '${org}' is already registered`, { field: 'organization' }),
  idempotencyMismatch: () =>
    new AppError('IDEMPOTENCY_KEY_REUSED', 409, 'Idempotency-Key was already used with a different request body; use a new key for a new request', { field: 'Idempotency-Key' }),
  idempotencyInProgress: () =>
    new AppError('IDEMPOTENCY_KEY_IN_PROGRESS', 409, 'a request with this Idempotency-Key is still being processed; retry shortly', { field: 'Idempotency-Key' }),
  unknownRegion: (region: string, known: readonly string[]) =>
    new AppError('UNKNOWN_REGION', 400, known.length > 0
      ? `region '${region}' has no root cluster; choose one of: ${known.join(', ')}`
      : `region '${region}' has no root cluster (none is registered yet)`, { field: 'region' }),
  unknownPlan: (plan: string, known: readonly string[]) =>
    new AppError('UNKNOWN_PLAN', 400, `plan '${plan}' does not exist; choose one of: ${known.join(', ')}`, { field: 'plan' }),
  unknownVersion: (version: string, field = 'runtimeVersion') =>
    new AppError('UNKNOWN_RUNTIME_VERSION', 400, `runtime version '${version}' is not in the catalog (GET /v1/runtime-versions lists them)`, { field }),
  versionUnavailable: (version: string, availability: string, field = 'runtimeVersion') =>
    new AppError('RUNTIME_VERSION_UNAVAILABLE', 422, `runtime version '${version}' is ${availability} and cannot be installed`, { field }),
  upgradeRefused: (message: string, path: readonly string[], field = 'version') =>
    new AppError('UPGRADE_PATH_REFUSED', 422, message, { field, details: { path } }),
  rateLimited: (retryAfterSeconds: number) =>
    new AppError('RATE_LIMITED', 429, `too many requests; retry in ${retryAfterSeconds} s`),
  unavailable: (code: string, message: string) => new AppError(code, 503, message),
  internal: (cause?: unknown) => new AppError('INTERNAL', 500, 'internal error', { cause }),
};

export function isAppError(err: unknown): err is AppError {
  return err instanceof AppError;
}
