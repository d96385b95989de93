/** Moved to sandbox/charts.ts: the local sandbox (npm run sandbox) and this tier share it. */
export * from '../../../sandbox/charts.ts';
