-- Removed hybrid runtimes are purged once removed longer than PROVISIONER_REMOVED_RUNTIME_RETENTION_HOURS
-- (provisioner/runtimes/purge.ts, store/runtimes.ts purgeRemovedRuntimes): the purge finds them by
-- removal time without reading the runtimes that are not removed (an index of removed rows only).
CREATE INDEX runtimes_removed ON runtimes (removed_at) WHERE removed_at IS NOT NULL;
