-- A claim that places tenants counts the live tenants of every candidate cluster (capacity).
-- With only tenants_cluster that count read every tenant row of those clusters (or scanned the
-- table): this partial index answers it from the index alone, and the leases count keeps using
-- tenants_live_leases.
CREATE INDEX tenants_live_by_cluster ON tenants (cluster_id) WHERE phase <> 'Deleted';
