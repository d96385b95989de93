/**
 * The control-plane request token: a compact, JWT-shaped token (`header.payload.signature`,
 * base64url, alg EdDSA over Ed25519) the control plane signs for every request it forwards
 * through a tunnel, and the app-proxy verifies with the control plane's public key only.
 * It binds the request to one tenant (audience), one method and one path, for at most 60 s.
 */

/** Header carrying the token on forwarded requests. */
export const REQUEST_TOKEN_HEADER = 'x-hrt-request-token';
export const TOKEN_ISSUER = 'hrt-control-plane';
/** Tokens never live longer than this, whatever a signer is configured with. */
export const MAX_TOKEN_TTL_SECONDS = 60;

export interface RequestTokenClaims {
  iss: typeof TOKEN_ISSUER;
  /** `runtime:<tenantId>`: only that tenant's runtime accepts it. */
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

export function audienceFor(tenantId: string): string {
  return `runtime:${tenantId}`;
}
