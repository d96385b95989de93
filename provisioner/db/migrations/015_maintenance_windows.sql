-- Maintenance windows (docs/fleet-upgrades.md "Maintenance windows and freezes"): the windows a
-- tenant allows upgrades in (RFC 5545 rules with a time zone and a duration; [] = always), set
-- with PATCH /v1/tenants/:id. Not part of the spec: no generation, no engine run.
ALTER TABLE tenants ADD COLUMN maintenance_windows jsonb NOT NULL DEFAULT '[]'::jsonb;

-- A fleet upgrade's override of the windows and the duration-fits rule ({by, reason, at}; null: none).
ALTER TABLE fleet_upgrades ADD COLUMN windows_override jsonb;

-- A pending tenant whose window is closed: when it may start next (null: not deferred).
ALTER TABLE fleet_upgrade_tenants ADD COLUMN deferred_until timestamptz;

-- The duration-fits rule reads the p95 of an edge's recent successful upgrades.
CREATE INDEX operations_upgrade_edges ON operations (from_version, to_version, finished_at DESC)
  WHERE kind = 'upgrade' AND state = 'succeeded';
