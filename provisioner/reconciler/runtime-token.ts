/**
 * The runtime token: a `runtime` API key the tenant's agents present to the control plane (the
 * tunnel authenticates with it). The clear key is needed by the engine (it becomes a Secret in
 * the vcluster), so it is kept encrypted on the tenant row (runtime_token_enc, SecretBox, aad
 * `tenant/<id>/runtime-token`); only its hash is in api_keys. Made at the first attempt that runs
 * the engine — for a warm pool entry that key is its pool credential, and the signup that claims
 * the entry mints the tenant's own in its transaction (newRuntimeKey; store/pool.ts bindClaimedEntry).
 */
import { randomUUID } from 'node:crypto';
import { generateKey, hashKey, keyPrefix } from '../store/key-format.ts';
import type { SecretBox } from '../crypto.ts';
import type { NewRuntimeKey } from '../store/leases.ts';

export function runtimeTokenAad(tenantId: string): string {
  return `tenant/${tenantId}/runtime-token`;
}

/** A new runtime key of the tenant: its clear value, and what is stored of it (id, hash, prefix, sealed value). */
export function newRuntimeKey(box: SecretBox, tenantId: string): { token: string; newKey: NewRuntimeKey } {
  const token = generateKey('runtime');
  return {
    token,
    newKey: {
      id: randomUUID(),
      hash: hashKey(token),
      prefix: keyPrefix(token),
      enc: box.encrypt(token, runtimeTokenAad(tenantId)),
    },
  };
}

/**
 * The tenant's clear runtime token: decrypted when stored, else a new key whose hash and
 * encrypted value the attempt stores (markAttemptRunning) in the statement that starts it.
 */
export function runtimeTokenFor(
  box: SecretBox,
  tenantId: string,
  enc: Buffer | null,
): { token: string; newKey?: NewRuntimeKey } {
  if (enc) return { token: box.decrypt(enc, runtimeTokenAad(tenantId)).toString('utf8') };
  return newRuntimeKey(box, tenantId);
}
