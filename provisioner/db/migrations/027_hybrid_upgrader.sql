-- The in-cluster upgrader of a hybrid runtime (`upgrades = 'agent'`, issue 37): an upgrade the
-- control plane asked for and the upgrader pulls, applies and reports. `upgrade_phase`: `pending`
-- (asked, not picked up), `applying` (the upgrader applies it and waits for the rollout),
-- `succeeded`, `rolled-back` (the rollout failed; the upgrader put the version before back, and
-- `version`/`previous_version` were restored from `upgrade_from`/`upgrade_from_previous`),
-- `failed` (the rollback failed too: the customer must look). NULL: no upgrade by the upgrader.
ALTER TABLE runtimes
  ADD COLUMN upgrade_phase text CHECK (upgrade_phase IN ('pending', 'applying', 'succeeded', 'rolled-back', 'failed')),
  ADD COLUMN upgrade_from text,
  ADD COLUMN upgrade_to text,
  ADD COLUMN upgrade_from_previous text,
  ADD COLUMN upgrade_message text,
  ADD COLUMN upgrade_updated_at timestamptz,
  ADD CONSTRAINT runtimes_upgrade_by_agent CHECK (
    upgrade_phase IS NULL
    OR (mode = 'hybrid' AND upgrades = 'agent' AND upgrade_from IS NOT NULL AND upgrade_to IS NOT NULL
        AND upgrade_updated_at IS NOT NULL));
