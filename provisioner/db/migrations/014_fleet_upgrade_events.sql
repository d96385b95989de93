-- A fleet upgrade's progress as events (GET /v1/fleet-upgrades/:id/events, Server-Sent Events,
-- resumable with Last-Event-ID = seq): one row per decision, written in the transaction that makes
-- it. Every writer holds the fleet upgrade's row lock, so one fleet upgrade's seqs commit in order.
CREATE TABLE fleet_upgrade_events (
  fleet_upgrade_id  uuid NOT NULL REFERENCES fleet_upgrades (id) ON DELETE CASCADE,
  seq               bigint GENERATED ALWAYS AS IDENTITY,
  at                timestamptz NOT NULL DEFAULT now(),
  action            text NOT NULL,
  tenant_id         uuid,
  data              jsonb NOT NULL DEFAULT '{}'::jsonb,
  PRIMARY KEY (fleet_upgrade_id, seq)
);
