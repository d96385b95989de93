/**
 * The Kubernetes API transport of an agent that reads or patches objects (the event reporter, the
 * app-proxy, the upgrader): Node's own https (runtime/kube/light-client.ts), not
 * @kubernetes/client-node, whose import alone costs about 60 MiB of memory and 0.8 CPU-s. A
 * kubeconfig that cannot be used stops the agent like any other bad variable (a ConfigError:
 * exit 2).
 */
import { KubeconfigError, loadLightTransport } from '../../kube/light-client.ts';
import type { KubeTransport } from '../../kube/transport.ts';
import { ConfigError } from './config.ts';

/** The transport of KUBECONFIG (a file), or of the pod's service account when it is unset. */
export function agentKubeTransport(kubeconfig: string | undefined): KubeTransport {
  try {
    return loadLightTransport(kubeconfig);
  } catch (err) {
    if (err instanceof KubeconfigError)
      throw new ConfigError(kubeconfig ? 'KUBECONFIG' : 'KUBERNETES_SERVICE_HOST', err.message);
    throw err;
  }
}
