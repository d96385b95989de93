-- Runtime objects keyed by runtime (issue 37, "One runtime model"): a tenant's hybrid runtimes
-- report their Argo objects like the hosted runtime, each under its own runtime, so two runtimes of
-- one tenant may report an Application of the same namespace and name. runtime_objects,
-- runtime_reporters and runtime_object_horizons get `runtime_id`; the rows there before are the
-- hosted runtime's (the only runtime that could report) and get its id. A horizon is per runtime:
-- resourceVersions are one cluster's etcd revisions and mean nothing in another cluster.
--
-- What stays per tenant: the usage row (runtime_object_usage, migration 021), so a tenant's
-- runtimes share its stored-object budgets (docs/decisions.md "A tenant's runtimes share its
-- runtime-object budgets"), and the ingest lock (lockTenantObjects), which guards that usage.
--
-- The foreign keys are (tenant_id, runtime_id) → runtimes (tenant_id, id): a row's runtime is one
-- of its tenant's, and deleting a runtime (only with its tenant) finds its rows by the primary
-- key's prefix. The primary keys lead with tenant_id, as before, so the tenant's ON DELETE
-- CASCADE still finds its rows by index.
--
-- Locks on a populated table: like 021 (which rewrote runtime_objects for its stored column), this
-- migration holds ACCESS EXCLUSIVE on runtime_objects, runtime_reporters and
-- runtime_object_horizons from its first ALTER to its commit, while it fills runtime_id (one UPDATE
-- writing each row once) and builds the new primary keys and the change stream's index: ingest
-- and the listings wait for it (reporters retry their batches; a batch is never half applied).
-- At the default budgets that is up to 20,000 rows per tenant; the UPDATE leaves as many dead
-- rows for autovacuum. The usage trigger on UPDATE is disabled for the backfill: runtime_id is no
-- part of a row's bytes, and the statement's transition tables would hold the whole table.
-- Replicas of the previous release cannot store event batches once this is applied (their upsert
-- names the old key): during the rolling update their batches fail whole and the reporters send
-- them again, reaching a new replica; nothing is lost (docs/operations.md, "Upgrading the
-- provisioner itself").

-- One hosted runtime per tenant (the trigger of 022 makes it), found by tenant.
CREATE UNIQUE INDEX runtimes_hosted ON runtimes (tenant_id) WHERE mode = 'hosted';
-- The target of the composite foreign keys below.
ALTER TABLE runtimes ADD CONSTRAINT runtimes_tenant_id_id UNIQUE (tenant_id, id);

ALTER TABLE runtime_objects ADD COLUMN runtime_id uuid;
ALTER TABLE runtime_objects DISABLE TRIGGER runtime_object_usage_update;
UPDATE runtime_objects o SET runtime_id = r.id FROM runtimes r WHERE r.tenant_id = o.tenant_id AND r.mode = 'hosted';
ALTER TABLE runtime_objects ENABLE TRIGGER runtime_object_usage_update;
ALTER TABLE runtime_objects ALTER COLUMN runtime_id SET NOT NULL,
  DROP CONSTRAINT runtime_objects_pkey,
  ADD PRIMARY KEY (tenant_id, runtime_id, kind, namespace, name),
  ADD CONSTRAINT runtime_objects_runtime FOREIGN KEY (tenant_id, runtime_id) REFERENCES runtimes (tenant_id, id) ON DELETE CASCADE;
-- The change stream reads one runtime's rows in seq order.
DROP INDEX runtime_objects_changes;
CREATE INDEX runtime_objects_changes ON runtime_objects (runtime_id, seq);

ALTER TABLE runtime_reporters ADD COLUMN runtime_id uuid;
UPDATE runtime_reporters p SET runtime_id = r.id FROM runtimes r WHERE r.tenant_id = p.tenant_id AND r.mode = 'hosted';
ALTER TABLE runtime_reporters ALTER COLUMN runtime_id SET NOT NULL,
  DROP CONSTRAINT runtime_reporters_pkey,
  ADD PRIMARY KEY (tenant_id, runtime_id, replica),
  ADD CONSTRAINT runtime_reporters_runtime FOREIGN KEY (tenant_id, runtime_id) REFERENCES runtimes (tenant_id, id) ON DELETE CASCADE;

ALTER TABLE runtime_object_horizons ADD COLUMN runtime_id uuid;
UPDATE runtime_object_horizons h SET runtime_id = r.id FROM runtimes r WHERE r.tenant_id = h.tenant_id AND r.mode = 'hosted';
ALTER TABLE runtime_object_horizons ALTER COLUMN runtime_id SET NOT NULL,
  DROP CONSTRAINT runtime_object_horizons_pkey,
  ADD PRIMARY KEY (tenant_id, runtime_id),
  ADD CONSTRAINT runtime_object_horizons_runtime FOREIGN KEY (tenant_id, runtime_id) REFERENCES runtimes (tenant_id, id) ON DELETE CASCADE;

-- What a hybrid runtime's agents last said about themselves (the hosted runtime's come from its
-- tenant): whether its event reporter lists and watches Argo CD Applications (null: it never
-- said), next to last_heartbeat_at and reported_version (022).
ALTER TABLE runtimes ADD COLUMN argo_cd_listed boolean;
