/** Moved to sandbox/provisioner-process.ts: the local sandbox (npm run sandbox) and this tier share it. */
export * from '../../../sandbox/provisioner-process.ts';
