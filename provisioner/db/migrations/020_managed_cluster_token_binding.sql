-- Bound managed-cluster tokens (issue 16): the control plane requests a registration's tokens
-- bound (TokenRequest `boundObjectRef`) to a Secret it creates in the ServiceAccount's namespace,
-- so that deleting the Secret on DELETE revokes every token it issued at once.
-- `token_binding` is that Secret's `namespace/name` (null: the tokens are not bound);
-- `token_unbound` says why they are not (the credentials may not create Secrets there, or a
-- bootstrap's ServiceAccount, revoked by deleting the account) and what that means.
ALTER TABLE managed_clusters
  ADD COLUMN token_binding text,
  ADD COLUMN token_unbound text;
