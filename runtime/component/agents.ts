/**
 * The runtime agents that run next to Argo inside a tenant's vcluster, and what each may do.
 * Plain data: the GitOpsRuntime component turns each entry into a ServiceAccount, RBAC, a
 * Deployment and (when it serves traffic) a Service.
 *
 *  - tunnel-client: dials out to the control plane's tunnel server with the runtime token and
 *    forwards requests to the request router. No Kubernetes API access.
 *  - request-router: routes tunnelled requests: API calls to the app-proxy, webhooks to Argo
 *    Events. No Kubernetes API access.
 *  - app-proxy: verifies requests signed by the control plane (its public key), serves runtime
 *    info (the runtime-versions ConfigMap) and the actions on Argo objects: refresh and sync an
 *    Application, promote, abort or retry a Rollout, terminate or stop a Workflow; promote a
 *    product, retry or abort a promotion (1.8.0+).
 *  - event-reporter: watches Applications, Rollouts and Workflows and reports them in batches;
 *    each object belongs to one live replica (rendezvous hashing over the replicas' Leases).
 *  - source-server (from runtime version 1.7.0): answers the event reporter and the app-proxy
 *    about an Application's Git side (runtime/protocol/sources.ts): what Argo CD generated at a
 *    revision, the commit that last changed it, the diff against the cluster. It reads Argo CD's
 *    API server as the read-only local account `source-server` and Git with Argo CD's repository
 *    credentials.
 *
 *  - gitops-operator (from runtime version 1.8.0): runs promotions (docs/promotions.md).
 *
 * AGENTS are the agents of every runtime, hosted and hybrid (the install bundle's). An agent added
 * later names the first runtime version it is installed in (`since`); the hosted runtime installs
 * `agentsAt(version)`, and so does a hybrid runtime's bundle (runtime/hybrid/bundle.ts), where the
 * Source Server reaches the Argo CD beside it as that mode allows (docs/hybrid.md "Source Server").
 */
import type * as k8s from '@pulumi/kubernetes';
import { compareVersions } from '../catalog.ts';
import { CREDENTIAL_KEYS, CREDENTIALS_SECRET } from '../protocol/bootstrap.ts';
import { VERSIONS_CONFIGMAP } from '../protocol/upgrade.ts';
import { GITOPS_OPERATOR_RULES } from './promotion-crds.ts';

/** Image repository prefix of the agents unless a tenant's config names another: images are `<prefix>/<agent>:<tag>`. */
export const DEFAULT_AGENT_IMAGE_REPOSITORY = 'hosted-runtimes';

export type AgentName =
  'tunnel-client' | 'request-router' | 'app-proxy' | 'event-reporter' | 'source-server' | 'gitops-operator';

/** Keys of the runtime credentials Secret (defined with the bootstrap exchange, which writes them in a hybrid runtime). */
export { CREDENTIAL_KEYS };

type CredentialKey = (typeof CREDENTIAL_KEYS)[keyof typeof CREDENTIAL_KEYS];

export interface AgentDefinition {
  name: AgentName;
  replicas: number;
  /** Port the agent serves (HTTP, health endpoints included). */
  port: number;
  /** Whether other pods call it (a Service is created). */
  service: boolean;
  /** Whether it talks to the Kubernetes API (otherwise no token is mounted). */
  apiAccess: boolean;
  /** Credentials Secret keys exposed as environment variables (env name -> key): values read once, at start. */
  secretEnv: Readonly<Record<string, CredentialKey>>;
  /**
   * Secret keys mounted as files (a `<NAME>_FILE` env name -> the Secret and key; agentSecretFile
   * says where): a value that changes (the runtime key exchanged when a warm pool entry is claimed,
   * a rotated password) reaches the running agent, which reads the file again (the kubelet updates
   * a mounted Secret's files; an environment variable keeps its first value).
   */
  secretFiles?: Readonly<Record<string, SecretFile>>;
  /** Rules granted cluster-wide inside the vcluster. */
  clusterRules: k8s.types.input.rbac.v1.PolicyRule[];
  /** Rules granted in the runtime namespace only. */
  namespaceRules: k8s.types.input.rbac.v1.PolicyRule[];
  /** Rules granted in other namespaces of the vcluster (a Role and RoleBinding in each). */
  otherNamespaceRules?: Readonly<Record<string, k8s.types.input.rbac.v1.PolicyRule[]>>;
  /** The first runtime version that installs the agent; absent: every version. */
  since?: string;
}

/** A key of a Secret in the agent's namespace, mounted as a file. */
export interface SecretFile {
  secret: string;
  key: string;
}

/** Where an agent's pod mounts the Secrets of its secretFiles: one folder per Secret. */
export const SECRET_FILES_DIR = '/etc/hosted-runtime-secrets';

/** The path of a secretFiles entry in the agent's container. */
export function agentSecretFile(f: SecretFile): string {
  return `${SECRET_FILES_DIR}/${f.secret}/${f.key}`;
}

/** The runtime key as a file: what the agents that present it read (tunnel client, event reporter). */
const RUNTIME_TOKEN_FILE: Readonly<Record<string, SecretFile>> = {
  RUNTIME_TOKEN_FILE: { secret: CREDENTIALS_SECRET, key: CREDENTIAL_KEYS.token },
};

export const AGENT_PORT = 8080;
/** Namespace of the agents inside the vcluster. */
export const RUNTIME_NAMESPACE = 'hosted-runtime';
/** ConfigMap recording the runtime version and every component version (defined with the upgrade protocol: the in-cluster upgrader patches it). */
export { VERSIONS_CONFIGMAP };
/** Key of the versions ConfigMap holding `{runtimeVersion, components}` as JSON (the app-proxy's runtime info file). */
export const RUNTIME_INFO_KEY = 'runtime-info.json';
/** Secret holding the runtime token and the control plane's addresses and public key (runtime/protocol/bootstrap.ts). */
export { CREDENTIALS_SECRET };
/** Events the event reporter queues per replica before its overflow policy applies. */
export const EVENT_QUEUE_LIMIT = 1000;

export const AGENTS: readonly AgentDefinition[] = [
  {
    name: 'tunnel-client',
    replicas: 1, // one tunnel per runtime: a newer connection replaces an older one
    port: AGENT_PORT,
    service: false,
    apiAccess: false,
    secretEnv: { TUNNEL_URL: CREDENTIAL_KEYS.tunnelUrl },
    // Read at every connect and checked every few seconds: a new key reconnects with it.
    secretFiles: RUNTIME_TOKEN_FILE,
    clusterRules: [],
    namespaceRules: [],
  },
  {
    name: 'request-router',
    replicas: 2,
    port: AGENT_PORT,
    service: true,
    apiAccess: false,
    secretEnv: {},
    clusterRules: [],
    namespaceRules: [],
  },
  {
    name: 'app-proxy',
    replicas: 2,
    port: AGENT_PORT,
    service: true,
    apiAccess: true,
    secretEnv: { CONTROL_PLANE_PUBLIC_KEY: CREDENTIAL_KEYS.publicKey },
    // Only what the actions (runtime/agents/app-proxy/actions.ts) read and write: one object at a
    // time by name (no list, no watch), merge patches, and Promotions created (no update or delete).
    clusterRules: [
      // Refresh (annotation) and sync (`operation`) an Application.
      { apiGroups: ['argoproj.io'], resources: ['applications'], verbs: ['get', 'patch'] },
      // Promote, abort, retry a Rollout: spec and status patches, as kubectl-argo-rollouts.
      { apiGroups: ['argoproj.io'], resources: ['rollouts', 'rollouts/status'], verbs: ['get', 'patch'] },
      // Terminate or stop a Workflow: a patch of spec.shutdown.
      { apiGroups: ['argoproj.io'], resources: ['workflows'], verbs: ['get', 'patch'] },
      // Promote a product (a new Promotion for the GitOps Operator), retry or abort a promotion (a
      // patch of its spec). Runtime 1.8.0+; before, the group does not exist and the actions answer 404.
      { apiGroups: ['promotions.hosted-runtimes.io'], resources: ['products'], verbs: ['get'] },
      { apiGroups: ['promotions.hosted-runtimes.io'], resources: ['promotions'], verbs: ['get', 'create', 'patch'] },
      // A product's dry run (a new PromotionPreview) and its abort (a patch of its spec).
      {
        apiGroups: ['promotions.hosted-runtimes.io'],
        resources: ['promotionpreviews'],
        verbs: ['get', 'create', 'patch'],
      },
    ],
    namespaceRules: [
      { apiGroups: [''], resources: ['configmaps'], resourceNames: [VERSIONS_CONFIGMAP], verbs: ['get', 'watch'] },
    ],
  },
  {
    name: 'event-reporter',
    replicas: 2,
    port: AGENT_PORT,
    service: false,
    apiAccess: true,
    // Every replica caches every reported object (the JSON only of those it does not own or has
    // still to send): 100–120 MiB idle, under 150 MiB with 10,000 owned objects with its V8 flags
    // (agent-workload.ts, docs/benchmarks.md "Event reporter"); its memory limit (per plan,
    // tenants/plans.ts, at least 512 MiB) leaves room for a queue of large objects (up to
    // QUEUE_LIMIT × 256 KiB).
    secretEnv: { CONTROL_PLANE_URL: CREDENTIAL_KEYS.controlPlaneUrl },
    // Read before every batch.
    secretFiles: RUNTIME_TOKEN_FILE,
    clusterRules: [
      {
        apiGroups: ['argoproj.io'],
        resources: ['applications', 'rollouts', 'workflows'],
        verbs: ['get', 'list', 'watch'],
      },
      // The GitOps Operator's products, promotions and previews (runtime 1.8.0+; absent before: reported unavailable).
      {
        apiGroups: ['promotions.hosted-runtimes.io'],
        resources: ['products', 'promotions', 'promotionpreviews'],
        verbs: ['get', 'list', 'watch'],
      },
    ],
    namespaceRules: [
      // Shard membership: one Lease per replica, deleted on shutdown (fast handover) and by the
      // others once its replica is long gone.
      {
        apiGroups: ['coordination.k8s.io'],
        resources: ['leases'],
        verbs: ['get', 'list', 'watch', 'create', 'update', 'delete'],
      },
    ],
  },
];

/**
 * Where the Source Server keeps its Git clones (a writable emptyDir: the root file system is
 * read-only under Pod Security `restricted`), and how large they may grow.
 */
export const GIT_CACHE_DIR = '/var/cache/source-server';
export const GIT_CACHE_SIZE_LIMIT = '1Gi';
/** The Secret in the runtime namespace holding the Source Server's Argo CD password (key `password`). */
export const SOURCE_SERVER_ARGOCD_SECRET = 'source-server-argocd';
/** The Secret Argo CD keeps its settings and local accounts' passwords in (in its namespace). */
export const ARGOCD_SECRET = 'argocd-secret';
/** The Secret whose certificate Argo CD's server serves when the customer put one there. */
export const ARGOCD_SERVER_TLS_SECRET = 'argocd-server-tls';
/** The Argo CD local account the Source Server logs in as. */
export const SOURCE_SERVER_ARGOCD_ACCOUNT = 'source-server';
/** The Source Server's address inside a runtime whose agents are in `namespace` (its Service), for the event reporter and the app-proxy. */
export const sourceServerUrl = (namespace: string): string => `http://source-server.${namespace}.svc:${AGENT_PORT}`;
/**
 * The console's page of a tenant's products whose resources are in Argo CD namespace `namespace`
 * (`<it>/<product>` is one product's page): the GitOps Operator's PRODUCTS_URL, which its pull
 * requests link back to. `controlPlaneUrl` is the control plane's public URL (the console is at
 * `/console/`).
 */
export const productsUrl = (controlPlaneUrl: string, tenantId: string, namespace: string): string =>
  `${controlPlaneUrl.replace(/\/+$/, '')}/console/#/tenants/${encodeURIComponent(tenantId)}/products/${encodeURIComponent(namespace)}`;
/** The hosted runtime's Source Server. */
export const SOURCE_SERVER_URL = sourceServerUrl(RUNTIME_NAMESPACE);
/** Where a hybrid runtime beside an existing Argo CD mounts the Source Server's Argo CD token (Secret SOURCE_SERVER_ARGOCD_SECRET, key `token`). */
export const SOURCE_SERVER_TOKEN_DIR = '/etc/source-server-argocd';

export const SOURCE_SERVER_AGENT: AgentDefinition = {
  name: 'source-server',
  replicas: 1, // stateless besides its caches; the reporter retries while it restarts
  port: AGENT_PORT,
  service: true,
  apiAccess: true,
  secretEnv: {},
  // Its Argo CD password, derived from the runtime key (source-server-account.ts): read at every
  // login, so the password the claim of a warm pool entry rotates is picked up without a restart.
  secretFiles: { ARGOCD_PASSWORD_FILE: { secret: SOURCE_SERVER_ARGOCD_SECRET, key: 'password' } },
  since: '1.7.0',
  clusterRules: [],
  namespaceRules: [],
  otherNamespaceRules: {
    // Argo CD's repository credentials (Secrets labelled argocd.argoproj.io/secret-type=repository
    // or repo-creds), to read Git history with them. RBAC cannot narrow a rule by label, so this
    // grants every Secret of the argocd namespace (Argo CD's own among them): the agent selects
    // the labelled ones and keeps nothing else. It is the namespace's Secrets only, never the
    // tenant's applications' namespaces.
    argocd: [{ apiGroups: [''], resources: ['secrets'], verbs: ['get', 'list', 'watch'] }],
  },
};

/** Where the GitOps Operator keeps its working clones (a writable emptyDir). */
export const GITOPS_WORK_DIR = '/var/cache/gitops-operator';
export const GITOPS_WORK_SIZE_LIMIT = '1Gi';

/**
 * The GitOps Operator (from runtime version 1.8.0): runs promotions (docs/promotions.md) from the
 * promotion resources in Argo CD's namespace, committing to the customer's configuration
 * repository with Argo CD's repository credentials. Its rights are all in that namespace
 * (promotion-crds.ts GITOPS_OPERATOR_RULES); nothing cluster-wide, nothing in its own.
 */
export const GITOPS_OPERATOR_AGENT: AgentDefinition = {
  name: 'gitops-operator',
  replicas: 1, // one active at a time anyway (its Lease); a restarted one continues from the status
  port: AGENT_PORT,
  service: false,
  apiAccess: true,
  secretEnv: {},
  since: '1.8.0',
  clusterRules: [],
  namespaceRules: [],
  otherNamespaceRules: { argocd: GITOPS_OPERATOR_RULES },
};

/** Every agent any runtime version installs: AGENTS and those added later (`since`). */
export const RUNTIME_AGENTS: readonly AgentDefinition[] = [...AGENTS, SOURCE_SERVER_AGENT, GITOPS_OPERATOR_AGENT];

/** The agents a hosted runtime of `version` installs. */
export function agentsAt(version: string): AgentDefinition[] {
  return RUNTIME_AGENTS.filter((a) => a.since === undefined || compareVersions(version, a.since) >= 0);
}
