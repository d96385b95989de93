-- Watch-driven resync (docs/reconciler.md, "Drift"): the provisioner watches the objects the
-- tenants program owns on each root cluster and, when one of a tenant's objects changes or
-- disappears outside the engine's own runs, asks for a resync of exactly that tenant. The request
-- is kept on the tenant row (why, and since when) until a resync attempt starts; the periodic
-- resync becomes a slow safety net.
ALTER TABLE tenants ADD COLUMN resync_requested_at timestamptz, ADD COLUMN resync_reason text;
CREATE INDEX tenants_resync_requested ON tenants (resync_requested_at) WHERE resync_requested_at IS NOT NULL;
