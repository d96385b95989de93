/**
 * A head start for a wake (or a resume): the vcluster's control plane scaled back to one replica
 * on the root cluster directly, before the engine run that wakes the tenant has started.
 *
 * The engine's run sets the same replica count through the vcluster's Helm release and then waits
 * for the control plane to be ready; alone, its own start (the language host, the program, the
 * provider plugin, the diff of every resource) came first, and the control plane only began
 * starting once the release was upgraded. Scaling the StatefulSet first lets the control plane,
 * its syncer and the runtime's pods start while the engine starts; the release's upgrade then
 * finds the count it sets already there (Helm's three-way merge leaves it), so the run confirms
 * the state it records instead of making it. A failure here changes nothing: the run scales it.
 */
import { AppsV1Api, PatchStrategy, setHeaderOptions } from '@kubernetes/client-node';
import { kubeConfigFrom } from '../kubeconfig-policy/client.ts';
import type { KubeconfigPolicy } from '../kubeconfig-policy/policy.ts';
import { failure, statusOf } from './synced-pods.ts';
import { VCLUSTER_RELEASE } from './names.ts';

export interface ControlPlaneScaleRequest {
  /** Kubeconfig contents of the root cluster. */
  kubeconfig: string;
  /** The vcluster's host namespace (the tenant's namespace). */
  namespace: string;
  replicas: number;
  /** What the kubeconfig may hold (default strict: no exec, no file, TLS verified). */
  policy?: KubeconfigPolicy;
}

/** `scaled` when this call changed the count, `unchanged` when it was already there. */
export type ControlPlaneScaler = (request: ControlPlaneScaleRequest) => Promise<'scaled' | 'unchanged'>;

export const scaleControlPlane: ControlPlaneScaler = async (request) => {
  const kc = await kubeConfigFrom(request.kubeconfig, request.policy);
  const apps = kc.makeApiClient(AppsV1Api);
  const { namespace, replicas } = request;
  const where = `scaling StatefulSet ${VCLUSTER_RELEASE} in namespace ${namespace} on the root cluster to ${replicas}`;
  let current: number | undefined;
  try {
    const sts = await apps.readNamespacedStatefulSet({ name: VCLUSTER_RELEASE, namespace });
    current = sts.spec?.replicas;
  } catch (err) {
    const what = statusOf(err) === 404 ? 'the StatefulSet does not exist' : `reading it: ${failure(err)}`;
    // eslint-disable-next-line preserve-caught-error -- the cause holds the upstream's body, which must not travel on
    throw new Error(`${where}: ${what}`);
  }
  if (current === replicas) return 'unchanged';
  try {
    await apps.patchNamespacedStatefulSet(
      { name: VCLUSTER_RELEASE, namespace, body: { spec: { replicas } } },
      setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
    );
  } catch (err) {
    // eslint-disable-next-line preserve-caught-error -- as above
    throw new Error(`${where}: ${failure(err)}`);
  }
  return 'scaled';
};
