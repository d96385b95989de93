/**
 * Bounded wait for the kubeconfig Secret a vcluster exports (`vc-<release>`, key `config`). The
 * Secret appears a little after the Helm release reports ready; the tenant program waits for it
 * (polling the root cluster's API) before reading it through Pulumi, and fails with a clear
 * message when it does not appear in time.
 */
import { CoreV1Api } from '@kubernetes/client-node';
import { kubeConfigFrom } from '../kubeconfig-policy/client.ts';
import type { KubeconfigPolicy } from '../kubeconfig-policy/policy.ts';

export interface SecretWaitRequest {
  /** Kubeconfig contents of the root cluster. */
  kubeconfig: string;
  namespace: string;
  name: string;
  /** Key that must be present in the Secret's data. */
  key: string;
  timeoutMs: number;
  /** Delay between polls (default 2 s). */
  intervalMs?: number;
  /** What the kubeconfig may hold (default strict: no exec, no file, TLS verified). */
  policy?: KubeconfigPolicy;
}

/** Resolves once the Secret holds `key`; rejects after `timeoutMs`. */
export type SecretWaiter = (request: SecretWaitRequest) => Promise<void>;

export class KubeconfigTimeoutError extends Error {
  override name = 'KubeconfigTimeoutError';
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

export const waitForSecretKey: SecretWaiter = async (request) => {
  // Checked before use: a kubeconfig that runs a command or reads a file is refused here too.
  const kc = await kubeConfigFrom(request.kubeconfig, request.policy);
  const api = kc.makeApiClient(CoreV1Api);
  const deadline = Date.now() + request.timeoutMs;
  const interval = request.intervalMs ?? 2000;
  let last: string;
  for (;;) {
    try {
      const secret = await api.readNamespacedSecret({ name: request.name, namespace: request.namespace });
      if (secret.data?.[request.key]) return;
      last = `present without key '${request.key}'`;
    } catch (err) {
      // client-node rejects with an ApiException carrying the HTTP status in `code`.
      const code = statusOf(err);
      // The error carries the upstream's answer body: only its status or network error code
      // goes on (the message ends up in an operation log the tenant reads).
      const where = `reading Secret ${request.namespace}/${request.name} on the root cluster`;
      // eslint-disable-next-line preserve-caught-error -- the cause holds the upstream's body, which must not travel on
      if (code === undefined) throw new Error(`${where}: the API server could not be reached${networkCode(err)}`);
      // eslint-disable-next-line preserve-caught-error -- as above
      if (code !== 404 && code < 500) throw new Error(`${where}: the API server answered HTTP ${code}`);
      last = code === 404 ? 'not found' : `API answered ${code}`;
    }
    const left = deadline - Date.now();
    if (left <= 0) {
      throw new KubeconfigTimeoutError(
        `kubeconfig Secret ${request.namespace}/${request.name} did not appear within ${request.timeoutMs / 1000} s (last: ${last}); ` +
          'check the vcluster control plane pods in that namespace',
      );
    }
    await sleep(Math.min(interval, left));
  }
};

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
