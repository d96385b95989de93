/**
 * The provisioner's logger: pino JSON lines to stdout (or to the file `destination`), with
 * secrets redacted. `provisioner serve` and the API benchmark build it the same way.
 */
import pino from 'pino';
import type { Config } from './config.ts';

export function createLogger(level: Config['logLevel'], destination?: string): pino.Logger {
  return pino({
    level,
    redact: { paths: ['req.headers.authorization', 'apiKey', 'key', 'kubeconfig', '*.kubeconfig'], censor: '[redacted]' },
  }, destination === undefined ? undefined : pino.destination({ dest: destination, sync: true }));
}
