/**
 * The Kubernetes objects of one runtime agent as plain data: ServiceAccount, least-privilege RBAC,
 * Deployment and (for agents other pods call) a Service. The GitOpsRuntime component creates them
 * in a tenant's vcluster (agent-workload.ts), the offline render prints them
 * (runtime/render/render.ts) and the hybrid install bundle writes them (runtime/hybrid/bundle.ts).
 * Nothing here loads Pulumi: the types only.
 */
import type * as k8s from '@pulumi/kubernetes';
import type * as pulumi from '@pulumi/pulumi';
import {
  AGENT_PORT,
  CREDENTIALS_SECRET,
  EVENT_QUEUE_LIMIT,
  GIT_CACHE_DIR,
  GIT_CACHE_SIZE_LIMIT,
  GITOPS_WORK_DIR,
  GITOPS_WORK_SIZE_LIMIT,
  RUNTIME_INFO_KEY,
  RUNTIME_NAMESPACE,
  SECRET_FILES_DIR,
  SOURCE_SERVER_ARGOCD_ACCOUNT,
  agentSecretFile,
  sourceServerUrl,
  VERSIONS_CONFIGMAP,
  type AgentDefinition,
} from './agents.ts';
import { ARGO_CD_NAMESPACE, ARGOCD_SERVER_URL, WEBHOOK_EVENT_SOURCE_URL } from './argo-releases.ts';
import { restrictedContainerSecurityContext, restrictedPodSecurityContext } from './pod-security.ts';
import { copyResources, type ContainerResources } from './resources.ts';
import { bytes } from '../render/quantity.ts';

export function agentLabels(agent: string): Record<string, string> {
  return {
    'app.kubernetes.io/name': agent,
    'app.kubernetes.io/part-of': 'hosted-runtime',
    'app.kubernetes.io/managed-by': 'pulumi',
  };
}

/** Where the app-proxy's pod mounts the versions ConfigMap (its runtime info file). */
const RUNTIME_INFO_DIR = '/etc/hosted-runtime';

/**
 * The environment of an agent: exactly the variables its config loader reads
 * (runtime/agents/<agent>/config.ts); test/unit/pulumi/agent-env.test.ts runs each loader on it.
 */
/**
 * V8 flags of the event reporter: a young generation of 1 MiB semi-spaces instead of V8's default
 * 16 MiB (its watch parses many short-lived objects; with the default the process grew to 350 MiB
 * with 10,000 objects, with 1 MiB it stays under 150 MiB: docs/benchmarks.md "Event reporter"), and
 * an old generation capped below the container's memory limit, so that running out of heap is
 * V8's error in the log rather than an OOM kill.
 */
export const EVENT_REPORTER_NODE_OPTIONS = '--max-semi-space-size=1 --max-old-space-size=384';

/** What else the runtime of a version runs that an agent's environment names. */
export interface AgentPeers {
  /** The runtime has a Source Server (agentsAt(version)): the event reporter and the app-proxy get its URL. */
  sourceServer?: boolean;
  /** The console's page of the tenant's products (agents.ts productsUrl): the GitOps Operator's PRODUCTS_URL. */
  productsUrl?: pulumi.Input<string>;
}

function env(
  agent: AgentDefinition,
  tenantId: pulumi.Input<string>,
  namespace: string,
  peers: AgentPeers,
  resources: ContainerResources,
): k8s.types.input.core.v1.EnvVar[] {
  const vars: k8s.types.input.core.v1.EnvVar[] = [
    ...Object.entries(agent.secretEnv).map(([name, key]) => ({
      name,
      valueFrom: { secretKeyRef: { name: CREDENTIALS_SECRET, key } },
    })),
    ...Object.entries(agent.secretFiles ?? {}).map(([name, file]) => ({ name, value: agentSecretFile(file) })),
  ];
  switch (agent.name) {
    case 'tunnel-client':
      vars.push(
        // The tunnel client serves only its health endpoints, on the port the probes call.
        { name: 'HEALTH_PORT', value: String(AGENT_PORT) },
        { name: 'ROUTER_URL', value: `http://request-router.${namespace}.svc:${AGENT_PORT}` },
      );
      break;
    case 'request-router':
      vars.push(
        { name: 'PORT', value: String(AGENT_PORT) },
        { name: 'APP_PROXY_URL', value: `http://app-proxy.${namespace}.svc:${AGENT_PORT}` },
        { name: 'EVENT_SOURCE_URL', value: WEBHOOK_EVENT_SOURCE_URL },
        { name: 'ARGOCD_SERVER_URL', value: ARGOCD_SERVER_URL },
      );
      break;
    case 'app-proxy':
      vars.push(
        { name: 'PORT', value: String(AGENT_PORT) },
        { name: 'TENANT_ID', value: tenantId },
        // A mounted ConfigMap file, re-read when it changes: an upgrade that does not change the
        // agents' image updates the served versions without restarting the app-proxy.
        { name: 'RUNTIME_INFO_FILE', value: `${RUNTIME_INFO_DIR}/${RUNTIME_INFO_KEY}` },
      );
      if (peers.sourceServer) vars.push({ name: 'SOURCE_SERVER_URL', value: sourceServerUrl(namespace) });
      break;
    case 'event-reporter':
      vars.push(
        { name: 'PORT', value: String(AGENT_PORT) },
        { name: 'QUEUE_LIMIT', value: String(EVENT_QUEUE_LIMIT) },
        { name: 'POD_NAME', valueFrom: { fieldRef: { fieldPath: 'metadata.name' } } },
        { name: 'POD_NAMESPACE', valueFrom: { fieldRef: { fieldPath: 'metadata.namespace' } } },
        { name: 'NODE_OPTIONS', value: EVENT_REPORTER_NODE_OPTIONS },
      );
      if (peers.sourceServer) vars.push({ name: 'SOURCE_SERVER_URL', value: sourceServerUrl(namespace) });
      break;
    case 'gitops-operator':
      vars.push(
        { name: 'PORT', value: String(AGENT_PORT) },
        { name: 'PROMOTIONS_NAMESPACE', value: ARGO_CD_NAMESPACE },
        { name: 'POD_NAME', valueFrom: { fieldRef: { fieldPath: 'metadata.name' } } },
        { name: 'GIT_WORK_DIR', value: GITOPS_WORK_DIR },
      );
      // Dry runs ask the Source Server what a scratch commit would change (docs/promotions.md).
      if (peers.sourceServer) vars.push({ name: 'SOURCE_SERVER_URL', value: sourceServerUrl(namespace) });
      // Its pull requests link back to the product's page in the console.
      if (peers.productsUrl) vars.push({ name: 'PRODUCTS_URL', value: peers.productsUrl });
      break;
    case 'source-server':
      vars.push(
        { name: 'PORT', value: String(AGENT_PORT) },
        { name: 'ARGOCD_SERVER_URL', value: ARGOCD_SERVER_URL },
        { name: 'ARGOCD_USERNAME', value: SOURCE_SERVER_ARGOCD_ACCOUNT },
        // ARGOCD_PASSWORD_FILE: a secretFiles entry (agents.ts).
        { name: 'GIT_CACHE_DIR', value: GIT_CACHE_DIR },
        // Its in-memory cache of answers: a quarter of the container's memory limit.
        { name: 'CACHE_MAX_BYTES', value: String(Math.floor(bytes(resources.limits.memory) / 4)) },
      );
      break;
  }
  return vars;
}

/**
 * The pod template of an agent (exported for tests and for the manifest validation). `namespace`
 * is where its peers' Services are: the hosted runtime's own, or a hybrid runtime's (bundle.ts).
 */
export function agentPodSpec(
  agent: AgentDefinition,
  image: pulumi.Input<string>,
  tenantId: pulumi.Input<string>,
  resources: ContainerResources,
  namespace: string = RUNTIME_NAMESPACE,
  peers: AgentPeers = {},
): k8s.types.input.core.v1.PodSpec {
  const runtimeInfo = agent.name === 'app-proxy';
  // The Secrets of its secretFiles, one volume each with the keys it reads (no subPath: the kubelet
  // updates such files when the Secret changes).
  const secretVolumes = new Map<string, string[]>();
  for (const f of Object.values(agent.secretFiles ?? {}))
    secretVolumes.set(f.secret, [...(secretVolumes.get(f.secret) ?? []), f.key]);
  // Git clones: the Source Server's mirrors, the GitOps Operator's working clones.
  const gitCache =
    agent.name === 'source-server'
      ? { path: GIT_CACHE_DIR, size: GIT_CACHE_SIZE_LIMIT }
      : agent.name === 'gitops-operator'
        ? { path: GITOPS_WORK_DIR, size: GITOPS_WORK_SIZE_LIMIT }
        : undefined;
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
        env: env(agent, tenantId, namespace, peers, resources),
        resources: copyResources(resources),
        securityContext: restrictedContainerSecurityContext(),
        readinessProbe: { httpGet: { path: '/readyz', port: 'http' }, periodSeconds: 10 },
        livenessProbe: { httpGet: { path: '/healthz', port: 'http' }, periodSeconds: 20, failureThreshold: 3 },
        volumeMounts: [
          { name: 'tmp', mountPath: '/tmp' },
          ...(runtimeInfo ? [{ name: 'runtime-info', mountPath: RUNTIME_INFO_DIR, readOnly: true }] : []),
          ...[...secretVolumes.keys()].map((secret) => ({
            name: secretVolumeName(secret),
            mountPath: `${SECRET_FILES_DIR}/${secret}`,
            readOnly: true,
          })),
          ...(gitCache ? [{ name: 'git-cache', mountPath: gitCache.path }] : []),
        ],
      },
    ],
    volumes: [
      { name: 'tmp', emptyDir: { sizeLimit: '64Mi' } },
      ...(runtimeInfo
        ? [
            {
              name: 'runtime-info',
              configMap: { name: VERSIONS_CONFIGMAP, items: [{ key: RUNTIME_INFO_KEY, path: RUNTIME_INFO_KEY }] },
            },
          ]
        : []),
      ...[...secretVolumes].map(([secret, keys]) => ({
        name: secretVolumeName(secret),
        secret: { secretName: secret, items: keys.map((key) => ({ key, path: key })) },
      })),
      // Git clones of the repositories the Applications read (the Source Server's `git log`).
      ...(gitCache ? [{ name: 'git-cache', emptyDir: { sizeLimit: gitCache.size } }] : []),
    ],
  };
}

/** The volume of a secretFiles Secret in an agent's pod. */
export function secretVolumeName(secret: string): string {
  return `secret-${secret}`;
}

/** The Kubernetes objects of one agent, as the runtime creates them (also rendered offline). */
export interface AgentObjects {
  serviceAccount: k8s.types.input.core.v1.ServiceAccount;
  role?: k8s.types.input.rbac.v1.Role;
  roleBinding?: k8s.types.input.rbac.v1.RoleBinding;
  clusterRole?: k8s.types.input.rbac.v1.ClusterRole;
  clusterRoleBinding?: k8s.types.input.rbac.v1.ClusterRoleBinding;
  /** Roles in namespaces other than the runtime's (AgentDefinition.otherNamespaceRules). */
  otherRoles?: {
    namespace: string;
    role: k8s.types.input.rbac.v1.Role;
    roleBinding: k8s.types.input.rbac.v1.RoleBinding;
  }[];
  service?: k8s.types.input.core.v1.Service;
  deployment: k8s.types.input.apps.v1.Deployment;
}

/**
 * `namespace`: the hosted runtime's (default) or a hybrid runtime's own; the cluster-scoped RBAC
 * is named after it (`<namespace>:<agent>`), so that two runtimes in one cluster keep theirs apart.
 */
export function agentObjects(
  agent: AgentDefinition,
  image: pulumi.Input<string>,
  tenantId: pulumi.Input<string>,
  resources: ContainerResources,
  namespace: string = RUNTIME_NAMESPACE,
  peers: AgentPeers = {},
): AgentObjects {
  const labels = agentLabels(agent.name);
  const metadata = { name: agent.name, namespace, labels };
  const subjects = [{ kind: 'ServiceAccount', name: agent.name, namespace }];
  const clusterName = `${namespace}:${agent.name}`;
  const out: AgentObjects = {
    serviceAccount: {
      apiVersion: 'v1',
      kind: 'ServiceAccount',
      metadata,
      automountServiceAccountToken: agent.apiAccess,
    },
    deployment: {
      apiVersion: 'apps/v1',
      kind: 'Deployment',
      metadata,
      spec: {
        replicas: agent.replicas,
        selector: { matchLabels: { 'app.kubernetes.io/name': agent.name } },
        strategy: { type: 'RollingUpdate', rollingUpdate: { maxUnavailable: 0, maxSurge: 1 } },
        template: { metadata: { labels }, spec: agentPodSpec(agent, image, tenantId, resources, namespace, peers) },
      },
    },
  };
  if (agent.namespaceRules.length > 0) {
    out.role = { apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'Role', metadata, rules: agent.namespaceRules };
    out.roleBinding = {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'RoleBinding',
      metadata,
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: agent.name },
      subjects,
    };
  }
  const others = Object.entries(agent.otherNamespaceRules ?? {});
  if (others.length > 0) {
    // Named `<namespace>:<agent>` like the cluster-scoped RBAC: two runtimes' agents keep theirs apart.
    out.otherRoles = others.map(([ns, rules]) => {
      const meta = { name: clusterName, namespace: ns, labels };
      return {
        namespace: ns,
        role: { apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'Role', metadata: meta, rules },
        roleBinding: {
          apiVersion: 'rbac.authorization.k8s.io/v1',
          kind: 'RoleBinding',
          metadata: meta,
          roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: clusterName },
          subjects,
        },
      };
    });
  }
  if (agent.clusterRules.length > 0) {
    out.clusterRole = {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'ClusterRole',
      metadata: { name: clusterName, labels },
      rules: agent.clusterRules,
    };
    out.clusterRoleBinding = {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'ClusterRoleBinding',
      metadata: { name: clusterName, labels },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: clusterName },
      subjects,
    };
  }
  if (agent.service) {
    out.service = {
      apiVersion: 'v1',
      kind: 'Service',
      metadata,
      spec: {
        type: 'ClusterIP',
        selector: { 'app.kubernetes.io/name': agent.name },
        ports: [{ name: 'http', port: agent.port, targetPort: 'http', protocol: 'TCP' }],
      },
    };
  }
  return out;
}
