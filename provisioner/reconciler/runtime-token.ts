/**
 * The runtime token: a `runtime` API key the tenant's agents present to the control plane (the
 * tunnel authenticates with it). The clear key is needed by the engine (it becomes a Secret in
 * the vcluster), so it is kept encrypted on the tenant row (runtime_token_enc, SecretBox, aad
 * `tenant/<id>/runtime-token`); only its hash is in api_keys. Made once, at the first attempt.
 */
import type { SecretBox } from '../crypto.ts';
import type { Queryable } from '../db/tx.ts';
import { createKey } from '../store/keys.ts';

export function runtimeTokenAad(tenantId: string): string {
  return `tenant/${tenantId}/runtime-token`;
}

/** Returns the tenant's clear runtime token, creating (and storing) it when there is none. */
export async function ensureRuntimeToken(db: Queryable, box: SecretBox, tenantId: string, enc: Buffer | null): Promise<string> {
  if (enc) return box.decrypt(enc, runtimeTokenAad(tenantId)).toString('utf8');
  const { key } = await createKey(db, { role: 'runtime', tenantId, name: 'runtime agents (made by the reconciler)', createdBy: 'system' });
  await db.query('UPDATE tenants SET runtime_token_enc = $2 WHERE id = $1', [tenantId, box.encrypt(key, runtimeTokenAad(tenantId))]);
  return key;
}
