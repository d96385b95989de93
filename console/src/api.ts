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

import { ApiClient, ApiError } from '../../provisioner/http/api-client.ts';

/** An answer of the API that is not a success, as the API gave it (the one error type of every client). */
export { ApiError };

let onUnauthorized: (err: ApiError) => void = () => {};
/** Called when the key stops working (revoked): the console signs out with the API's message. */
export function setUnauthorizedHandler(fn: (err: ApiError) => void): void {
  onUnauthorized = fn;
}

/**
 * The console's client of the API (provisioner/http/api-client.ts): typed from the route map, with
 * the session's key; a 401 to a call made with it signs the console out.
 */
export const client = new ApiClient({
  baseUrl: '',
  token: () => session.key(),
  onUnauthorized: (err) => onUnauthorized(err),
});

export function authHeaders(key = session.key()): Record<string, string> {
  return key ? { authorization: `Bearer ${key}` } : {};
}

export const errorOf = (res: Response): Promise<ApiError> => ApiError.of(res);

/** A query string of the set values. */
export { queryString as query } from '../../provisioner/http/api-client.ts';

/**
 * The API's types, derived from the provisioner's route schemas (provisioner/api/types.ts):
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
} from '../../provisioner/api/types.ts';

export { PHASES } from '../../provisioner/store/states.ts';
export type { Availability, Phase } from '../../provisioner/store/states.ts';

/** `GET /v1/capacity` (operators only) and one of its CPU-and-memory reservations. */
export type { Capacity } from '../../provisioner/api/types.ts';
export type Reservation = import('../../provisioner/api/types.ts').Capacity['plans'][number]['reservation']['now'];

/** What the runtime's Source Server says changed an application (runtime/protocol/sources.ts). */
export type { ImageChange, ResourceChange, ResourceDiff } from '../../runtime/protocol/sources.ts';
