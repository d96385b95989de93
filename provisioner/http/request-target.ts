/**
 * The request-target check in the HTTP server's request listener (http/app.ts, serverFactory):
 * before fastify routes the request, so before any hook, route or 404 handler sees it. Which
 * targets are refused and why: request-target-rules.ts.
 *
 * A refused request is answered 400 BAD_REQUEST in the API's error shape with a request id and
 * the API's security headers, then the connection is closed (its body is never read). The target
 * itself is neither echoed nor logged: it is the caller's, and may be hostile.
 */
import { randomUUID } from 'node:crypto';
import type { RequestListener } from 'node:http';
import type { BaseLogger } from 'pino';
import { errors } from '../errors.ts';
import { SECURITY_HEADERS } from './security-headers.ts';
import { requestTargetProblem } from '../request-target-rules.ts';

/**
 * `listener` behind the request-target check: a refused request is answered here and never
 * reaches it. `log` gets one line per refusal (method and request id, never the target).
 */
export function checkRequestTargets(listener: RequestListener, log?: BaseLogger): RequestListener {
  return (req, res) => {
    const problem = requestTargetProblem(req.url ?? '');
    if (problem === undefined) {
      listener(req, res);
      return;
    }
    const requestId = randomUUID();
    const err = errors.badRequest(400, problem);
    log?.info(
      { requestId, method: req.method, code: err.code, remoteAddress: req.socket.remoteAddress },
      `request refused before routing: ${problem}`,
    );
    const body = JSON.stringify({ error: { code: err.code, message: err.message, requestId } });
    res.writeHead(err.statusCode, {
      'content-type': 'application/json; charset=utf-8',
      'content-length': Buffer.byteLength(body),
      ...SECURITY_HEADERS,
      connection: 'close',
    });
    res.end(body);
  };
}
