-- The warm pool per root cluster, and the runtime key exchanged at the claim (docs/operations.md
-- "Warm pool", docs/decisions.md "The warm pool (issue 54)").
--
-- Entries are pinned to a root cluster when the pool adds them (tenants.cluster_id set at insert;
-- the reconciler keeps a tenant's cluster), so no column is needed for that.
--
-- pool_credential_id: the pool credential of an entry: the runtime key its runtime authenticates
-- with while unclaimed, minted at its first engine run (stored like any runtime token: hash in
-- api_keys, encrypted clear value in runtime_token_enc). The claim mints the tenant's own runtime
-- key in its transaction and keeps this column; the first engine run that installed the new key
-- and succeeded revokes the credential and clears it.
ALTER TABLE tenants ADD COLUMN pool_credential_id uuid REFERENCES api_keys(id);

-- Unclaimed entries made before this migration: their runtime key is their pool credential.
UPDATE tenants t SET pool_credential_id = k.id
  FROM api_keys k
 WHERE t.pool_state = 'pooled' AND NOT t.deleted
   AND k.tenant_id = t.id AND k.role = 'runtime' AND k.revoked_at IS NULL AND k.runtime_id IS NULL;
