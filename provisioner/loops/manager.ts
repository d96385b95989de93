/**
 * The process's background work under one manager: every loop (the reconciler, the fleet driver,
 * the managed-cluster prober, …) is a named Runnable with the same lifecycle, registered in one
 * list (services.ts) whose order is the start order and whose reverse is the stop order, as
 * controller-runtime's Manager runs its Runnables. Each runnable keeps its health (LoopHealth:
 * rounds, failures, last success, last error), which /readyz, GET /v1/doctor and /metrics report
 * by name.
 *
 * A runnable belongs to a phase: `services` start with the services (before the HTTP server
 * listens), `workers` once it listens, and stop first, beside the HTTP server's drain
 * (server.ts). Within the list the services come first, so the reverse order stops the workers
 * before what they use.
 */
import type { Logger } from 'pino';

/** When a runnable starts: with the services, or once the HTTP server listens. */
export type LoopPhase = 'services' | 'workers';

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

/** A piece of background work the manager starts and stops. */
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

/** A runnable in the manager's list. */
export interface Registration {
  runnable: Runnable;
  phase: LoopPhase;
  /** Longest wait for its stop, over the manager's (a reconciler's grace period). */
  stopMs?: number;
}

export interface LoopManagerOptions {
  logger?: Logger | undefined;
  /** Longest wait for one runnable to stop (default 30 s); the manager then goes on to the next. */
  stopMs?: number;
}

/**
 * Starts the registered runnables in their order (one phase at a time) and stops them in the
 * reverse order, each within a bound. Names are unique; `services` come before `workers`.
 */
export class LoopManager {
  readonly #list: readonly Registration[];
  readonly #log: Logger | undefined;
  readonly #stopMs: number;
  readonly #controllers = new Map<string, AbortController>();
  readonly #stopping = new Map<string, Promise<void>>();

  constructor(list: ReadonlyArray<Registration | undefined | false>, o: LoopManagerOptions = {}) {
    this.#list = list.filter((r): r is Registration => Boolean(r));
    this.#log = o.logger;
    this.#stopMs = o.stopMs ?? 30_000;
    const names = new Set<string>();
    let workers = false;
    for (const { runnable, phase } of this.#list) {
      if (names.has(runnable.name)) throw new Error(`LoopManager: two runnables are named ${runnable.name}`);
      names.add(runnable.name);
      if (phase === 'workers') workers = true;
      else if (workers) throw new Error(`LoopManager: ${runnable.name} (services) is listed after a worker`);
    }
  }

  /** The registered names, in start order. */
  get names(): string[] {
    return this.#list.map((r) => r.runnable.name);
  }

  /** Each runnable's status, in start order. */
  status(): LoopStatus[] {
    return this.#list.map((r) => r.runnable.status());
  }

  /** The runnable named `name`. */
  get(name: string): Runnable | undefined {
    return this.#list.find((r) => r.runnable.name === name)?.runnable;
  }

  /** Starts the runnables of `phase` in their order, each once. */
  async start(phase: LoopPhase): Promise<void> {
    for (const { runnable, phase: p } of this.#list) {
      if (p !== phase || this.#controllers.has(runnable.name) || this.#stopping.has(runnable.name)) continue;
      const controller = new AbortController();
      this.#controllers.set(runnable.name, controller);
      await runnable.start(controller.signal);
    }
  }

  /** Stops the runnables of `phase` (all: every one) in the reverse order, each within the bound. */
  async stop(phase?: LoopPhase): Promise<void> {
    for (const { runnable, phase: p, stopMs } of [...this.#list].reverse()) {
      if (phase && p !== phase) continue;
      await this.#stopOne(runnable, stopMs);
    }
  }

  #stopOne(runnable: Runnable, stopMs = this.#stopMs): Promise<void> {
    let stopping = this.#stopping.get(runnable.name);
    if (!stopping) {
      this.#controllers.get(runnable.name)?.abort();
      stopping = this.#within(runnable.stop(), runnable.name, stopMs);
      this.#stopping.set(runnable.name, stopping);
    }
    return stopping;
  }

  async #within(work: Promise<void>, name: string, stopMs: number): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<'late'>((resolve) => {
      timer = setTimeout(() => resolve('late'), stopMs);
    });
    const outcome = await Promise.race([
      work.then(
        () => 'stopped' as const,
        (err: unknown) => {
          this.#log?.warn(
            { loop: name, err: err instanceof Error ? err.message : String(err) },
            'stopping a loop failed',
          );
          return 'stopped' as const;
        },
      ),
      late,
    ]);
    clearTimeout(timer);
    if (outcome === 'late')
      this.#log?.warn({ loop: name, afterMs: stopMs }, 'a loop did not stop in time; going on without it');
  }
}

/**
 * A runnable over something with a start and stop of its own (the LISTEN connection, the
 * root-cluster watches): `running` between the two. Its rounds, if it has any, go into `health`.
 */
export function serviceRunnable(
  name: string,
  service: { start(): Promise<void> | void; stop(): Promise<void> | void },
  health: LoopHealth = new LoopHealth(name),
): Runnable {
  let started = false;
  let stopped: Promise<void> | undefined;
  return {
    name,
    async start() {
      if (started || stopped) return;
      started = true;
      await service.start();
      health.state = 'running';
    },
    stop() {
      stopped ??= (async () => {
        if (!started) return;
        health.state = 'stopping';
        await service.stop();
        health.state = 'stopped';
      })();
      return stopped;
    },
    status: () => health.status(),
  };
}
