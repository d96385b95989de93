/**
 * `provisioner serve`: validates config, resolves the development secrets kept in the data dir,
 * opens the database (embedded when DATABASE_URL is unset), makes sure an admin key exists,
 * builds the services (services.ts) and the HTTP API over them, starts them, and shuts everything
 * down in order on SIGTERM/SIGINT (docs/operations.md "Stopping a provisioner").
 */
import type { FastifyInstance } from 'fastify';
import type pino from 'pino';
import type pg from 'pg';
import { loadConfig, type Config } from './config.ts';
import { loadOrCreateDevKey, loadOrCreateDevPassphrase, loadOrCreateSigningKey } from './crypto.ts';
import { DatabaseHealth } from './db/availability.ts';
import { openDatabase, type Database } from './db/database.ts';
import { leaveShutdownToCaller, type EmbeddedLog } from './db/embedded.ts';
import { createLogger } from './logger.ts';
import { buildApp } from './http/app.ts';
import type { Reconciler } from './reconciler/reconciler.ts';
import { buildServices, type Services } from './services.ts';
import { createKey, hasActiveAdmin, keyExists } from './store/keys.ts';
import { exitAfterOutput } from './cli/exit.ts';

export interface Running {
  config: Config;
  app: FastifyInstance;
  db: Database;
  url: string;
  /** The process's services (services.ts). */
  services: Services;
  /** The reconcile loop (services.reconciler); undefined with PROVISIONER_ENGINE=none. */
  reconciler: Reconciler | undefined;
  /** Stops accepting requests, finishes in-flight ones, closes the database. */
  close(): Promise<void>;
}

/** Ensures an admin key exists. Returns a newly generated key when it had to make one. */
export async function bootstrapAdmin(pool: pg.Pool, token: string | undefined): Promise<string | undefined> {
  if (token !== undefined) {
    if (!(await keyExists(pool, token)))
      await createKey(pool, {
        role: 'admin',
        name: 'bootstrap (PROVISIONER_ADMIN_TOKEN)',
        createdBy: 'system',
        key: token,
      });
    return undefined;
  }
  if (await hasActiveAdmin(pool)) return undefined;
  const { key } = await createKey(pool, { role: 'admin', name: 'bootstrap (generated)', createdBy: 'system' });
  return key;
}

/**
 * Fills in the secrets left unset with development ones kept in the data dir (each with a
 * warning): the encryption key, the Pulumi passphrase, the request-signing key.
 */
async function withDevelopmentSecrets(given: Config, logger: pino.Logger): Promise<Config> {
  let config = given;
  if (!config.encryptionKey) {
    const dev = await loadOrCreateDevKey(config.dataDir);
    config = { ...config, encryptionKey: dev.key };
    logger.warn(
      { path: dev.path, created: dev.created },
      'PROVISIONER_ENCRYPTION_KEY is not set: using a development key kept in the data dir; set it in production',
    );
  }
  if (
    config.engine.kind === 'pulumi' &&
    config.engine.secretsProvider === 'passphrase' &&
    config.engine.passphrase === undefined
  ) {
    const dev = await loadOrCreateDevPassphrase(config.dataDir);
    config = { ...config, engine: { ...config.engine, passphrase: dev.passphrase } };
    logger.warn(
      { path: dev.path, created: dev.created },
      'PULUMI_CONFIG_PASSPHRASE is not set: using a development passphrase kept in the data dir; set it (or a KMS secrets provider) in production',
    );
  }
  if (!config.requestSigningKeyPem) {
    const dev = await loadOrCreateSigningKey(config.dataDir);
    config = { ...config, requestSigningKeyPem: dev.pem };
    if (dev.created)
      logger.warn(
        { path: dev.path },
        'PROVISIONER_REQUEST_SIGNING_KEY is not set: generated a request-signing key in the data dir',
      );
  }
  return config;
}

export async function startServer(given: Config, opts: { out?: (line: string) => void } = {}): Promise<Running> {
  const out = opts.out ?? ((line: string) => process.stdout.write(line + '\n'));
  const logger = createLogger(given.logLevel);
  const config = await withDevelopmentSecrets(given, logger);
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
    const services = await buildServices(config, db, { logger });
    let app: FastifyInstance | undefined;
    try {
      app = await buildApp(services);
      await services.start();
      const url = await app.listen({ port: config.port, host: config.host });
      await services.startWorkers();
      const running = app;
      return {
        config,
        app,
        db,
        url,
        services,
        reconciler: services.reconciler,
        async close() {
          // At the same time: stop the workers (the reconciler stops claiming, lets running operations
          // finish within their grace period and hands back the rest); drain the tunnels while the
          // API keeps serving, then stop it.
          await Promise.all([services.stopWorkers(), running.close()]);
          // The database's part is bounded: a database that is gone or hangs costs at most this.
          // The services hand their connections back (the LISTEN one, the write pool) before the pool ends.
          await within(DATABASE_CLOSE_MS, Promise.allSettled([services.stop().finally(() => db.close())]), () =>
            logger.warn({ afterMs: DATABASE_CLOSE_MS }, 'the database connections did not close in time; leaving them'),
          );
        },
      };
    } catch (err) {
      await services.reconciler?.stop({ graceMs: 0 }).catch(() => {});
      await services.stopWorkers().catch(() => {});
      await app?.close();
      await services.stop();
      throw err;
    }
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
  const timedOut = new Promise<boolean>((resolve) => {
    timer = setTimeout(() => resolve(true), ms);
  });
  const outcome = await Promise.race([work.then(() => false), timedOut]);
  clearTimeout(timer);
  if (outcome) late();
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
    running.close().then(
      () => exitAfterOutput(0),
      (err: unknown) => {
        running.app.log.error({ err }, 'shutdown failed');
        return exitAfterOutput(1);
      },
    );
  };
  process.on('SIGTERM', () => stop('SIGTERM'));
  process.on('SIGINT', () => stop('SIGINT'));
}
