/**
 * The process's background work under one manager: every loop (the reconciler, the fleet driver,
 * the managed-cluster prober, …) is a named Runnable with the same lifecycle, registered in one
 * list (services.ts) whose order is the start order and whose reverse is the stop order, as
 * controller-runtime's Manager runs its Runnables. Each runnable keeps its health (LoopHealth:
 * rounds, failures, last success, last error), which /readyz, GET /v1/doctor and /metrics report
 * by name. The loop shape, the health record and the Runnable interface are runtime/loops/'s
 * (shared with the runtime's agents); the manager and its phases are the control plane's.
 *
 * A runnable belongs to a phase: `services` start with the services (before the HTTP server
 * listens), `workers` once it listens, and stop first, beside the HTTP server's drain
 * (server.ts). Within the list the services come first, so the reverse order stops the workers
 * before what they use.
 */
import type { Logger } from 'pino';
import { LoopHealth, type LoopStatus, type Runnable } from '../../runtime/loops/health.ts';

/** When a runnable starts: with the services, or once the HTTP server listens. */
export type LoopPhase = 'services' | 'workers';

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
