-- A hybrid runtime's namespace in the customer's cluster (issue 51): its own, `hosted-runtime-<name>`
-- for runtimes registered from now on, so that two runtimes share a cluster (their cluster-scoped
-- RBAC is named after it too, runtime/hybrid/bundle.ts). NULL: a runtime registered before, installed
-- in `hosted-runtime` with the names that went with it, which its upgrade bundles keep.
ALTER TABLE runtimes
  ADD COLUMN namespace text,
  ADD CONSTRAINT runtimes_namespace_hybrid CHECK (namespace IS NULL OR mode = 'hybrid');
