/**
 * The control-plane request token: a compact, JWT-shaped token (`header.payload.signature`,
 * base64url, alg EdDSA over Ed25519) the control plane signs for every request it forwards
 * through a tunnel, and the app-proxy verifies with the control plane's public key only.
 * It binds the request to one runtime (audience: a tenant's hosted runtime, or one of its hybrid
 * runtimes), one method and one path, for at most 60 s.
 */

/** Header carrying the token on forwarded requests. */
export const REQUEST_TOKEN_HEADER = 'x-hrt-request-token';
export const TOKEN_ISSUER = 'hrt-control-plane';
/** Tokens never live longer than this, whatever a signer is configured with. */
export const MAX_TOKEN_TTL_SECONDS = 60;

export interface RequestTokenClaims {
  iss: typeof TOKEN_ISSUER;
  /**
   * audienceFor(): `runtime:<tenantId>` for a tenant's hosted runtime, `runtime:<tenantId>/<runtimeId>`
   * for one of its hybrid runtimes; only that runtime accepts it.
   */
  aud: string;
  /** Seconds since the epoch. */
  iat: number;
  exp: number;
  /** Unique id (for logs and replay detection). */
  jti: string;
  /** The HTTP method and path (with query) the token is valid for. */
  htm: string;
  htu: string;
  /** Who called the control plane (API key id), for the runtime's logs. */
  sub?: string;
}

/**
 * The subject of the control plane's own requests (a managed-cluster check), never an API key id:
 * the routes only the control plane may call require it.
 */
export const CONTROL_PLANE_SUBJECT = 'control-plane';

export const TOKEN_HEADER = { alg: 'EdDSA', typ: 'JWT' } as const;

/**
 * The audience of a request for a runtime: the tenant's hosted runtime (no runtime id), or one of
 * its hybrid runtimes. A hosted runtime's token is refused by every hybrid runtime of the tenant
 * and the reverse, so a token cannot be replayed against another runtime of the same tenant.
 */
export function audienceFor(tenantId: string, runtimeId?: string): string {
  return runtimeId === undefined ? `runtime:${tenantId}` : `runtime:${tenantId}/${runtimeId}`;
}
