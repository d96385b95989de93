/** Moved to sandbox/tar.ts: the local sandbox (npm run sandbox) and this tier share it. */
export * from '../../../sandbox/tar.ts';
