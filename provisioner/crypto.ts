/**
 * Secrets at rest: AES-256-GCM with a random 12-byte nonce per value. Stored layout:
 * version byte (1) | nonce (12) | auth tag (16) | ciphertext. `aad` binds a value to its row
 * (e.g. the cluster name) so that ciphertexts cannot be swapped between rows.
 */
import {
  createCipheriv,
  createDecipheriv,
  createHmac,
  generateKeyPairSync,
  randomBytes,
  timingSafeEqual,
} from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';

const VERSION = 1;

export class SecretBox {
  readonly #key: Buffer;
  readonly #macKey: Buffer;

  constructor(key: Buffer) {
    if (key.length !== 32) throw new Error('encryption key must be 32 bytes');
    this.#key = key;
    this.#macKey = createHmac('sha256', key).update('hosted-runtimes/mac-key/v1').digest();
  }

  encrypt(plaintext: string | Buffer, aad = ''): Buffer {
    const nonce = randomBytes(12);
    const cipher = createCipheriv('aes-256-gcm', this.#key, nonce);
    cipher.setAAD(Buffer.from(aad));
    const body = Buffer.concat([cipher.update(plaintext), cipher.final()]);
    return Buffer.concat([Buffer.from([VERSION]), nonce, cipher.getAuthTag(), body]);
  }

  decrypt(sealed: Buffer, aad = ''): Buffer {
    if (sealed.length < 29 || sealed[0] !== VERSION) throw new Error('sealed value has an unknown format');
    const decipher = createDecipheriv('aes-256-gcm', this.#key, sealed.subarray(1, 13));
    decipher.setAAD(Buffer.from(aad));
    decipher.setAuthTag(sealed.subarray(13, 29));
    return Buffer.concat([decipher.update(sealed.subarray(29)), decipher.final()]);
  }

  /** HMAC-SHA256 of `data` under a key derived from the encryption key (cursors, tokens). */
  mac(data: string): Buffer {
    return createHmac('sha256', this.#macKey).update(data).digest();
  }

  verifyMac(data: string, mac: Buffer): boolean {
    const expected = this.mac(data);
    return mac.length === expected.length && timingSafeEqual(mac, expected);
  }
}

/** A secret file in the data dir: read when present, otherwise made once with mode 0600. */
async function loadOrCreateSecretFile(
  dataDir: string,
  name: string,
  make: () => string,
): Promise<{ text: string; created: boolean; path: string }> {
  const path = join(dataDir, name);
  if (existsSync(path)) return { text: await readFile(path, 'utf8'), created: false, path };
  await mkdir(dataDir, { recursive: true });
  const text = make();
  await writeFile(path, text, { mode: 0o600, flag: 'wx' });
  return { text, created: true, path };
}

/**
 * The development fallback when PROVISIONER_ENCRYPTION_KEY is unset: a key generated once and
 * kept in `<dataDir>/encryption.key` (mode 0600). Returns the key and whether it was just made.
 */
export async function loadOrCreateDevKey(dataDir: string): Promise<{ key: Buffer; created: boolean; path: string }> {
  const f = await loadOrCreateSecretFile(dataDir, 'encryption.key', () => randomBytes(32).toString('hex') + '\n');
  const key = Buffer.from(f.text.trim(), 'hex');
  if (key.length !== 32) throw new Error(`${f.path} does not hold a 32-byte hex key`);
  return { key, created: f.created, path: f.path };
}

/**
 * The development fallback when PROVISIONER_REQUEST_SIGNING_KEY is unset: an Ed25519 key made
 * once and kept in `<dataDir>/request-signing.pem` (mode 0600).
 */
export async function loadOrCreateSigningKey(
  dataDir: string,
): Promise<{ pem: string; created: boolean; path: string }> {
  const f = await loadOrCreateSecretFile(dataDir, 'request-signing.pem', () =>
    generateKeyPairSync('ed25519').privateKey.export({ type: 'pkcs8', format: 'pem' }).toString(),
  );
  return { pem: f.text, created: f.created, path: f.path };
}

/**
 * The development fallback when the passphrase secrets provider is used without
 * PULUMI_CONFIG_PASSPHRASE: a passphrase made once and kept in `<dataDir>/pulumi-passphrase`
 * (mode 0600). Losing it makes the stacks' secrets unreadable: set it explicitly in production.
 */
export async function loadOrCreateDevPassphrase(
  dataDir: string,
): Promise<{ passphrase: string; created: boolean; path: string }> {
  const f = await loadOrCreateSecretFile(
    dataDir,
    'pulumi-passphrase',
    () => randomBytes(24).toString('base64url') + '\n',
  );
  return { passphrase: f.text.trim(), created: f.created, path: f.path };
}
