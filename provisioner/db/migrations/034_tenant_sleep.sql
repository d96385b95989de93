-- Idle tenants sleep (docs/operations.md "Sleep"): `sleeping` is the control plane's half of the
-- spec (not the tenant's: set by the idle loop or an explicit sleep, cleared by any activity or
-- spec change), applied by the same engine path as a suspension; phases Sleeping (the runtime
-- and the vcluster's control plane at zero, data kept) and Waking (the wake operation running);
-- operation kinds sleep and wake. last_activity_at is the last request that reached the tenant's
-- runtime or came with its own key, written at most every 30 s per tenant (not a change of the
-- fleet's change stream: the trigger of migration 012 does not list it).
ALTER TABLE tenants
  ADD COLUMN sleeping boolean NOT NULL DEFAULT false,
  ADD COLUMN last_activity_at timestamptz NOT NULL DEFAULT now(),
  ADD COLUMN asleep_since timestamptz,
  -- When it was last woken: until its runtime's tunnel is back (a few minutes at most) a request
  -- waits for it and its status says Waking instead of raising the not-connected alarm.
  ADD COLUMN woke_at timestamptz;

ALTER TABLE tenants DROP CONSTRAINT tenants_phase_check;
ALTER TABLE tenants
  ADD CONSTRAINT tenants_phase_check
  CHECK (phase IN ('Pending','Provisioning','Ready','Updating','Suspended','Sleeping','Waking','Failed','Deleting','Deleted'));

ALTER TABLE operations DROP CONSTRAINT operations_kind_check;
ALTER TABLE operations
  ADD CONSTRAINT operations_kind_check
  CHECK (kind IN ('create','update','upgrade','suspend','resume','sleep','wake','delete','resync','retry'));

-- The idle loop's candidates: awake Ready tenants by their last activity, oldest first.
CREATE INDEX tenants_idle ON tenants (last_activity_at)
  WHERE phase = 'Ready' AND NOT sleeping AND NOT suspended AND NOT deleted;
