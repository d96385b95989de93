/**
 * The pods a vcluster synced onto its host namespace, deleted when the tenant is suspended (or
 * sleeps). Scaling the control plane to zero stops the syncer but leaves the pods it created
 * running on the root cluster, still holding the tenant's whole runtime there; `vcluster pause`
 * (pkg/cli/pause_helm.go, pkg/lifecycle/lifecycle.go DeletePods) therefore scales the control
 * plane down and then deletes every pod of the namespace labelled
 * `vcluster.loft.sh/managed-by=<vcluster name>`. This does the same: list by that selector, delete
 * each (one already gone is fine), without waiting for them to terminate (the kubelet does that).
 * On resume the syncer recreates them from the vcluster's store, which stays on its volume.
 */
import { CoreV1Api } from '@kubernetes/client-node';
import { kubeConfigFrom } from '../kubeconfig-policy/client.ts';
import type { KubeconfigPolicy } from '../kubeconfig-policy/policy.ts';

/** The label the vcluster syncer puts on every pod it creates in the host namespace. */
export const MANAGED_BY_LABEL = 'vcluster.loft.sh/managed-by';

/** The label selector of the pods the vcluster named `release` synced (as `vcluster pause` builds it). */
export function syncedPodSelector(release: string): string {
  return `${MANAGED_BY_LABEL}=${release}`;
}

export interface SyncedPodsRequest {
  /** Kubeconfig contents of the root cluster. */
  kubeconfig: string;
  /** The vcluster's host namespace. */
  namespace: string;
  /** Which pods: syncedPodSelector(<release>). */
  labelSelector: string;
  /** What the kubeconfig may hold (default strict: no exec, no file, TLS verified). */
  policy?: KubeconfigPolicy;
}

/** Deletes the matching pods; resolves with how many this call deleted. */
export type SyncedPodsEvictor = (request: SyncedPodsRequest) => Promise<number>;

/** Pods deleted at once. */
const PARALLEL = 8;
/** Pods per list page. */
const PAGE = 500;

export const deleteSyncedPods: SyncedPodsEvictor = async (request) => {
  // Checked before use: a kubeconfig that runs a command or reads a file is refused here too.
  const kc = await kubeConfigFrom(request.kubeconfig, request.policy);
  const api = kc.makeApiClient(CoreV1Api);
  const { namespace, labelSelector } = request;
  const where = `deleting the vcluster's synced pods (${labelSelector}) in namespace ${namespace} on the root cluster`;

  const names: string[] = [];
  let next: string | undefined;
  do {
    let page;
    try {
      page = await api.listNamespacedPod({
        namespace,
        labelSelector,
        limit: PAGE,
        ...(next ? { _continue: next } : {}),
      });
    } catch (err) {
      // eslint-disable-next-line preserve-caught-error -- the cause holds the upstream's body, which must not travel on
      throw new Error(`${where}: listing them: ${failure(err)}`);
    }
    for (const pod of page.items) {
      // One already terminating is on its way out: deleting it again changes nothing.
      if (pod.metadata?.name && !pod.metadata.deletionTimestamp) names.push(pod.metadata.name);
    }
    next = page.metadata?._continue || undefined;
  } while (next);

  let deleted = 0;
  for (let i = 0; i < names.length; i += PARALLEL) {
    await Promise.all(
      names.slice(i, i + PARALLEL).map(async (name) => {
        try {
          await api.deleteNamespacedPod({ name, namespace });
          deleted++;
        } catch (err) {
          if (statusOf(err) === 404) return; // already gone
          // eslint-disable-next-line preserve-caught-error -- as above
          throw new Error(`${where}: pod ${name}: ${failure(err)}`);
        }
      }),
    );
  }
  return deleted;
};

/** The HTTP status or network error only: the error carries the upstream's answer body. */
function failure(err: unknown): string {
  const code = statusOf(err);
  return code === undefined
    ? `the API server could not be reached${networkCode(err)}`
    : `the API server answered HTTP ${code}`;
}

function statusOf(err: unknown): number | undefined {
  if (typeof err !== 'object' || err === null || !('code' in err)) return undefined;
  return typeof err.code === 'number' ? err.code : undefined;
}

function networkCode(err: unknown): string {
  const cause = typeof err === 'object' && err !== null && 'cause' in err ? err.cause : undefined;
  for (const e of [cause, err]) {
    if (typeof e === 'object' && e !== null && 'code' in e && typeof e.code === 'string') return ` (${e.code})`;
  }
  return '';
}
