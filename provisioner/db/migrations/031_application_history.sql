-- An application's history (issue 52): one entry per deployment of an Argo CD Application, keyed by
-- its change revision (the commit that last changed the application's source path, from the
-- runtime's Source Server, runtime/protocol/sources.ts). An event batch that stores an Application
-- whose report carries a change revision the application has no entry for creates one; later
-- reports of the same change revision move its result from pending or running to a final one
-- (succeeded or failed), never back (provisioner/app-history/rules.ts). A monorepo commit that
-- touched only application A creates an entry for A only: B's change revision did not move.
--
-- Rows go with their runtime and tenant, as runtime_objects' do (migration 025): the foreign key
-- (tenant_id, runtime_id) → runtimes (tenant_id, id) cascades when a removed hybrid runtime is
-- purged or a tenant is deleted. A tenant keeps at most PROVISIONER_APP_HISTORY_MAX_PER_TENANT
-- entries (its oldest go in the transaction that stores a newer one) and none older than
-- PROVISIONER_APP_HISTORY_RETENTION_DAYS (the `app-history-pruner` loop).
--
-- `seq` is renewed from application_history_seq on every write: the per-application change stream
-- (GET …/applications/:namespace/:name/history/stream) reads an application's entries in seq order,
-- resumable with Last-Event-ID. Writes of one tenant happen under its ingest lock
-- (store/runtime-objects.ts lockTenantObjects), so a runtime's seqs commit in order.
CREATE SEQUENCE application_history_seq;

CREATE TABLE application_history (
  id                       uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  tenant_id                uuid NOT NULL,
  runtime_id               uuid NOT NULL,
  namespace                text NOT NULL,
  name                     text NOT NULL,
  change_revision          text NOT NULL,
  -- The revision the change was computed at (the head Argo CD compared or synced).
  revision                 text NOT NULL,
  previous_change_revision text,
  -- The change revision's commit, as Argo CD's revision metadata gives it.
  author                   text,
  date                     timestamptz,
  message                  text,
  tags                     jsonb NOT NULL DEFAULT '[]',
  -- What the commit changed (ImageChange[] and ResourceChange[]), bounded by the reporter (MAX_CHANGE_BYTES).
  images                   jsonb NOT NULL DEFAULT '[]',
  resources                jsonb NOT NULL DEFAULT '[]',
  truncated                boolean NOT NULL DEFAULT false,
  result                   text NOT NULL CHECK (result IN ('pending', 'running', 'succeeded', 'failed')),
  result_message           text,
  started_at               timestamptz,
  finished_at              timestamptz,
  duration_ms              bigint,
  recorded_at              timestamptz NOT NULL DEFAULT now(),
  updated_at               timestamptz NOT NULL DEFAULT now(),
  seq                      bigint NOT NULL DEFAULT nextval('application_history_seq'),
  CONSTRAINT application_history_runtime FOREIGN KEY (tenant_id, runtime_id)
    REFERENCES runtimes (tenant_id, id) ON DELETE CASCADE,
  CONSTRAINT application_history_change UNIQUE (runtime_id, namespace, name, change_revision)
);
-- An application's history, newest first (the listing's keyset: recorded_at, id).
CREATE INDEX application_history_newest ON application_history (runtime_id, namespace, name, recorded_at DESC, id DESC);
-- An application's change stream.
CREATE INDEX application_history_changes ON application_history (runtime_id, namespace, name, seq);
-- A tenant's oldest entries (its cap), and the cascade from its tenant.
CREATE INDEX application_history_tenant ON application_history (tenant_id, recorded_at, id);
-- The retention loop: entries older than the retention, oldest first.
CREATE INDEX application_history_recorded ON application_history (recorded_at);
