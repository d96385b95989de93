/**
 * Resource budgets of the runtime: explicit requests and limits for every container the runtime
 * runs inside a tenant's vcluster (each Argo component, the agents), chosen per plan
 * (tenants/plans.ts). Every pod of a vcluster is synced into the tenant namespace on the root
 * cluster, so these containers count against the plan's ResourceQuota there; without explicit
 * resources each would get the namespace LimitRange's defaults.
 */
import type { AgentName } from './agents.ts';

// Type aliases, not interfaces: the Kubernetes SDK's inputs take them as string maps.
export type Quantities = { cpu: string; memory: string };

/** Requests and limits of one container. */
export type ContainerResources = { requests: Quantities; limits: Quantities };

/** Every container of the runtime's Argo releases and agents (per replica). */
export interface RuntimeResources {
  argoCd: {
    applicationController: ContainerResources;
    /** The repo-server and its copyutil init container (the chart gives both the same resources). */
    repoServer: ContainerResources;
    server: ContainerResources;
    redis: ContainerResources;
    applicationSet: ContainerResources;
    notifications: ContainerResources;
    /** The pre-install/pre-upgrade Job that creates the Redis password Secret. */
    redisSecretInit: ContainerResources;
  };
  argoWorkflows: {
    controller: ContainerResources;
    server: ContainerResources;
    /** The init and wait containers the controller adds to each of the tenant's workflow pods. */
    executor: ContainerResources;
  };
  argoRollouts: { controller: ContainerResources; replicas: number };
  argoEvents: { controller: ContainerResources };
  agents: Record<AgentName, ContainerResources>;
}

/** `resources(requests cpu, requests memory, limits cpu, limits memory)`. */
export function resources(cpu: string, memory: string, limitCpu: string, limitMemory: string): ContainerResources {
  return { requests: { cpu, memory }, limits: { cpu: limitCpu, memory: limitMemory } };
}

/** A copy (the values handed to Helm and Pulumi must not share objects with the plan table). */
export function copyResources(r: ContainerResources): ContainerResources {
  return { requests: { ...r.requests }, limits: { ...r.limits } };
}
