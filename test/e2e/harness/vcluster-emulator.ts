/** Moved to sandbox/vcluster-emulator.ts: the local sandbox (npm run sandbox) and this tier share it. */
export * from '../../../sandbox/vcluster-emulator.ts';
