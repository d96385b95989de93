/**
 * Kubernetes objects of one runtime agent: ServiceAccount, least-privilege RBAC, Deployment and
 * (for agents other pods call) a Service. Created as children of the GitOpsRuntime component.
 */
import * as k8s from '@pulumi/kubernetes';
import * as pulumi from '@pulumi/pulumi';
import type { AgentDefinition } from './agents.ts';
import { agentObjects, type AgentPeers } from './agent-objects.ts';
import type { ContainerResources } from './resources.ts';

export {
  agentLabels,
  agentObjects,
  agentPodSpec,
  EVENT_REPORTER_NODE_OPTIONS,
  type AgentObjects,
  type AgentPeers,
} from './agent-objects.ts';

export interface AgentWorkloadOptions {
  /** Component name; children are named `${name}-${agent}-<kind>`. */
  name: string;
  agent: AgentDefinition;
  /** The tenant the runtime belongs to (the app-proxy refuses requests signed for another). */
  tenantId: pulumi.Input<string>;
  /** Image repository prefix; the image is `<prefix>/<agent>:<tag>`. */
  imageRepository: pulumi.Input<string>;
  imageTag: string;
  /** Requests and limits of the agent's container (per plan). */
  resources: ContainerResources;
  parent: pulumi.Resource;
  /** Resources the Deployment waits for (namespace, credentials, CRD owners). */
  dependsOn: pulumi.Resource[];
  /** What else the runtime runs that the agent's environment names (the Source Server). */
  peers?: AgentPeers;
}

export function createAgentWorkload(opts: AgentWorkloadOptions): k8s.apps.v1.Deployment {
  const { agent, name, parent } = opts;
  const prefix = `${name}-${agent.name}`;
  const child = { parent };
  const objects = agentObjects(
    agent,
    imageRef(opts.imageRepository, agent.name, opts.imageTag),
    opts.tenantId,
    opts.resources,
    undefined,
    opts.peers,
  );
  const dependsOn: pulumi.Resource[] = [...opts.dependsOn];

  const account = new k8s.core.v1.ServiceAccount(`${prefix}-sa`, objects.serviceAccount, {
    ...child,
    dependsOn: opts.dependsOn,
  });
  dependsOn.push(account);

  if (objects.role && objects.roleBinding) {
    const role = new k8s.rbac.v1.Role(`${prefix}-role`, objects.role, { ...child, dependsOn: opts.dependsOn });
    dependsOn.push(
      new k8s.rbac.v1.RoleBinding(`${prefix}-rolebinding`, objects.roleBinding, {
        ...child,
        dependsOn: [role, account],
      }),
    );
  }
  for (const other of objects.otherRoles ?? []) {
    const ns = other.namespace;
    const role = new k8s.rbac.v1.Role(`${prefix}-role-${ns}`, other.role, { ...child, dependsOn: opts.dependsOn });
    dependsOn.push(
      new k8s.rbac.v1.RoleBinding(`${prefix}-rolebinding-${ns}`, other.roleBinding, {
        ...child,
        dependsOn: [role, account],
      }),
    );
  }
  if (objects.clusterRole && objects.clusterRoleBinding) {
    const role = new k8s.rbac.v1.ClusterRole(`${prefix}-clusterrole`, objects.clusterRole, child);
    dependsOn.push(
      new k8s.rbac.v1.ClusterRoleBinding(`${prefix}-clusterrolebinding`, objects.clusterRoleBinding, {
        ...child,
        dependsOn: [role, account],
      }),
    );
  }
  if (objects.service) {
    new k8s.core.v1.Service(`${prefix}-service`, objects.service, { ...child, dependsOn: opts.dependsOn });
  }
  return new k8s.apps.v1.Deployment(`${prefix}-deployment`, objects.deployment, { ...child, dependsOn });
}

/** `<repository>/<agent>:<tag>`. */
export function imageRef(repository: pulumi.Input<string>, agent: string, tag: string): pulumi.Output<string> {
  return pulumi.interpolate`${repository}/${agent}:${tag}`;
}
