/**
 * Kubernetes objects of one runtime agent: ServiceAccount, least-privilege RBAC, Deployment and
 * (for agents other pods call) a Service. Created as children of the GitOpsRuntime component.
 */
import * as k8s from '@pulumi/kubernetes';
import * as pulumi from '@pulumi/pulumi';
import {
  AGENT_PORT,
  CREDENTIALS_SECRET,
  EVENT_QUEUE_LIMIT,
  RUNTIME_NAMESPACE,
  VERSIONS_CONFIGMAP,
  type AgentDefinition,
} from './agents.ts';
import { ARGO_CD_SERVER } from './argo-releases.ts';
import { restrictedContainerSecurityContext, restrictedPodSecurityContext } from './pod-security.ts';

export interface AgentWorkloadOptions {
  /** Component name; children are named `${name}-${agent}-<kind>`. */
  name: string;
  agent: AgentDefinition;
  /** Image repository prefix; the image is `<prefix>/<agent>:<tag>`. */
  imageRepository: pulumi.Input<string>;
  imageTag: string;
  parent: pulumi.Resource;
  /** Resources the Deployment waits for (namespace, credentials, CRD owners). */
  dependsOn: pulumi.Resource[];
}

export function agentLabels(agent: string): Record<string, string> {
  return {
    'app.kubernetes.io/name': agent,
    'app.kubernetes.io/part-of': 'hosted-runtime',
    'app.kubernetes.io/managed-by': 'pulumi',
  };
}

function env(agent: AgentDefinition): k8s.types.input.core.v1.EnvVar[] {
  const vars: k8s.types.input.core.v1.EnvVar[] = Object.entries(agent.secretEnv).map(([name, key]) => ({
    name,
    valueFrom: { secretKeyRef: { name: CREDENTIALS_SECRET, key } },
  }));
  vars.push({ name: 'PORT', value: String(AGENT_PORT) });
  switch (agent.name) {
    case 'tunnel-client':
      vars.push({ name: 'ROUTER_URL', value: `http://request-router.${RUNTIME_NAMESPACE}.svc:${AGENT_PORT}` });
      break;
    case 'request-router':
      vars.push(
        { name: 'APP_PROXY_URL', value: `http://app-proxy.${RUNTIME_NAMESPACE}.svc:${AGENT_PORT}` },
        { name: 'ARGO_CD_URL', value: `http://${ARGO_CD_SERVER}` },
        { name: 'EVENTS_NAMESPACE', value: 'argo-events' },
      );
      break;
    case 'app-proxy':
      vars.push(
        { name: 'VERSIONS_CONFIGMAP', value: VERSIONS_CONFIGMAP },
        { name: 'RUNTIME_NAMESPACE', value: RUNTIME_NAMESPACE },
      );
      break;
    case 'event-reporter':
      vars.push(
        { name: 'QUEUE_LIMIT', value: String(EVENT_QUEUE_LIMIT) },
        { name: 'POD_NAME', valueFrom: { fieldRef: { fieldPath: 'metadata.name' } } },
        { name: 'POD_NAMESPACE', valueFrom: { fieldRef: { fieldPath: 'metadata.namespace' } } },
      );
      break;
  }
  return vars;
}

/** The pod template of an agent (exported for tests and for the manifest validation). */
export function agentPodSpec(agent: AgentDefinition, image: pulumi.Input<string>): k8s.types.input.core.v1.PodSpec {
  return {
    serviceAccountName: agent.name,
    automountServiceAccountToken: agent.apiAccess,
    securityContext: restrictedPodSecurityContext(),
    containers: [
      {
        name: agent.name,
        image,
        imagePullPolicy: 'IfNotPresent',
        ports: [{ name: 'http', containerPort: agent.port, protocol: 'TCP' }],
        env: env(agent),
        resources: agent.resources,
        securityContext: restrictedContainerSecurityContext(),
        readinessProbe: { httpGet: { path: '/readyz', port: 'http' }, periodSeconds: 10 },
        livenessProbe: { httpGet: { path: '/healthz', port: 'http' }, periodSeconds: 20, failureThreshold: 3 },
        volumeMounts: [{ name: 'tmp', mountPath: '/tmp' }],
      },
    ],
    volumes: [{ name: 'tmp', emptyDir: { sizeLimit: '64Mi' } }],
  };
}

export function createAgentWorkload(opts: AgentWorkloadOptions): k8s.apps.v1.Deployment {
  const { agent, name, parent } = opts;
  const prefix = `${name}-${agent.name}`;
  const child = { parent };
  const labels = agentLabels(agent.name);
  const metadata = { name: agent.name, namespace: RUNTIME_NAMESPACE, labels };
  const dependsOn: pulumi.Resource[] = [...opts.dependsOn];

  const account = new k8s.core.v1.ServiceAccount(
    `${prefix}-sa`,
    {
      metadata,
      automountServiceAccountToken: agent.apiAccess,
    },
    { ...child, dependsOn: opts.dependsOn },
  );
  dependsOn.push(account);

  if (agent.namespaceRules.length > 0) {
    const role = new k8s.rbac.v1.Role(
      `${prefix}-role`,
      { metadata, rules: agent.namespaceRules },
      { ...child, dependsOn: opts.dependsOn },
    );
    dependsOn.push(
      new k8s.rbac.v1.RoleBinding(
        `${prefix}-rolebinding`,
        {
          metadata,
          roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: agent.name },
          subjects: [{ kind: 'ServiceAccount', name: agent.name, namespace: RUNTIME_NAMESPACE }],
        },
        { ...child, dependsOn: [role, account] },
      ),
    );
  }
  if (agent.clusterRules.length > 0) {
    const clusterName = `hosted-runtime:${agent.name}`;
    const role = new k8s.rbac.v1.ClusterRole(
      `${prefix}-clusterrole`,
      {
        metadata: { name: clusterName, labels },
        rules: agent.clusterRules,
      },
      child,
    );
    dependsOn.push(
      new k8s.rbac.v1.ClusterRoleBinding(
        `${prefix}-clusterrolebinding`,
        {
          metadata: { name: clusterName, labels },
          roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: clusterName },
          subjects: [{ kind: 'ServiceAccount', name: agent.name, namespace: RUNTIME_NAMESPACE }],
        },
        { ...child, dependsOn: [role, account] },
      ),
    );
  }
  if (agent.service) {
    new k8s.core.v1.Service(
      `${prefix}-service`,
      {
        metadata,
        spec: {
          type: 'ClusterIP',
          selector: { 'app.kubernetes.io/name': agent.name },
          ports: [{ name: 'http', port: agent.port, targetPort: 'http', protocol: 'TCP' }],
        },
      },
      { ...child, dependsOn: opts.dependsOn },
    );
  }
  return new k8s.apps.v1.Deployment(
    `${prefix}-deployment`,
    {
      metadata,
      spec: {
        replicas: agent.replicas,
        selector: { matchLabels: { 'app.kubernetes.io/name': agent.name } },
        strategy: { type: 'RollingUpdate', rollingUpdate: { maxUnavailable: 0, maxSurge: 1 } },
        template: {
          metadata: { labels },
          spec: agentPodSpec(agent, imageRef(opts.imageRepository, agent.name, opts.imageTag)),
        },
      },
    },
    { ...child, dependsOn },
  );
}

function imageRef(repository: pulumi.Input<string>, agent: string, tag: string): pulumi.Output<string> {
  return pulumi.interpolate`${repository}/${agent}:${tag}`;
}
