/**
 * Request logging: one line per request, written when it completes (fastify writes two, one when
 * a request comes in and one when it completes). Successful reads (GET and HEAD answered below
 * 400) are logged at debug level, everything else at info: a client polling its tenant's status
 * does not fill the info log (the metrics count and time every request, and the audit log records
 * every change), while writes and refused or failed requests stay visible. Stream and server
 * errors keep fastify's own lines.
 *
 * A path that holds a secret (a hybrid runtime's install URL holds its bootstrap token) is logged
 * with the secret replaced (`loggedUrl`).
 */
import { LogController, type FastifyReply, type FastifyRequest } from 'fastify';
import { INSTALL_PATH_PREFIX } from '../../runtime/hybrid/install.ts';

/** `url` as the log shows it: the segment after the install path (the bootstrap token) replaced. */
export function loggedUrl(url: string): string {
  return url.startsWith(INSTALL_PATH_PREFIX)
    ? `${INSTALL_PATH_PREFIX}[redacted]${/\.yaml(\?|$)/.test(url) ? '.yaml' : ''}`
    : url;
}

/** The request as fastify's `req` serializer reads it, with the URL as the log shows it. */
function loggedRequest(request: FastifyRequest): FastifyRequest | Record<string, unknown> {
  const url = loggedUrl(request.url);
  if (url === request.url) return request;
  return {
    method: request.method,
    url,
    headers: request.headers,
    host: request.host,
    ip: request.ip,
    socket: request.socket,
  };
}

export class RequestLog extends LogController {
  override incomingRequest(): void {
    // Written with the outcome, in requestCompleted.
  }

  override requestCompleted(error: Error | null | undefined, request: FastifyRequest, reply: FastifyReply): void {
    if (this.isLogDisabled(request)) return;
    const log = reply.log;
    if (error) {
      log.error(
        { req: loggedRequest(request), res: reply, err: error, responseTime: reply.elapsedTime },
        'request errored',
      );
      return;
    }
    const line = { req: loggedRequest(request), res: reply, responseTime: reply.elapsedTime };
    if (reply.statusCode < 400 && (request.method === 'GET' || request.method === 'HEAD'))
      log.debug(line, 'request completed');
    else log.info(line, 'request completed');
  }
}
