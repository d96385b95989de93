/**
 * Headers on every API answer: no content sniffing, and a CSP that lets nothing run or load (the
 * API answers JSON; a runtime's answers pass the tunnel's allow-list). The Swagger UI under /docs
 * sets its own, narrower-than-default CSP for its assets (@fastify/swagger-ui `staticCSP`).
 */
import type { FastifyInstance } from 'fastify';

export const API_CSP = "default-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'; sandbox";

export const SECURITY_HEADERS = {
  'x-content-type-options': 'nosniff',
  'content-security-policy': API_CSP,
} as const;

export function installSecurityHeaders(app: FastifyInstance): void {
  app.addHook('onSend', async (_request, reply, payload) => {
    reply.header('x-content-type-options', 'nosniff');
    reply.header('content-security-policy', API_CSP);
    return payload;
  });
}
