-- A tenant may ask for a region at signup: placement then only considers root clusters of that
-- region. NULL: any region. Fixed once placed (placement is sticky).
ALTER TABLE tenants ADD COLUMN region text;
CREATE INDEX root_clusters_region ON root_clusters (region);
