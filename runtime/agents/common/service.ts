/**
 * What every runtime agent shares: a pino logger, a start-up that turns configuration errors into
 * one clear log line and exit code 2, and a graceful shutdown on SIGTERM/SIGINT (stop accepting,
 * let in-flight work finish within a grace period, then exit).
 */
import type { Server } from 'node:http';
import pino, { type Logger } from 'pino';
import { ConfigError, type LogLevel } from './config.ts';

export interface Service {
  close(): Promise<void>;
}

export function createLogger(name: string, level: LogLevel): Logger {
  return pino({ name, level, base: { service: name } });
}

export async function runService<C extends { logLevel: LogLevel }>(
  name: string,
  loadConfig: () => C,
  start: (config: C, log: Logger) => Promise<Service>,
  graceMs = 10_000,
): Promise<void> {
  let config: C;
  try {
    config = loadConfig();
  } catch (err) {
    const log = createLogger(name, 'info');
    if (err instanceof ConfigError) log.fatal({ variable: err.variable }, `invalid configuration: ${err.message}`);
    else log.fatal({ err }, 'could not load configuration');
    process.exitCode = 2;
    return;
  }
  const log = createLogger(name, config.logLevel);
  const service = await start(config, log);
  let stopping = false;
  const stop = (signal: string): void => {
    if (stopping) return;
    stopping = true;
    log.info({ signal }, 'shutting down');
    const force = setTimeout(() => {
      log.warn({ graceMs }, 'shutdown grace period over; exiting');
      process.exit(1);
    }, graceMs);
    force.unref();
    service.close().then(
      () => {
        log.info('stopped');
        process.exit(0);
      },
      (err: unknown) => {
        log.error({ err }, 'shutdown failed');
        process.exit(1);
      },
    );
  };
  process.once('SIGTERM', () => stop('SIGTERM'));
  process.once('SIGINT', () => stop('SIGINT'));
}

/** Listens and resolves with the bound port (0 picks a free one). */
export function listen(server: Server, port: number, host: string): Promise<number> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      const addr = server.address();
      resolve(typeof addr === 'object' && addr !== null ? addr.port : port);
    });
  });
}

/** Stops accepting, ends idle keep-alive connections, waits for in-flight requests. */
export function closeServer(server: Server): Promise<void> {
  return new Promise((resolve) => {
    if (!server.listening) {
      resolve();
      return;
    }
    server.close(() => resolve());
    server.closeIdleConnections();
  });
}
