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
