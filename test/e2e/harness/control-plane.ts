/** Moved to sandbox/control-plane.ts: the local sandbox (npm run sandbox) and this tier share it. */
export * from '../../../sandbox/control-plane.ts';
