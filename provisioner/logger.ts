/**
 * The provisioner's logger: pino JSON lines to stdout (or to the file `destination`), with
 * secrets redacted. `provisioner serve` and the API benchmark build it the same way.
 */
import pino from 'pino';
import type { Config } from './config.ts';

export function createLogger(level: Config['logLevel'], destination?: string): pino.Logger {
  return pino(
    {
      level,
      redact: {
        paths: ['req.headers.authorization', 'apiKey', 'key', 'kubeconfig', '*.kubeconfig'],
        censor: '[redacted]',
      },
    },
    destination === undefined ? undefined : pino.destination({ dest: destination, sync: true }),
  );
}

/** Logs at most one line per key per window, counting the ones it leaves out. */
export class RateLimitedLog {
  readonly #windowMs: number;
  readonly #now: () => number;
  readonly #seen = new Map<string, { at: number; suppressed: number }>();

  constructor(windowMs: number, now: () => number = Date.now) {
    this.#windowMs = windowMs;
    this.#now = now;
  }

  /** Calls `write(suppressed)` when `key` was not written within the window; else counts it. */
  maybe(key: string, write: (suppressed: number) => void): void {
    const now = this.#now();
    const s = this.#seen.get(key);
    if (s && now - s.at < this.#windowMs) {
      s.suppressed++;
      return;
    }
    this.#seen.set(key, { at: now, suppressed: 0 });
    write(s?.suppressed ?? 0);
  }
}
