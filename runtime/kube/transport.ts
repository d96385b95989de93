/**
 * How the reflector (reflector.ts) and the event reporter's Leases reach an API server: a JSON
 * request and a watch stream. Two implementations: client-node-transport.ts over a client-node
 * KubeConfig (the provisioner, which loads client-node anyway), and light-client.ts over Node's
 * own https (the event reporter, which would otherwise load client-node for nothing but this: about
 * 60 MiB of its memory).
 */

type Obj = Record<string, unknown>;

export interface KubeResponse {
  status: number;
  /** The parsed JSON body (undefined when there was none or it was not JSON). */
  body: unknown;
}

export interface KubeRequestOptions {
  method?: 'GET' | 'POST' | 'PUT' | 'DELETE' | 'PATCH';
  query?: Record<string, string>;
  /** Sent as JSON. */
  body?: unknown;
  /** The body's content type: application/json unless a PATCH names its kind (e.g. application/merge-patch+json). */
  contentType?: string;
  signal?: AbortSignal;
}

export interface KubeTransport {
  /** One request to `path` (e.g. `/apis/coordination.k8s.io/v1/namespaces/x/leases`). */
  request(path: string, opts?: KubeRequestOptions): Promise<KubeResponse>;
  /**
   * A watch of `path` (watch=true is added), as client-node's Watch.watch does it: `onEvent` per
   * event line; `done` once, with null when the server closed the stream, an error carrying
   * `statusCode` for a non-200 answer, or an error named TimeoutError when nothing arrived for
   * `idleTimeoutMs`. Resolves with the controller that ends it.
   */
  watch(
    path: string,
    query: Record<string, string | number | boolean>,
    onEvent: (type: string, obj: Obj) => void,
    done: (err: unknown) => void,
  ): Promise<AbortController>;
}

/** An error for an API server's non-2xx answer, with the status where statusOf() looks for it. */
export function statusError(what: string, status: number): Error & { code: number; statusCode: number } {
  return Object.assign(new Error(`${what}: HTTP ${status}`), { code: status, statusCode: status });
}
