/**
 * Bootstrap of a managed cluster: what is created on the tenant's cluster so that the control
 * plane holds least-privilege, short-lived credentials there. A ServiceAccount of its own,
 * `argocd-manager-<id>` (bootstrapAccount: derived from the tenant's id and the registration's
 * name), in the shared namespace `argocd-manager`, in each listed namespace a Role with every verb on every resource
 * and its RoleBinding named after the account (a ClusterRole and ClusterRoleBinding instead only when cluster-wide access
 * is asked for explicitly), and in its own namespace a Role letting the account request tokens for
 * itself (TokenRequest, for the renewals) and delete itself (for the revocation on DELETE).
 *
 * The same objects are created by the Job manifest the API returns (applied by the tenant with
 * its own credentials; the Job runs as the new ServiceAccount and redeems the bootstrap token with
 * its token) and by `provisioner managed-clusters connect` (with the tenant's kubeconfig, locally).
 * Every object but the Namespace is labelled with the registration (tenant id and name), so that
 * `provisioner managed-clusters remove --remove-rbac --kubeconfig` deletes exactly its objects.
 * Bootstrap tokens are random, single-use, stored as their SHA-256 only.
 */
import { createHash, randomBytes } from 'node:crypto';
import { yamlText } from '../../runtime/hybrid/yaml-text.ts';
import type { CreatedObjects } from '../store/managed-clusters.ts';
import { ClusterNetworkError, kubeRequest, type ClusterConnection } from './kube-api.ts';

export const BOOTSTRAP_NAMESPACE = 'argocd-manager';
/**
 * The one account every bootstrap used before each registration got its own: registrations made
 * then record it in their created objects (`created.serviceAccount`), which the revocation reads.
 */
export const LEGACY_BOOTSTRAP_ACCOUNT = 'argocd-manager';
/** Longest life of a bootstrap token. */
export const BOOTSTRAP_TTL_SECONDS = 3600;
const TOKEN_PREFIX = 'hrtb_';

export type KubeObject = { apiVersion: string; kind: string; metadata: { name: string; namespace?: string } } & Record<
  string,
  unknown
>;

/** On every object a bootstrap creates (the Namespace, which registrations may share, has these only). */
export const LABELS = Object.freeze({
  'app.kubernetes.io/managed-by': 'hosted-runtimes',
  'app.kubernetes.io/name': LEGACY_BOOTSTRAP_ACCOUNT,
});
/** The registration an object was created for: `remove --remove-rbac --kubeconfig` selects by them. */
export const TENANT_LABEL = 'hosted-runtimes.io/tenant';
export const MANAGED_CLUSTER_LABEL = 'hosted-runtimes.io/managed-cluster';
const ALL = [{ apiGroups: ['*'], resources: ['*'], verbs: ['*'] }];

/** The registration a bootstrap is for: the tenant's id and the managed cluster's name. */
export interface RegistrationRef {
  tenantId: string;
  name: string;
}

/**
 * The ServiceAccount (and Role, RoleBinding, ClusterRole, ClusterRoleBinding) name of a
 * registration's bootstrap: `argocd-manager-` and the first 10 hex digits of the SHA-256 of the
 * tenant's id and the registration's name. Two registrations of one cluster (two tenants, or one
 * tenant under two names) get two accounts, so removing one revokes only its own tokens.
 */
export const bootstrapAccount = (r: RegistrationRef): string =>
  `${LEGACY_BOOTSTRAP_ACCOUNT}-${createHash('sha256').update(`${r.tenantId}/${r.name}`).digest('hex').slice(0, 10)}`;

/** The name of the Job (and its Secret) of a registration's bootstrap manifest. */
export const bootstrapJobName = (r: RegistrationRef): string => `${bootstrapAccount(r)}-bootstrap`;

export const registrationLabels = (r: RegistrationRef): Record<string, string> => ({
  ...LABELS,
  [TENANT_LABEL]: r.tenantId,
  [MANAGED_CLUSTER_LABEL]: r.name,
});

/** The label selector of the objects a bootstrap created for a registration. */
export const registrationSelector = (r: RegistrationRef): string =>
  `${TENANT_LABEL}=${r.tenantId},${MANAGED_CLUSTER_LABEL}=${r.name}`;

/**
 * The kinds a bootstrap creates for a registration, in the order they are removed: the Job and its
 * Secret, the bindings before the roles they refer to, the ServiceAccount last.
 */
export const REGISTRATION_KINDS: ReadonlyArray<{ apiVersion: string; kind: string; namespaced: boolean }> = [
  { apiVersion: 'batch/v1', kind: 'Job', namespaced: true },
  { apiVersion: 'v1', kind: 'Secret', namespaced: true },
  { apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'RoleBinding', namespaced: true },
  { apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'ClusterRoleBinding', namespaced: false },
  { apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'Role', namespaced: true },
  { apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'ClusterRole', namespaced: false },
  { apiVersion: 'v1', kind: 'ServiceAccount', namespaced: true },
];

/**
 * The objects a bootstrap creates for a registration, in the order they are created; all but the
 * Namespace carry the registration's labels.
 */
export function bootstrapObjects(
  registration: RegistrationRef,
  namespaces: readonly string[],
  clusterWide: boolean,
): KubeObject[] {
  const labels = registrationLabels(registration);
  const meta = (name: string, namespace?: string) => ({
    name,
    ...(namespace ? { namespace } : {}),
    labels: { ...labels },
  });
  const account = bootstrapAccount(registration);
  const subject = { kind: 'ServiceAccount', name: account, namespace: BOOTSTRAP_NAMESPACE };
  const objects: KubeObject[] = [
    { apiVersion: 'v1', kind: 'Namespace', metadata: { name: BOOTSTRAP_NAMESPACE, labels: { ...LABELS } } },
    { apiVersion: 'v1', kind: 'ServiceAccount', metadata: meta(account, BOOTSTRAP_NAMESPACE) },
    {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'Role',
      metadata: meta(account, BOOTSTRAP_NAMESPACE),
      rules: [
        {
          apiGroups: [''],
          resources: ['serviceaccounts/token'],
          resourceNames: [account],
          verbs: ['create'],
        },
        {
          apiGroups: [''],
          resources: ['serviceaccounts'],
          resourceNames: [account],
          verbs: ['get', 'delete'],
        },
      ],
    },
    {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'RoleBinding',
      metadata: meta(account, BOOTSTRAP_NAMESPACE),
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: account },
      subjects: [subject],
    },
  ];
  if (clusterWide) {
    objects.push(
      {
        apiVersion: 'rbac.authorization.k8s.io/v1',
        kind: 'ClusterRole',
        metadata: meta(account),
        rules: ALL,
      },
      {
        apiVersion: 'rbac.authorization.k8s.io/v1',
        kind: 'ClusterRoleBinding',
        metadata: meta(account),
        roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: account },
        subjects: [subject],
      },
    );
  }
  for (const ns of namespaces) {
    objects.push(
      { apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'Role', metadata: meta(account, ns), rules: ALL },
      {
        apiVersion: 'rbac.authorization.k8s.io/v1',
        kind: 'RoleBinding',
        metadata: meta(account, ns),
        roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: account },
        subjects: [subject],
      },
    );
  }
  return objects;
}

/** A new bootstrap token and the hash stored for it. */
export function newBootstrapToken(): { token: string; hash: string } {
  const token = TOKEN_PREFIX + randomBytes(32).toString('base64url');
  return { token, hash: hashBootstrapToken(token) };
}

export const hashBootstrapToken = (token: string): string => createHash('sha256').update(token).digest('base64');

/**
 * What the Job runs: the new account's token and CA, sent with the bootstrap token to redeem it.
 * Its output is what the tenant reads in `kubectl logs job/argocd-manager-<id>-bootstrap`: the
 * registration, or `bootstrap failed: ` and what to check. `SA_DIR` (not set by the manifest)
 * points it at another copy of the pod's ServiceAccount files.
 */
const REDEEM_SCRIPT = `
const fs = require('node:fs');
const sa = process.env.SA_DIR || '/var/run/secrets/kubernetes.io/serviceaccount';
const fail = (message) => { throw Object.assign(new Error(message), { expected: true }); };
(async () => {
  for (const name of ['REDEEM_URL', 'BOOTSTRAP_TOKEN', 'SERVER']) if (!process.env[name]) fail(name + ' is not set');
  const read = (file) => {
    try { return fs.readFileSync(sa + '/' + file, 'utf8').trim(); } catch (err) {
      fail("cannot read the pod's ServiceAccount " + file + ' at ' + sa + '/' + file + ' (' + (err.code || err.message) +
        '): the Job must run as its ServiceAccount (' + (process.env.ACCOUNT || 'argocd-manager-<id>') +
        ') with its token mounted');
    }
  };
  const url = process.env.REDEEM_URL;
  const body = JSON.stringify({ server: process.env.SERVER, caData: read('ca.crt'), token: read('token') });
  let res;
  try {
    res = await fetch(url, {
      method: 'POST',
      headers: { authorization: 'Bearer ' + process.env.BOOTSTRAP_TOKEN, 'content-type': 'application/json' },
      body,
      signal: AbortSignal.timeout(60000),
    });
  } catch (err) {
    fail('cannot reach ' + url + ': ' + ((err.cause && err.cause.message) || err.message) +
      ' (check REDEEM_URL, and that this cluster can reach the service)');
  }
  const text = await res.text();
  let answer;
  try { answer = JSON.parse(text); } catch { answer = undefined; }
  const error = answer && answer.error;
  if (!res.ok && error && error.code && res.status !== 404 && res.status !== 405)
    fail('the registration was refused: ' + url + ' answered HTTP ' + res.status + ' ' + error.code + ': ' + error.message);
  const m = answer && answer.managedCluster;
  if (!res.ok || !m)
    fail(url + ' answered HTTP ' + res.status + ' ' + (error ? error.code + ': ' + error.message : text.slice(0, 300)) +
      ": not the service's redeem endpoint (check REDEEM_URL: it ends in /v1/managed-clusters/redeem)");
  console.log('registered managed cluster ' + m.name + ' (' + m.server + ', Kubernetes ' + m.serverVersion + ', ' +
    (m.namespaces.join(',') || 'cluster-wide') + '); operation ' + answer.operationId + " writes it into the tenant's Argo CD");
})().catch((err) => {
  console.error('bootstrap failed: ' + (err.expected ? err.message : err.stack || err));
  process.exitCode = 1;
});
`.trim();

export interface JobManifestInput {
  registration: RegistrationRef;
  namespaces: readonly string[];
  clusterWide: boolean;
  bootstrapToken: string;
  redeemUrl: string;
  /** The URL the control plane reaches the cluster's API server at. */
  server: string;
  image: string;
}

/**
 * The manifest a tenant applies (`kubectl apply -f`) on its cluster: the bootstrap's objects, the
 * bootstrap token in a Secret, and a Job running as the new ServiceAccount that redeems it.
 */
export function jobManifest(i: JobManifestInput): string {
  const labels = registrationLabels(i.registration);
  const account = bootstrapAccount(i.registration);
  const job = bootstrapJobName(i.registration);
  const objects: object[] = [
    ...bootstrapObjects(i.registration, i.namespaces, i.clusterWide),
    {
      apiVersion: 'v1',
      kind: 'Secret',
      metadata: { name: job, namespace: BOOTSTRAP_NAMESPACE, labels: { ...labels } },
      type: 'Opaque',
      stringData: { token: i.bootstrapToken },
    },
    {
      apiVersion: 'batch/v1',
      kind: 'Job',
      metadata: { name: job, namespace: BOOTSTRAP_NAMESPACE, labels: { ...labels } },
      spec: {
        backoffLimit: 3,
        ttlSecondsAfterFinished: 600,
        template: {
          metadata: { labels: { ...labels } },
          spec: {
            serviceAccountName: account,
            restartPolicy: 'Never',
            securityContext: { runAsNonRoot: true, runAsUser: 1000, seccompProfile: { type: 'RuntimeDefault' } },
            containers: [
              {
                name: 'redeem',
                image: i.image,
                command: ['node', '-e', REDEEM_SCRIPT],
                env: [
                  { name: 'REDEEM_URL', value: i.redeemUrl },
                  { name: 'SERVER', value: i.server },
                  { name: 'ACCOUNT', value: `${BOOTSTRAP_NAMESPACE}/${account}` },
                  {
                    name: 'BOOTSTRAP_TOKEN',
                    valueFrom: { secretKeyRef: { name: job, key: 'token' } },
                  },
                ],
                securityContext: { allowPrivilegeEscalation: false, capabilities: { drop: ['ALL'] } },
              },
            ],
          },
        },
      },
    },
  ];
  // Written by the YAML library, with YAML 1.1's extra line breaks escaped (kubectl reads 1.1).
  return objects.map((o) => yamlText(o)).join('---\n');
}

/** The command that does the same from the tenant's machine with its kubeconfig. */
export function connectCommand(
  tenantId: string,
  name: string,
  namespaces: readonly string[],
  clusterWide: boolean,
): string {
  return [
    `provisioner managed-clusters connect ${tenantId} ${name} --kubeconfig FILE`,
    namespaces.length ? `--namespaces ${namespaces.join(',')}` : '',
    clusterWide ? '--cluster-wide' : '',
  ]
    .filter((p) => p !== '')
    .join(' ');
}

export interface Revocation {
  /** The ServiceAccount whose tokens the control plane held. */
  serviceAccount: string;
  /**
   * True when the tokens issued no longer work: the bootstrap's ServiceAccount is gone, or the
   * Secret they are bound to (`binding`) is (deleted now, or already).
   */
  revoked: boolean;
  /** The RBAC objects removed (with removeRbac). */
  removed: string[];
  /** `namespace/name` of the Secret the tokens were bound to (tokens the tenant's own ServiceAccount may request). */
  binding?: string;
  /** When not revoked: what the tenant runs to revoke them (`kubectl … delete secret …`). */
  command?: string;
  /** Tokens that were not bound: when the last one issued expires (it works until then). */
  validUntil?: string;
  /** Why the revocation did not complete. */
  error?: string;
}

/**
 * Deletes what a bootstrap created, with the registration's own (current) credentials: the Roles in
 * the listed namespaces and the ClusterRole when asked (`removeRbac`), then the ServiceAccount, so
 * every token issued for it is refused from then on. Gone already counts as done.
 */
export async function revokeCreated(
  conn: ClusterConnection,
  created: CreatedObjects,
  removeRbac: boolean,
  signal: AbortSignal,
): Promise<Revocation> {
  // The account recorded at registration: per registration, or `argocd-manager` for older ones.
  const [saNamespace = BOOTSTRAP_NAMESPACE, saName = LEGACY_BOOTSTRAP_ACCOUNT] = created.serviceAccount.split('/');
  const out: Revocation = { serviceAccount: created.serviceAccount, revoked: false, removed: [] };
  const del = async (path: string): Promise<number> => (await kubeRequest(conn, 'DELETE', path, { signal })).status;
  const rbacBase = '/apis/rbac.authorization.k8s.io/v1';
  try {
    if (removeRbac) {
      // The Roles go (their bindings then grant nothing); the bindings stay, since deleting one
      // takes away the right to delete the other (docs/operations.md).
      const paths = created.namespaces.map((ns) => `${rbacBase}/namespaces/${ns}/roles/${saName}`);
      if (created.clusterWide) paths.push(`${rbacBase}/clusterroles/${saName}`);
      for (const path of paths) {
        const status = await del(path);
        if (status === 200 || status === 202 || status === 404) out.removed.push(path.slice(rbacBase.length + 1));
        else if (status === 401) return { ...out, error: 'the cluster refused the stored credentials (401)' };
      }
    }
    const status = await del(`/api/v1/namespaces/${saNamespace}/serviceaccounts/${saName}`);
    if (status === 200 || status === 202 || status === 404) out.revoked = true;
    else out.error = `deleting the ServiceAccount ${created.serviceAccount} was answered with HTTP ${status}`;
  } catch (err) {
    out.error = err instanceof ClusterNetworkError ? `the cluster could not be reached: ${err.message}` : String(err);
  }
  return out;
}
