/**
 * The API's wire types, derived from the API's schemas (schemas.ts) and written nowhere else: the
 * console (console/src/api.ts), the CLI (cli/) and the end-to-end tier's client take their types
 * from here, so a field added to a schema reaches them without a copy, and one renamed or removed
 * is a compile error where they read it. Services answer with them: this folder is below http/
 * (docs/architecture.md "Layers"), so a service imports it as any other module below it.
 *
 * The console imports this module with `import type` only: esbuild drops it from the browser
 * bundle, and the console's type-check (console/tsconfig.json, DOM types, no Node.js types) reads
 * it, schemas.ts and what schemas.ts imports. So schemas.ts imports only modules that need no
 * Node.js (store/states.ts, errors.ts, runtime/protocol/kinds.ts); test/unit/console/api-types.test.ts
 * checks both.
 */
import type { Static, TSchema } from 'typebox';
import type * as S from './schemas.ts';

/** The schemas `Type.Ref` names by their `$id`: a reference is typed as what it names. */
export type WireRefs = {
  Tenant: typeof S.Tenant;
  Operation: typeof S.Operation;
  Cluster: typeof S.Cluster;
  ManagedCluster: typeof S.ManagedCluster;
  ApiKey: typeof S.ApiKeyInfo;
  DoctorCheck: typeof S.DoctorCheck;
  DoctorReport: typeof S.DoctorReport;
  FleetUpgrade: typeof S.FleetUpgrade;
  Runtime: typeof S.Runtime;
};
type Wire<T extends TSchema> = Static<T, WireRefs>;

export type ErrorBody = Wire<typeof S.ErrorBody>;
export type Condition = Wire<typeof S.Condition>;
export type TenantSpec = Wire<typeof S.TenantSpec>;
export type MaintenanceWindow = Wire<typeof S.MaintenanceWindowSchema>;
export type Tenant = Wire<typeof S.Tenant>;
export type TenantPage = Wire<typeof S.TenantPage>;
export type TenantSummary = Wire<typeof S.TenantSummary>;
export type Accepted = Wire<typeof S.Accepted>;
export type SignupResponse = Wire<typeof S.SignupResponse>;
export type Capacity = Wire<typeof S.Capacity>;
export type Operation = Wire<typeof S.Operation>;
export type OperationPage = Wire<typeof S.OperationPage>;
export type LogLine = Wire<typeof S.LogLine>;
export type LogPage = Wire<typeof S.LogPage>;
export type RuntimeVersionInfo = Wire<typeof S.RuntimeVersionInfo>;
export type RuntimeVersionList = Wire<typeof S.RuntimeVersionList>;
export type PathInfo = Wire<typeof S.PathInfo>;
export type PlanInfo = Wire<typeof S.PlanInfo>;
export type RegionInfo = Wire<typeof S.RegionInfo>;
export type Cluster = Wire<typeof S.Cluster>;
export type ClusterPutAnswer = Wire<typeof S.ClusterPutAnswer>;
export type ManagedCluster = Wire<typeof S.ManagedCluster>;
export type ManagedClusterRegistered = Wire<typeof S.ManagedClusterRegistered>;
export type ApiKeyInfo = Wire<typeof S.ApiKeyInfo>;
export type CreatedKey = Wire<typeof S.CreatedKey>;
export type Identity = Wire<typeof S.Identity>;
export type DoctorCheck = Wire<typeof S.DoctorCheck>;
export type DoctorReport = Wire<typeof S.DoctorReport>;
export type GateCheck = Wire<typeof S.GateCheck>;
export type FleetUpgrade = Wire<typeof S.FleetUpgrade>;
export type FleetPlan = Wire<typeof S.FleetPlan>;
/** One selected tenant of a fleet upgrade (its `tenants`). */
export type FleetUpgradeTenant = NonNullable<FleetUpgrade['tenants']>[number];
export type FleetWave = FleetUpgrade['waves'][number];
export type RuntimeObject = Wire<typeof S.RuntimeObject>;
export type Runtime = Wire<typeof S.Runtime>;
export type RuntimePage = Wire<typeof S.RuntimePage>;
export type RuntimeRegistered = Wire<typeof S.RuntimeRegistered>;
export type RuntimeRemoved = Wire<typeof S.RuntimeRemoved>;
export type RuntimeUpgradeBundle = Wire<typeof S.RuntimeUpgradeBundle>;
export type RuntimeUpgraded = Wire<typeof S.RuntimeUpgraded>;
export type RuntimeBootstrapAnswer = Wire<typeof S.RuntimeBootstrapAnswer>;
export type RuntimeObjectPage = Wire<typeof S.RuntimeObjectPage>;
export type RuntimeObjectDetail = Wire<typeof S.RuntimeObjectDetail>;
export type ApplicationHistoryEntry = Wire<typeof S.ApplicationHistoryEntry>;
export type ApplicationHistoryPage = Wire<typeof S.ApplicationHistoryPage>;
export type ApplicationDiff = Wire<typeof S.ApplicationDiff>;

/** The payload of a stream's `error` event. */
export type StreamError = Wire<typeof S.StreamError>;
export type TenantStreamReady = Wire<typeof S.TenantStreamReady>;
export type OperationLogState = Wire<typeof S.OperationLogState>;
export type OperationLogEnd = Wire<typeof S.OperationLogEnd>;
export type FleetEvent = Wire<typeof S.FleetEvent>;
export type FleetStreamEnd = Wire<typeof S.FleetStreamEnd>;
export type RuntimeObjectChange = Wire<typeof S.RuntimeObjectChange>;
export type ChangeStreamReset = Wire<typeof S.ChangeStreamReset>;
export type ApplicationHistoryChange = Wire<typeof S.ApplicationHistoryChange>;

/**
 * The events of each Server-Sent Events stream, by event name: the payload type of each. The
 * server writes them through `serveEventStream<…>` (http/streams.ts), the clients read them as
 * `StreamEventOf<…>`.
 */
/** `GET /v1/tenants/events`. */
export interface TenantStreamEvents {
  ready: TenantStreamReady;
  tenant: Tenant;
  error: StreamError;
}
/** `GET /v1/operations/:id/log?follow=1`. */
export interface OperationLogEvents {
  state: OperationLogState;
  line: LogLine;
  end: OperationLogEnd;
  error: StreamError;
}
/** `GET /v1/fleet-upgrades/:id/events` (`state` and `progress`: the fleet upgrade without its tenants). */
export interface FleetUpgradeEvents {
  state: FleetUpgrade;
  event: FleetEvent;
  progress: FleetUpgrade;
  end: FleetStreamEnd;
  error: StreamError;
}
/** `GET /v1/tenants/:id/changes`. */
export interface RuntimeObjectChangeEvents {
  change: RuntimeObjectChange;
  reset: ChangeStreamReset;
  error: StreamError;
}

/** `GET /v1/tenants/:id/applications/:namespace/:name/history/stream`. */
export interface ApplicationHistoryEvents {
  entry: ApplicationHistoryChange;
  error: StreamError;
}

/** One event of a stream whose events are `M`, as a client reads it: testing `event` types `data`. */
export type StreamEventOf<M> = {
  [K in keyof M & string]: { event: K; data: M[K]; id?: string | undefined };
}[keyof M & string];
