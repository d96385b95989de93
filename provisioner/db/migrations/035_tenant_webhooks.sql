-- Git webhooks at a public per-tenant URL (docs/operations.md "Webhooks while asleep"): the
-- control plane keeps each webhook it accepts until the tenant's runtime has taken it, so one sent
-- while the tenant sleeps (or while its runtime is away) is delivered once it is back.
-- webhook_token_hash: SHA-256 of the URL's secret; the secret itself is shown once and not kept.
ALTER TABLE tenants ADD COLUMN webhook_token_hash bytea;

CREATE TABLE tenant_webhooks (
  id               bigserial PRIMARY KEY,
  tenant_id        uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
  -- What follows /webhooks on the runtime's request router (the event source's path), with its query.
  path             text NOT NULL,
  -- The headers the event source may need (content type, the provider's event and signature headers).
  headers          jsonb NOT NULL,
  body             bytea NOT NULL,
  size_bytes       integer NOT NULL,
  received_at      timestamptz NOT NULL DEFAULT now(),
  attempts         integer NOT NULL DEFAULT 0,
  next_attempt_at  timestamptz NOT NULL DEFAULT now(),
  -- Held by a replica's delivery round until then (a replica that died lets it go).
  lease_until      timestamptz,
  last_error       text
);
-- Delivery reads a tenant's webhooks in the order they came.
CREATE INDEX tenant_webhooks_by_tenant ON tenant_webhooks (tenant_id, id);
