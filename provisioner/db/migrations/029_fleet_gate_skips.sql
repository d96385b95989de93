-- An operator's skips of health-gate checks (docs/fleet-upgrades.md "Skipping a check"): each
-- tenant's row of a fleet upgrade keeps every skip made for it, oldest first, as
-- {generation, step, from, to, checks, reason, by, at}. A skip holds for the step whose spec change
-- made `generation` only (a step's generation is its own), so the driver that judges that step,
-- on whichever replica, reads it here; the tenant's later steps are judged in full.
ALTER TABLE fleet_upgrade_tenants ADD COLUMN gate_skips jsonb NOT NULL DEFAULT '[]'::jsonb;
