/** Moved to sandbox/processes.ts: the local sandbox (npm run sandbox) and this tier share it. */
export * from '../../../sandbox/processes.ts';
