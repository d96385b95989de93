/**
 * Request logging: one line per request, written when it completes (fastify writes two, one when
 * a request comes in and one when it completes). Successful reads (GET and HEAD answered below
 * 400) are logged at debug level, everything else at info: a client polling its tenant's status
 * does not fill the info log (the metrics count and time every request, and the audit log records
 * every change), while writes and refused or failed requests stay visible. Stream and server
 * errors keep fastify's own lines.
 */
import { LogController, type FastifyReply, type FastifyRequest } from 'fastify';

export class RequestLog extends LogController {
  override incomingRequest(): void {
    // Written with the outcome, in requestCompleted.
  }

  override requestCompleted(error: Error | null | undefined, request: FastifyRequest, reply: FastifyReply): void {
    if (this.isLogDisabled(request)) return;
    const log = reply.log;
    if (error) {
      log.error({ req: request, res: reply, err: error, responseTime: reply.elapsedTime }, 'request errored');
      return;
    }
    const line = { req: request, res: reply, responseTime: reply.elapsedTime };
    if (reply.statusCode < 400 && (request.method === 'GET' || request.method === 'HEAD'))
      log.debug(line, 'request completed');
    else log.info(line, 'request completed');
  }
}
