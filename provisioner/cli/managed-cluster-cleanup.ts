/**
 * What `provisioner managed-clusters remove --remove-rbac` does on the tenant's cluster, and says
 * about it. With the tenant's kubeconfig (read here only, never sent): deletes every object a
 * bootstrap created for the registration (selected by its labels, bootstrap.ts), in the order
 * that keeps nothing granted longer than needed, and names what it could not delete with the
 * kubectl command that does. Objects of an older bootstrap, created before the objects carried the
 * registration's labels, are found by name in the namespaces the registration listed and deleted
 * only when no registration label says they belong to another one. Without a kubeconfig: what the
 * API's DELETE leaves (the account cannot delete the RoleBindings once their Role is gone).
 *
 * Loaded by `remove --kubeconfig` only: the other commands start without the Kubernetes client.
 */
import type { KubeConfig, KubernetesObject, KubernetesObjectApi } from '@kubernetes/client-node';
import {
  BOOTSTRAP_NAMESPACE,
  LEGACY_BOOTSTRAP_ACCOUNT,
  LABELS,
  REGISTRATION_KINDS,
  TENANT_LABEL,
  registrationSelector,
  type RegistrationRef,
} from '../managed-clusters/bootstrap.ts';

/** An object on the cluster. */
export interface ObjectRef {
  kind: string;
  namespace?: string;
  name: string;
}

export interface Cleanup {
  /** The label selector the registration's objects were found by. */
  selector: string;
  deleted: ObjectRef[];
  /** What could not be deleted (or looked for), why, and the command that does it. */
  failed: Array<ObjectRef & { error: string; command: string }>;
}

/**
 * The names an older bootstrap gave its objects (one account `argocd-manager` for every
 * registration); its objects without the registration's labels are looked up by them.
 */
const JOB_NAME = 'argocd-manager-bootstrap';

export const describe = (o: ObjectRef): string => `${o.kind} ${o.namespace ? `${o.namespace}/` : ''}${o.name}`;

/** `kubectl [--kubeconfig F] [--context C] [-n NS] delete KIND NAME`. */
export function kubectlDelete(o: ObjectRef, kubectlArgs: string): string {
  return `kubectl${kubectlArgs}${o.namespace ? ` -n ${o.namespace}` : ''} delete ${o.kind.toLowerCase()} ${o.name}`;
}

/** The command deleting everything labelled for the registration (every kind at once). */
export function kubectlDeleteAll(registration: RegistrationRef, kubectlArgs: string): string {
  const kinds = REGISTRATION_KINDS.map((k) => k.kind.toLowerCase()).join(',');
  return `kubectl${kubectlArgs} delete ${kinds} -A -l ${registrationSelector(registration)}`;
}

function kubeError(err: unknown): { status?: number; message: string } {
  const e = err as { code?: unknown; body?: unknown; message?: string; cause?: { message?: string } };
  let body = e.body;
  if (typeof body === 'string') {
    try {
      body = JSON.parse(body) as unknown;
    } catch {
      // not JSON: the exception's message is used
    }
  }
  const fromBody = (body as { message?: unknown } | undefined)?.message;
  const message =
    typeof fromBody === 'string' ? fromBody : (e.cause?.message ?? e.message ?? String(err)).split('\n')[0]!;
  return typeof e.code === 'number' ? { status: e.code, message } : { message };
}

/**
 * Deletes the registration's objects on the cluster the kubeconfig points at. `legacy`: the
 * registration as the API had it (its namespaces; none means cluster-wide), to find an older
 * bootstrap's unlabelled objects; absent when the registration is gone already.
 */
export async function removeRegistrationObjects(
  kc: KubeConfig,
  registration: RegistrationRef,
  legacy: { namespaces: string[] } | undefined,
  kubectlArgs: string,
): Promise<Cleanup> {
  const k8s = await import('@kubernetes/client-node');
  const api: KubernetesObjectApi = k8s.KubernetesObjectApi.makeApiClient(kc);
  const selector = registrationSelector(registration);
  const out: Cleanup = { selector, deleted: [], failed: [] };
  const fail = (o: ObjectRef, err: unknown): void => {
    out.failed.push({ ...o, error: kubeError(err).message, command: kubectlDelete(o, kubectlArgs) });
  };

  for (const { apiVersion, kind, namespaced } of REGISTRATION_KINDS) {
    const found = new Map<string, ObjectRef>();
    try {
      const list = await api.list(apiVersion, kind, undefined, undefined, undefined, undefined, undefined, selector);
      for (const item of list.items) {
        const ref = refOf(kind, item);
        found.set(describe(ref), ref);
      }
    } catch (err) {
      const e = kubeError(err);
      if (e.status === undefined) {
        // The cluster did not answer: nothing more can be done from here.
        out.failed.push({
          kind: REGISTRATION_KINDS.map((k) => k.kind).join(','),
          name: `-l ${selector}`,
          error: e.message,
          command: kubectlDeleteAll(registration, kubectlArgs),
        });
        return out;
      }
      out.failed.push({
        kind,
        name: `-l ${selector}`,
        error: `listing ${kind}s was refused (HTTP ${e.status}): ${e.message}`,
        command: `kubectl${kubectlArgs} delete ${kind.toLowerCase()} ${namespaced ? '-A ' : ''}-l ${selector}`,
      });
    }
    if (legacy)
      for (const candidate of legacyCandidates(kind, legacy.namespaces)) {
        if (found.has(describe(candidate))) continue;
        try {
          const object = await api.read({
            apiVersion,
            kind,
            metadata: { name: candidate.name, ...(candidate.namespace ? { namespace: candidate.namespace } : {}) },
          });
          const labels = object.metadata?.labels ?? {};
          const ours = Object.entries(LABELS).every(([k, v]) => labels[k] === v);
          if (ours && labels[TENANT_LABEL] === undefined) found.set(describe(candidate), candidate);
        } catch (err) {
          const e = kubeError(err);
          if (e.status !== 404) fail(candidate, err);
        }
      }
    for (const ref of found.values()) {
      try {
        await api.delete(
          { apiVersion, kind, metadata: { name: ref.name, ...(ref.namespace ? { namespace: ref.namespace } : {}) } },
          undefined,
          undefined,
          undefined,
          undefined,
          kind === 'Job' ? 'Background' : undefined, // its pods go with it
        );
        out.deleted.push(ref);
      } catch (err) {
        if (kubeError(err).status === 404) out.deleted.push(ref);
        else fail(ref, err);
      }
    }
  }
  return out;
}

function refOf(kind: string, item: KubernetesObject): ObjectRef {
  const name = item.metadata?.name ?? '';
  const namespace = item.metadata?.namespace;
  return namespace ? { kind, namespace, name } : { kind, name };
}

/** Where an older bootstrap put objects of a kind for a registration with these namespaces (none: cluster-wide). */
function legacyCandidates(kind: string, namespaces: readonly string[]): ObjectRef[] {
  const inOwn = (name: string): ObjectRef => ({ kind, namespace: BOOTSTRAP_NAMESPACE, name });
  switch (kind) {
    case 'Job':
    case 'Secret':
      return [inOwn(JOB_NAME)];
    case 'ServiceAccount':
      return [inOwn(LEGACY_BOOTSTRAP_ACCOUNT)];
    case 'Role':
    case 'RoleBinding':
      return [...new Set([BOOTSTRAP_NAMESPACE, ...namespaces])].map((namespace) => ({
        kind,
        namespace,
        name: LEGACY_BOOTSTRAP_ACCOUNT,
      }));
    case 'ClusterRole':
    case 'ClusterRoleBinding':
      return namespaces.length === 0 ? [{ kind, name: LEGACY_BOOTSTRAP_ACCOUNT }] : [];
    default:
      return [];
  }
}

/**
 * What a bootstrap's registration leaves on the cluster after the API's DELETE with removeRbac
 * (`account`: the name of its ServiceAccount, which its Roles and bindings share; `removed`: the
 * API's `revocation.removed`, e.g. `namespaces/apps/roles/argocd-manager-0123456789`; `revoked`:
 * whether it deleted the ServiceAccount): the RoleBindings (and the ClusterRoleBinding), the
 * account's own Role, and whatever the API could not delete.
 */
export function leftAfterDelete(
  account: string,
  namespaces: readonly string[],
  removed: readonly string[],
  revoked: boolean,
): ObjectRef[] {
  const gone = new Set(removed);
  const left: ObjectRef[] = [];
  const name = account;
  for (const namespace of [...new Set([BOOTSTRAP_NAMESPACE, ...namespaces])]) {
    left.push({ kind: 'RoleBinding', namespace, name });
    if (!gone.has(`namespaces/${namespace}/roles/${name}`)) left.push({ kind: 'Role', namespace, name });
  }
  if (namespaces.length === 0) {
    left.push({ kind: 'ClusterRoleBinding', name });
    if (!gone.has(`clusterroles/${name}`)) left.push({ kind: 'ClusterRole', name });
  }
  if (!revoked) left.push({ kind: 'ServiceAccount', namespace: BOOTSTRAP_NAMESPACE, name });
  return left;
}
