/**
 * A tenant's phases, in lifecycle order, and its conditions: shared by the server (store, schemas, routes) and the
 * console (console/src/api.ts), so this module imports nothing.
 */
export const PHASES = [
  'Pending',
  'Provisioning',
  'Ready',
  'Updating',
  'Suspended',
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
