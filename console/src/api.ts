/**
 * The console's one way to the provisioner: its public API, with the key the user typed. The key
 * lives in this tab's sessionStorage (gone when the tab closes) and travels only in the
 * Authorization header, never in a URL.
 */
const KEY = 'hrt-console-api-key';

export const session = {
  key(): string | null {
    return sessionStorage.getItem(KEY);
  },
  set(key: string): void {
    sessionStorage.setItem(KEY, key);
  },
  clear(): void {
    sessionStorage.removeItem(KEY);
  },
};

/** An answer of the API that is not a success, as the API gave it. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly details?: Record<string, unknown>,
    readonly field?: string,
    /** The answer's Retry-After (seconds): a 503 (runtime unreachable) or 429 says when to try again. */
    readonly retryAfterSeconds?: number,
  ) {
    super(message);
  }
}

let onUnauthorized: (err: ApiError) => void = () => {};
/** Called when the key stops working (revoked): the console signs out with the API's message. */
export function setUnauthorizedHandler(fn: (err: ApiError) => void): void {
  onUnauthorized = fn;
}

export function authHeaders(key = session.key()): Record<string, string> {
  return key ? { authorization: `Bearer ${key}` } : {};
}

export async function errorOf(res: Response): Promise<ApiError> {
  let body: { error?: { code?: string; message?: string; details?: Record<string, unknown>; field?: string } } = {};
  try {
    body = (await res.json()) as typeof body;
  } catch {
    // not JSON: the status says it all
  }
  const e = body.error ?? {};
  const retryAfter = Number(res.headers.get('retry-after') ?? NaN);
  return new ApiError(
    res.status,
    e.code ?? `HTTP_${res.status}`,
    e.message ?? res.statusText,
    e.details,
    e.field,
    Number.isFinite(retryAfter) ? retryAfter : undefined,
  );
}

export async function api<T>(
  method: string,
  path: string,
  opts: { body?: unknown; signal?: AbortSignal; key?: string } = {},
): Promise<T> {
  const headers: Record<string, string> = { ...authHeaders(opts.key ?? session.key()), accept: 'application/json' };
  if (opts.body !== undefined) headers['content-type'] = 'application/json';
  const res = await fetch(path, {
    method,
    headers,
    ...(opts.body !== undefined ? { body: JSON.stringify(opts.body) } : {}),
    ...(opts.signal ? { signal: opts.signal } : {}),
  });
  if (!res.ok) {
    const err = await errorOf(res);
    if (res.status === 401 && opts.key === undefined) onUnauthorized(err);
    throw err;
  }
  return (await res.json()) as T;
}

/** A query string of the set values. */
export function query(params: Record<string, string | number | undefined | null>): string {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== '') q.set(k, String(v));
  const s = q.toString();
  return s ? `?${s}` : '';
}

/**
 * The API's types, derived from the provisioner's route schemas (provisioner/http/api-types.ts):
 * type-only, so nothing of the server reaches the bundle, and a changed field is a compile error
 * here.
 */
export type {
  Accepted,
  ApplicationDiff,
  ApplicationHistoryEntry,
  ApplicationHistoryEvents,
  ApplicationHistoryPage,
  Cluster,
  Condition,
  DoctorCheck,
  DoctorReport,
  FleetPlan,
  FleetUpgrade,
  FleetUpgradeTenant,
  FleetWave,
  GateCheck,
  Identity,
  LogLine,
  LogPage,
  Operation,
  OperationLogEvents,
  OperationPage,
  PathInfo,
  PlanInfo,
  RegionInfo,
  Runtime,
  RuntimePage,
  RuntimeRemoved,
  RuntimeObject,
  RuntimeObjectChangeEvents,
  RuntimeObjectPage,
  RuntimeVersionInfo,
  RuntimeVersionList,
  StreamError,
  StreamEventOf,
  Tenant,
  TenantPage,
  TenantStreamEvents,
  TenantSummary,
} from '../../provisioner/http/api-types.ts';

export { PHASES } from '../../provisioner/store/states.ts';

/** `GET /v1/capacity` (operators only) and one of its CPU-and-memory reservations. */
export type { Capacity } from '../../provisioner/http/api-types.ts';
export type Reservation = import('../../provisioner/http/api-types.ts').Capacity['plans'][number]['reservation']['now'];

/** What the runtime's Source Server says changed an application (runtime/protocol/sources.ts). */
export type { ImageChange, ResourceChange, ResourceDiff } from '../../runtime/protocol/sources.ts';
