/**
 * The provisioner process of bench/rest.bench.ts and bench/soak.bench.ts, forked by them: the
 * services, the HTTP API and the reconciler as `provisioner serve` builds them (services.ts,
 * http/app.ts, the default settings), listening on loopback, except for the engine: the
 * ScriptedEngine TEST DOUBLE (no Pulumi, no cluster), so what is measured is the control plane's
 * own work. Not a benchmark of its own (scripts/bench.sh only runs bench/*.bench.ts).
 *
 * Environment: BENCH_DATABASE_URL, BENCH_KEY (hex encryption key), BENCH_ADMIN_TOKEN,
 * BENCH_ENGINE=unavailable (the engine reports itself unavailable), BENCH_ENGINE_DELAY_MS (each
 * engine call takes this long and prints a few lines), BENCH_RESYNC_SECONDS, BENCH_LOG_FILE (the server log;
 * default /dev/null), BENCH_LOOPBACK_CLUSTERS=1 (root clusters on loopback may be watched).
 *
 * IPC: sends `{type: 'ready', url}` once listening; answers `{type: 'stats', gc?}` with the
 * reconciler's counters and the process's memory (after a full GC when asked and --expose-gc).
 */
import { loadConfig } from '../provisioner/config.ts';
import { createPool } from '../provisioner/db/database.ts';
import { ScriptedEngine } from '../test/helpers/scripted-engine.ts';
import { buildApp } from '../provisioner/http/app.ts';
import { createLogger } from '../provisioner/logger.ts';
import { bootstrapAdmin } from '../provisioner/server.ts';
import { buildServices } from '../provisioner/services.ts';

export type ChildMessage = { type: 'ready'; url: string } | { type: 'stats'; stats: ChildStats };

export interface ChildStats {
  polls: number;
  claims: number;
  claimed: number;
  succeeded: number;
  waiting: number;
  failed: number;
  rss: number;
  heapUsed: number;
  external: number;
  arrayBuffers: number;
  tunnels: number;
}

const url = process.env.BENCH_DATABASE_URL!;
const delayMs = Number(process.env.BENCH_ENGINE_DELAY_MS ?? 0);
const config = loadConfig({
  DATABASE_URL: url,
  LOG_LEVEL: 'info',
  PROVISIONER_ENCRYPTION_KEY: process.env.BENCH_KEY!,
  PROVISIONER_ADMIN_TOKEN: process.env.BENCH_ADMIN_TOKEN!,
  PROVISIONER_SIGNUP_RATE_LIMIT: '1000000',
  ...(process.env.BENCH_RESYNC_SECONDS ? { PROVISIONER_RESYNC_SECONDS: process.env.BENCH_RESYNC_SECONDS } : {}),
  // The root clusters' API servers are a loopback stand-in (bench/rest.bench.ts).
  ...(process.env.BENCH_LOOPBACK_CLUSTERS ? { PROVISIONER_CLUSTER_ALLOWED_CIDRS: '127.0.0.0/8' } : {}),
});
const pool = createPool(url, 20);
await bootstrapAdmin(pool, config.adminToken);
const engine = new ScriptedEngine({
  ...(process.env.BENCH_ENGINE === 'unavailable'
    ? { unavailable: 'the Pulumi CLI was not found (benchmark: engine unavailable)' }
    : {}),
  ...(delayMs > 0
    ? {
        script: (c) => ({
          delayMs,
          lines: [
            `${c.kind} of ${c.tenantId}`,
            ' +  kubernetes:core/v1:Namespace tenant created (0.1s)',
            'Resources: 1 created',
          ],
        }),
      }
    : {}),
});
const services = await buildServices(
  config,
  { pool, url },
  { logger: createLogger(config.logLevel, process.env.BENCH_LOG_FILE ?? '/dev/null'), engine },
);
const app = await buildApp(services);
await services.start();
const apiUrl = await app.listen({ port: 0, host: '127.0.0.1' });
await services.reconciler!.start();
process.on('message', (m: { type: string; gc?: boolean }) => {
  if (m.type !== 'stats') return;
  if (m.gc) (globalThis as { gc?: () => void }).gc?.();
  const s = services.reconciler!.stats;
  const mem = process.memoryUsage();
  process.send!({
    type: 'stats',
    stats: {
      polls: s.polls,
      claims: s.claims,
      claimed: s.claimed,
      succeeded: s.succeeded,
      waiting: s.waiting,
      failed: s.failed,
      rss: mem.rss,
      heapUsed: mem.heapUsed,
      external: mem.external,
      arrayBuffers: mem.arrayBuffers,
      tunnels: services.tunnel.connections().length,
    },
  } satisfies ChildMessage);
});
process.send!({ type: 'ready', url: apiUrl } satisfies ChildMessage);
