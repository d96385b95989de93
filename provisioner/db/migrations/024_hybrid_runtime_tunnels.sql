-- Which provisioner replica holds each hybrid runtime's tunnel (issue 37), with the same lease as
-- the hosted runtimes' runtime_tunnels (migration 004): the holding replica writes the row when the
-- tunnel connects, renews `seen_at` in its tunnel directory's renewal round and deletes the row when
-- the tunnel closes; readers ignore a row not renewed within the lease (its replica died) and any
-- replica's renewal sweeps it later. Other replicas read it to show the runtime's tunnel and to
-- relay requests for the runtime to `replica_url`. Kept apart from runtime_tunnels, whose readers
-- (tenants, fleet upgrades, managed clusters) join it by tenant for the hosted runtime only.
-- It replaces the lease-less columns of migration 023.
CREATE TABLE hybrid_runtime_tunnels (
  runtime_id     uuid PRIMARY KEY REFERENCES runtimes (id) ON DELETE CASCADE,
  tenant_id      uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
  connection_id  uuid NOT NULL,
  replica_id     text NOT NULL,
  replica_url    text NOT NULL,
  connected_at   timestamptz NOT NULL,
  seen_at        timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX hybrid_runtime_tunnels_replica ON hybrid_runtime_tunnels (replica_id);

ALTER TABLE runtimes
  DROP COLUMN tunnel_replica,
  DROP COLUMN tunnel_connected_at;
