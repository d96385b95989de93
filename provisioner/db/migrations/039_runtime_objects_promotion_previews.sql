-- A runtime reports the GitOps Operator's PromotionPreviews (a promotion's dry run, a kind of its own:
-- docs/promotions.md "Previews") besides its Products and Promotions (runtime/protocol/kinds.ts).
ALTER TABLE runtime_objects DROP CONSTRAINT runtime_objects_kind_check;
ALTER TABLE runtime_objects
  ADD CONSTRAINT runtime_objects_kind_check
  CHECK (kind IN ('Application', 'Rollout', 'Workflow', 'Product', 'Promotion', 'PromotionPreview'));
