-- One runtime model (issue 37): a tenant's hosted runtime and the hybrid runtimes it registers, in
-- one table. The hosted row (`mode = 'hosted'`, `name = 'hosted'`) stands for the runtime in the
-- tenant's vcluster: its state, version and conditions are the tenant row's, so it holds none of
-- its own. Every tenant has exactly one, made by the trigger below in the transaction that inserts
-- the tenant (signup), and goes with it.
--
-- A hybrid row is a runtime installed in the customer's own cluster from the bundle the
-- registration answered with: how the control plane reaches it (`access`: tunnel, or the
-- customer's https `ingress_url`), whether it brings its own Argo CD (`argo = 'new'`) or works
-- beside the customer's (`existing`, in `argo_namespace`), who applies upgrades (`upgrades`: the
-- customer, or the in-cluster upgrader agent it opted in to), and the catalog `version` the bundle
-- was made for. Its single-use bootstrap token is stored as its SHA-256 only; the statement that
-- redeems it sets `bootstrap_redeemed_at`, `state = 'installed'` and the runtime key's id.
-- A removed runtime keeps its row (`state = 'removed'`, `removed_at`); its name may be registered
-- again.
CREATE TABLE runtimes (
  id                    uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  tenant_id             uuid NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
  name                  text NOT NULL,
  mode                  text NOT NULL CHECK (mode IN ('hosted', 'hybrid')),
  access                text CHECK (access IN ('tunnel', 'ingress')),
  ingress_url           text,
  argo                  text CHECK (argo IN ('new', 'existing')),
  argo_namespace        text,
  upgrades              text CHECK (upgrades IN ('customer', 'agent')),
  version               text,
  state                 text CHECK (state IN ('awaiting-install', 'installed', 'removed')),
  bootstrap_token_hash  text UNIQUE,
  bootstrap_expires_at  timestamptz,
  bootstrap_redeemed_at timestamptz,
  runtime_key_id        uuid REFERENCES api_keys(id),
  last_heartbeat_at     timestamptz,
  reported_version      text,
  created_by            text NOT NULL,
  created_at            timestamptz NOT NULL DEFAULT now(),
  removed_at            timestamptz,
  CONSTRAINT runtimes_hosted CHECK (
    mode <> 'hosted' OR (name = 'hosted' AND state IS NULL AND access IS NULL AND argo IS NULL AND upgrades IS NULL
                         AND version IS NULL AND bootstrap_token_hash IS NULL AND runtime_key_id IS NULL)),
  CONSTRAINT runtimes_hybrid CHECK (
    mode <> 'hybrid' OR (name <> 'hosted' AND state IS NOT NULL AND access IS NOT NULL AND argo IS NOT NULL
                         AND upgrades IS NOT NULL AND version IS NOT NULL AND bootstrap_token_hash IS NOT NULL
                         AND bootstrap_expires_at IS NOT NULL)),
  CONSTRAINT runtimes_ingress CHECK ((access = 'ingress') = (ingress_url IS NOT NULL)),
  CONSTRAINT runtimes_argo_namespace CHECK ((argo = 'existing') = (argo_namespace IS NOT NULL)),
  CONSTRAINT runtimes_removed CHECK ((state = 'removed') = (removed_at IS NOT NULL))
);
-- Names are unique among a tenant's runtimes that are not removed.
CREATE UNIQUE INDEX runtimes_tenant_name ON runtimes (tenant_id, name) WHERE removed_at IS NULL;
-- `GET /v1/runtimes` pages in creation order.
CREATE INDEX runtimes_created ON runtimes (created_at, id);

INSERT INTO runtimes (tenant_id, name, mode, created_by, created_at)
SELECT id, 'hosted', 'hosted', 'migration', created_at FROM tenants;

CREATE FUNCTION runtimes_hosted_row() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO runtimes (tenant_id, name, mode, created_by, created_at) VALUES (NEW.id, 'hosted', 'hosted', 'signup', NEW.created_at);
  RETURN NULL;
END $$;
CREATE TRIGGER runtimes_hosted_row AFTER INSERT ON tenants FOR EACH ROW EXECUTE FUNCTION runtimes_hosted_row();

-- A runtime key of a hybrid runtime names it; a hosted runtime's key (minted by the reconciler)
-- names none.
ALTER TABLE api_keys ADD COLUMN runtime_id uuid REFERENCES runtimes(id);
ALTER TABLE api_keys ADD CONSTRAINT api_keys_runtime_role CHECK (runtime_id IS NULL OR role = 'runtime');
