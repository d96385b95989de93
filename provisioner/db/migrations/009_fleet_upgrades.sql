-- Fleet upgrades (docs/fleet-upgrades.md): many tenants moved to a target runtime version in waves.
-- The whole state lives here and is driven by whichever provisioner holds the fleet upgrade's
-- lease (lease_owner, lease_expires_at: the same rules as a tenant's); every decision is written
-- in one transaction with the spec changes it makes, so a crash loses nothing and repeats nothing.
CREATE TABLE fleet_upgrades (
  id                uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  target_version    text NOT NULL,
  state             text NOT NULL DEFAULT 'running'
                    CHECK (state IN ('running', 'paused', 'halted', 'aborting', 'completed', 'aborted')),
  selector          jsonb NOT NULL,
  options           jsonb NOT NULL,
  -- The wave being worked on (0: the canary).
  current_wave      integer NOT NULL DEFAULT 0,
  -- Why it halted (failure budget) or was aborted; null otherwise.
  state_reason      text,
  -- Abort: roll back the tenants this fleet upgrade moved, in reverse wave order.
  abort_rollback    boolean NOT NULL DEFAULT false,
  created_by        text NOT NULL,
  created_at        timestamptz NOT NULL DEFAULT now(),
  updated_at        timestamptz NOT NULL DEFAULT now(),
  finished_at       timestamptz,
  lease_owner       text,
  lease_expires_at  timestamptz
);
CREATE INDEX fleet_upgrades_active ON fleet_upgrades (created_at)
  WHERE state IN ('running', 'paused', 'halted', 'aborting');
CREATE INDEX fleet_upgrades_page ON fleet_upgrades (created_at DESC, id DESC);

CREATE TABLE fleet_upgrade_waves (
  fleet_upgrade_id  uuid NOT NULL REFERENCES fleet_upgrades (id) ON DELETE CASCADE,
  wave              integer NOT NULL,
  size              integer NOT NULL,
  max_concurrency   integer NOT NULL,
  max_unavailable   integer NOT NULL,
  soak_seconds      integer NOT NULL,
  -- Failure budget: halt when more than max_failures tenants, or more than max_failure_percent of
  -- the wave, fail (null: no limit of that kind); failures before a resume are forgiven.
  max_failures      integer,
  max_failure_percent double precision,
  forgiven          integer NOT NULL DEFAULT 0,
  state             text NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'running', 'soaking', 'completed')),
  started_at        timestamptz,
  -- When its last tenant settled: the soak runs from here.
  settled_at        timestamptz,
  completed_at      timestamptz,
  PRIMARY KEY (fleet_upgrade_id, wave)
);

CREATE TABLE fleet_upgrade_tenants (
  fleet_upgrade_id  uuid NOT NULL REFERENCES fleet_upgrades (id) ON DELETE CASCADE,
  tenant_id         uuid NOT NULL REFERENCES tenants (id),
  -- null for a tenant the plan excluded (reason says why).
  wave              integer,
  position          integer NOT NULL,
  state             text NOT NULL CHECK (state IN ('excluded', 'pending', 'upgrading', 'succeeded', 'rolling_back',
                    'quarantined', 'interrupted', 'cancelled', 'reverting', 'reverted', 'left', 'skipped')),
  -- A tenant belongs to at most one fleet upgrade that is not finished.
  active            boolean NOT NULL DEFAULT true,
  from_version      text NOT NULL,
  -- Every hop of the tenant's path, in order, ending with the target.
  path              text[] NOT NULL DEFAULT '{}',
  hop               integer NOT NULL DEFAULT 0,
  -- The spec change the driver made last (hop, rollback or revert): its generation and operation,
  -- the versions it moves between, and when it was made (driver clock).
  generation        bigint,
  operation_id      uuid,
  step_from         text,
  step_to           text,
  step_started_at   timestamptz,
  -- Before the hop: the tunnel and the Applications' health (gate compares with it).
  snapshot          jsonb,
  -- The last gate evaluation: {passed, checks: [{name, ok, detail}], at}.
  gate              jsonb,
  rolled_back       boolean NOT NULL DEFAULT false,
  reason            text,
  started_at        timestamptz,
  finished_at       timestamptz,
  PRIMARY KEY (fleet_upgrade_id, tenant_id)
);
CREATE UNIQUE INDEX fleet_upgrade_tenants_one_active ON fleet_upgrade_tenants (tenant_id) WHERE active;
CREATE INDEX fleet_upgrade_tenants_wave ON fleet_upgrade_tenants (fleet_upgrade_id, wave, state, position);
CREATE INDEX fleet_upgrade_tenants_in_flight ON fleet_upgrade_tenants (fleet_upgrade_id)
  WHERE state IN ('upgrading', 'rolling_back', 'reverting');
