/**
 * The interruptible sleep of a polling loop (periodic.ts): `sleep(ms)` waits `ms` or until
 * `kick()`, whichever comes first. A kick that arrives while the loop is busy (not sleeping) is
 * remembered, so the loop's next sleep returns at once: a wake-up between the loop's look and its
 * sleep is never lost. One sleeper at a time.
 */
import { armWait } from './wait.ts';

export class Waker {
  #kicked = false;
  #wake: (() => void) | undefined;

  /** A kick arrived that no sleep has taken yet. */
  get kicked(): boolean {
    return this.#kicked;
  }

  /** Wakes the sleep under way, or makes the next one return at once. */
  kick(): void {
    this.#kicked = true;
    const wake = this.#wake;
    this.#wake = undefined;
    wake?.();
  }

  /** Forgets a kick not taken yet (the loop is about to look anyway). */
  clear(): void {
    this.#kicked = false;
  }

  /** Waits `ms`, or less when kicked; a kick taken by it is forgotten. */
  async sleep(ms: number): Promise<void> {
    if (this.#kicked) {
      this.#kicked = false;
      return;
    }
    const wait = armWait(ms);
    const wake = (): void => {
      this.#kicked = false;
      wait.wake();
    };
    this.#wake = wake;
    await wait.done;
    if (this.#wake === wake) this.#wake = undefined;
  }
}
