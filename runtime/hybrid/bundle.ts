/**
 * The install bundle of a hybrid runtime: what a customer applies to its own cluster to run the
 * runtime there. Generated from the same runtime package as a hosted runtime (the namespace and
 * versions ConfigMap of runtime-objects.ts, the agents of agents.ts/agent-objects.ts, the Argo
 * releases of argo-releases.ts at the catalog's chart pins), with the agents configured for that
 * runtime. Pure: no I/O.
 *
 * The only secret in it is the single-use bootstrap token (Secret `runtime-bootstrap`). The
 * `runtime-bootstrap` Job (runtime/agents/bootstrap/main.ts) exchanges it for the runtime token
 * inside the cluster, writes that into the `runtime-credentials` Secret, which the bundle creates
 * empty, and deletes the bootstrap Secret. The Job's Role may get and patch only the credentials
 * Secret and delete only the bootstrap Secret (by resourceNames; a `create` cannot be limited to
 * one name, which is why the bundle creates the credentials Secret itself).
 *
 *  - access=ingress: no tunnel client; the customer's ingress points at the request router's
 *    Service (ROUTER_SERVICE).
 *  - argo=existing: no Argo charts; the app-proxy and event reporter get no cluster-wide rights but
 *    a Role in the customer's Argo CD namespace: read Applications, and patch them (refresh, sync)
 *    for the app-proxy. Nothing else of the customer's Argo CD is created or changed.
 *  - the Source Server (catalog versions that have it, agentsAt): reads the Argo CD beside it as
 *    sourceServerObjects() says for each mode.
 *  - the GitOps Operator (catalog versions that have it, from 1.8.0): the promotion CRDs
 *    (promotion-crds.ts, the hosted runtime's own), the operator's account and Deployment, and its
 *    Role in the Argo CD beside it (agentObjects' `otherRoles`, moved to the customer's Argo CD
 *    namespace with argo=existing, where PROMOTIONS_NAMESPACE names it too). The CRDs are the one
 *    thing a bundle shares with other runtimes in the cluster: identical in every bundle and every
 *    version, labelled managed-by only (no tenant or runtime label), so that a second runtime's
 *    apply changes nothing of them, and the remove command never deletes them (deleting a CRD
 *    deletes every object of its kind, cluster-wide); it says how to once no runtime needs them.
 *    With argo=existing the app-proxy and event reporter also get the promotion rules of their
 *    hosted ClusterRoles in their Roles there.
 *  - argo=new: `charts` lists the four Argo releases at the catalog's versions with the values the
 *    hosted runtime gets on the default plan; `command` installs them with helm before the apply.
 *  - upgrader (`upgrades: agent`): the in-cluster upgrader's Deployment, account and Role, which may
 *    get and patch only the agents' Deployments and the versions ConfigMap, by name (upgrader.ts).
 *  - purpose=upgrade: the bundle a customer applies over an installed runtime to move it to another
 *    catalog version. No bootstrap token, Secret or Job (the runtime holds its credentials; a Job's
 *    pod template cannot be changed by an apply), everything else as at install. upgradeBundle()
 *    compares two of them (runtime/hybrid/upgrade.ts).
 *
 * Every object but the shared CRDs carries HYBRID_LABELS (managed-by, tenant, runtime);
 * `removeCommand` deletes by them.
 *
 * Names are the runtime's own, so that two runtimes share a cluster: its namespace
 * (`hosted-runtime-<name>`, `runtime.namespace`) and the cluster-scoped RBAC named after it
 * (`<namespace>:<agent>`), the operator's Role in Argo CD's namespace likewise
 * (`<namespace>:gitops-operator`, as agentObjects names it), and with argo=existing the other
 * agents' Roles in the customer's Argo CD namespace (`<namespace>-<agent>`). A runtime registered
 * before names were per runtime has no namespace of its own and keeps `hosted-runtime` and the
 * names that go with it (its installed objects).
 *
 * Images: the agents' at the release's registry with the digest the release pipeline recorded
 * (images.ts); `unpinnedImages` lists those without one.
 *
 * A customer applies this as the control plane's own, so nothing in it is a template around a
 * caller's text: objects are data written by the YAML library (yaml-text.ts), commands are quoted
 * word by word (shell.ts), and the comment at the top holds no value a caller gave (docs/security.md
 * "Content the control plane generates for customers").
 */
import { DEFAULT_PLAN, PLANS } from '../../tenants/plans.ts';
import { agentObjects, secretVolumeName, type AgentObjects, type AgentPeers } from '../component/agent-objects.ts';
import {
  AGENT_PORT,
  agentsAt,
  ARGOCD_SECRET,
  ARGOCD_SERVER_TLS_SECRET,
  CREDENTIALS_SECRET,
  productsUrl,
  RUNTIME_NAMESPACE,
  SOURCE_SERVER_ARGOCD_ACCOUNT,
  SOURCE_SERVER_ARGOCD_SECRET,
  SOURCE_SERVER_TOKEN_DIR,
  type AgentDefinition,
  type AgentName,
} from '../component/agents.ts';
import {
  ARGO_CD_NAMESPACE,
  ARGO_RELEASES,
  ARGOCD_SERVER_URL,
  argoChartVersion,
  argoReleaseValues,
  mergeValues,
} from '../component/argo-releases.ts';
import { sourceServerArgoCdAccountValues } from '../component/source-server-account.ts';
import { UPSTREAM_REPOSITORIES } from '../component/chart-source.ts';
import { restrictedContainerSecurityContext, restrictedPodSecurityContext } from '../component/pod-security.ts';
import { runtimeNamespace, versionsConfigMap } from '../component/runtime-objects.ts';
import { promotionCrds } from '../component/promotion-crds.ts';
import { PROMOTIONS_GROUP } from '../protocol/promotions.ts';
import { BOOTSTRAP_SECRET, BOOTSTRAP_TOKEN_KEY, CREDENTIAL_KEYS } from '../protocol/bootstrap.ts';
import type { KubeObject } from '../render/render.ts';
import type { RuntimeVersion } from '../versions.ts';
import { agentImage, ImageDigestError, unpinnedImages } from './images.ts';
import { shellCommand, withHereDocument } from './shell.ts';
import { yamlText } from './yaml-text.ts';
import { upgraderObjects } from './upgrader-objects.ts';

export type { KubeObject };

export type HybridAccess = 'tunnel' | 'ingress';
export type HybridArgo = 'new' | 'existing';

export interface HybridRuntimeSpec {
  tenantId: string;
  runtimeId: string;
  name: string;
  access: HybridAccess;
  /** access = ingress */
  ingressUrl?: string;
  argo: HybridArgo;
  /** argo = existing */
  argoNamespace?: string;
  /** upgrades = 'agent' */
  upgrader: boolean;
  /**
   * The runtime's namespace in the customer's cluster (`hybridNamespace(name)` for runtimes
   * registered now); absent: `hosted-runtime`, a runtime registered before names were per runtime.
   */
  namespace?: string;
}

export interface InstallBundleInput {
  runtime: HybridRuntimeSpec;
  /** The catalog entry (runtime/catalog.ts). */
  version: RuntimeVersion;
  /** Base URL the bootstrap Job and agents call. */
  controlPlaneUrl: string;
  /** wss URL of the tunnel server (access = tunnel). */
  tunnelUrl: string;
  /** The control plane's request-signing public key (PEM), not a secret. */
  publicKey: string;
  /** The only secret in the bundle; none for purpose=upgrade. */
  bootstrapToken?: string;
  /** `install` (default): the first install, with the bootstrap Job; `upgrade`: applied over an installed runtime. */
  purpose?: 'install' | 'upgrade';
  imageRepository?: string;
}

export interface BundleChart {
  release: string;
  namespace: string;
  chart: string;
  repository: string;
  version: string;
  /** YAML */
  values: string;
}

export interface InstallBundle {
  /** Multi-document YAML for `kubectl apply -f`. */
  manifests: string;
  /** The same objects, parsed. */
  objects: KubeObject[];
  /** argo = new: the Argo charts at the catalog's versions with their values; [] for existing. */
  charts: BundleChart[];
  /** The one command (kubectl apply of the saved manifest; helm installs first when charts). */
  command: string;
  /** Deletes exactly what the install created (by the labels it put on them). */
  removeCommand: string;
  /** The runtime's namespace in the customer's cluster. */
  namespace: string;
  /** The images of `objects` the catalog records no digest for (each once, sorted). */
  unpinnedImages: string[];
}

/**
 * The agents a hybrid runtime of `version` installs: the hosted runtime's (agentsAt), the GitOps
 * Operator and its promotion CRDs included from 1.8.0 (docs/promotions.md "Hybrid runtimes").
 */
export function hybridAgents(version: string): AgentDefinition[] {
  return agentsAt(version);
}

/**
 * The promotion CRDs a hybrid runtime of `version` installs (with the GitOps Operator), as the hosted
 * runtime installs them (promotion-crds.ts), labelled managed-by only: they are shared by every
 * runtime in the cluster, so they name none (a tenant or runtime label would change with each
 * runtime's apply, and make a server-side apply of another field manager conflict).
 */
export function hybridPromotionCrds(version: string): KubeObject[] {
  if (!hybridAgents(version).some((a) => a.name === 'gitops-operator')) return [];
  return promotionCrds().map((crd) => labelled(crd, { [HYBRID_LABELS.managedBy]: HYBRID_MANAGED_BY }));
}

/** Kinds a bundle holds that are shared with the cluster's other runtimes: never deleted by a runtime's removal or upgrade. */
export const SHARED_KINDS: readonly string[] = ['CustomResourceDefinition'];

/** The labels every object of a bundle carries. */
export const HYBRID_LABELS = {
  managedBy: 'app.kubernetes.io/managed-by',
  tenant: 'hosted-runtimes.io/tenant',
  runtime: 'hosted-runtimes.io/runtime',
} as const;
export const HYBRID_MANAGED_BY = 'hosted-runtimes';

/** access=ingress: the annotation of the request router's Service that holds the runtime's ingressUrl. */
export const INGRESS_URL_ANNOTATION = 'hosted-runtimes.io/ingress-url';

/** Name of the bootstrap Job, its ServiceAccount, Role and RoleBinding. */
export const BOOTSTRAP_JOB = 'runtime-bootstrap';
/** Exit code of the bootstrap program when the control plane refused the token: the Job fails at once. */
export const BOOTSTRAP_REFUSED_EXIT_CODE = 3;
/** Where the bootstrap Job's pod mounts the bootstrap Secret. */
export const BOOTSTRAP_TOKEN_DIR = '/etc/runtime-bootstrap';

/** What the customer's ingress points at when access = ingress: the request router's Service (in the runtime's namespace). */
export const ROUTER_SERVICE = { name: 'request-router', port: AGENT_PORT } as const;

/** The namespace of a hybrid runtime registered now: its own, by its name. */
export function hybridNamespace(runtimeName: string): string {
  return `${RUNTIME_NAMESPACE}-${runtimeName}`;
}

/** The runtime's namespace in the customer's cluster (`hosted-runtime` for a runtime registered before names were per runtime). */
export const namespaceOf = (r: Pick<HybridRuntimeSpec, 'namespace'>): string => r.namespace ?? RUNTIME_NAMESPACE;

/** The file name `command` applies (the manifest saved under it); an upgrade bundle's names its version. */
export function manifestFileName(runtimeName: string, upgradeVersion?: string): string {
  return upgradeVersion === undefined
    ? `hybrid-runtime-${runtimeName}.yaml`
    : `hybrid-runtime-${runtimeName}-${upgradeVersion}.yaml`;
}

export class HybridBundleError extends Error {
  override name = 'HybridBundleError';
}

const DNS_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;

function check(input: InstallBundleInput): void {
  const r = input.runtime;
  if (!DNS_LABEL.test(r.name) || r.name.length > 40)
    throw new HybridBundleError(`runtime name '${r.name}' is not a DNS label of 1-40 characters`);
  if (!/^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$/.test(r.tenantId))
    throw new HybridBundleError(`tenant id '${r.tenantId}' cannot be a label value`);
  if (r.access === 'ingress' && !r.ingressUrl) throw new HybridBundleError('access=ingress needs the ingress URL');
  const ns = namespaceOf(r);
  if (!DNS_LABEL.test(ns) || ns.length > 63)
    throw new HybridBundleError(`the runtime's namespace '${ns}' is not a DNS label of 1-63 characters`);
  // The one value of the comment at the top of the manifest (the catalog's, not a caller's).
  if (!/^\d+\.\d+\.\d+$/.test(input.version.version))
    throw new HybridBundleError(`runtime version '${input.version.version}' is not x.y.z`);
  if (r.argo === 'existing') {
    const argoNs = r.argoNamespace ?? '';
    if (!DNS_LABEL.test(argoNs) || argoNs.length > 63)
      throw new HybridBundleError(`argo=existing needs the Argo CD namespace (a DNS label), not '${argoNs}'`);
    if (argoNs === ns) throw new HybridBundleError(`the Argo CD namespace cannot be the runtime's own namespace ${ns}`);
  }
  if (input.purpose === 'upgrade') {
    if (input.bootstrapToken !== undefined)
      throw new HybridBundleError('an upgrade bundle carries no bootstrap token: the runtime holds its credentials');
  } else if (!input.bootstrapToken) throw new HybridBundleError('the bootstrap token is empty');
}

function labelsOf(r: HybridRuntimeSpec): Record<string, string> {
  return {
    [HYBRID_LABELS.managedBy]: HYBRID_MANAGED_BY,
    [HYBRID_LABELS.tenant]: r.tenantId,
    [HYBRID_LABELS.runtime]: r.name,
  };
}

type Obj = Record<string, unknown>;

/** A copy of an object with the bundle's labels on it (and on its pod template). */
function labelled(object: unknown, labels: Record<string, string>): KubeObject {
  const o = structuredClone(object) as KubeObject;
  o.metadata.labels = { ...o.metadata.labels, ...labels };
  const template = (o.spec as Obj | undefined)?.template as
    { metadata?: { labels?: Record<string, string> } } | undefined;
  if (template) template.metadata = { ...template.metadata, labels: { ...template.metadata?.labels, ...labels } };
  return o;
}

/** The namespace of the Argo CD beside a hybrid runtime: the customer's (argo=existing) or the one its charts install. */
const argoNamespaceOf = (r: HybridRuntimeSpec): string =>
  r.argo === 'existing' ? r.argoNamespace! : ARGO_CD_NAMESPACE;

/**
 * The agent's objects for a hybrid runtime: with existing Argo CD, its Argo rights move to a Role in
 * that namespace. `promotions`: the version has the GitOps Operator and its CRDs.
 */
function hybridAgentObjects(
  agent: AgentDefinition,
  input: InstallBundleInput,
  image: string,
  peers: AgentPeers,
  promotions: boolean,
): unknown[] {
  const r = input.runtime;
  const resources = PLANS[DEFAULT_PLAN]!.runtime.agents[agent.name];
  const ns = namespaceOf(r);
  const o: AgentObjects = agentObjects(agent, image, r.tenantId, resources, ns, peers);
  if (agent.name === 'source-server') return sourceServerObjects(o, r);
  if (agent.name === 'gitops-operator') return gitopsOperatorObjects(o, r);
  // (agentObjects gives plain values here: plain strings went in.)
  const container = (o.deployment.spec as { template: { spec: { containers: Array<{ env: unknown[] }> } } }).template
    .spec.containers[0]!;
  // Which runtime the agents are: the app-proxy accepts only request tokens for this runtime.
  container.env.push({ name: 'RUNTIME_ID', value: r.runtimeId });
  if (agent.name === 'request-router' && r.argo === 'existing') {
    // Beside the customer's own Argo CD the router serves no `/argo-cd/*`: that API server is the
    // customer's, served over its own TLS (which the router could not verify) at its own address.
    // Without the variable the route answers 404 naming what the runtime serves, not a 502.
    const env = container.env as Array<{ name: string }>;
    container.env = env.filter((e) => e.name !== 'ARGOCD_SERVER_URL');
  }
  if (agent.name === 'request-router' && r.access === 'ingress') {
    // Exposed on the customer's ingress: it refuses every request without the control plane's
    // request token for this runtime (nothing unsigned reaches the app-proxy or the event source).
    container.env.push(
      { name: 'ACCESS_MODE', value: 'ingress' },
      { name: 'TENANT_ID', value: r.tenantId },
      {
        name: 'CONTROL_PLANE_PUBLIC_KEY',
        valueFrom: { secretKeyRef: { name: CREDENTIALS_SECRET, key: CREDENTIAL_KEYS.publicKey } },
      },
    );
  }
  // Its heartbeats carry the version, shown as the runtime's reportedVersion (and VersionSkew).
  if (agent.name === 'event-reporter') container.env.push({ name: 'RUNTIME_VERSION', value: input.version.version });
  const out: unknown[] = [o.serviceAccount, o.role, o.roleBinding];
  const argoRules = existingArgoRules[agent.name];
  if (r.argo === 'existing' && argoRules) {
    // With the operator, the promotion rules of its hosted ClusterRole too (Products and
    // Promotions: the event reporter's reports, the app-proxy's promote, rollback, retry and
    // abort), in that namespace only, where the operator keeps them.
    const rules = promotions
      ? [
          ...argoRules,
          ...(agent.clusterRules as unknown as Obj[]).filter((rule) =>
            (rule.apiGroups as string[]).includes(PROMOTIONS_GROUP),
          ),
        ]
      : argoRules;
    // Per runtime: two runtimes beside one Argo CD keep their Roles apart (`hosted-runtime-<agent>` before).
    const name = `${ns}-${agent.name}`;
    const metadata = { name, namespace: r.argoNamespace!, labels: { 'app.kubernetes.io/name': agent.name } };
    out.push(
      { apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'Role', metadata, rules },
      {
        apiVersion: 'rbac.authorization.k8s.io/v1',
        kind: 'RoleBinding',
        metadata,
        roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name },
        subjects: [{ kind: 'ServiceAccount', name: agent.name, namespace: ns }],
      },
    );
    if (agent.name === 'event-reporter') {
      // Watch that namespace only: a cluster-wide list would be refused.
      container.env.push({ name: 'WATCH_NAMESPACE', value: r.argoNamespace! });
    }
  } else {
    out.push(o.clusterRole, o.clusterRoleBinding);
  }
  if (agent.name === 'request-router' && r.access === 'ingress' && o.service) {
    const service = o.service as { metadata: { annotations?: Record<string, string> } };
    service.metadata.annotations = { ...service.metadata.annotations, [INGRESS_URL_ANNOTATION]: r.ingressUrl! };
  }
  out.push(o.service, o.deployment);
  return out.filter((x) => x !== undefined);
}

type EnvVar = { name: string; value?: string; valueFrom?: unknown };
type PodSpecData = {
  containers: Array<{ env: EnvVar[]; volumeMounts: Obj[] }>;
  volumes: Obj[];
};

/**
 * The Source Server of a hybrid runtime (docs/hybrid.md "Source Server"), reaching the Argo CD
 * beside it:
 *  - argo=new: the runtime's own Argo CD (the bundle's charts declare the account, its values the
 *    hosted runtime's): it logs in as `source-server` with a password derived from the runtime
 *    token, and writes the password's hash into argocd-secret itself when Argo CD refuses it
 *    (source-server/argocd-setup.ts). Its Role in `argocd`: read Secrets (repository
 *    credentials), patch argocd-secret by name.
 *  - argo=existing: the customer's Argo CD, whose accounts the runtime does not manage: an API
 *    token the customer creates for a read-only account, in Secret SOURCE_SERVER_ARGOCD_SECRET
 *    (key `token`) of the runtime's namespace, mounted optional (without it every answer is a 503
 *    naming it); https to `argocd-server` in its namespace, verified against `argocd-server-tls`.
 *    Its Role there: read Secrets (repository credentials), nothing else.
 */
function sourceServerObjects(o: AgentObjects, r: HybridRuntimeSpec): unknown[] {
  const ns = namespaceOf(r);
  const existing = r.argo === 'existing';
  const argoNs = existing ? r.argoNamespace! : ARGO_CD_NAMESPACE;
  const pod = (o.deployment.spec as unknown as { template: { spec: PodSpecData } }).template.spec;
  const container = pod.containers[0]!;
  const drop = new Set(['ARGOCD_SERVER_URL', 'ARGOCD_PASSWORD_FILE', ...(existing ? ['ARGOCD_USERNAME'] : [])]);
  container.env = container.env.filter((e) => !drop.has(e.name));
  // The hosted runtime's password file (a Secret the hybrid runtime does not have): not mounted.
  const passwordVolume = secretVolumeName(SOURCE_SERVER_ARGOCD_SECRET);
  container.volumeMounts = container.volumeMounts.filter((m) => m.name !== passwordVolume);
  pod.volumes = pod.volumes.filter((v) => v.name !== passwordVolume);
  if (existing) {
    container.env.push(
      { name: 'ARGOCD_SERVER_URL', value: `https://argocd-server.${argoNs}.svc` },
      { name: 'ARGOCD_CA_SECRET', value: ARGOCD_SERVER_TLS_SECRET },
      { name: 'ARGOCD_NAMESPACE', value: argoNs },
      { name: 'ARGOCD_TOKEN_FILE', value: `${SOURCE_SERVER_TOKEN_DIR}/token` },
    );
    container.volumeMounts.push({ name: 'argocd-token', mountPath: SOURCE_SERVER_TOKEN_DIR, readOnly: true });
    pod.volumes.push({
      name: 'argocd-token',
      secret: { secretName: SOURCE_SERVER_ARGOCD_SECRET, optional: true, items: [{ key: 'token', path: 'token' }] },
    });
  } else {
    container.env.push(
      { name: 'ARGOCD_SERVER_URL', value: ARGOCD_SERVER_URL },
      { name: 'ARGOCD_ACCOUNT_SETUP', value: 'argocd-secret' },
      { name: 'RUNTIME_TOKEN', valueFrom: { secretKeyRef: { name: CREDENTIALS_SECRET, key: CREDENTIAL_KEYS.token } } },
    );
  }
  const name = `${ns}-source-server`;
  const metadata = { name, namespace: argoNs, labels: { 'app.kubernetes.io/name': 'source-server' } };
  const rules: Obj[] = [{ apiGroups: [''], resources: ['secrets'], verbs: ['get', 'list', 'watch'] }];
  if (!existing)
    rules.push({ apiGroups: [''], resources: ['secrets'], resourceNames: [ARGOCD_SECRET], verbs: ['patch'] });
  return [
    o.serviceAccount,
    { apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'Role', metadata, rules },
    {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'RoleBinding',
      metadata,
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name },
      subjects: [{ kind: 'ServiceAccount', name: 'source-server', namespace: ns }],
    },
    o.service,
    o.deployment,
  ].filter((x) => x !== undefined);
}

/**
 * The GitOps Operator of a hybrid runtime (docs/promotions.md "Hybrid runtimes"): the hosted
 * runtime's account, Deployment and Role (agentObjects), the Role in the Argo CD beside it. With
 * argo=new that is `argocd`, as in the hosted runtime; with argo=existing the customer's Argo CD
 * namespace, which PROMOTIONS_NAMESPACE then names: the promotion resources, the Applications, the
 * actions' Workflows and its Lease are there. Its rights are all in that namespace (nothing
 * cluster-wide), named `<namespace>:gitops-operator` so that two runtimes beside one Argo CD keep
 * theirs apart; their operators then share the Lease `gitops-operator` there, one active at a time.
 */
function gitopsOperatorObjects(o: AgentObjects, r: HybridRuntimeSpec): unknown[] {
  const argoNs = argoNamespaceOf(r);
  const container = (o.deployment.spec as unknown as { template: { spec: PodSpecData } }).template.spec.containers[0]!;
  const promotionsNs = container.env.find((e) => e.name === 'PROMOTIONS_NAMESPACE');
  if (!promotionsNs) throw new Error('the GitOps Operator has no PROMOTIONS_NAMESPACE');
  promotionsNs.value = argoNs;
  const roles = (o.otherRoles ?? []).flatMap(({ namespace, role, roleBinding }) => {
    // Its rights are in Argo CD's namespace (agents.ts otherNamespaceRules): the one beside this runtime.
    if (namespace !== ARGO_CD_NAMESPACE)
      throw new Error(`the GitOps Operator has rights in namespace ${namespace}, which a hybrid runtime does not have`);
    const moved = (x: unknown) => {
      const c = structuredClone(x) as KubeObject;
      c.metadata.namespace = argoNs;
      return c;
    };
    return [moved(role), moved(roleBinding)];
  });
  if (roles.length === 0) throw new Error("the GitOps Operator has no Role in Argo CD's namespace");
  return [o.serviceAccount, o.role, o.roleBinding, ...roles, o.clusterRole, o.clusterRoleBinding, o.deployment].filter(
    (x) => x !== undefined,
  );
}

/**
 * The rights on the customer's Argo CD (argo=existing), in its namespace only: the event reporter
 * reads Applications, the app-proxy reads one by name and patches it (refresh, sync). Rollouts and
 * Workflows are not part of a customer's Argo CD install and get no rights.
 */
const existingArgoRules: Partial<Record<AgentName, Obj[]>> = {
  'app-proxy': [{ apiGroups: ['argoproj.io'], resources: ['applications'], verbs: ['get', 'patch'] }],
  'event-reporter': [{ apiGroups: ['argoproj.io'], resources: ['applications'], verbs: ['get', 'list', 'watch'] }],
};

/** The bootstrap Job and what it runs as. */
function bootstrapObjects(input: InstallBundleInput & { bootstrapToken: string }, image: string): unknown[] {
  const ns = namespaceOf(input.runtime);
  const meta = {
    name: BOOTSTRAP_JOB,
    namespace: ns,
    labels: { 'app.kubernetes.io/name': BOOTSTRAP_JOB },
  };
  return [
    {
      apiVersion: 'v1',
      kind: 'Secret',
      metadata: { name: BOOTSTRAP_SECRET, namespace: ns },
      type: 'Opaque',
      stringData: { [BOOTSTRAP_TOKEN_KEY]: input.bootstrapToken },
    },
    { apiVersion: 'v1', kind: 'ServiceAccount', metadata: meta, automountServiceAccountToken: true },
    {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'Role',
      metadata: meta,
      rules: [
        { apiGroups: [''], resources: ['secrets'], resourceNames: [CREDENTIALS_SECRET], verbs: ['get', 'patch'] },
        { apiGroups: [''], resources: ['secrets'], resourceNames: [BOOTSTRAP_SECRET], verbs: ['delete'] },
      ],
    },
    {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'RoleBinding',
      metadata: meta,
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: BOOTSTRAP_JOB },
      subjects: [{ kind: 'ServiceAccount', name: BOOTSTRAP_JOB, namespace: ns }],
    },
    {
      apiVersion: 'batch/v1',
      kind: 'Job',
      metadata: meta,
      spec: {
        // Network failures and 5xx are retried inside the program (bounded); a pod that still
        // failed is tried again a few times. A refused token fails the Job at once.
        backoffLimit: 4,
        podFailurePolicy: {
          rules: [
            {
              action: 'FailJob',
              onExitCodes: { containerName: 'bootstrap', operator: 'In', values: [BOOTSTRAP_REFUSED_EXIT_CODE] },
            },
          ],
        },
        template: {
          metadata: { labels: { 'app.kubernetes.io/name': BOOTSTRAP_JOB } },
          spec: {
            serviceAccountName: BOOTSTRAP_JOB,
            automountServiceAccountToken: true,
            restartPolicy: 'Never',
            securityContext: restrictedPodSecurityContext(),
            containers: [
              {
                name: 'bootstrap',
                image,
                imagePullPolicy: 'IfNotPresent',
                env: [
                  { name: 'CONTROL_PLANE_URL', value: input.controlPlaneUrl },
                  // Written to the credentials Secret where the control plane's answer lacks them.
                  { name: 'TUNNEL_URL', value: input.tunnelUrl },
                  { name: 'CONTROL_PLANE_PUBLIC_KEY', value: input.publicKey },
                  { name: 'BOOTSTRAP_TOKEN_FILE', value: `${BOOTSTRAP_TOKEN_DIR}/${BOOTSTRAP_TOKEN_KEY}` },
                  { name: 'POD_NAMESPACE', valueFrom: { fieldRef: { fieldPath: 'metadata.namespace' } } },
                ],
                resources: {
                  requests: { cpu: '10m', memory: '48Mi' },
                  limits: { cpu: '200m', memory: '128Mi' },
                },
                securityContext: restrictedContainerSecurityContext(),
                volumeMounts: [
                  { name: 'bootstrap-token', mountPath: BOOTSTRAP_TOKEN_DIR, readOnly: true },
                  { name: 'tmp', mountPath: '/tmp' },
                ],
              },
            ],
            volumes: [
              // Optional: a pod started after the token was redeemed (and the Secret deleted) finds
              // the credentials written and exits 0.
              { name: 'bootstrap-token', secret: { secretName: BOOTSTRAP_SECRET, optional: true } },
              { name: 'tmp', emptyDir: { sizeLimit: '16Mi' } },
            ],
          },
        },
      },
    },
  ];
}

/** Apply order: namespace, CRDs, configuration, accounts and rights, Services, workloads, the Job last. */
const KIND_ORDER = [
  'Namespace',
  'CustomResourceDefinition',
  'ConfigMap',
  'Secret',
  'ServiceAccount',
  'Role',
  'RoleBinding',
  'ClusterRole',
  'ClusterRoleBinding',
  'Service',
  'Deployment',
  'Job',
];

/** `kubectl delete` resource names (group-qualified, so that no other group's kind of that name is meant). */
const RESOURCE_OF_KIND: Record<string, string> = {
  Namespace: 'namespaces',
  ConfigMap: 'configmaps',
  Secret: 'secrets',
  ServiceAccount: 'serviceaccounts',
  Role: 'roles.rbac.authorization.k8s.io',
  RoleBinding: 'rolebindings.rbac.authorization.k8s.io',
  ClusterRole: 'clusterroles.rbac.authorization.k8s.io',
  ClusterRoleBinding: 'clusterrolebindings.rbac.authorization.k8s.io',
  Service: 'services',
  Deployment: 'deployments.apps',
  StatefulSet: 'statefulsets.apps',
  Job: 'jobs.batch',
};

/**
 * Kinds the Argo charts render besides KIND_ORDER's (argo=new): the remove command deletes these
 * too, since an install from the URL creates the charts' objects with the bundle's labels
 * (install.ts refuses a chart object of a kind the remove command would leave behind).
 */
export const ARGO_CHART_KINDS = ['StatefulSet'] as const;

/** The kinds the remove command deletes (by the bundle's labels), in delete order. */
export function removableKinds(argo: HybridArgo, upgrade = false, present?: (kind: string) => boolean): string[] {
  // The shared CRDs are never deleted by one runtime's removal (SHARED_KINDS).
  const kinds = [...KIND_ORDER.filter((k) => !SHARED_KINDS.includes(k)), ...(argo === 'new' ? ARGO_CHART_KINDS : [])];
  // An upgrade bundle leaves out the bootstrap Job and Secret, which the install made: removal still deletes them.
  return kinds.filter(
    (k) =>
      present === undefined ||
      present(k) ||
      (upgrade && (k === 'Job' || k === 'Secret')) ||
      (argo === 'new' && (ARGO_CHART_KINDS as readonly string[]).includes(k)),
  );
}

/** The helm installs (argo = new) and the apply of the manifest saved as `manifestFile`; every word quoted (shell.ts). */
export function installCommand(charts: readonly BundleChart[], manifestFile: string): string {
  const helm = charts.map((c) =>
    withHereDocument(
      shellCommand([
        'helm',
        'upgrade',
        '--install',
        c.release,
        c.chart,
        '--repo',
        c.repository,
        '--version',
        c.version,
        '--namespace',
        c.namespace,
        '--create-namespace',
        '--values',
        '-',
      ]),
      'VALUES',
      c.values,
    ),
  );
  return [...helm, shellCommand(['kubectl', 'apply', '-f', manifestFile])].join('\n');
}

/** The helm uninstall of one chart. */
export const helmUninstall = (c: { release: string; namespace: string }): string =>
  shellCommand(['helm', 'uninstall', c.release, '--namespace', c.namespace]);

/**
 * The remove command's uninstall of one chart, run only where helm knows the release: a runtime
 * installed from the URL has no release (the kubectl delete before it removed the charts' objects)
 * and may have no helm.
 */
const helmUninstallIfInstalled = (c: { release: string; namespace: string }): string =>
  `${shellCommand(['helm', 'status', c.release, '--namespace', c.namespace])} >/dev/null 2>&1 && ${helmUninstall(c)} || true`;

/**
 * The remove command's last lines when the bundle has the shared promotion CRDs: shell comments
 * (the command runs as it is) saying they stay and how to delete them when the cluster's last
 * runtime that uses them is gone.
 */
function sharedObjectsNote(crds: readonly KubeObject[]): string[] {
  if (crds.length === 0) return [];
  return [
    `# The promotion CRDs (${PROMOTIONS_GROUP}) stay: other runtimes in this cluster may use them, and deleting`,
    '# a CRD deletes every object of its kind in the cluster (every Product, Promotion and preview). Once no runtime in',
    '# this cluster runs the GitOps Operator any more, delete them with:',
    `# ${shellCommand(['kubectl', 'delete', 'customresourcedefinitions.apiextensions.k8s.io', ...crds.map((c) => c.metadata.name), '--ignore-not-found'])}`,
  ];
}

export function hybridInstallBundle(input: InstallBundleInput): InstallBundle {
  check(input);
  const r = input.runtime;
  const labels = labelsOf(r);
  const ns = namespaceOf(r);
  let image: (name: string) => string;
  try {
    const images = new Map<string, string>();
    for (const name of ['bootstrap', 'upgrader', ...hybridAgents(input.version.version).map((a) => a.name)])
      images.set(name, agentImage(input.version, name, input.imageRepository));
    image = (name) => images.get(name)!;
  } catch (err) {
    if (err instanceof ImageDigestError) throw new HybridBundleError(err.message);
    throw err;
  }
  // The runtime's own namespace (plain values: plain strings went in).
  const namespace = runtimeNamespace() as unknown as KubeObject;
  namespace.metadata = { ...namespace.metadata, name: ns };
  const versions = versionsConfigMap(input.version) as unknown as KubeObject;
  versions.metadata = { ...versions.metadata, namespace: ns };

  const raw: unknown[] = [
    namespace,
    versions,
    {
      apiVersion: 'v1',
      kind: 'Secret',
      metadata: {
        name: CREDENTIALS_SECRET,
        namespace: ns,
        annotations: { 'hosted-runtimes.io/written-by': `Job ${BOOTSTRAP_JOB}` },
      },
      type: 'Opaque',
    },
  ];
  const upgrade = input.purpose === 'upgrade';
  if (!upgrade) raw.push(...bootstrapObjects({ ...input, bootstrapToken: input.bootstrapToken! }, image('bootstrap')));
  const agents = hybridAgents(input.version.version).filter(
    (agent) => !(agent.name === 'tunnel-client' && r.access === 'ingress'),
  );
  const peers: AgentPeers = {
    sourceServer: agents.some((a) => a.name === 'source-server'),
    // The GitOps Operator's pull requests link back to the products' page in the console.
    productsUrl: productsUrl(input.controlPlaneUrl, r.tenantId, argoNamespaceOf(r)),
  };
  const crds = hybridPromotionCrds(input.version.version);
  const promotions = crds.length > 0;
  for (const agent of agents) raw.push(...hybridAgentObjects(agent, input, image(agent.name), peers, promotions));
  if (r.upgrader)
    raw.push(
      ...upgraderObjects(
        { runtimeId: r.runtimeId, namespace: ns },
        image('upgrader'),
        agents.map((a) => a.name),
      ),
    );
  const objects = [...raw.map((o) => labelled(o, labels)), ...crds]
    .map((o, i) => ({ o, i }))
    .sort((a, b) => KIND_ORDER.indexOf(a.o.kind) - KIND_ORDER.indexOf(b.o.kind) || a.i - b.i)
    .map(({ o }) => o);

  const charts: BundleChart[] =
    r.argo === 'new'
      ? ARGO_RELEASES.map((spec) => ({
          release: spec.releaseName,
          namespace: spec.namespace,
          chart: spec.chart,
          repository: UPSTREAM_REPOSITORIES.argo,
          version: argoChartVersion(input.version.components, spec.component),
          values: yamlText(
            peers.sourceServer && spec.component === 'argoCd'
              ? mergeValues(argoReleaseValues(spec, PLANS[DEFAULT_PLAN]!.runtime), sourceServerArgoCdAccountValues())
              : argoReleaseValues(spec, PLANS[DEFAULT_PLAN]!.runtime),
          ),
        }))
      : [];

  // The comment is the product's own text and the catalog's version (checked above): the runtime's
  // settings are in the objects alone, where the YAML library writes them (its name and tenant in
  // the labels, the ingress URL in an annotation of the router's Service, the Argo CD namespace in
  // its Roles'). No value a caller gave is written into a comment, where a line break would end it.
  const header = [
    `# A hybrid runtime of the hosted GitOps service, runtime version ${input.version.version}` +
      (upgrade ? ': the upgrade bundle, applied over the installed runtime.' : '.'),
    '# Apply it with the install command: kubectl apply -f of this file' +
      (charts.length > 0 ? ', after helm installs the Argo charts.' : '.'),
    `# Every object${promotions ? ' but the promotion CRDs' : ''} is labelled ${HYBRID_LABELS.managedBy}, ${HYBRID_LABELS.tenant} and ${HYBRID_LABELS.runtime};`,
    '# the remove command deletes by these labels.',
    ...(upgrade
      ? [`# No bootstrap token: the runtime keeps the credentials in Secret ${CREDENTIALS_SECRET}.`]
      : [
          `# The Secret ${BOOTSTRAP_SECRET} holds a single-use bootstrap token; the Job ${BOOTSTRAP_JOB} exchanges it`,
          `# for the runtime's credentials (Secret ${CREDENTIALS_SECRET}) and deletes it.`,
        ]),
    ...(r.access === 'ingress'
      ? [
          `# access=ingress: point your ingress for the runtime's URL (annotation ${INGRESS_URL_ANNOTATION})`,
          `# at Service ${ROUTER_SERVICE.name} in namespace ${ns}, port ${ROUTER_SERVICE.port} (http), serving https`,
          "# with a certificate for the URL's host from a public CA or the one your control plane operator trusts.",
          "# The router refuses every request but /healthz and /readyz without the control plane's signed request",
          '# token. No tunnel client is installed.',
        ]
      : []),
    ...(promotions
      ? [
          `# The GitOps Operator runs promotions (API group ${PROMOTIONS_GROUP}). Their CustomResourceDefinitions`,
          '# are cluster-scoped and shared by every runtime in this cluster: the same objects in every bundle, labelled',
          `# ${HYBRID_LABELS.managedBy} only, so that applying them again changes nothing. The remove command leaves`,
          '# them (deleting a CRD deletes every object of its kind) and says how to delete them once no runtime needs them.',
          "# The operator's Role is in Argo CD's namespace, nothing cluster-wide: it reads the promotion resources,",
          "# creates Promotions, writes their and PromotionPreviews' status, deletes finished PromotionPreviews beyond",
          '# the 10 kept per product, gets and patches Applications (refresh), creates Workflows',
          "# (actions, hooks), lists Secrets (Argo CD's repository credentials, to push its commits) and holds its Lease.",
        ]
      : []),
    ...(r.argo === 'existing'
      ? [
          "# argo=existing: the app-proxy and event reporter get a Role in your Argo CD's namespace (Applications:",
          promotions
            ? '# read; patch for refresh and sync; Products, Promotions and PromotionPreviews: read; Promotions: create'
            : '# read; patch for refresh and sync). Nothing else of that Argo CD is created or changed.',
          ...(promotions
            ? [
                '# and patch for promote, roll back, retry and abort; PromotionPreviews: create and patch for a dry run',
                '# and its abort), and so does the GitOps Operator (above). Nothing else of that',
                '# Argo CD is created or changed. Promotions run in that namespace: keep the promotion resources there,',
                '# beside the Applications they name. Pre- and post-actions and flow hooks are Workflows the operator',
                '# creates there; they need Argo Workflows in this cluster (its CRDs and a controller that runs Workflows',
                '# in that namespace), which this install does not bring. Without it a step with an action waits and',
                '# never ends and hooks do not start; promotions without actions or hooks need nothing more.',
              ]
            : []),
          ...(peers.sourceServer
            ? [
                "# The Source Server gets a Role there that reads Secrets (Argo CD's repository credentials), and reads",
                `# Argo CD's API with a token you create: declare an account (argocd-cm: accounts.${SOURCE_SERVER_ARGOCD_ACCOUNT}: apiKey;`,
                `# argocd-rbac-cm policy.csv: g, ${SOURCE_SERVER_ARGOCD_ACCOUNT}, role:readonly), then store`,
                `# argocd account generate-token --account ${SOURCE_SERVER_ARGOCD_ACCOUNT}`,
                `# as key token of Secret ${SOURCE_SERVER_ARGOCD_SECRET} in the runtime's namespace. Until then it answers 503.`,
              ]
            : []),
        ]
      : peers.sourceServer
        ? [
            `# The Source Server logs in to the Argo CD installed here as account ${SOURCE_SERVER_ARGOCD_ACCOUNT} (read-only),`,
            `# writing its password's hash into ${ARGOCD_SECRET}, the one Secret of that namespace its Role may patch.`,
          ]
        : []),
  ];
  const manifests = header.join('\n') + '\n' + objects.map((o) => '---\n' + yamlText(o)).join('');

  const selector = Object.entries(labels)
    .map(([k, v]) => `${k}=${v}`)
    .join(',');
  const kinds = removableKinds(r.argo, upgrade, (k) => objects.some((o) => o.kind === k))
    .reverse()
    .map((k) => RESOURCE_OF_KIND[k]!);
  const removeCommand = [
    shellCommand(['kubectl', 'delete', kinds.join(','), '--all-namespaces', '--ignore-not-found', '-l', selector]),
    ...charts.map(helmUninstallIfInstalled),
    ...sharedObjectsNote(crds),
  ].join('\n');

  return {
    manifests,
    objects,
    charts,
    command: installCommand(charts, manifestFileName(r.name, upgrade ? input.version.version : undefined)),
    removeCommand,
    namespace: ns,
    unpinnedImages: unpinnedImages(objects),
  };
}
