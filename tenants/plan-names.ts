/**
 * The plans' names (tenants/plans.ts has each plan under its name, checked against this list): a
 * module that imports nothing, so the API's request schemas (provisioner/http/route-schemas.ts)
 * and through them the console's type-check read the names without the plans' resources.
 */
export const PLAN_NAME_LIST = ['free', 'team', 'enterprise'] as const;
export type PlanName = (typeof PLAN_NAME_LIST)[number];
export const PLAN_NAMES: readonly string[] = PLAN_NAME_LIST;
