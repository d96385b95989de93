/** Moved to sandbox/pki.ts: the local sandbox (npm run sandbox) and this tier share it. */
export * from '../../../sandbox/pki.ts';
