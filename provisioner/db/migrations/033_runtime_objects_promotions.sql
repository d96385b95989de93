-- A runtime reports the GitOps Operator's products and promotions (runtime 1.8.0+, docs/promotions.md)
-- besides Argo's Applications, Rollouts and Workflows (runtime/protocol/kinds.ts).
ALTER TABLE runtime_objects DROP CONSTRAINT runtime_objects_kind_check;
ALTER TABLE runtime_objects
  ADD CONSTRAINT runtime_objects_kind_check
  CHECK (kind IN ('Application', 'Rollout', 'Workflow', 'Product', 'Promotion'));
