-- What each tenant's stored runtime objects take (docs/security.md "Tenant against tenant through
-- shared resources"): the number of live objects and the bytes of all its rows, kept up to date by
-- statement triggers on runtime_objects, so that ingest checks the tenant's budget with one row
-- read instead of a scan. A row's bytes: its key, uid, summary and object as JSON text, plus 256
-- for the row itself (a tombstone, object dropped, still counts its key and the 256).
ALTER TABLE runtime_objects ADD COLUMN stored_bytes integer GENERATED ALWAYS AS (
  256 + octet_length(namespace) + octet_length(name) + octet_length(uid) + octet_length(summary::text)
    + coalesce(octet_length(object::text), 0)
) STORED;

CREATE TABLE runtime_object_usage (
  tenant_id uuid PRIMARY KEY REFERENCES tenants (id) ON DELETE CASCADE,
  objects   bigint NOT NULL DEFAULT 0,
  bytes     bigint NOT NULL DEFAULT 0
);

INSERT INTO runtime_object_usage (tenant_id, objects, bytes)
SELECT tenant_id, count(*) FILTER (WHERE NOT deleted), sum(stored_bytes) FROM runtime_objects GROUP BY tenant_id;

-- Adds what a statement's new rows take and subtracts what its old rows took, per tenant. A row of
-- a tenant being deleted (the cascade) finds no usage row to update, which is what it should find.
CREATE FUNCTION runtime_object_usage_apply() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'INSERT' THEN
    INSERT INTO runtime_object_usage AS u (tenant_id, objects, bytes)
    SELECT tenant_id, count(*) FILTER (WHERE NOT deleted), sum(stored_bytes) FROM new_rows GROUP BY tenant_id
    ON CONFLICT (tenant_id) DO UPDATE SET objects = u.objects + excluded.objects, bytes = u.bytes + excluded.bytes;
  ELSIF TG_OP = 'UPDATE' THEN
    UPDATE runtime_object_usage u SET objects = u.objects + d.objects, bytes = u.bytes + d.bytes
      FROM (SELECT tenant_id, sum(o)::bigint AS objects, sum(b)::bigint AS bytes
              FROM (SELECT tenant_id, (NOT deleted)::int AS o, stored_bytes AS b FROM new_rows
                    UNION ALL
                    SELECT tenant_id, -(NOT deleted)::int, -stored_bytes FROM old_rows) x
             GROUP BY tenant_id) d
     WHERE u.tenant_id = d.tenant_id;
  ELSE
    UPDATE runtime_object_usage u SET objects = u.objects - d.objects, bytes = u.bytes - d.bytes
      FROM (SELECT tenant_id, count(*) FILTER (WHERE NOT deleted) AS objects, sum(stored_bytes) AS bytes
              FROM old_rows GROUP BY tenant_id) d
     WHERE u.tenant_id = d.tenant_id;
  END IF;
  RETURN NULL;
END $$;

CREATE TRIGGER runtime_object_usage_insert AFTER INSERT ON runtime_objects
  REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION runtime_object_usage_apply();
CREATE TRIGGER runtime_object_usage_update AFTER UPDATE ON runtime_objects
  REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION runtime_object_usage_apply();
CREATE TRIGGER runtime_object_usage_delete AFTER DELETE ON runtime_objects
  REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION runtime_object_usage_apply();
