-- Reconciler support (additive): the runtime token the engine hands to a tenant's agents, kept
-- encrypted (SecretBox, aad `tenant/<id>/runtime-token`), and partial indexes for the claim query
-- (spec changed, retry due, resync due) and for counting live leases per root cluster.

ALTER TABLE tenants ADD COLUMN runtime_token_enc bytea;

CREATE INDEX tenants_spec_due ON tenants (updated_at)
  WHERE generation <> observed_generation AND NOT stalled AND phase <> 'Deleted';
CREATE INDEX tenants_retry_due ON tenants (next_attempt_at)
  WHERE next_attempt_at IS NOT NULL AND NOT stalled AND phase <> 'Deleted';
CREATE INDEX tenants_resync_due ON tenants (last_reconciled_at)
  WHERE phase IN ('Ready', 'Suspended') AND NOT stalled;
CREATE INDEX tenants_live_leases ON tenants (cluster_id) WHERE lease_owner IS NOT NULL;
