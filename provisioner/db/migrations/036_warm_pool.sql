-- The warm pool (docs/operations.md "Warm pool"): tenant rows provisioned ahead of signups, with
-- no customer yet (pool_state 'pooled'), each a whole vcluster and runtime on a root cluster. A
-- signup claims one in its transaction (claimed_at; the row becomes the customer's tenant, its id
-- and namespace unchanged) and a `bind` operation then applies the customer's names to it.
-- Pooled rows are not tenants to any reader: listings, counts, change streams, fleet upgrades and
-- the idle loop leave them out.
ALTER TABLE tenants
  ADD COLUMN pool_state text CHECK (pool_state IN ('pooled')),
  ADD COLUMN claimed_at timestamptz;

CREATE INDEX tenants_pool ON tenants (plan, runtime_version, created_at)
  WHERE pool_state = 'pooled' AND NOT deleted;

ALTER TABLE operations DROP CONSTRAINT operations_kind_check;
ALTER TABLE operations
  ADD CONSTRAINT operations_kind_check
  CHECK (kind IN ('create','update','upgrade','suspend','resume','sleep','wake','bind','delete','resync','retry'));
