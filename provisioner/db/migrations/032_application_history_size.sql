-- The bytes an application history entry holds, for the tenant's byte budget of history
-- (PROVISIONER_APP_HISTORY_MAX_BYTES_PER_TENANT, store/application-history.ts trimTenantHistory):
-- its texts and JSON as stored, and a fixed 200 for its identifiers, times and the row itself.
-- Generated, so no writer can get it wrong; the table is rewritten once (it is bounded per tenant).
ALTER TABLE application_history
  ADD COLUMN size_bytes integer NOT NULL GENERATED ALWAYS AS (
    200
    + octet_length(namespace) + octet_length(name) + octet_length(change_revision) + octet_length(revision)
    + coalesce(octet_length(previous_change_revision), 0) + coalesce(octet_length(author), 0)
    + coalesce(octet_length(message), 0) + coalesce(octet_length(result_message), 0)
    + octet_length(tags::text) + octet_length(images::text) + octet_length(resources::text)
  ) STORED;
