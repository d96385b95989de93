/**
 * Plans: what a tenant's namespace on the root cluster may use. The tenants/ program turns a
 * plan into the ResourceQuota and LimitRange of the tenant namespace.
 */
export interface Plan {
  name: string;
  /** Total requests/limits across the tenant namespace (vcluster control plane + synced pods). */
  quota: { cpu: string; memory: string; pods: number; storage: string; pvcs: number };
  /** Per-container defaults and maximum (LimitRange). */
  container: { defaultRequest: { cpu: string; memory: string }; default: { cpu: string; memory: string }; max: { cpu: string; memory: string } };
}

export const PLANS: Readonly<Record<string, Plan>> = {
  free: {
    name: 'free',
    quota: { cpu: '4', memory: '8Gi', pods: 30, storage: '10Gi', pvcs: 5 },
    container: { defaultRequest: { cpu: '50m', memory: '64Mi' }, default: { cpu: '500m', memory: '512Mi' }, max: { cpu: '2', memory: '4Gi' } },
  },
  team: {
    name: 'team',
    quota: { cpu: '16', memory: '32Gi', pods: 100, storage: '50Gi', pvcs: 20 },
    container: { defaultRequest: { cpu: '100m', memory: '128Mi' }, default: { cpu: '1', memory: '1Gi' }, max: { cpu: '4', memory: '8Gi' } },
  },
  enterprise: {
    name: 'enterprise',
    quota: { cpu: '64', memory: '128Gi', pods: 400, storage: '500Gi', pvcs: 100 },
    container: { defaultRequest: { cpu: '100m', memory: '128Mi' }, default: { cpu: '2', memory: '2Gi' }, max: { cpu: '16', memory: '32Gi' } },
  },
};

export const PLAN_NAMES: readonly string[] = Object.keys(PLANS);
export const DEFAULT_PLAN = 'free';
