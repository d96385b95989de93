/**
 * Starts one embedded PostgreSQL for a whole test run (scripts/test.sh), prints its URL on the
 * first stdout line, and stops it (removing its data) when stdin closes or on SIGTERM.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startEmbeddedPostgres } from '../provisioner/db/embedded.ts';

const dir = await mkdtemp(join(tmpdir(), 'hrt-test-pg-'));
const server = await startEmbeddedPostgres(dir);
process.stdout.write(server.url + '\n');
let stopping = false;
const stop = async () => {
  if (stopping) return;
  stopping = true;
  await server.stop();
  await rm(dir, { recursive: true, force: true });
  process.exit(0);
};
process.stdin.on('end', () => void stop());
process.stdin.resume();
process.on('SIGTERM', () => void stop());
process.on('SIGINT', () => void stop());
