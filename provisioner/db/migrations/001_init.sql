-- Initial schema: tenants (spec + status + reconciler lease), operations and their logs, root
-- clusters, runtime version availability, API keys, idempotency keys and the audit log.

CREATE TABLE root_clusters (
  id              uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  name            text NOT NULL UNIQUE CHECK (name ~ '^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$'),
  region          text NOT NULL,
  labels          jsonb NOT NULL DEFAULT '{}'::jsonb,
  capacity        integer NOT NULL CHECK (capacity >= 0),
  plans           text[] NOT NULL DEFAULT '{}',          -- empty: every plan may be placed here
  cordoned        boolean NOT NULL DEFAULT false,
  kubeconfig_enc  bytea NOT NULL,                         -- AES-256-GCM (see provisioner/crypto.ts)
  created_at      timestamptz NOT NULL DEFAULT now(),
  updated_at      timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE tenants (
  id                      uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  organization            text NOT NULL,
  email                   text NOT NULL,
  -- spec
  plan                    text NOT NULL,
  runtime_version         text NOT NULL,
  suspended               boolean NOT NULL DEFAULT false,
  deleted                 boolean NOT NULL DEFAULT false,
  generation              bigint NOT NULL DEFAULT 1,
  -- status
  phase                   text NOT NULL DEFAULT 'Pending'
                          CHECK (phase IN ('Pending','Provisioning','Ready','Updating','Suspended','Failed','Deleting','Deleted')),
  observed_generation     bigint NOT NULL DEFAULT 0,
  actual_runtime_version  text,
  previous_runtime_version text,
  cluster_id              uuid REFERENCES root_clusters(id),
  endpoints               jsonb NOT NULL DEFAULT '{}'::jsonb,
  conditions              jsonb NOT NULL DEFAULT '[]'::jsonb,
  last_operation_id       uuid,
  -- reconciler bookkeeping
  lease_owner             text,
  lease_expires_at        timestamptz,
  next_attempt_at         timestamptz,
  consecutive_failures    integer NOT NULL DEFAULT 0,
  stalled                 boolean NOT NULL DEFAULT false,
  last_reconciled_at      timestamptz,
  created_at              timestamptz NOT NULL DEFAULT now(),
  updated_at              timestamptz NOT NULL DEFAULT now(),
  deleted_at              timestamptz
);
-- An organization is unique among tenants that are not deleted; a tombstone frees the name.
CREATE UNIQUE INDEX tenants_organization_live ON tenants (organization) WHERE NOT deleted;
CREATE INDEX tenants_page ON tenants (created_at, id);
CREATE INDEX tenants_phase ON tenants (phase);
CREATE INDEX tenants_runtime_version ON tenants (runtime_version);
CREATE INDEX tenants_cluster ON tenants (cluster_id);
CREATE INDEX tenants_plan ON tenants (plan);
CREATE INDEX tenants_due ON tenants (next_attempt_at) WHERE phase <> 'Deleted';

CREATE TABLE operations (
  id            uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  tenant_id     uuid NOT NULL REFERENCES tenants(id),
  kind          text NOT NULL CHECK (kind IN ('create','update','upgrade','suspend','resume','delete','resync','retry')),
  generation    bigint NOT NULL,
  from_version  text,
  to_version    text,
  state         text NOT NULL DEFAULT 'queued'
                CHECK (state IN ('queued','running','succeeded','failed','cancelled','superseded')),
  attempt       integer NOT NULL DEFAULT 0,
  owner         text,
  error         jsonb,
  created_at    timestamptz NOT NULL DEFAULT now(),
  started_at    timestamptz,
  finished_at   timestamptz
);
CREATE INDEX operations_tenant ON operations (tenant_id, created_at DESC, id DESC);
CREATE INDEX operations_open ON operations (tenant_id) WHERE state IN ('queued','running');

CREATE TABLE operation_logs (
  operation_id  uuid NOT NULL REFERENCES operations(id),
  seq           bigint GENERATED ALWAYS AS IDENTITY,
  stream        text NOT NULL DEFAULT 'engine',
  line          text NOT NULL,
  created_at    timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (operation_id, seq)
);

CREATE TABLE runtime_version_availability (
  version       text PRIMARY KEY,
  availability  text NOT NULL CHECK (availability IN ('available','deprecated','withdrawn')),
  updated_at    timestamptz NOT NULL DEFAULT now(),
  updated_by    text
);

CREATE TABLE api_keys (
  id            uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  key_hash      bytea NOT NULL UNIQUE,                    -- SHA-256 of the whole key
  prefix        text NOT NULL,                            -- first characters, shown in listings
  role          text NOT NULL CHECK (role IN ('admin','operator','tenant','runtime')),
  tenant_id     uuid REFERENCES tenants(id),
  name          text NOT NULL DEFAULT '',
  created_by    text,
  created_at    timestamptz NOT NULL DEFAULT now(),
  revoked_at    timestamptz,
  CHECK ((role IN ('tenant','runtime')) = (tenant_id IS NOT NULL))
);
CREATE INDEX api_keys_tenant ON api_keys (tenant_id);

CREATE TABLE idempotency_keys (
  scope           text NOT NULL,
  key             text NOT NULL,
  request_hash    text NOT NULL,
  response_status integer,
  response_enc    bytea,                                  -- encrypted: it can hold a new API key
  created_at      timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (scope, key)
);
CREATE INDEX idempotency_keys_age ON idempotency_keys (created_at);

CREATE TABLE audit_log (
  id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  at            timestamptz NOT NULL DEFAULT now(),
  actor         text NOT NULL,                            -- api key id, or 'public' / 'system'
  actor_role    text NOT NULL,
  action        text NOT NULL,
  target_type   text NOT NULL,
  target_id     text NOT NULL,
  before        jsonb,
  after         jsonb,
  request_id    text
);
CREATE INDEX audit_log_target ON audit_log (target_type, target_id, id);
