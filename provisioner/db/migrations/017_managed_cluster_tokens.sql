-- Short-lived credentials of managed clusters (issue 16): when the tenant's credentials are a
-- ServiceAccount's token that may request tokens for itself (TokenRequest), the control plane keeps
-- a token of `token_lifetime_seconds` in `credentials_enc` and replaces it before it expires.
-- `token_service_account` is `namespace/name` on the tenant's cluster (null: static credentials);
-- the refresher claims rows whose `token_refresh_due_at` has come with SKIP LOCKED, moving it
-- ahead in the claiming statement (a lease: one replica refreshes a registration at a time).
ALTER TABLE managed_clusters
  ADD COLUMN token_service_account text,
  ADD COLUMN token_expires_at timestamptz,
  ADD COLUMN token_refresh_due_at timestamptz,
  ADD COLUMN token_rotated_at timestamptz,
  ADD COLUMN token_rotations integer NOT NULL DEFAULT 0;
CREATE INDEX managed_clusters_token_refresh_due ON managed_clusters (token_refresh_due_at)
  WHERE token_service_account IS NOT NULL;
