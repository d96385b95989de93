-- Upgrades of a hybrid runtime the customer applies (issue 37): `version` is the catalog version the
-- customer is asked to run (the bundle it was last given); `previous_version` the one before the
-- last change, so that a rollback may return to it and the upgrade bundle's diff has a base, and
-- `version_changed_at` when that change was asked for. A hosted runtime's versions are its
-- tenant's (tenants.runtime_version, previous_runtime_version).
ALTER TABLE runtimes
  ADD COLUMN previous_version text,
  ADD COLUMN version_changed_at timestamptz,
  ADD CONSTRAINT runtimes_hosted_versions CHECK (mode <> 'hosted' OR (previous_version IS NULL AND version_changed_at IS NULL));
