/**
 * `provisioner serve`: validates config, opens the database (embedded when DATABASE_URL is
 * unset), makes sure an admin key exists, starts the HTTP API and shuts everything down in order
 * on SIGTERM/SIGINT.
 */
import type pino from 'pino';
import type { FastifyInstance } from 'fastify';
import { loadConfig, type Config } from './config.ts';
import { SecretBox, loadOrCreateDevKey, loadOrCreateDevPassphrase, loadOrCreateSigningKey } from './crypto.ts';
import { DatabaseHealth } from './db/availability.ts';
import { openDatabase, type Database } from './db/database.ts';
import { leaveShutdownToCaller, type EmbeddedLog } from './db/embedded.ts';
import { Notifications } from './db/notifications.ts';
import { createLogger } from './logger.ts';
import { buildApp } from './http/app.ts';
import { registerDriftMetrics } from './http/metrics.ts';
import { createEngine } from './engine/create.ts';
import { Reconciler } from './reconciler/reconciler.ts';
import { createWritePool } from './reconciler/write-pool.ts';
import { createKey, hasActiveAdmin, keyExists } from './store/keys.ts';
import { catalog } from '../runtime/catalog.ts';
import type pg from 'pg';

export interface Running {
  config: Config;
  app: FastifyInstance;
  db: Database;
  url: string;
  /** The reconcile loop; undefined with PROVISIONER_ENGINE=none. */
  reconciler: Reconciler | undefined;
  /** The process's one LISTEN connection (db/notifications.ts). */
  notifications: Notifications;
  /** Stops accepting requests, finishes in-flight ones, closes the database. */
  close(): Promise<void>;
}

/** Ensures an admin key exists. Returns a newly generated key when it had to make one. */
export async function bootstrapAdmin(pool: pg.Pool, token: string | undefined): Promise<string | undefined> {
  if (token !== undefined) {
    if (!(await keyExists(pool, token))) await createKey(pool, { role: 'admin', name: 'bootstrap (PROVISIONER_ADMIN_TOKEN)', createdBy: 'system', key: token });
    return undefined;
  }
  if (await hasActiveAdmin(pool)) return undefined;
  const { key } = await createKey(pool, { role: 'admin', name: 'bootstrap (generated)', createdBy: 'system' });
  return key;
}

export async function startServer(given: Config, opts: { out?: (line: string) => void } = {}): Promise<Running> {
  let config = given;
  const out = opts.out ?? ((line: string) => process.stdout.write(line + '\n'));
  const logger = createLogger(config.logLevel);
  let key = config.encryptionKey;
  if (!key) {
    const dev = await loadOrCreateDevKey(config.dataDir);
    key = dev.key;
    logger.warn({ path: dev.path, created: dev.created },
      'PROVISIONER_ENCRYPTION_KEY is not set: using a development key kept in the data dir; set it in production');
  }
  if (config.engine.kind === 'pulumi' && config.engine.secretsProvider === 'passphrase' && config.engine.passphrase === undefined) {
    const dev = await loadOrCreateDevPassphrase(config.dataDir);
    config = { ...config, engine: { ...config.engine, passphrase: dev.passphrase } };
    logger.warn({ path: dev.path, created: dev.created },
      'PULUMI_CONFIG_PASSPHRASE is not set: using a development passphrase kept in the data dir; set it (or a KMS secrets provider) in production');
  }
  let signingKeyPem = config.requestSigningKeyPem;
  if (!signingKeyPem) {
    const dev = await loadOrCreateSigningKey(config.dataDir);
    signingKeyPem = dev.pem;
    if (dev.created) logger.warn({ path: dev.path }, 'PROVISIONER_REQUEST_SIGNING_KEY is not set: generated a request-signing key in the data dir');
  }
  const db = await openDatabase({
    databaseUrl: config.databaseUrl,
    dataDir: config.dataDir,
    log: (msg) => logger.info(msg),
    health: new DatabaseHealth(logger.child({ component: 'database' })),
    embeddedLog: pinoLines(logger.child({ component: 'embedded-postgres' })),
  });
  if (db.embedded) logger.info({ dataDir: config.dataDir }, 'using embedded PostgreSQL (DATABASE_URL is not set)');
  try {
    const generated = await bootstrapAdmin(db.pool, config.adminToken);
    if (generated) {
      out('');
      out('  A bootstrap admin API key was generated. It is shown once and stored only as a hash:');
      out(`    ${generated}`);
      out('  Set PROVISIONER_ADMIN_TOKEN to use a key of your own.');
      out('');
    }
    const box = new SecretBox(key);
    // One LISTEN connection for the process: the app's and the reconciler's subscriptions share it.
    const notifications = new Notifications({ pool: db.pool, logger: logger.child({ component: 'notifications' }) });
    const { app, ctx } = await buildApp({ config, pool: db.pool, box, catalog, logger, requestSigningKeyPem: signingKeyPem, notifications });
    const url = await app.listen({ port: config.port, host: config.host });
    let reconciler: Reconciler | undefined;
    const writePool = createWritePool(db.url, Math.max(4, config.reconciler.workers + 2), db.health);
    try {
      reconciler = await startReconciler(config, db, writePool, box, logger, ctx.requestSigningPublicKeyPem, notifications);
      if (reconciler) registerDriftMetrics(ctx.metrics, reconciler.stats);
      await notifications.start();
    } catch (err) {
      await reconciler?.stop({ graceMs: 0 });
      await app.close();
      await notifications.stop();
      await writePool.end();
      throw err;
    }
    return {
      config, app, db, url, reconciler, notifications,
      async close() {
        // At the same time: stop claiming, let running operations finish within their grace period
        // and hand back the rest; drain the tunnels while the API keeps serving, then stop it.
        await Promise.all([
          reconciler?.stop({ graceMs: config.reconciler.shutdownGraceSeconds * 1000 }),
          app.close(),
        ]);
        // The database's part is bounded: a database that is gone or hangs costs at most this. The
        // notifications hub hands its connection back before the pool ends.
        await within(DATABASE_CLOSE_MS, Promise.allSettled([writePool.end(), notifications.stop().then(() => db.close())]), () =>
          logger.warn({ afterMs: DATABASE_CLOSE_MS }, 'the database connections did not close in time; leaving them'));
      },
    };
  } catch (err) {
    await db.close();
    throw err;
  }
}

/** An EmbeddedLog writing to pino (message last, fields first). */
function pinoLines(log: pino.Logger): EmbeddedLog {
  return {
    info: (msg, fields) => log.info(fields ?? {}, msg),
    warn: (msg, fields) => log.warn(fields ?? {}, msg),
    error: (msg, fields) => log.error(fields ?? {}, msg),
  };
}

/** Longest wait for the database connections (and an embedded server) to close at shutdown. */
const DATABASE_CLOSE_MS = 1_500;

/** Waits for `work` at most `ms`; calls `late` when it gave up. */
async function within(ms: number, work: Promise<unknown>, late: () => void): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const timedOut = new Promise<boolean>((resolve) => { timer = setTimeout(() => resolve(true), ms); });
  const outcome = await Promise.race([work.then(() => false), timedOut]);
  clearTimeout(timer);
  if (outcome) late();
}

/** Secrets the Pulumi CLI may print (its errors quote the backend URL): masked in operation logs. */
export function engineSecrets(config: Config, databaseUrl: string): string[] {
  const out: string[] = [];
  for (const raw of [databaseUrl, config.engine.backendUrl]) {
    if (!raw) continue;
    try {
      const url = new URL(raw);
      if (url.password) out.push(url.password, decodeURIComponent(url.password));
    } catch {
      // not a URL: nothing to mask
    }
  }
  if (config.engine.passphrase) out.push(config.engine.passphrase);
  return [...new Set(out)];
}

/** Starts the reconcile loop with the configured engine (none: no loop; the API still serves). */
async function startReconciler(
  config: Config, db: Database, writePool: pg.Pool, box: SecretBox, logger: pino.Logger, publicKeyPem: string,
  notifications: Notifications,
): Promise<Reconciler | undefined> {
  const log = logger.child({ component: 'reconciler' });
  const engine = await createEngine(config.engine, {
    dataDir: config.dataDir,
    databaseUrl: db.url,
    controlPlanePublicKey: publicKeyPem,
    kubeconfigPolicy: config.kubeconfig,
    log: (msg, fields) => log.info(fields ?? {}, msg),
  });
  if (!engine) {
    log.warn('PROVISIONER_ENGINE=none: no reconciler runs; tenants stay as they are');
    return undefined;
  }
  const r = config.reconciler;
  const reconciler = new Reconciler({
    pool: db.pool,
    writePool,
    notifications,
    engine,
    box,
    workers: r.workers,
    clusterParallelism: r.clusterParallelism,
    leaseTtlMs: r.leaseTtlSeconds * 1000,
    pollMs: r.pollMs,
    resyncMs: r.resyncSeconds * 1000,
    maxFailures: r.maxFailures,
    backoff: { baseMs: r.backoffBaseSeconds * 1000, capMs: r.backoffCapSeconds * 1000 },
    logger: log,
    logSecrets: engineSecrets(config, db.url),
    kubeconfigPolicy: config.kubeconfig,
  });
  await reconciler.start();
  return reconciler;
}

/** Runs until SIGTERM/SIGINT; exits 0 after a clean shutdown. */
export async function serve(env: NodeJS.ProcessEnv = process.env): Promise<void> {
  const config = loadConfig(env);
  const running = await startServer(config);
  // This process stops the embedded PostgreSQL itself, last (running.close()).
  leaveShutdownToCaller();
  running.app.log.info({ url: running.url }, 'provisioner listening');
  let stopping = false;
  const stop = (signal: string) => {
    if (stopping) return;
    stopping = true;
    running.app.log.info({ signal }, 'shutting down');
    running.close().then(() => process.exit(0), (err: unknown) => {
      running.app.log.error({ err }, 'shutdown failed');
      process.exit(1);
    });
  };
  process.on('SIGTERM', () => stop('SIGTERM'));
  process.on('SIGINT', () => stop('SIGINT'));
}
