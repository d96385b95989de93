/**
 * A tenant's phases, in lifecycle order: shared by the server (store, schemas, routes) and the
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
