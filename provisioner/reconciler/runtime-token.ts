/**
 * The runtime token: a `runtime` API key the tenant's agents present to the control plane (the
 * tunnel authenticates with it). The clear key is needed by the engine (it becomes a Secret in
 * the vcluster), so it is kept encrypted on the tenant row (runtime_token_enc, SecretBox, aad
 * `tenant/<id>/runtime-token`); only its hash is in api_keys. Made once, at the first attempt that runs the engine.
 */
import { generateKey, hashKey, keyPrefix } from '../store/key-format.ts';
import type { SecretBox } from '../crypto.ts';
import type { NewRuntimeKey } from '../store/leases.ts';

export function runtimeTokenAad(tenantId: string): string {
  return `tenant/${tenantId}/runtime-token`;
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
  const token = generateKey('runtime');
  return {
    token,
    newKey: { hash: hashKey(token), prefix: keyPrefix(token), enc: box.encrypt(token, runtimeTokenAad(tenantId)) },
  };
}
