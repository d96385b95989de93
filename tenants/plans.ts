/**
 * Plans: what a tenant's namespace on the root cluster may use. The tenants/ program turns a
 * plan into the ResourceQuota and LimitRange of the tenant namespace and into the resources of
 * every container the tenant's runtime runs: the vcluster control plane and its CoreDNS, each
 * Argo component and the agents. Every pod of the vcluster is synced into the tenant namespace,
 * so all of them count against the quota; what is left is the tenant's own (its Argo Workflows
 * pods above all). The per-plan table with the sums and that headroom is in docs/operations.md
 * ("Resource budgets per plan"); test/unit/plans.test.ts keeps it in step with this file.
 */
import type { PlanName } from './plan-names.ts';
import { resources, type ContainerResources, type RuntimeResources } from '../runtime/component/resources.ts';

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
  /** The control plane pod's init containers (they copy the Kubernetes binaries, then exit). */
  controlPlaneInit: ContainerResources;
  /** CoreDNS inside the vcluster (one replica; the syncer deploys it from the chart's values). */
  coreDns: ContainerResources;
  /** The runtime's Argo components and agents. */
  runtime: RuntimeResources;
  /**
   * What the quota must still hold for the tenant's own pods (its Argo Workflows pods above all)
   * once the runtime runs: the conformance check fails a plan whose runtime leaves less.
   */
  tenantHeadroom: { cpu: string; memory: string; limits: { cpu: string; memory: string }; pods: number };
}

// resources(requests cpu, requests memory, limits cpu, limits memory), per container and replica.
const FREE_RUNTIME: RuntimeResources = {
  argoCd: {
    applicationController: resources('100m', '256Mi', '500m', '768Mi'),
    repoServer: resources('50m', '128Mi', '500m', '512Mi'),
    server: resources('25m', '64Mi', '250m', '256Mi'),
    redis: resources('10m', '32Mi', '100m', '128Mi'),
    applicationSet: resources('10m', '48Mi', '100m', '128Mi'),
    notifications: resources('10m', '32Mi', '100m', '128Mi'),
    redisSecretInit: resources('10m', '32Mi', '100m', '64Mi'),
  },
  argoWorkflows: {
    controller: resources('25m', '64Mi', '250m', '256Mi'),
    server: resources('10m', '64Mi', '100m', '256Mi'),
    executor: resources('10m', '32Mi', '250m', '128Mi'),
  },
  argoRollouts: { controller: resources('25m', '64Mi', '250m', '256Mi'), replicas: 1 },
  argoEvents: { controller: resources('10m', '48Mi', '100m', '128Mi') },
  agents: {
    'tunnel-client': resources('10m', '48Mi', '100m', '128Mi'),
    'request-router': resources('10m', '48Mi', '100m', '128Mi'),
    'app-proxy': resources('10m', '64Mi', '250m', '256Mi'),
    // The event reporter idles at 100–120 MiB; its V8 heap is capped below the 512 MiB limit.
    'event-reporter': resources('25m', '160Mi', '250m', '512Mi'),
    // From runtime version 1.7.0. Node plus `git log` over its clones; its answer cache is a
    // quarter of the memory limit (agent-objects.ts). The free plan's quota headroom allows 128Mi.
    'source-server': resources('10m', '80Mi', '250m', '128Mi'),
    // From runtime version 1.8.0. Node, polling every few seconds, plus git for a commit now and then.
    'gitops-operator': resources('10m', '64Mi', '250m', '128Mi'),
  },
};

const TEAM_RUNTIME: RuntimeResources = {
  argoCd: {
    applicationController: resources('250m', '512Mi', '2', '2Gi'),
    repoServer: resources('100m', '256Mi', '1', '1Gi'),
    server: resources('50m', '128Mi', '500m', '512Mi'),
    redis: resources('25m', '64Mi', '250m', '256Mi'),
    applicationSet: resources('25m', '64Mi', '250m', '256Mi'),
    notifications: resources('25m', '64Mi', '250m', '256Mi'),
    redisSecretInit: resources('10m', '32Mi', '100m', '64Mi'),
  },
  argoWorkflows: {
    controller: resources('100m', '128Mi', '1', '512Mi'),
    server: resources('50m', '128Mi', '500m', '512Mi'),
    executor: resources('25m', '64Mi', '500m', '256Mi'),
  },
  argoRollouts: { controller: resources('50m', '128Mi', '500m', '512Mi'), replicas: 2 },
  argoEvents: { controller: resources('25m', '64Mi', '250m', '256Mi') },
  agents: {
    'tunnel-client': resources('50m', '64Mi', '250m', '128Mi'),
    'request-router': resources('50m', '64Mi', '250m', '128Mi'),
    'app-proxy': resources('50m', '96Mi', '500m', '256Mi'),
    'event-reporter': resources('100m', '256Mi', '500m', '512Mi'),
    'source-server': resources('50m', '128Mi', '500m', '512Mi'),
    'gitops-operator': resources('25m', '96Mi', '500m', '256Mi'),
  },
};

const ENTERPRISE_RUNTIME: RuntimeResources = {
  argoCd: {
    applicationController: resources('500m', '1Gi', '4', '4Gi'),
    repoServer: resources('250m', '512Mi', '2', '2Gi'),
    server: resources('100m', '256Mi', '1', '1Gi'),
    redis: resources('50m', '128Mi', '500m', '512Mi'),
    applicationSet: resources('50m', '128Mi', '500m', '512Mi'),
    notifications: resources('50m', '128Mi', '500m', '512Mi'),
    redisSecretInit: resources('10m', '32Mi', '100m', '64Mi'),
  },
  argoWorkflows: {
    controller: resources('250m', '256Mi', '2', '1Gi'),
    server: resources('100m', '256Mi', '1', '1Gi'),
    executor: resources('50m', '64Mi', '500m', '256Mi'),
  },
  argoRollouts: { controller: resources('100m', '256Mi', '1', '1Gi'), replicas: 2 },
  argoEvents: { controller: resources('50m', '128Mi', '500m', '512Mi') },
  agents: {
    'tunnel-client': resources('50m', '64Mi', '250m', '128Mi'),
    'request-router': resources('100m', '128Mi', '500m', '256Mi'),
    'app-proxy': resources('100m', '128Mi', '1', '512Mi'),
    'event-reporter': resources('200m', '384Mi', '1', '768Mi'),
    'source-server': resources('100m', '256Mi', '1', '1Gi'),
    'gitops-operator': resources('50m', '128Mi', '1', '512Mi'),
  },
};

/** Every plan under its name: exactly the names of plan-names.ts. */
const PLAN_TABLE = {
  free: {
    name: 'free',
    // Limits 8.5 and 12.5Gi (8 and 12Gi before 1.8.0): the GitOps Operator's limits are burst room
    // on top of the tenant's stated headroom; its requests, what a tenant reserves, are 10m and 64Mi.
    quota: {
      cpu: '4',
      memory: '8Gi',
      limits: { cpu: '8500m', memory: '12800Mi' },
      pods: 30,
      storage: '10Gi',
      pvcs: 5,
    },
    container: {
      defaultRequest: { cpu: '50m', memory: '64Mi' },
      default: { cpu: '500m', memory: '512Mi' },
      max: { cpu: '2', memory: '4Gi' },
    },
    controlPlane: { requests: { cpu: '150m', memory: '384Mi' }, limits: { cpu: '1', memory: '1Gi' }, storage: '5Gi' },
    controlPlaneInit: resources('20m', '32Mi', '100m', '128Mi'),
    coreDns: resources('20m', '64Mi', '100m', '170Mi'),
    runtime: FREE_RUNTIME,
    tenantHeadroom: { cpu: '2', memory: '4Gi', limits: { cpu: '3', memory: '6Gi' }, pods: 8 },
  },
  team: {
    name: 'team',
    quota: { cpu: '16', memory: '32Gi', limits: { cpu: '32', memory: '48Gi' }, pods: 100, storage: '50Gi', pvcs: 20 },
    container: {
      defaultRequest: { cpu: '100m', memory: '128Mi' },
      default: { cpu: '1', memory: '1Gi' },
      max: { cpu: '4', memory: '8Gi' },
    },
    controlPlane: { requests: { cpu: '500m', memory: '1Gi' }, limits: { cpu: '2', memory: '2Gi' }, storage: '10Gi' },
    controlPlaneInit: resources('40m', '64Mi', '100m', '256Mi'),
    coreDns: resources('50m', '64Mi', '500m', '170Mi'),
    runtime: TEAM_RUNTIME,
    tenantHeadroom: { cpu: '12', memory: '24Gi', limits: { cpu: '16', memory: '32Gi' }, pods: 70 },
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
    controlPlane: { requests: { cpu: '1', memory: '2Gi' }, limits: { cpu: '4', memory: '4Gi' }, storage: '20Gi' },
    controlPlaneInit: resources('40m', '64Mi', '100m', '256Mi'),
    coreDns: resources('100m', '128Mi', '1', '256Mi'),
    runtime: ENTERPRISE_RUNTIME,
    tenantHeadroom: { cpu: '56', memory: '112Gi', limits: { cpu: '96', memory: '160Gi' }, pods: 360 },
  },
} satisfies Record<PlanName, Plan>;

export const PLANS: Readonly<Record<string, Plan>> = PLAN_TABLE;
export { PLAN_NAMES } from './plan-names.ts';
export const DEFAULT_PLAN = 'free';

/**
 * The plan called `name`, or undefined. By own property only: a name a caller gave (a signup's
 * plan, a CLI flag) indexing PLANS directly would find what every object inherits (`constructor`,
 * `toString`, `__proto__`) and take it for a plan.
 */
export function planOf(name: string): Plan | undefined {
  return Object.hasOwn(PLANS, name) ? PLANS[name] : undefined;
}
