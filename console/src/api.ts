/**
 * The console's one way to the provisioner: its public API, with the key the user typed. The key
 * lives in this tab's sessionStorage (gone when the tab closes) and travels only in the
 * Authorization header, never in a URL.
 */
const KEY = 'hrt-console-api-key';

export interface Identity {
  keyId: string;
  role: 'admin' | 'operator' | 'tenant' | 'runtime';
  tenantId: string | null;
}

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
  return new ApiError(res.status, e.code ?? `HTTP_${res.status}`, e.message ?? res.statusText, e.details, e.field);
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

export interface Condition {
  type: string;
  status: string;
  reason: string;
  message: string;
  lastTransitionTime: string;
}

export interface Tenant {
  id: string;
  organization: string;
  email: string;
  generation: number;
  spec: { plan: string; region: string | null; runtimeVersion: string; suspended: boolean; deleted: boolean };
  status: {
    phase: string;
    observedGeneration: number;
    runtimeVersion: string | null;
    previousRuntimeVersion: string | null;
    cluster: string | null;
    endpoints: Record<string, string>;
    conditions: Condition[];
    lastOperationId: string | null;
    observedAt?: string | null;
    stale?: boolean;
    tunnel?: { connected: boolean; since: string | null };
    suspension?: { by: 'operator' | 'tenant'; reason: string | null };
    reporting?: { lastHeartbeatAt: string; replicas: number; objects: number; stale: boolean };
  };
  createdAt: string;
  updatedAt: string;
  deletedAt: string | null;
}

export interface Operation {
  id: string;
  tenantId: string;
  kind: string;
  generation: number;
  fromVersion: string | null;
  toVersion: string | null;
  state: string;
  createdAt: string;
  startedAt?: string | null;
  finishedAt?: string | null;
  error?: { code: string; message: string } | null;
}

export interface RuntimeVersionInfo {
  version: string;
  releaseDate: string;
  channel: string;
  availability: 'available' | 'deprecated' | 'withdrawn';
  default: boolean;
  components: Record<string, string>;
  upgrade: { minFrom?: string };
}

export interface PathInfo {
  from: string;
  to: string;
  allowed: boolean;
  path: string[];
  reason?: string;
}

export interface Cluster {
  id: string;
  name: string;
  region: string;
  labels: Record<string, string>;
  capacity: number;
  plans: string[];
  cordoned: boolean;
  tenants: number;
  createdAt: string;
  updatedAt: string;
}

export interface DoctorCheck {
  name: string;
  status: 'ok' | 'problem' | 'warning' | 'skipped';
  message: string;
  fix: string[];
  detail: Record<string, string>;
}

export interface DoctorReport {
  version: string;
  checks: DoctorCheck[];
}

export interface TenantSummary {
  phases: Record<string, number>;
  total: number;
  /** Absent from a provisioner older than the console. */
  suspended?: number;
  runtimeVersions?: { version: string; tenants: number; running: number }[];
}

export { PHASES } from '../../provisioner/store/phases.ts';
