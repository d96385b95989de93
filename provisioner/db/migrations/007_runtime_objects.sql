-- What each tenant's runtime reports through its event reporter (runtime/protocol/events.ts): the
-- latest state of every Argo CD Application, Argo Rollouts Rollout and Argo Workflows Workflow, one
-- row per object. A state is stored only when its resourceVersion (the etcd revision, an integer)
-- is larger than the stored one; a deletion keeps the row as a tombstone (deleted, object NULL) so
-- that an older state arriving later cannot bring the object back. `seq` is renewed from
-- runtime_object_seq on every change: the change stream (GET /v1/tenants/:id/changes) reads a
-- tenant's rows in seq order, resumable with Last-Event-ID = seq. Changes of one tenant are written
-- under a transaction-level advisory lock of that tenant, so its seqs commit in order.
CREATE SEQUENCE runtime_object_seq;

CREATE TABLE runtime_objects (
  tenant_id        uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
  kind             text NOT NULL CHECK (kind IN ('Application', 'Rollout', 'Workflow')),
  namespace        text NOT NULL,
  name             text NOT NULL,
  uid              text NOT NULL,
  resource_version bigint NOT NULL,
  generation       bigint NOT NULL DEFAULT 0,
  -- Summary fields the listings filter on (Applications: health and sync status, operation phase;
  -- Rollouts: phase, also as health; Workflows: phase).
  health           text,
  sync             text,
  phase            text,
  summary          jsonb NOT NULL DEFAULT '{}',
  object           jsonb,
  truncated        boolean NOT NULL DEFAULT false,
  deleted          boolean NOT NULL DEFAULT false,
  -- The reporter replica whose report this is, and when it saw the state.
  reported_by      text NOT NULL,
  observed_at      timestamptz NOT NULL,
  updated_at       timestamptz NOT NULL DEFAULT now(),
  seq              bigint NOT NULL DEFAULT nextval('runtime_object_seq'),
  PRIMARY KEY (tenant_id, kind, namespace, name)
);
-- Listings: a tenant's live objects of one kind in (namespace, name) order, with the filters.
CREATE INDEX runtime_objects_live ON runtime_objects (tenant_id, kind, namespace, name) WHERE NOT deleted;
CREATE INDEX runtime_objects_health ON runtime_objects (tenant_id, kind, health) WHERE NOT deleted;
CREATE INDEX runtime_objects_sync ON runtime_objects (tenant_id, kind, sync) WHERE NOT deleted;
CREATE INDEX runtime_objects_phase ON runtime_objects (tenant_id, kind, phase) WHERE NOT deleted;
-- The change stream.
CREATE INDEX runtime_objects_changes ON runtime_objects (tenant_id, seq);

-- Each reporter replica's last heartbeat (any batch it sends counts as one). A tenant whose newest
-- row is older than STALE_AFTER_SECONDS is not reporting. `since`: start of the replica's current
-- uninterrupted run of heartbeats. Rows of replicas gone for an hour are removed when another
-- replica of the tenant reports.
CREATE TABLE runtime_reporters (
  tenant_id              uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
  replica                text NOT NULL,
  last_seen              timestamptz NOT NULL DEFAULT now(),
  since                  timestamptz NOT NULL DEFAULT now(),
  owned_objects          integer NOT NULL DEFAULT 0,
  queue_depth            integer NOT NULL DEFAULT 0,
  oldest_pending_seconds double precision NOT NULL DEFAULT 0,
  PRIMARY KEY (tenant_id, replica)
);
CREATE INDEX runtime_reporters_last_seen ON runtime_reporters (last_seen);
