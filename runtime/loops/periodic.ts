/**
 * The one shape of a background loop: rounds one after the other (never two at once), an
 * interruptible wait between them (kick() ends it: a NOTIFY, a finished operation, a lost
 * connection), a growing wait after failed rounds, and a stop that ends the wait and waits for the
 * round under way. The control plane's loops (the reconciler and its lease heartbeat, the LISTEN
 * connection, the tunnel directory, the drift watch, the purgers, …) and the runtime's agents'
 * (the upgrader, the event reporter's Lease and digests) are each a PeriodicLoop with their own
 * round; the control plane's manager (provisioner/loops/manager.ts) starts and stops its loops.
 */
import type { Logger } from 'pino';
import { Waker } from './waker.ts';
import { LoopHealth, type LoopStatus, type Runnable } from './health.ts';

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
  /** start() resolves once the first round ended (successful or not), not as soon as the loop runs. */
  startAfterFirstRound?: boolean;
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
  /** Callers of runNow() waiting for a round that has not begun yet. */
  #next: Array<() => void> = [];
  /** A round run by runNow() while the loop does not run. */
  #direct: Promise<void> | undefined;

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

  /** The loop runs rounds (started, not stopping). */
  get running(): boolean {
    return this.#loop !== undefined && !this.stopping;
  }

  /** Ends the wait under way (or makes the next one return at once): a round now. */
  kick(): void {
    this.#waker.kick();
  }

  /**
   * A round now, and waits for it: resolves once a round that began after the call ended
   * (successful or not), or the loop stopped. While the loop does not run (before start, after
   * stop, turned off), runs the round itself, one such round at a time.
   */
  runNow(): Promise<void> {
    if (!this.running) {
      const run = async (): Promise<void> => {
        await this.#direct?.catch(() => undefined);
        await this.#oneRound();
      };
      const p = run();
      this.#direct = p;
      return p.finally(() => {
        if (this.#direct === p) this.#direct = undefined;
      });
    }
    const ended = new Promise<void>((resolve) => this.#next.push(resolve));
    this.kick();
    return ended;
  }

  async start(signal?: AbortSignal): Promise<void> {
    if (this.#options.enabled === false || this.#loop || this.stopping) return;
    signal?.addEventListener('abort', () => void this.stop(), { once: true });
    await this.#options.setUp?.();
    this.health.state = 'running';
    let firstEnded: () => void = () => {};
    const first = new Promise<void>((resolve) => (firstEnded = resolve));
    this.#loop = this.#run(firstEnded);
    if (this.#options.startAfterFirstRound) await first;
  }

  stop(): Promise<void> {
    this.#stopped ??= (async () => {
      this.#controller.abort();
      this.#waker.kick();
      if (this.health.state === 'running') this.health.state = 'stopping';
      const started = this.#loop !== undefined;
      await this.#loop;
      for (const resolve of this.#next.splice(0)) resolve();
      await this.#direct?.catch(() => undefined);
      if (started) await this.#options.tearDown?.();
      if (this.health.state !== 'disabled') this.health.state = 'stopped';
    })();
    return this.#stopped;
  }

  status(): LoopStatus {
    return this.health.status();
  }

  /** One round with its health; answers the wait before the next one ('again': none). */
  async #oneRound(): Promise<number | 'again'> {
    try {
      const result = await this.#options.round(this.signal);
      this.health.succeed();
      return result === 'again' ? 'again' : this.#options.intervalMs();
    } catch (err) {
      this.health.fail(err);
      const failures = this.health.consecutiveFailures;
      const wait = (this.#options.retryMs ?? defaultRetryMs)(failures, err);
      if (this.#options.onFailure) this.#options.onFailure(err, wait, failures);
      else this.#options.logger?.warn({ loop: this.name, err, retryInMs: wait }, 'loop round failed; next round soon');
      return wait;
    }
  }

  async #run(firstEnded: () => void): Promise<void> {
    try {
      const first = this.#options.firstDelayMs?.() ?? 0;
      if (first > 0) await this.#waker.sleep(first);
      while (!this.stopping) {
        this.#waker.clear();
        const waiting = this.#next.splice(0);
        const wait = await this.#oneRound();
        for (const resolve of waiting) resolve();
        firstEnded();
        if (this.stopping) break;
        if (wait !== 'again') await this.#waker.sleep(wait);
      }
    } finally {
      firstEnded();
    }
  }
}
