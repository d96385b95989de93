/**
 * Verifies the control plane's request token (format: runtime/protocol/request-token.ts) with the
 * control plane's public key only. A token is accepted once, for its runtime, method and path,
 * until it expires (at most 60 s after it was signed).
 */
import { createPublicKey, type KeyObject, verify } from 'node:crypto';
import {
  audienceFor,
  MAX_TOKEN_TTL_SECONDS,
  type RequestTokenClaims,
  TOKEN_ISSUER,
} from '../../protocol/request-token.ts';

export type VerifyResult = { ok: true; claims: RequestTokenClaims } | { ok: false; reason: string };

export interface VerifyOptions {
  publicKey: KeyObject;
  tenantId: string;
  /** A hybrid runtime's id (RUNTIME_ID): only tokens for this runtime are accepted; none: the tenant's hosted runtime. */
  runtimeId?: string | undefined;
  method: string;
  /** Path and query as received. */
  path: string;
  nowMs: number;
  /** Allowed clock difference, seconds (default 5). */
  skewSeconds?: number;
}

export function loadPublicKey(pem: string): KeyObject {
  const key = createPublicKey(pem);
  if (key.asymmetricKeyType !== 'ed25519')
    throw new Error(`control plane public key must be Ed25519, not ${key.asymmetricKeyType ?? 'unknown'}`);
  return key;
}

function decodeJson(part: string): unknown {
  try {
    return JSON.parse(Buffer.from(part, 'base64url').toString('utf8'));
  } catch {
    return undefined;
  }
}

export function verifyRequestToken(token: string, opts: VerifyOptions): VerifyResult {
  const parts = token.split('.');
  if (parts.length !== 3 || token.length > 4096) return { ok: false, reason: 'malformed token' };
  const [h, p, s] = parts as [string, string, string];
  const header = decodeJson(h);
  if (typeof header !== 'object' || header === null || (header as { alg?: unknown }).alg !== 'EdDSA')
    return { ok: false, reason: 'unsupported token algorithm' };
  const sig = Buffer.from(s, 'base64url');
  if (sig.length !== 64 || !verify(null, Buffer.from(`${h}.${p}`), opts.publicKey, sig))
    return { ok: false, reason: 'bad signature' };
  const c = decodeJson(p) as Partial<RequestTokenClaims> | undefined;
  if (typeof c !== 'object' || c === null) return { ok: false, reason: 'malformed claims' };
  const skew = opts.skewSeconds ?? 5;
  const now = opts.nowMs / 1000;
  if (c.iss !== TOKEN_ISSUER) return { ok: false, reason: 'wrong issuer' };
  if (c.aud !== audienceFor(opts.tenantId, opts.runtimeId))
    return { ok: false, reason: 'token is for another runtime' };
  if (typeof c.iat !== 'number' || typeof c.exp !== 'number' || c.exp - c.iat > MAX_TOKEN_TTL_SECONDS)
    return { ok: false, reason: 'bad lifetime' };
  if (c.exp + skew < now) return { ok: false, reason: 'token expired' };
  if (c.iat - skew > now) return { ok: false, reason: 'token issued in the future' };
  if (c.htm !== opts.method.toUpperCase() || c.htu !== opts.path)
    return { ok: false, reason: 'token is for another request' };
  if (typeof c.jti !== 'string' || c.jti === '') return { ok: false, reason: 'token has no id' };
  return { ok: true, claims: c as RequestTokenClaims };
}

/**
 * Remembers token ids until they expire so that a token is used once. Bounded: when full, the
 * oldest entries are dropped first (they are also the closest to expiry).
 */
export class ReplayCache {
  readonly #seen = new Map<string, number>();
  readonly #max: number;
  constructor(max = 100_000) {
    this.#max = max;
  }

  /** Records `jti`; false when it was already used. */
  use(jti: string, expSeconds: number, nowMs: number): boolean {
    if (this.#seen.has(jti)) return false;
    const now = nowMs / 1000;
    if (this.#seen.size >= this.#max) {
      for (const [k, exp] of this.#seen) {
        if (exp >= now && this.#seen.size < this.#max) break;
        this.#seen.delete(k);
      }
    }
    this.#seen.set(jti, expSeconds);
    return true;
  }

  get size(): number {
    return this.#seen.size;
  }
}
