-- Bootstrap tokens of managed clusters (issue 16): a tenant asks for a single-use token (stored as
-- its SHA-256 only) valid for at most an hour; redeeming it registers the cluster whose
-- ServiceAccount the bootstrap created. `redeemed_at` is set in the statement that claims the
-- token, so it is redeemed once; a redemption that fails the cluster's checks gives it back.
CREATE TABLE managed_cluster_bootstraps (
  id            uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  tenant_id     uuid NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
  name          text NOT NULL,
  namespaces    text[] NOT NULL DEFAULT '{}',
  cluster_wide  boolean NOT NULL DEFAULT false,
  token_hash    text NOT NULL,
  expires_at    timestamptz NOT NULL,
  redeemed_at   timestamptz,
  created_by    text NOT NULL,
  created_at    timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT managed_cluster_bootstraps_token UNIQUE (token_hash)
);
CREATE INDEX managed_cluster_bootstraps_tenant ON managed_cluster_bootstraps (tenant_id);
-- What a bootstrap created on the tenant's cluster (the ServiceAccount, the namespaces of its
-- Roles, a ClusterRole), for DELETE to revoke it; null when the tenant gave the credentials.
ALTER TABLE managed_clusters ADD COLUMN created_objects jsonb;
