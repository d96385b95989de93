/**
 * The kinds a runtime reports (Argo's, and the GitOps Operator's products, promotions and previews), with the API group/version/plural the reporter watches: the
 * closed list the event reporter (events.ts), the control plane's store and the API's schemas
 * share. It imports nothing, so the API's types (provisioner/api/types.ts) can name it where
 * Node.js is not available (the console's type-check).
 */
export const REPORTED_KINDS = {
  Application: { group: 'argoproj.io', version: 'v1alpha1', plural: 'applications' },
  Rollout: { group: 'argoproj.io', version: 'v1alpha1', plural: 'rollouts' },
  Workflow: { group: 'argoproj.io', version: 'v1alpha1', plural: 'workflows' },
  // The GitOps Operator's (runtime 1.8.0+, docs/promotions.md): a runtime without them lists them as unavailable.
  Product: { group: 'promotions.hosted-runtimes.io', version: 'v1alpha1', plural: 'products' },
  Promotion: { group: 'promotions.hosted-runtimes.io', version: 'v1alpha1', plural: 'promotions' },
  // A promotion's dry run, a kind of its own (docs/promotions.md "Previews").
  PromotionPreview: { group: 'promotions.hosted-runtimes.io', version: 'v1alpha1', plural: 'promotionpreviews' },
} as const;
export type ReportedKind = keyof typeof REPORTED_KINDS;
export const REPORTED_KIND_NAMES = Object.keys(REPORTED_KINDS) as ReportedKind[];
