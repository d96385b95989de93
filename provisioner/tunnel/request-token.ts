/**
 * Signs the short-lived token the control plane attaches to every request it forwards through a
 * tunnel (format: runtime/protocol/request-token.ts). The runtime's app-proxy verifies it with the
 * control plane's public key, so a request that did not come through the control plane is refused.
 */
import { createPrivateKey, createPublicKey, generateKeyPairSync, randomUUID, sign, type KeyObject } from 'node:crypto';
import {
  audienceFor,
  MAX_TOKEN_TTL_SECONDS,
  type RequestTokenClaims,
  TOKEN_HEADER,
  TOKEN_ISSUER,
} from '../../runtime/protocol/request-token.ts';

export interface RequestSignerOptions {
  /** Ed25519 private key, PEM (PKCS#8). */
  privateKeyPem: string;
  /** Token lifetime in seconds, 1..60 (default 30). */
  ttlSeconds?: number;
  /** Clock, for tests. */
  now?: () => number;
}

export interface SignInput {
  tenantId: string;
  /** A hybrid runtime's id: the token is for that runtime only (none: the tenant's hosted runtime). */
  runtimeId?: string;
  method: string;
  /** Path and query exactly as the runtime will receive it. */
  path: string;
  /** The caller's API key id. */
  subject?: string;
}

export interface RequestSigner {
  sign(input: SignInput): string;
  /** The matching public key, PEM (SPKI), to hand to runtimes. */
  readonly publicKeyPem: string;
}

const b64 = (value: unknown): string => Buffer.from(JSON.stringify(value)).toString('base64url');
const ENCODED_HEADER = b64(TOKEN_HEADER);

export function createRequestSigner(opts: RequestSignerOptions): RequestSigner {
  let key: KeyObject;
  try {
    key = createPrivateKey(opts.privateKeyPem);
  } catch (cause) {
    throw new Error('request signing key is not a PEM private key', { cause });
  }
  if (key.asymmetricKeyType !== 'ed25519')
    throw new Error(`request signing key must be Ed25519, not ${key.asymmetricKeyType ?? 'unknown'}`);
  const ttl = opts.ttlSeconds ?? 30;
  if (!Number.isInteger(ttl) || ttl < 1 || ttl > MAX_TOKEN_TTL_SECONDS)
    throw new Error(`request token ttl must be 1..${MAX_TOKEN_TTL_SECONDS} seconds`);
  const now = opts.now ?? Date.now;
  const publicKeyPem = createPublicKey(key).export({ type: 'spki', format: 'pem' }).toString();
  return {
    publicKeyPem,
    sign(input: SignInput): string {
      const iat = Math.floor(now() / 1000);
      const claims: RequestTokenClaims = {
        iss: TOKEN_ISSUER,
        aud: audienceFor(input.tenantId, input.runtimeId),
        iat,
        exp: iat + ttl,
        jti: randomUUID(),
        htm: input.method.toUpperCase(),
        htu: input.path,
        ...(input.subject !== undefined ? { sub: input.subject } : {}),
      };
      const signingInput = `${ENCODED_HEADER}.${b64(claims)}`;
      return `${signingInput}.${sign(null, Buffer.from(signingInput), key).toString('base64url')}`;
    },
  };
}

/** A fresh Ed25519 key pair as PEM, for development and tests. */
export function generateRequestSigningKeys(): { privateKeyPem: string; publicKeyPem: string } {
  const { privateKey, publicKey } = generateKeyPairSync('ed25519');
  return {
    privateKeyPem: privateKey.export({ type: 'pkcs8', format: 'pem' }).toString(),
    publicKeyPem: publicKey.export({ type: 'spki', format: 'pem' }).toString(),
  };
}
