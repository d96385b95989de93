-- Where a managed cluster is reached from (issue 16): `controlPlane` (the control plane connects
-- to it, within PROVISIONER_MANAGED_CLUSTER_ALLOWED_CIDRS) or `runtime` (only the tenant's runtime
-- reaches it: the registration's checks and the health probes go through the runtime's tunnel).
ALTER TABLE managed_clusters
  ADD COLUMN reach text NOT NULL DEFAULT 'controlPlane' CHECK (reach IN ('controlPlane', 'runtime'));
