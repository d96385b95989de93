/**
 * When a proxied request may be sent again: the upstream closed a kept-alive connection just as
 * it was reused (the request never reached it). Safe once, on a fresh connection, for idempotent
 * methods when no body has been sent; the caller checks the body and that no response started.
 */
import type { ClientRequest } from 'node:http';

const IDEMPOTENT = new Set(['GET', 'HEAD', 'OPTIONS', 'PUT', 'DELETE', 'TRACE']);

export function retriableUpstreamError(req: ClientRequest, err: Error, method: string): boolean {
  return (
    req.reusedSocket && (err as NodeJS.ErrnoException).code === 'ECONNRESET' && IDEMPOTENT.has(method.toUpperCase())
  );
}

/**
 * The upstream refused the connection (nothing listens at its address yet: a Service without
 * ready endpoints, a server still starting after a wake). The request never reached it, so it may
 * be sent again for any method once no body has been read from the client; the caller bounds how
 * long it keeps trying.
 */
export function refusedUpstreamConnection(err: Error): boolean {
  return (err as NodeJS.ErrnoException).code === 'ECONNREFUSED';
}

/**
 * Paces the tries of a request whose upstream refuses connections: 100 ms, doubling to 1 s, until
 * `budgetMs` has passed since the request came (0: no second try).
 */
export class RefusedConnectionRetry {
  readonly #until: number;
  #tries = 0;

  constructor(budgetMs: number) {
    this.#until = Date.now() + budgetMs;
  }

  /** The wait before the next try, or undefined once the budget is spent. */
  next(): number | undefined {
    const left = this.#until - Date.now();
    if (left <= 0) return undefined;
    return Math.min(1_000, 100 * 2 ** this.#tries++, left);
  }

  /** How many tries were paced so far. */
  get tries(): number {
    return this.#tries;
  }
}
