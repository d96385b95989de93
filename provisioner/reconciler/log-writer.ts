/**
 * Streams engine output into operation_logs: lines are buffered and appended in batches (every
 * `flushMs` or `maxBatch` lines), each batch followed by a NOTIFY on `operation_log` so that
 * followers read it at once. Known secret values are masked before anything is stored, and the
 * engine's lines (streams `engine` and `event`) are stored in their tenant-visible form
 * (visible-text.ts: upstream response bodies withheld). Each resource step is one line: the
 * engine's line when the step ends (its progress line is left out, isStepUnderWay), and the engine's
 * events add only the change summary (engine/pulumi.ts summarizeEvent).
 */
import type pg from 'pg';
import { parse } from 'yaml';
import { appendLogAndNotify } from '../store/operations.ts';
import { maskSecrets, secretList, tenantVisible } from './visible-text.ts';

const MAX_LINE = 4000;

/**
 * The engine's progress line of a resource step under way, and nothing else on it:
 * ` +  kubernetes:core/v1:Namespace tenant-x creating (0s) `. The same step's line when it ends
 * (`created (0.52s)`, `creating failed`, or one carrying a status or an error after the time) says
 * what this one does and more, so only that one is kept: each resource step is one line of the
 * log. Anchored at both ends with bounded runs: linear in the line.
 */
const STEP_UNDER_WAY =
  /^\s{0,4}[-+~<>=*]{0,3}\s{1,4}[A-Za-z0-9_.-]+:[A-Za-z0-9_./-]*:[A-Za-z0-9_.]+\s\S+\s(?:creating|updating|deleting|replacing|reading|refreshing|importing|discarding|creating replacement|deleting original|deleting replaced)\s\(\d+(?:\.\d+)?m?s\)\s*$/;

/** Whether an engine line only says that a resource step is under way (STEP_UNDER_WAY). */
export function isStepUnderWay(line: string): boolean {
  return line.length < 1000 && STEP_UNDER_WAY.test(line);
}

const SECRET_FIELD = /(?:-data|token|password|secret|key)$/i;

/**
 * Values worth masking from a kubeconfig (YAML or JSON): keys, certificates, tokens, passwords,
 * and the values of an exec plugin's environment. The document is parsed, not matched as text,
 * so every spelling and quoting is found; an unparsable one yields nothing (it is never used).
 */
export function kubeconfigSecrets(kubeconfig: string): string[] {
  let doc: unknown;
  try {
    doc = parse(kubeconfig, { maxAliasCount: 16 });
  } catch {
    return [];
  }
  const out = new Set<string>();
  const walk = (value: unknown, key: string): void => {
    if (typeof value === 'string') {
      if (SECRET_FIELD.test(key) && value.length >= 6) out.add(value);
    } else if (Array.isArray(value)) {
      for (const v of value) walk(v, key);
    } else if (typeof value === 'object' && value !== null) {
      const entries = Object.entries(value as Record<string, unknown>);
      // exec env: [{name, value}]: every value is treated as a secret.
      if (key === 'env') for (const [k, v] of entries) if (k === 'value') walk(v, 'secret');
      for (const [k, v] of entries) walk(v, k);
    }
  };
  walk(doc, '');
  return [...out];
}

export class LogWriter {
  readonly #pool: pg.Pool;
  readonly #operationId: string;
  readonly #secrets: string[];
  readonly #flushMs: number;
  readonly #maxBatch: number;
  #buffer: Array<{ stream: string; line: string }> = [];
  #partial = '';
  #timer: NodeJS.Timeout | undefined;
  #chain: Promise<void> = Promise.resolve();
  #errors = 0;

  constructor(
    pool: pg.Pool,
    operationId: string,
    opts: { secrets?: string[]; flushMs?: number; maxBatch?: number } = {},
  ) {
    this.#pool = pool;
    this.#operationId = operationId;
    this.#secrets = secretList(opts.secrets ?? []);
    this.#flushMs = opts.flushMs ?? 100;
    this.#maxBatch = opts.maxBatch ?? 200;
  }

  /** Appends engine output (may hold partial lines; they are joined). */
  output(text: string, stream = 'engine'): void {
    const parts = (this.#partial + text).split('\n');
    this.#partial = parts.pop() ?? '';
    for (const p of parts) this.line(p, stream);
  }

  /**
   * One line; stream `reconciler` for the reconciler's own words, anything else is the engine's.
   * The engine's line of a step under way is left out: its line when it ends follows.
   */
  line(line: string, stream = 'reconciler'): void {
    const raw = line.replace(/\r$/, '');
    if (stream === 'engine' && isStepUnderWay(raw)) return;
    let clean = stream === 'reconciler' ? maskSecrets(raw, this.#secrets) : tenantVisible(raw, this.#secrets);
    if (clean.length > MAX_LINE) clean = clean.slice(0, MAX_LINE) + '…';
    this.#buffer.push({ stream, line: clean });
    if (this.#buffer.length >= this.#maxBatch) this.#schedule(0);
    else this.#schedule(this.#flushMs);
  }

  #schedule(ms: number): void {
    if (this.#timer && ms > 0) return;
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      void this.flush();
    }, ms);
  }

  /** Writes what is buffered; resolves when it is stored. Never rejects (log loss is counted). */
  flush(): Promise<void> {
    if (this.#timer) {
      clearTimeout(this.#timer);
      this.#timer = undefined;
    }
    const batch = this.#buffer;
    this.#buffer = [];
    if (batch.length === 0) return this.#chain;
    this.#chain = this.#chain.then(async () => {
      try {
        await appendLogAndNotify(this.#pool, this.#operationId, batch);
      } catch {
        this.#errors += batch.length;
      }
    });
    return this.#chain;
  }

  /** Flushes the partial last line and everything buffered. */
  async close(): Promise<void> {
    if (this.#partial !== '') {
      const rest = this.#partial;
      this.#partial = '';
      this.line(rest, 'engine');
    }
    await this.flush();
  }

  /** Lines that could not be stored (database errors). */
  get lostLines(): number {
    return this.#errors;
  }
}
