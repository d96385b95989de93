-- Tombstones of runtime objects are purged once older than PROVISIONER_TOMBSTONE_RETENTION_HOURS
-- (provisioner/runtime-objects/purge.ts). What a purged tombstone did is kept compactly, one row per
-- tenant: the largest resourceVersion and change sequence among the tenant's purged tombstones and
-- the newest time one of them was stored. With it, a late state of a purged object (older than its
-- deletion, seen before the deletion was stored) is still refused as stale, and a change stream that
-- resumes from before a purged deletion is told to start over (docs/runtime.md "Tombstone retention").
CREATE TABLE runtime_object_horizons (
  tenant_id         uuid PRIMARY KEY REFERENCES tenants (id) ON DELETE CASCADE,
  -- The largest resourceVersion of a purged tombstone: a state for an object without a row that is
  -- not newer than this may belong to a purged deletion.
  purged_rv         bigint NOT NULL,
  -- The largest seq of a purged tombstone: a stream resuming before it may have missed a deletion.
  purged_seq        bigint NOT NULL,
  -- The newest updated_at of a purged tombstone: a state observed after it was seen after every
  -- purged deletion was stored (a relist), so it is current, not late.
  purged_through    timestamptz NOT NULL,
  updated_at        timestamptz NOT NULL DEFAULT now()
);

-- The purge finds old tombstones without reading live rows (an index of tombstones only: live rows,
-- the ones ingest writes again and again, add no entry to it).
CREATE INDEX runtime_objects_tombstones ON runtime_objects (updated_at) WHERE deleted;
