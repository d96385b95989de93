/**
 * Plans: what a tenant's namespace on the root cluster may use. The tenants/ program turns a
 * plan into the ResourceQuota and LimitRange of the tenant namespace and into the resources of
 * the vcluster control plane.
 */
export interface Plan {
  name: string;
  /** Totals across the tenant namespace (vcluster control plane + synced pods). */
  quota: {
    /** Sum of CPU requests. */
    cpu: string;
    /** Sum of memory requests. */
    memory: string;
    /** Sums of limits (allowing bursts above the requests). */
    limits: { cpu: string; memory: string };
    pods: number;
    /** Sum of PVC storage requests. */
    storage: string;
    pvcs: number;
  };
  /** Per-container defaults and maximum (LimitRange). */
  container: {
    defaultRequest: { cpu: string; memory: string };
    default: { cpu: string; memory: string };
    max: { cpu: string; memory: string };
  };
  /** The vcluster control plane (StatefulSet) resources and datastore volume. */
  controlPlane: { requests: { cpu: string; memory: string }; limits: { cpu: string; memory: string }; storage: string };
}

export const PLANS: Readonly<Record<string, Plan>> = {
  free: {
    name: 'free',
    quota: { cpu: '4', memory: '8Gi', limits: { cpu: '8', memory: '12Gi' }, pods: 30, storage: '10Gi', pvcs: 5 },
    container: {
      defaultRequest: { cpu: '50m', memory: '64Mi' },
      default: { cpu: '500m', memory: '512Mi' },
      max: { cpu: '2', memory: '4Gi' },
    },
    controlPlane: { requests: { cpu: '200m', memory: '256Mi' }, limits: { cpu: '1', memory: '1Gi' }, storage: '5Gi' },
  },
  team: {
    name: 'team',
    quota: { cpu: '16', memory: '32Gi', limits: { cpu: '32', memory: '48Gi' }, pods: 100, storage: '50Gi', pvcs: 20 },
    container: {
      defaultRequest: { cpu: '100m', memory: '128Mi' },
      default: { cpu: '1', memory: '1Gi' },
      max: { cpu: '4', memory: '8Gi' },
    },
    controlPlane: { requests: { cpu: '500m', memory: '512Mi' }, limits: { cpu: '2', memory: '2Gi' }, storage: '10Gi' },
  },
  enterprise: {
    name: 'enterprise',
    quota: {
      cpu: '64',
      memory: '128Gi',
      limits: { cpu: '128', memory: '192Gi' },
      pods: 400,
      storage: '500Gi',
      pvcs: 100,
    },
    container: {
      defaultRequest: { cpu: '100m', memory: '128Mi' },
      default: { cpu: '2', memory: '2Gi' },
      max: { cpu: '16', memory: '32Gi' },
    },
    controlPlane: { requests: { cpu: '1', memory: '1Gi' }, limits: { cpu: '4', memory: '4Gi' }, storage: '20Gi' },
  },
};

export const PLAN_NAMES: readonly string[] = Object.keys(PLANS);
export const DEFAULT_PLAN = 'free';
