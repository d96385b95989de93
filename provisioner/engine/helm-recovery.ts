/**
 * Helm releases an interrupted operation left behind. The Kubernetes provider installs and
 * upgrades `kubernetes:helm.sh/v3:Release` resources through the Helm library, which writes the
 * release record (a Secret `sh.helm.release.v1.<release>.v<revision>`, labels `owner=helm`,
 * `name`, `status`, `version`) as `pending-install` / `pending-upgrade` / `pending-rollback` before
 * it touches any object and marks it `deployed` or `failed` at the end. When the provisioner dies
 * in between, the record stays pending and every later attempt fails: an install with "cannot
 * re-use a name that is still in use", an upgrade with "another operation (install/upgrade/
 * rollback) is in progress". Pulumi's own recovery (`refresh --clear-pending-creates`) only
 * forgets the resource; the record is still there.
 *
 * The same message meets a crash that came after Helm finished but before Pulumi recorded the
 * create: the release is deployed, and the state does not know it.
 *
 * Crash recovery therefore reads the stack's pending operations (with secrets shown, for the
 * provider's kubeconfig) and, for each Helm release among them:
 *  - an interrupted **create**: the release is not in the state (the refresh that follows drops
 *    the pending create), so every record of it is removed, whatever its status;
 *  - an interrupted **update**: the release is in the state; only its pending records are removed,
 *    the deployed history stays.
 * The next install or upgrade then runs as if the interrupted one had not started; the objects
 * the interrupted one created carry the release's ownership annotations, so Helm adopts them
 * instead of creating them twice.
 */
import { CoreV1Api } from '@kubernetes/client-node';
import { kubeConfigFrom } from '../../kubeconfig-policy/client.ts';
import {
  describeRefusal,
  KubeconfigPolicyError,
  STRICT_KUBECONFIG_POLICY,
  type KubeconfigPolicy,
} from '../../kubeconfig-policy/policy.ts';

export const HELM_RELEASE_TYPE = 'kubernetes:helm.sh/v3:Release';
const SECRET_SIG_KEY = '4dabf18193072939515e22adb298388d';
const PENDING = new Set(['pending-install', 'pending-upgrade', 'pending-rollback']);

/** A resource an interrupted Pulumi operation was working on (from the stack's pending operations). */
export interface InterruptedResource {
  urn: string;
  type: string;
  /** creating, updating, deleting, reading, importing. */
  operation: string;
  inputs: Record<string, unknown>;
  /** The explicit provider's inputs (secrets revealed), when the resource has one in the state. */
  providerInputs?: Record<string, unknown>;
}

type Json = Record<string, unknown>;
const isObject = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);

/** Replaces secret envelopes of a `stack export --show-secrets` with their values. */
export function revealSecrets(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(revealSecrets);
  if (!isObject(value)) return value;
  if (SECRET_SIG_KEY in value) {
    if (typeof value.plaintext === 'string') return revealSecrets(JSON.parse(value.plaintext));
    return undefined; // still encrypted: not usable
  }
  return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, revealSecrets(v)]));
}

/**
 * The pending operations of an exported deployment (`stack export --show-secrets`), each with its
 * provider's inputs. Tolerates a missing or empty deployment.
 */
export function interruptedResources(exported: unknown): InterruptedResource[] {
  const deployment = isObject(exported) && isObject(exported.deployment) ? exported.deployment : undefined;
  if (!deployment) return [];
  const resources = Array.isArray(deployment.resources) ? deployment.resources.filter(isObject) : [];
  const pending = Array.isArray(deployment.pending_operations) ? deployment.pending_operations.filter(isObject) : [];
  const providers = new Map<string, Json>();
  for (const r of resources) {
    if (
      typeof r.urn === 'string' &&
      typeof r.id === 'string' &&
      typeof r.type === 'string' &&
      r.type.startsWith('pulumi:providers:')
    ) {
      providers.set(`${r.urn}::${r.id}`, isObject(r.inputs) ? r.inputs : {});
    }
  }
  const out: InterruptedResource[] = [];
  for (const op of pending) {
    const r = op.resource;
    if (!isObject(r) || typeof r.urn !== 'string' || typeof r.type !== 'string') continue;
    const item: InterruptedResource = {
      urn: r.urn,
      type: r.type,
      operation: typeof op.type === 'string' ? op.type : 'unknown',
      inputs: isObject(r.inputs) ? (revealSecrets(r.inputs) as Json) : {},
    };
    const providerInputs = typeof r.provider === 'string' ? providers.get(r.provider) : undefined;
    if (providerInputs) item.providerInputs = revealSecrets(providerInputs) as Json;
    out.push(item);
  }
  return out;
}

/** A Helm release record as listed from the cluster. */
export interface HelmRecord {
  name: string;
  status: string;
  revision: number;
}

/**
 * The records to delete, oldest first: all of them for an interrupted create (the state does not
 * know the release), the pending ones for an interrupted update.
 */
export function recordsToRemove(operation: string, records: HelmRecord[]): HelmRecord[] {
  const sorted = [...records].sort((a, b) => a.revision - b.revision);
  return operation === 'creating' ? sorted : sorted.filter((r) => PENDING.has(r.status));
}

/** What recovery did for one release (one operation-log line each). */
export interface ReleaseRepair {
  urn: string;
  release: string;
  namespace: string;
  /** Records found (`name (status)`). */
  found: string[];
  /** Records deleted (`name (status)`). */
  deleted: string[];
  /** Why nothing could be done (no kubeconfig, API error); undefined on success. */
  problem?: string;
}

/** How to reach a cluster: the default uses @kubernetes/client-node. */
export interface HelmRecordStore {
  list(namespace: string, release: string): Promise<HelmRecord[]>;
  remove(namespace: string, name: string): Promise<void>;
}

/** A kubeconfig read back from a stack's state is checked by the kubeconfig policy before use. */
export function kubeRecordStore(
  kubeconfig: string,
  policy: KubeconfigPolicy = STRICT_KUBECONFIG_POLICY,
): HelmRecordStore {
  let client: Promise<CoreV1Api> | undefined;
  const apiOf = (): Promise<CoreV1Api> =>
    (client ??= kubeConfigFrom(kubeconfig, policy).then((kc) => kc.makeApiClient(CoreV1Api)));
  return {
    async list(namespace, release) {
      const api = await apiOf();
      const list = await api.listNamespacedSecret({ namespace, labelSelector: `owner=helm,name=${release}` });
      return list.items.map((s) => ({
        name: s.metadata?.name ?? '',
        status: s.metadata?.labels?.status ?? '',
        revision: Number(s.metadata?.labels?.version ?? 0),
      }));
    },
    async remove(namespace, name) {
      const api = await apiOf();
      try {
        await api.deleteNamespacedSecret({ name, namespace });
      } catch (err) {
        if (isObject(err) && err.code === 404) return;
        throw err;
      }
    },
  };
}

function kubeconfigOf(inputs: Record<string, unknown> | undefined): string | undefined {
  const value = inputs?.kubeconfig;
  if (typeof value !== 'string' || value.trim() === '') return undefined;
  // The provider accepts a path too; recovery only uses contents (the tenants program passes contents).
  return /apiVersion|clusters/.test(value) ? value : undefined;
}

/**
 * Removes the records that would block the next install or upgrade of every Helm release an
 * interrupted operation was creating or updating (recordsToRemove). Never throws: each release's outcome (or problem) is returned for the operation log.
 */
export async function repairHelmReleases(
  interrupted: InterruptedResource[],
  storeFor: (kubeconfig: string) => HelmRecordStore = kubeRecordStore,
): Promise<ReleaseRepair[]> {
  const repairs: ReleaseRepair[] = [];
  for (const r of interrupted) {
    if (r.type !== HELM_RELEASE_TYPE || (r.operation !== 'creating' && r.operation !== 'updating')) continue;
    const release = typeof r.inputs.name === 'string' ? r.inputs.name : '';
    const namespace =
      typeof r.inputs.namespace === 'string' && r.inputs.namespace !== '' ? r.inputs.namespace : 'default';
    const repair: ReleaseRepair = { urn: r.urn, release, namespace, found: [], deleted: [] };
    repairs.push(repair);
    if (!release) {
      repair.problem = 'the release has no name in its inputs';
      continue;
    }
    const kubeconfig = kubeconfigOf(r.providerInputs);
    if (!kubeconfig) {
      repair.problem = 'its provider has no kubeconfig contents in the state';
      continue;
    }
    try {
      const store = storeFor(kubeconfig);
      const records = await store.list(namespace, release);
      repair.found = [...records].sort((a, b) => a.revision - b.revision).map((x) => `${x.name} (${x.status})`);
      for (const record of recordsToRemove(r.operation, records)) {
        await store.remove(namespace, record.name);
        repair.deleted.push(`${record.name} (${record.status})`);
      }
    } catch (err) {
      repair.problem = clusterProblem(err);
    }
  }
  return repairs;
}

/**
 * Why a cluster call failed, for the operation log a tenant reads: the policy's refusal, the
 * HTTP status, or the network error's code. Never the response body (it is the upstream's text).
 */
function clusterProblem(err: unknown): string {
  if (err instanceof KubeconfigPolicyError) return describeRefusal(err);
  if (isObject(err) && typeof err.code === 'number') return `the cluster answered HTTP ${err.code}`;
  const code =
    isObject(err) && isObject(err.cause) && typeof err.cause.code === 'string'
      ? err.cause.code
      : isObject(err) && typeof err.code === 'string'
        ? err.code
        : undefined;
  return `the cluster could not be reached${code ? ` (${code})` : ''}`;
}

/** One operation-log line per repair. */
export function describeRepair(r: ReleaseRepair): string {
  const what = `Helm release ${r.namespace}/${r.release || '?'}`;
  if (r.problem) return `${what}: not repaired, ${r.problem}`;
  if (r.deleted.length === 0)
    return `${what}: nothing to remove (${r.found.length ? `records: ${r.found.join(', ')}` : 'no record at all'})`;
  return `${what}: removed record(s) ${r.deleted.join(', ')}`;
}

const KUBERNETES_PROVIDER_TYPE = 'pulumi:providers:kubernetes';

/**
 * The URNs of an exported deployment that live in a tenant's virtual cluster: every Kubernetes
 * provider other than the root cluster's (named `rootProvider` at the program's top level), and
 * every resource that uses one. A refresh that excludes them reads only what is on the root
 * cluster: the recovery of a stack whose vcluster's API server does not answer (asleep, suspended,
 * or half-way through a wake) can still clear its pending creates and read the vcluster's release.
 */
export function virtualClusterUrns(exported: unknown, rootProvider: string): string[] {
  const deployment = isObject(exported) && isObject(exported.deployment) ? exported.deployment : undefined;
  const resources = Array.isArray(deployment?.resources) ? deployment.resources.filter(isObject) : [];
  const rootUrnSuffix = `::${KUBERNETES_PROVIDER_TYPE}::${rootProvider}`;
  const inner = new Set<string>();
  for (const r of resources) {
    if (typeof r.urn !== 'string' || r.type !== KUBERNETES_PROVIDER_TYPE) continue;
    // A default provider (`default_4_…`) is the ambient cluster's, not a vcluster's.
    const name = r.urn.slice(r.urn.lastIndexOf('::') + 2);
    if (!r.urn.endsWith(rootUrnSuffix) && !name.startsWith('default')) inner.add(r.urn);
  }
  const out = new Set(inner);
  for (const r of resources) {
    if (typeof r.urn !== 'string' || typeof r.provider !== 'string') continue;
    // A provider reference is `<provider urn>::<provider id>`.
    const providerUrn = r.provider.slice(0, r.provider.lastIndexOf('::'));
    if (inner.has(providerUrn)) out.add(r.urn);
  }
  return [...out];
}
