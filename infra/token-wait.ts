/**
 * Bounded wait for the token of a ServiceAccount token Secret. The API server's token controller
 * fills `data.token` and `data["ca.crt"]` of a `kubernetes.io/service-account-token` Secret a
 * moment after it is created, and the Kubernetes provider does not wait for it: the create's
 * outputs carry no token. The program waits with the credentials `pulumi up` itself uses (the
 * operator's kubeconfig from stack config, or a context of the ambient kubeconfig), then reads the
 * Secret through Pulumi.
 */
import { CoreV1Api, KubeConfig } from '@kubernetes/client-node';

export interface TokenWaitRequest {
  /** Kubeconfig contents; when absent the ambient kubeconfig (KUBECONFIG or ~/.kube/config) with `context`. */
  kubeconfig?: string;
  context?: string;
  namespace: string;
  name: string;
  timeoutMs: number;
  /** Delay between polls (default 1 s). */
  intervalMs?: number;
}

/** Resolves once the Secret holds a token and a CA; rejects naming the Secret after `timeoutMs`. */
export type TokenWaiter = (request: TokenWaitRequest) => Promise<void>;

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

export const waitForServiceAccountToken: TokenWaiter = async (request) => {
  const kc = new KubeConfig();
  if (request.kubeconfig !== undefined) kc.loadFromString(request.kubeconfig);
  else {
    kc.loadFromDefault();
    if (request.context !== undefined) kc.setCurrentContext(request.context);
  }
  const api = kc.makeApiClient(CoreV1Api);
  const deadline = Date.now() + request.timeoutMs;
  const where = `ServiceAccount token Secret ${request.namespace}/${request.name}`;
  let last: string;
  for (;;) {
    try {
      const secret = await api.readNamespacedSecret({ name: request.name, namespace: request.namespace });
      if (secret.data?.token && secret.data['ca.crt']) return;
      last = 'no token yet';
    } catch (err) {
      const code = typeof err === 'object' && err !== null && 'code' in err ? err.code : undefined;
      if (typeof code === 'number' && code !== 404 && code < 500)
        throw new Error(`${where}: the API server answered HTTP ${code}`, { cause: err });
      last = typeof code === 'number' ? `HTTP ${code}` : 'the API server could not be reached';
    }
    const left = deadline - Date.now();
    if (left <= 0)
      throw new Error(
        `${where} got no token within ${request.timeoutMs / 1000} s (last: ${last}); ` +
          'check that kube-controller-manager runs with --service-account-private-key-file (its token controller fills the Secret)',
      );
    await sleep(Math.min(request.intervalMs ?? 1000, left));
  }
};
