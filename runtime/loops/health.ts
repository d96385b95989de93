/**
 * What every background loop says of itself, in the control plane (its loop manager reports it on
 * /readyz, GET /v1/doctor and /metrics) and in the runtime's agents alike: its state, its rounds
 * and failures with their times, and its last error (masked, shortened). A loop is a Runnable: a
 * start, a stop that waits for the work under way, and its status.
 */

/** A loop's state: not started yet, running, stopping, stopped, or turned off by its configuration. */
export type LoopState = 'idle' | 'running' | 'stopping' | 'stopped' | 'disabled';

/** What a loop says of itself: /readyz, GET /v1/doctor and the metrics read it. */
export interface LoopStatus {
  name: string;
  state: LoopState;
  /** Rounds run (successful or not) since start. */
  rounds: number;
  /** Rounds that failed since start, and how many of the last ones in a row. */
  failures: number;
  consecutiveFailures: number;
  lastRoundAt: Date | undefined;
  lastSuccessAt: Date | undefined;
  /** The last failure's message (masked and shortened: LoopHealth.fail), and when. */
  lastError: string | undefined;
  lastErrorAt: Date | undefined;
}

/** A piece of background work with a start and a stop (the control plane's manager runs a list of them). */
export interface Runnable {
  readonly name: string;
  /** Starts the work; resolves once it runs. The signal aborts when the manager stops. */
  start(signal: AbortSignal): Promise<void>;
  /** Stops the work and waits for it (idempotent; a no-op when never started). */
  stop(): Promise<void>;
  status(): LoopStatus;
}

/** Longest error message kept in a loop's status. */
const ERROR_CHARS = 300;

/**
 * A loop's health record: rounds, failures and their times. A failure's message is kept with every
 * string of `secrets` masked and cut to 300 characters: the status is shown to operators.
 */
export class LoopHealth {
  readonly name: string;
  state: LoopState = 'idle';
  rounds = 0;
  failures = 0;
  consecutiveFailures = 0;
  lastRoundAt: Date | undefined;
  lastSuccessAt: Date | undefined;
  lastError: string | undefined;
  lastErrorAt: Date | undefined;
  readonly #secrets: () => readonly string[];

  constructor(name: string, secrets: () => readonly string[] = () => []) {
    this.name = name;
    this.#secrets = secrets;
  }

  succeed(at = new Date()): void {
    this.rounds += 1;
    this.consecutiveFailures = 0;
    this.lastRoundAt = at;
    this.lastSuccessAt = at;
  }

  fail(err: unknown, at = new Date()): void {
    this.rounds += 1;
    this.failures += 1;
    this.consecutiveFailures += 1;
    this.lastRoundAt = at;
    this.lastErrorAt = at;
    let text = err instanceof Error ? err.message : String(err);
    for (const s of this.#secrets()) if (s) text = text.replaceAll(s, '***');
    this.lastError = text.length > ERROR_CHARS ? `${text.slice(0, ERROR_CHARS - 1)}…` : text;
  }

  status(): LoopStatus {
    return {
      name: this.name,
      state: this.state,
      rounds: this.rounds,
      failures: this.failures,
      consecutiveFailures: this.consecutiveFailures,
      lastRoundAt: this.lastRoundAt,
      lastSuccessAt: this.lastSuccessAt,
      lastError: this.lastError,
      lastErrorAt: this.lastErrorAt,
    };
  }
}
