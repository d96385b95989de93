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
