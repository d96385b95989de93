/**
 * The one shape of a polling loop: rounds one after the other, an interruptible wait between them
 * (kick() ends it: a NOTIFY, a finished operation), a growing wait after failed rounds, and a
 * stop that ends the wait and waits for the round under way. The loops that poll (the reconciler,
 * the fleet driver, the managed-cluster prober and token refresher, the tombstone purger) are
 * each a PeriodicLoop with their own round; the manager (manager.ts) starts and stops them.
 */
import type { Logger } from 'pino';
import { Waker } from './waker.ts';
import { LoopHealth, type LoopStatus, type Runnable } from './manager.ts';

/** What a round asks of the loop: the next round at once ('again'), or the usual wait. */
export type RoundResult = void | 'again';

export interface PeriodicLoopOptions {
  name: string;
  /** One round. A throw counts as a failure: the next round comes after retryMs. */
  round: (signal: AbortSignal) => Promise<RoundResult>;
  /** The wait after a successful round (read each time). */
  intervalMs: () => number;
  /** The wait before the first round (default 0). */
  firstDelayMs?: () => number;
  /** The wait after the `failures`-th failed round in a row (default 200 ms doubling, at most 10 s). */
  retryMs?: (failures: number, err: unknown) => number;
  /** Logs a failed round (default: a warning naming the loop, with the next try's delay). */
  onFailure?: (err: unknown, retryInMs: number, failures: number) => void;
  /** Turned off by configuration: start() does nothing and the status says `disabled`. */
  enabled?: boolean;
  /** Runs before the first round (subscriptions, heartbeats); a throw fails start(). */
  setUp?: () => Promise<void> | void;
  /** Runs after the last round (hand back leases, unsubscribe). */
  tearDown?: () => Promise<void> | void;
  /** Strings masked in the status' last error. */
  secrets?: () => readonly string[];
  logger?: Logger | undefined;
}

export const defaultRetryMs = (failures: number): number => Math.min(10_000, 200 * 2 ** (failures - 1));

export class PeriodicLoop implements Runnable {
  readonly name: string;
  readonly health: LoopHealth;
  readonly #options: PeriodicLoopOptions;
  readonly #waker = new Waker();
  readonly #controller = new AbortController();
  #loop: Promise<void> | undefined;
  #stopped: Promise<void> | undefined;

  constructor(o: PeriodicLoopOptions) {
    this.name = o.name;
    this.#options = o;
    this.health = new LoopHealth(o.name, o.secrets);
    if (o.enabled === false) this.health.state = 'disabled';
  }

  /** Aborted once stop() was called: rounds check it to end early. */
  get signal(): AbortSignal {
    return this.#controller.signal;
  }

  get stopping(): boolean {
    return this.#controller.signal.aborted;
  }

  /** Ends the wait under way (or makes the next one return at once): a round now. */
  kick(): void {
    this.#waker.kick();
  }

  async start(signal?: AbortSignal): Promise<void> {
    if (this.#options.enabled === false || this.#loop || this.stopping) return;
    signal?.addEventListener('abort', () => void this.stop(), { once: true });
    await this.#options.setUp?.();
    this.health.state = 'running';
    this.#loop = this.#run();
  }

  stop(): Promise<void> {
    this.#stopped ??= (async () => {
      this.#controller.abort();
      this.#waker.kick();
      if (this.health.state === 'running') this.health.state = 'stopping';
      const started = this.#loop !== undefined;
      await this.#loop;
      if (started) await this.#options.tearDown?.();
      if (this.health.state !== 'disabled') this.health.state = 'stopped';
    })();
    return this.#stopped;
  }

  status(): LoopStatus {
    return this.health.status();
  }

  async #run(): Promise<void> {
    const first = this.#options.firstDelayMs?.() ?? 0;
    if (first > 0) await this.#waker.sleep(first);
    while (!this.stopping) {
      this.#waker.clear();
      let wait: number;
      try {
        const result = await this.#options.round(this.signal);
        this.health.succeed();
        if (result === 'again') continue;
        wait = this.#options.intervalMs();
      } catch (err) {
        this.health.fail(err);
        const failures = this.health.consecutiveFailures;
        wait = (this.#options.retryMs ?? defaultRetryMs)(failures, err);
        if (this.#options.onFailure) this.#options.onFailure(err, wait, failures);
        else
          this.#options.logger?.warn({ loop: this.name, err, retryInMs: wait }, 'loop round failed; next round soon');
      }
      if (this.stopping) break;
      await this.#waker.sleep(wait);
    }
  }
}
