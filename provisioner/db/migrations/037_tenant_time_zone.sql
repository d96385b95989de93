-- A tenant's time zone (docs/api.md, PATCH /v1/tenants/:id `timeZone`): an IANA name such as
-- Europe/Berlin, checked by the API with the maintenance windows' check (fleet/windows.ts) and
-- stored as that check names it; null: not set. A setting of the tenant, not part of the spec: no
-- generation, no engine run. The idle loop reads a plan's keep-awake windows
-- (PROVISIONER_SLEEP_AWAKE_WINDOWS) in it (docs/operations.md "Sleep").
ALTER TABLE tenants
  ADD COLUMN time_zone text CONSTRAINT tenants_time_zone_length CHECK (char_length(time_zone) BETWEEN 1 AND 64);

-- The zones in use, read once per idle round by skipping from one zone to the next
-- (store/sleep.ts tenantTimeZones): a few index probes per distinct zone, whatever the fleet's
-- size. Only the tenants that set one are in it.
CREATE INDEX tenants_time_zone ON tenants (time_zone) WHERE time_zone IS NOT NULL;
