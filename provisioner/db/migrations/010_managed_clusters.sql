-- Managed clusters: the clusters a tenant's Argo CD deploys to (issue 16). A registration is part
-- of the tenant's spec (registering or removing one bumps the tenant's generation); its
-- credentials are sealed with the secret box (AAD: managed-cluster/<tenant>/<name>) and never
-- leave the control plane except into the tenant's program. `server_key` is the server URL in a
-- canonical spelling (lower-case host, explicit port, no trailing slash): one server once per
-- tenant. The health probe claims due rows (`probe_due_at`) with SKIP LOCKED, so every replica can
-- probe and each cluster is probed by one of them.
CREATE TABLE managed_clusters (
  id               uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  tenant_id        uuid NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
  name             text NOT NULL,
  server           text NOT NULL,
  server_key       text NOT NULL,
  namespaces       text[] NOT NULL DEFAULT '{}',
  auth_method      text NOT NULL CHECK (auth_method IN ('kubeconfig', 'token')),
  credentials_enc  bytea NOT NULL,
  server_version   text,
  conditions       jsonb NOT NULL DEFAULT '[]',
  probe_due_at     timestamptz NOT NULL DEFAULT now(),
  last_probe_at    timestamptz,
  created_at       timestamptz NOT NULL DEFAULT now(),
  updated_at       timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT managed_clusters_name UNIQUE (tenant_id, name),
  CONSTRAINT managed_clusters_server UNIQUE (tenant_id, server_key)
);
CREATE INDEX managed_clusters_probe_due ON managed_clusters (probe_due_at);
