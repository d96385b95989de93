/**
 * Every error code the provisioner answers with, in one closed list: each code's HTTP status and
 * when it is used. The codes are part of the public API (docs/api.md lists each; a unit test
 * keeps the two equal): never rename one, add new ones here.
 *
 * One error type for the whole provisioner, AppError, is built from a code of this list (an
 * unknown code does not compile) and takes its status from it. Every failure a client can see has
 * a message that says what was wrong and what to do; `field` names the input at fault where there
 * is one. 5xx details stay in the logs (see http/error-handler.ts).
 */
export const ERROR_CODES = {
  VALIDATION_FAILED: {
    status: 400,
    description: 'a field is missing, unknown, of the wrong type or format (`field` names it)',
  },
  INVALID_JSON: { status: 400, description: 'the body is not JSON (or empty with a JSON content type)' },
  INVALID_CONTENT_LENGTH: { status: 400, description: 'Content-Length does not match the body' },
  INVALID_CURSOR: { status: 400, description: 'a pagination cursor was altered or belongs to another listing' },
  UNKNOWN_PLAN: { status: 400, description: 'the plan does not exist; the message lists those that do' },
  UNKNOWN_RUNTIME_VERSION: {
    status: 400,
    description: 'the runtime version is not in the catalog; the message says where the catalog is',
  },
  UNKNOWN_REGION: {
    status: 400,
    description: 'no root cluster is registered in the region; the message lists those that are',
  },
  BAD_REQUEST: {
    status: 400,
    description: 'another malformed request (the status is the one the HTTP layer reported, 4xx)',
  },
  REQUEST_CANCELLED: { status: 400, description: 'the caller cancelled a request forwarded to a runtime' },
  UNSUPPORTED_TUNNEL_PROTOCOL: {
    status: 400,
    description: 'a tunnel upgrade did not offer the tunnel WebSocket subprotocol',
  },
  UNAUTHENTICATED: { status: 401, description: 'no or malformed `Authorization` header' },
  INVALID_API_KEY: { status: 401, description: 'unknown or revoked key' },
  FORBIDDEN: { status: 403, description: 'the role may not call the route' },
  SUSPENDED_BY_OPERATOR: {
    status: 403,
    description: 'an operator suspended the tenant: only an operator may resume it (the message gives the reason)',
  },
  TENANT_NOT_FOUND: { status: 404, description: 'no such tenant (or one a tenant key may not see)' },
  OPERATION_NOT_FOUND: { status: 404, description: 'no such operation (or one a tenant key may not see)' },
  CLUSTER_NOT_FOUND: { status: 404, description: 'no root cluster of that name' },
  API_KEY_NOT_FOUND: { status: 404, description: 'no API key with that id' },
  MANAGED_CLUSTER_NOT_FOUND: { status: 404, description: 'the tenant has no managed cluster of that name' },
  RUNTIME_NOT_FOUND: { status: 404, description: 'the tenant has no runtime of that name (or it was removed)' },
  INSTALL_NOT_FOUND: {
    status: 404,
    description:
      'no hybrid runtime install at that URL: the token in it is not one this service issued, or its runtime was removed or its tenant deleted',
  },
  RUNTIME_VERSION_NOT_FOUND: { status: 404, description: 'the runtime version is not in the catalog' },
  RUNTIME_OBJECT_NOT_FOUND: {
    status: 404,
    description: "the tenant's runtime did not report that application, rollout or workflow (or it was deleted)",
  },
  FLEET_UPGRADE_NOT_FOUND: { status: 404, description: 'no fleet upgrade with that id' },
  ROUTE_NOT_FOUND: { status: 404, description: 'no route for this path' },
  METHOD_NOT_ALLOWED: {
    status: 405,
    description: 'the path exists but not with this method; `Allow` lists the methods it has',
  },
  REQUEST_TIMEOUT: {
    status: 408,
    description: 'the request (headers and body) did not arrive within `PROVISIONER_REQUEST_TIMEOUT_SECONDS`',
  },
  ORGANIZATION_TAKEN: { status: 409, description: 'a live tenant already has the organization name' },
  CLUSTER_EXISTS: { status: 409, description: 'a root cluster of that name is already registered' },
  CLUSTER_IN_USE: {
    status: 409,
    description: "the change would move a cluster holding tenants to another region (the tenants' region would change)",
  },
  MANAGED_CLUSTER_EXISTS: { status: 409, description: 'the tenant already has a managed cluster of that name' },
  RUNTIME_EXISTS: { status: 409, description: 'the tenant already has a runtime of that name that is not removed' },
  RUNTIME_NOT_INSTALLED: {
    status: 409,
    description:
      "the hybrid runtime is awaiting install: its bundle's bootstrap Job has not exchanged the token yet, so nothing can be forwarded to it, nor can it be upgraded",
  },
  SOURCE_SERVER_NOT_INSTALLED: {
    status: 409,
    description:
      "an application's diff from a runtime without a Source Server (a runtime version before 1.7.0, named in `details.runtimeVersion`): upgrade the runtime",
  },
  RUNTIME_UPGRADE_IN_PROGRESS: {
    status: 409,
    description:
      "the hybrid runtime's in-cluster upgrader is applying an upgrade (it reports within its rollout timeout): ask for another version once it has ended",
  },
  UPGRADE_SUPERSEDED: {
    status: 409,
    description:
      "an in-cluster upgrader's report about an upgrade that is no longer the one asked (another version was asked for since) or has already ended",
  },
  UPGRADE_PHASE_OUT_OF_ORDER: {
    status: 409,
    description:
      "an in-cluster upgrader's report of a phase the upgrade's current phase may not be followed by (pending: applying or failed; applying: succeeded, rolled-back or failed); `details.phase` and `details.allowed` say which",
  },
  UPGRADER_NOT_OPTED_IN: {
    status: 403,
    description:
      'an upgrader call with the key of a runtime that did not opt in to the in-cluster upgrader (`upgrades: customer`), or of the hosted runtime',
  },
  HOSTED_RUNTIME_EXISTS: {
    status: 409,
    description: "a registration asked for `mode: hosted`: a tenant's hosted runtime comes with its signup",
  },
  HOSTED_RUNTIME_NOT_REMOVABLE: {
    status: 409,
    description: 'DELETE of the hosted runtime: it goes with the tenant (DELETE /v1/tenants/:id)',
  },
  HOSTED_RUNTIME_NO_BUNDLE: {
    status: 409,
    description:
      'a bundle or upgrade of the hosted runtime: the control plane installs and upgrades it (POST /v1/tenants/:id/upgrade)',
  },
  HYBRID_RUNTIMES_NOT_CONFIGURED: {
    status: 409,
    description:
      "hybrid runtimes cannot be registered or upgraded: the setting named in `details.setting` (`PROVISIONER_PUBLIC_URL`, the URL customers' clusters reach the control plane at) is not set",
  },
  INSTALL_CHARTS_UNAVAILABLE: {
    status: 409,
    description:
      "an argo=new runtime's install URL: the control plane cannot render the Argo charts (no local chart directory in PROVISIONER_CHART_REPOSITORIES, a chart file or helm missing; the message says which); apply the registration's files and command instead",
  },
  MANAGED_CLUSTER_SERVER_TAKEN: {
    status: 409,
    description: 'the tenant already registered that API server (under the name the message gives)',
  },
  MANAGED_CLUSTER_ISOLATION: {
    status: 403,
    description: "the server is one of the service's root clusters or another tenant's virtual cluster",
  },
  MANAGED_CLUSTER_UNREACHABLE: {
    status: 422,
    description:
      'the managed cluster could not be reached within 10 s, or did not answer as a Kubernetes API server (the message names the network error)',
  },
  MANAGED_CLUSTER_UNAUTHORIZED: {
    status: 422,
    description: "the managed cluster's API server refused the credentials (401)",
  },
  MANAGED_CLUSTER_PERMISSIONS_MISSING: {
    status: 422,
    description:
      'the credentials lack permissions Argo CD needs in the listed namespaces (`details.missing` lists them)',
  },
  BOOTSTRAP_TOKEN_INVALID: {
    status: 401,
    description:
      "the bootstrap token given to redeem is missing or not one this service issued; for a hybrid runtime's bootstrap also an expired or redeemed token or one of a removed runtime (one message for all)",
  },
  BOOTSTRAP_TOKEN_USED: {
    status: 410,
    description:
      "the bootstrap token was already redeemed (single-use); for a hybrid runtime's install URL, the runtime is installed",
  },
  BOOTSTRAP_TOKEN_EXPIRED: {
    status: 410,
    description:
      "the bootstrap token expired (a managed cluster's is valid for an hour at most, a hybrid runtime's for PROVISIONER_HYBRID_BOOTSTRAP_TTL_SECONDS)",
  },
  TENANT_DELETED: { status: 409, description: 'the tenant is deleted; only reads are allowed' },
  IDEMPOTENCY_KEY_REUSED: { status: 409, description: 'the Idempotency-Key was used with another body' },
  IDEMPOTENCY_KEY_IN_PROGRESS: {
    status: 409,
    description: 'a request with the Idempotency-Key is still being processed; retry shortly',
  },
  CANNOT_REVOKE_OWN_KEY: { status: 409, description: 'a key tried to revoke itself' },
  NOTHING_TO_RETRY: {
    status: 409,
    description: 'retry of a tenant that is neither stalled nor failing and has no operation under way',
  },
  NOT_SLEEPABLE: {
    status: 409,
    description:
      'sleep of a tenant that is not a Ready, awake hosted tenant (suspended, asleep already, provisioning, failing, deleted or in a fleet upgrade); the message says which',
  },
  TENANT_IN_FLEET_UPGRADE: {
    status: 409,
    description:
      'an individual version change of a tenant that a fleet upgrade holds (the message and `details.fleetUpgradeId` name it); pause or abort the fleet upgrade, or wait for it',
  },
  FLEET_UPGRADE_STATE: {
    status: 409,
    description:
      'pause, resume, abort or a gate skip of a fleet upgrade in a state that does not allow it (`details.state`)',
  },
  GATE_NOT_WAITING: {
    status: 409,
    description:
      "a skip of health-gate checks for a fleet upgrade's tenant whose step does not wait on them (no step under way, its gate passed, or the step moved on); `details` has the tenant's state and what it waits on",
  },
  FLEET_UPGRADE_CONFLICT: {
    status: 409,
    description: 'another fleet upgrade took some of the selected tenants between the plan and the start; plan again',
  },
  LAST_AVAILABLE_RUNTIME_VERSION: {
    status: 409,
    description:
      'the change would leave no available runtime version, so signups would have none to install; make another version available first',
  },
  TENANT_LIMIT_REACHED: {
    status: 409,
    description:
      'the tenant already has as many managed clusters (`PROVISIONER_MANAGED_CLUSTERS_PER_TENANT`), unrevoked keys (`PROVISIONER_KEYS_PER_TENANT`) or hybrid runtimes (`PROVISIONER_HYBRID_RUNTIMES_PER_TENANT`) as its budget allows; `details.limit` and `details.setting` name it; remove one first',
  },
  RUNTIME_OBJECT_BUDGET_EXCEEDED: {
    status: 413,
    description:
      "the batch would take the tenant's stored runtime objects over `PROVISIONER_RUNTIME_OBJECTS_PER_TENANT` objects or `PROVISIONER_RUNTIME_OBJECT_BYTES_PER_TENANT` bytes (`details` names which, the limit and the usage); nothing of it is stored, nothing stored is removed",
  },
  PAYLOAD_TOO_LARGE: {
    status: 413,
    description: "body over `PROVISIONER_BODY_LIMIT`, or over the tunnel's request body limit (the message names it)",
  },
  URI_TOO_LONG: { status: 414, description: 'a path parameter is longer than 256 characters' },
  UNSUPPORTED_MEDIA_TYPE: { status: 415, description: 'not `application/json` (the message names the type sent)' },
  RUNTIME_VERSION_UNAVAILABLE: { status: 422, description: 'withdrawn (or deprecated, for tenants and signups)' },
  UPGRADE_PATH_REFUSED: { status: 422, description: '`details.path` lists the versions to go through' },
  NOTHING_TO_UPGRADE: {
    status: 422,
    description: 'a fleet upgrade whose selector takes no tenant that can be upgraded (the dry run lists why)',
  },
  CLUSTER_UNREACHABLE: {
    status: 422,
    description:
      "the kubeconfig's API server could not be reached (the message gives the network error); `force: true` registers it anyway",
  },
  CLUSTER_UNAUTHORIZED: {
    status: 422,
    description:
      "the cluster's API server refused the kubeconfig's credentials (401); `force: true` registers it anyway",
  },
  CLUSTER_PERMISSIONS_MISSING: {
    status: 422,
    description:
      "the kubeconfig's credentials lack permissions the tenants program needs; `details.missing` lists them; `force: true` registers it anyway",
  },
  RATE_LIMITED: { status: 429, description: 'with `Retry-After`' },
  TOO_MANY_TUNNEL_HANDSHAKES: {
    status: 429,
    description:
      'the tenant already has `PROVISIONER_TUNNEL_MAX_PENDING_HANDSHAKES_PER_TENANT` tunnel connections waiting for their hello',
  },
  TOO_MANY_STREAMS: {
    status: 429,
    description: 'the API key already holds `PROVISIONER_SSE_STREAMS_PER_KEY` open event streams',
  },
  REQUEST_HEADERS_TOO_LARGE: {
    status: 431,
    description:
      "the request's headers are over the server's limit (16 KiB), or, for a request forwarded to a runtime, too large for the tunnel",
  },
  INTERNAL: { status: 500, description: 'details only in the server log' },
  RUNTIME_BAD_RESPONSE: { status: 502, description: "the runtime's response was refused or broke the tunnel protocol" },
  RUNTIME_UPSTREAM_ERROR: { status: 502, description: 'the runtime could not serve the request' },
  RUNTIME_DISCONNECTED: { status: 502, description: 'the runtime disconnected during the request' },
  RUNTIME_UNREACHABLE: {
    status: 503,
    description:
      "the runtime has no tunnel (or the replica holding it cannot be reached); an ingress-based runtime's ingress is refused by the address policy, fails TLS or does not answer (the message names which)",
  },
  RUNTIME_BUSY: {
    status: 503,
    description:
      "the tunnel (per tunnel, or all of the tenant's tunnels together: `PROVISIONER_TUNNEL_MAX_STREAMS_PER_TENANT`), or an ingress-based runtime (`PROVISIONER_HYBRID_INGRESS_REQUESTS_PER_RUNTIME`; all of the tenant's ingress runtimes together: `PROVISIONER_HYBRID_INGRESS_REQUESTS_PER_TENANT`), has as many requests in flight as it allows",
  },
  TENANT_WAKING: {
    status: 503,
    description:
      "the tenant was asleep (no activity for its plan's idle time): the request woke it, and its runtime is not back yet; retry after `Retry-After` seconds (`details.operationId` is the wake operation)",
  },
  WEBHOOK_QUEUE_FULL: {
    status: 503,
    description:
      "the tenant's webhooks waiting for its runtime are at their budget (`PROVISIONER_WEBHOOK_QUEUE_PER_TENANT`, `PROVISIONER_WEBHOOK_QUEUE_BYTES_PER_TENANT`); retry after `Retry-After` seconds",
  },
  SHUTTING_DOWN: { status: 503, description: 'the replica is shutting down; retry (another replica serves it)' },
  AUTH_TIMEOUT: { status: 503, description: "a tunnel upgrade's authentication took too long" },
  AUTH_UNAVAILABLE: { status: 503, description: 'a tunnel upgrade could not be authenticated right now' },
  DATABASE_UNAVAILABLE: {
    status: 503,
    description: 'PostgreSQL cannot be reached (an outage or a restart); retry after `Retry-After` seconds',
  },
  RUNTIME_TIMEOUT: { status: 504, description: 'the runtime did not answer in time' },
} as const satisfies Record<string, { status: number; description: string }>;

export type ErrorCode = keyof typeof ERROR_CODES;

/** The HTTP status a code answers with. */
export function statusOf(code: ErrorCode): number {
  return ERROR_CODES[code].status;
}

export interface AppErrorOptions {
  field?: string;
  details?: Record<string, unknown>;
  cause?: unknown;
  /** Only for BAD_REQUEST, which keeps the 4xx status the HTTP layer reported (and for copies, see withField). */
  status?: number;
}

export class AppError extends Error {
  readonly code: ErrorCode;
  readonly statusCode: number;
  readonly field: string | undefined;
  readonly details: Record<string, unknown> | undefined;

  constructor(code: ErrorCode, message: string, opts: AppErrorOptions = {}) {
    super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.name = 'AppError';
    this.code = code;
    this.statusCode = opts.status ?? statusOf(code);
    this.field = opts.field;
    this.details = opts.details;
  }

  /** The same error about an input the API names differently (a route mapping a body field to a spec field). */
  withField(field: string): AppError {
    return new AppError(this.code, this.message, {
      field,
      status: this.statusCode,
      ...(this.details ? { details: this.details } : {}),
      ...(this.cause === undefined ? {} : { cause: this.cause }),
    });
  }
}

/** What `errors.notFound` may be asked about, and the code each answers with. */
const NOT_FOUND = {
  tenant: 'TENANT_NOT_FOUND',
  operation: 'OPERATION_NOT_FOUND',
  cluster: 'CLUSTER_NOT_FOUND',
  'API key': 'API_KEY_NOT_FOUND',
  'managed cluster': 'MANAGED_CLUSTER_NOT_FOUND',
  runtime: 'RUNTIME_NOT_FOUND',
  'runtime version': 'RUNTIME_VERSION_NOT_FOUND',
  'fleet upgrade': 'FLEET_UPGRADE_NOT_FOUND',
} as const satisfies Record<string, ErrorCode>;

/** Factories for the errors built in more than one place or with a message worth keeping in one place. */
export const errors = {
  validation: (message: string, field?: string, details?: Record<string, unknown>) =>
    new AppError('VALIDATION_FAILED', message, { ...(field ? { field } : {}), ...(details ? { details } : {}) }),
  invalidJson: (message: string) => new AppError('INVALID_JSON', message),
  invalidContentLength: () => new AppError('INVALID_CONTENT_LENGTH', 'Content-Length does not match the body'),
  badRequest: (status: number, message: string) => new AppError('BAD_REQUEST', message, { status }),
  unsupportedMediaType: (type: string) =>
    new AppError('UNSUPPORTED_MEDIA_TYPE', `content type '${type}' is not supported: send application/json`),
  /** 413 naming the limit when it is known (`details.limit`). */
  payloadTooLarge: (message = 'request body is too large', limit?: number) =>
    new AppError('PAYLOAD_TOO_LARGE', message, limit === undefined ? {} : { details: { limit } }),
  invalidCursor: () =>
    new AppError(
      'INVALID_CURSOR',
      'cursor is not valid: pass back the nextCursor value from a previous page unchanged',
      { field: 'cursor' },
    ),
  unauthenticated: (message = 'missing or malformed Authorization header: send "Authorization: Bearer <api key>"') =>
    new AppError('UNAUTHENTICATED', message),
  invalidKey: () => new AppError('INVALID_API_KEY', 'API key is not valid or has been revoked'),
  forbidden: (message: string) => new AppError('FORBIDDEN', message),
  suspendedByOperator: (reason: string | null) =>
    new AppError(
      'SUSPENDED_BY_OPERATOR',
      `an operator suspended this tenant${reason ? ` (${reason})` : ''}; only an operator can resume it: contact support`,
    ),
  notFound: (what: keyof typeof NOT_FOUND, id: string) =>
    new AppError(NOT_FOUND[what], `${what} '${id}' was not found`),
  routeNotFound: (method: string, url: string) => new AppError('ROUTE_NOT_FOUND', `no route ${method} ${url}`),
  methodNotAllowed: (method: string, allowed: readonly string[]) =>
    new AppError('METHOD_NOT_ALLOWED', `${method} is not allowed here; allowed: ${allowed.join(', ')}`),
  lastAvailableVersion: (version: string, availability: string) =>
    new AppError(
      'LAST_AVAILABLE_RUNTIME_VERSION',
      `runtime version '${version}' is the last available one: marking it ${availability} would leave signups nothing to install; make another version available first`,
      { field: 'availability' },
    ),
  nothingToRetry: (id: string, phase: string) =>
    new AppError(
      'NOTHING_TO_RETRY',
      `tenant ${id} is ${phase}, not stalled or failing, with no operation under way: nothing to retry (change its spec with PATCH to reconcile it)`,
    ),
  tenantDeleted: (id: string) =>
    new AppError('TENANT_DELETED', `tenant '${id}' has been deleted; only reads are allowed on a deleted tenant`),
  organizationTaken: (org: string) =>
    new AppError('ORGANIZATION_TAKEN', `organization '${org}' is already registered`, { field: 'organization' }),
  clusterInUse: (name: string, tenants: number) =>
    new AppError(
      'CLUSTER_IN_USE',
      `cluster '${name}' holds ${tenants} tenant(s): its region cannot change; register the new region's cluster under another name`,
      { field: 'region' },
    ),
  clusterExists: (name: string) =>
    new AppError('CLUSTER_EXISTS', `cluster '${name}' is already registered`, { field: 'name' }),
  cannotRevokeOwnKey: () => new AppError('CANNOT_REVOKE_OWN_KEY', 'a key cannot revoke itself; use another admin key'),
  idempotencyMismatch: () =>
    new AppError(
      'IDEMPOTENCY_KEY_REUSED',
      'Idempotency-Key was already used with a different request body; use a new key for a new request',
      { field: 'Idempotency-Key' },
    ),
  idempotencyInProgress: () =>
    new AppError(
      'IDEMPOTENCY_KEY_IN_PROGRESS',
      'a request with this Idempotency-Key is still being processed; retry shortly',
      { field: 'Idempotency-Key' },
    ),
  unknownRegion: (region: string, known: readonly string[]) =>
    new AppError(
      'UNKNOWN_REGION',
      known.length > 0
        ? `region '${region}' has no root cluster; choose one of: ${known.join(', ')}`
        : `region '${region}' has no root cluster (none is registered yet)`,
      { field: 'region' },
    ),
  unknownPlan: (plan: string, known: readonly string[]) =>
    new AppError('UNKNOWN_PLAN', `plan '${plan}' does not exist; choose one of: ${known.join(', ')}`, {
      field: 'plan',
    }),
  unknownVersion: (version: string, field = 'runtimeVersion') =>
    new AppError(
      'UNKNOWN_RUNTIME_VERSION',
      `runtime version '${version}' is not in the catalog (GET /v1/runtime-versions lists them)`,
      { field },
    ),
  versionUnavailable: (version: string, availability: string, field = 'runtimeVersion') =>
    new AppError(
      'RUNTIME_VERSION_UNAVAILABLE',
      `runtime version '${version}' is ${availability} and cannot be installed`,
      { field },
    ),
  inFleetUpgrade: (tenantId: string, fleetUpgradeId: string) =>
    new AppError(
      'TENANT_IN_FLEET_UPGRADE',
      `tenant ${tenantId} is part of fleet upgrade ${fleetUpgradeId}, which is not finished: its version changes only through it (pause or abort the fleet upgrade, or wait for it)`,
      { field: 'runtimeVersion', details: { fleetUpgradeId } },
    ),
  upgradeRefused: (message: string, path: readonly string[], field: string) =>
    new AppError('UPGRADE_PATH_REFUSED', message, { field, details: { path } }),
  tooManyStreams: (limit: number) =>
    new AppError(
      'TOO_MANY_STREAMS',
      `this API key already holds ${limit} event streams at once (the limit); close one first`,
    ),
  rateLimited: (retryAfterSeconds: number, what?: string) =>
    new AppError('RATE_LIMITED', `${what ?? 'too many requests'}; retry in ${retryAfterSeconds} s`, {
      details: { retryAfterSeconds },
    }),
  tenantLimitReached: (what: string, limit: number, setting: string) =>
    new AppError(
      'TENANT_LIMIT_REACHED',
      `the tenant already has ${limit} ${what}, the most it may have (${setting}); remove one first`,
      { details: { limit, setting } },
    ),
  runtimeObjectBudgetExceeded: (budget: 'objects' | 'bytes', usage: number, limit: number, setting: string) =>
    new AppError(
      'RUNTIME_OBJECT_BUDGET_EXCEEDED',
      budget === 'objects'
        ? `the batch would store ${usage} live runtime objects for this tenant, over its budget of ${limit} (${setting}): nothing of it was stored; delete objects in the runtime or ask the operator for a larger budget`
        : `the batch would store ${usage} bytes of runtime objects for this tenant, over its budget of ${limit} (${setting}): nothing of it was stored; trim or delete objects in the runtime or ask the operator for a larger budget`,
      { details: { budget, usage, limit, setting } },
    ),
  tenantWaking: (operationId: string, retryAfterSeconds: number) =>
    new AppError(
      'TENANT_WAKING',
      `the tenant's runtime was asleep and is waking up (operation ${operationId}); retry in ${retryAfterSeconds} s`,
      { details: { operationId, retryAfterSeconds } },
    ),
  notSleepable: (tenantId: string, why: string) =>
    new AppError('NOT_SLEEPABLE', `tenant ${tenantId} cannot be put to sleep: ${why}`),
  runtimeUnreachable: (message: string) => new AppError('RUNTIME_UNREACHABLE', message),
  databaseUnavailable: (retryAfterSeconds: number, cause?: unknown) =>
    new AppError('DATABASE_UNAVAILABLE', `the database is unavailable; retry in ${retryAfterSeconds} s`, { cause }),
  requestCancelled: () => new AppError('REQUEST_CANCELLED', 'the request was cancelled'),
  internal: (cause?: unknown) => new AppError('INTERNAL', 'internal error', { cause }),
};

export function isAppError(err: unknown): err is AppError {
  return err instanceof AppError;
}

/** A caller-supplied value quoted in a message: printable ASCII only, at most 100 characters. */
export function quoted(value: string): string {
  const printable = value.replace(/[^\x20-\x7e]/g, '?');
  return printable.length > 100 ? `${printable.slice(0, 100)}…` : printable;
}
