-- Which provisioner replica holds each runtime's tunnel. A replica writes its row when a runtime
-- connects, renews `seen_at` for all its rows every few seconds and deletes a row when the tunnel
-- closes; a row not renewed within the lease (provisioner/tunnel/directory.ts) is ignored and later
-- swept. Other replicas read it to show the tunnel in a tenant's status and to relay requests for
-- that runtime to the replica that holds it (`replica_url`).
CREATE TABLE runtime_tunnels (
  tenant_id      uuid PRIMARY KEY REFERENCES tenants (id) ON DELETE CASCADE,
  connection_id  uuid NOT NULL,
  replica_id     text NOT NULL,
  replica_url    text NOT NULL,
  connected_at   timestamptz NOT NULL,
  seen_at        timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX runtime_tunnels_replica ON runtime_tunnels (replica_id);
