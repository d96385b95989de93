/**
 * The provisioner's logger: pino JSON lines to stdout (or to the file `destination`), with
 * secrets redacted. When stdout is a terminal (someone runs `npm start` and reads along) each
 * line is written readably instead: time, level, component, message, then the fields as
 * key=value. `provisioner serve` and the API benchmark build it the same way.
 */
import { Writable } from 'node:stream';
import pino from 'pino';
import type { Config } from './config.ts';

export function createLogger(
  level: Config['logLevel'],
  destination?: string,
  opts: { pretty?: boolean } = {},
): pino.Logger {
  const pretty = opts.pretty ?? (destination === undefined && process.stdout.isTTY === true);
  return pino(
    {
      level,
      redact: {
        paths: ['req.headers.authorization', 'apiKey', 'key', 'kubeconfig', '*.kubeconfig'],
        censor: '[redacted]',
      },
    },
    destination !== undefined
      ? pino.destination({ dest: destination, sync: true })
      : pretty
        ? prettyStream((line) => process.stdout.write(line))
        : undefined,
  );
}

const LEVELS: Record<number, string> = { 10: 'TRACE', 20: 'DEBUG', 30: 'INFO', 40: 'WARN', 50: 'ERROR', 60: 'FATAL' };
/** Fields every line has, or that the pretty line shows in its own place. */
const SHOWN = new Set(['level', 'time', 'pid', 'hostname', 'msg', 'component', 'reqId']);

/** A field's value: a plain word as it is, anything else as JSON (quoted, one line). */
function fieldText(value: unknown): string {
  return typeof value === 'string' && /^[^\s="\\]+$/.test(value) ? value : JSON.stringify(value);
}

/**
 * One pino JSON line as a terminal line: `12:04:05.123 WARN  [reconciler] message key=value …`.
 * An error's stack, when there is one, follows on its own indented lines. A line that is not
 * JSON is passed through.
 */
export function prettyLine(json: string): string {
  let o: Record<string, unknown>;
  try {
    o = JSON.parse(json) as Record<string, unknown>;
  } catch {
    return json.endsWith('\n') ? json : json + '\n';
  }
  const time = typeof o.time === 'number' ? new Date(o.time).toISOString().slice(11, 23) : '';
  const level = (LEVELS[o.level as number] ?? String(o.level)).padEnd(5);
  const component = typeof o.component === 'string' ? ` [${o.component}]` : '';
  const fields: string[] = [];
  let stack = '';
  for (const [k, v] of Object.entries(o)) {
    if (SHOWN.has(k) || v === undefined) continue;
    if (k === 'err' && v !== null && typeof v === 'object' && typeof (v as { stack?: unknown }).stack === 'string') {
      stack = '\n    ' + (v as { stack: string }).stack.split('\n').join('\n    ');
      continue;
    }
    if (k === 'req' && v !== null && typeof v === 'object') {
      const r = v as { method?: string; url?: string };
      fields.push(`${r.method ?? ''} ${r.url ?? ''}`.trim());
      continue;
    }
    if (k === 'res' && v !== null && typeof v === 'object') {
      fields.push(`status=${String((v as { statusCode?: unknown }).statusCode)}`);
      continue;
    }
    fields.push(`${k}=${fieldText(v)}`);
  }
  return `${time} ${level}${component} ${typeof o.msg === 'string' ? o.msg : ''}${fields.length ? ' ' + fields.join(' ') : ''}${stack}\n`;
}

/** A pino destination that writes each JSON line through prettyLine. */
export function prettyStream(write: (text: string) => void): Writable {
  let rest = '';
  return new Writable({
    write(chunk: Buffer, _enc, cb) {
      const text = rest + chunk.toString();
      const lines = text.split('\n');
      rest = lines.pop() ?? '';
      for (const l of lines) if (l) write(prettyLine(l));
      cb();
    },
  });
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
