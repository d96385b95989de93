/**
 * The closed lists of states and kinds the store keeps and the API shows: a tenant's phases (in
 * lifecycle order) and the shape of its conditions, operations' kinds and states, runtime versions' availability, fleet upgrades'
 * states; and the bounds of a maintenance window's length. Shared by the server (store, schemas, routes) and, through the API's types
 * (api/types.ts), the console and the CLI, so this module imports nothing.
 */
export const PHASES = [
  'Pending',
  'Provisioning',
  'Ready',
  'Updating',
  'Suspended',
  'Sleeping',
  'Waking',
  'Failed',
  'Deleting',
  'Deleted',
] as const;
export type Phase = (typeof PHASES)[number];

/** One of a tenant's conditions (Ready, Reconciling, Stalled, Reporting): why it is in its phase. */
export interface Condition {
  type: string;
  status: 'True' | 'False' | 'Unknown';
  reason: string;
  message: string;
  lastTransitionTime: string;
}

export const OPERATION_KINDS = [
  'create',
  'update',
  'upgrade',
  'suspend',
  'resume',
  'sleep',
  'wake',
  'bind',
  'delete',
  'resync',
  'retry',
] as const;
export type OperationKind = (typeof OPERATION_KINDS)[number];

export const OPERATION_STATES = ['queued', 'running', 'succeeded', 'failed', 'cancelled', 'superseded'] as const;
export type OperationState = (typeof OPERATION_STATES)[number];

export const AVAILABILITIES = ['available', 'deprecated', 'withdrawn'] as const;
export type Availability = (typeof AVAILABILITIES)[number];

export const FLEET_STATES = ['running', 'paused', 'halted', 'aborting', 'completed', 'aborted'] as const;
export type FleetState = (typeof FLEET_STATES)[number];

export const FLEET_TENANT_STATES = [
  'excluded',
  'pending',
  'upgrading',
  'succeeded',
  'rolling_back',
  'quarantined',
  'interrupted',
  'cancelled',
  'reverting',
  'reverted',
  'left',
  'skipped',
] as const;
export type FleetTenantState = (typeof FLEET_TENANT_STATES)[number];

export const WAVE_STATES = ['pending', 'running', 'soaking', 'completed'] as const;
export type WaveState = (typeof WAVE_STATES)[number];

/**
 * The health-gate checks an operator may skip for a step under way (fleet/gate.ts): those that
 * judge the runtime's agents, which can be down for a reason unrelated to the upgrade. The others
 * say whether the step's own change was applied, so they are never skipped.
 */
export const SKIPPABLE_GATE_CHECKS = ['tunnel', 'applications'] as const;
export type SkippableGateCheck = (typeof SKIPPABLE_GATE_CHECKS)[number];

/** A maintenance window's length in minutes: at least 15, at most 7 days (fleet/windows.ts checks it). */
export const MIN_DURATION_MINUTES = 15;
export const MAX_DURATION_MINUTES = 7 * 24 * 60;
/** At most this many maintenance windows per tenant, and freezes per fleet upgrade (fleet/windows.ts). */
export const MAX_WINDOWS = 20;
export const MAX_FREEZES = 50;

/** The orders a tenant listing may take (store/tenants.ts has each one's column). */
export const TENANT_SORT_NAMES = ['createdAt', 'updatedAt', 'organization', 'phase'] as const;
export type TenantSort = (typeof TENANT_SORT_NAMES)[number];
