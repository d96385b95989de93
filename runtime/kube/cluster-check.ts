/**
 * The checks of a tenant's managed cluster, made by the control plane (a cluster it reaches) and by
 * the runtime's app-proxy (a cluster only the runtime reaches) with the same code: `GET /version`
 * answered by a Kubernetes API server that accepts the credentials, and, at registration,
 * SelfSubjectAccessReviews of what Argo CD does in each listed namespace (or cluster-wide when none
 * is listed). The outcome is plain data (ClusterCheck) so that it travels through the tunnel as
 * JSON; the control plane turns a failed check into its 4xx or its Reachable reason
 * (provisioner/managed-clusters/validate.ts). Requests are bounded in size (1 MiB per answer) and
 * by the caller's AbortSignal; nothing is read from disk or executed.
 */
import { request } from 'node:https';
import {
  gitVersionOf,
  reviewAllowed,
  selfSubjectAccessReview,
  SELF_SUBJECT_ACCESS_REVIEWS_PATH,
  VERSION_PATH,
} from './kube-review.ts';

/** What a request to the cluster needs. */
export interface ClusterConnection {
  /** The address connected to (`https://10.1.2.3:6443`). */
  url: URL;
  /** The name the certificate is checked against, when it differs from the URL's host. */
  servername?: string;
  ca?: string;
  cert?: string;
  key?: string;
  authorization?: string;
}

/** A connection failure (DNS, TCP, TLS, timeout): `code` is Node's error code or TIMEOUT. */
export class ClusterNetworkError extends Error {
  override name = 'ClusterNetworkError';
  readonly code: string;
  constructor(code: string, message: string) {
    super(message);
    this.code = code;
  }
}

/** Connection settings as Argo CD reads them from a cluster Secret's `config` (base64 PEM). */
export interface ClusterCredentials {
  bearerToken?: string;
  username?: string;
  password?: string;
  tlsClientConfig?: { insecure?: boolean; caData?: string; certData?: string; keyData?: string; serverName?: string };
}

const MAX_ANSWER_BYTES = 1024 * 1024;

const decode = (b64: string | undefined): string | undefined =>
  typeof b64 === 'string' && b64 !== '' ? Buffer.from(b64, 'base64').toString('utf8') : undefined;

/** The connection Argo CD's cluster config describes, to the server URL as given (no address pinning). */
export function connectionOfCredentials(server: string, c: ClusterCredentials): ClusterConnection {
  const conn: ClusterConnection = { url: new URL(server) };
  const tls = c.tlsClientConfig ?? {};
  if (tls.serverName) conn.servername = tls.serverName;
  const ca = decode(tls.caData);
  if (ca) conn.ca = ca;
  const cert = decode(tls.certData);
  const key = decode(tls.keyData);
  if (cert && key) {
    conn.cert = cert;
    conn.key = key;
  }
  if (c.bearerToken) conn.authorization = `Bearer ${c.bearerToken}`;
  else if (c.username !== undefined && c.password !== undefined)
    conn.authorization = `Basic ${Buffer.from(`${c.username}:${c.password}`).toString('base64')}`;
  return conn;
}

/** One request to the cluster's API; the answer's JSON (or undefined when it is not JSON). */
export function kubeRequest(
  conn: ClusterConnection,
  method: 'GET' | 'POST' | 'DELETE',
  path: string,
  opts: { body?: unknown; signal: AbortSignal },
): Promise<{ status: number; body: unknown }> {
  return new Promise((resolve, reject) => {
    const url = new URL(path, conn.url);
    const payload = opts.body === undefined ? undefined : JSON.stringify(opts.body);
    const headers: Record<string, string> = { accept: 'application/json' };
    if (conn.authorization) headers.authorization = conn.authorization;
    if (payload !== undefined) {
      headers['content-type'] = 'application/json';
      headers['content-length'] = String(Buffer.byteLength(payload));
    }
    const req = request(
      url,
      {
        method,
        headers,
        signal: opts.signal,
        agent: false,
        ...(conn.ca ? { ca: conn.ca } : {}),
        ...(conn.cert && conn.key ? { cert: conn.cert, key: conn.key } : {}),
        ...(conn.servername ? { servername: conn.servername } : {}),
      },
      (res) => {
        const chunks: Buffer[] = [];
        let size = 0;
        res.on('data', (chunk: Buffer) => {
          size += chunk.length;
          if (size > MAX_ANSWER_BYTES) {
            req.destroy(new ClusterNetworkError('ANSWER_TOO_LARGE', `the answer to ${path} is over 1 MiB`));
            return;
          }
          chunks.push(chunk);
        });
        res.on('end', () => {
          let body: unknown;
          try {
            body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
          } catch {
            body = undefined;
          }
          resolve({ status: res.statusCode ?? 0, body });
        });
        res.on('error', (err) => reject(networkError(err, opts.signal)));
      },
    );
    req.on('error', (err) => reject(networkError(err, opts.signal)));
    req.end(payload);
  });
}

function networkError(err: Error, signal: AbortSignal): ClusterNetworkError {
  if (err instanceof ClusterNetworkError) return err;
  if (signal.aborted) return new ClusterNetworkError('TIMEOUT', 'no answer in time');
  const code = (err as NodeJS.ErrnoException).code ?? 'ERROR';
  return new ClusterNetworkError(code, `${code}: ${err.message}`);
}

/**
 * The verbs Argo CD uses on the resources it manages: reads for its cache and diffs, writes for
 * syncs and prunes. Asked for every resource of every group (`*`), which is what Argo CD's own
 * `argocd cluster add --namespace` grants in a namespace.
 */
export const ARGO_CD_VERBS = ['get', 'list', 'watch', 'create', 'update', 'patch', 'delete'] as const;

/** At most this many reviews in flight at once. */
const REVIEW_CONCURRENCY = 8;

/** The outcome of a check, as JSON. */
export type ClusterCheck =
  | { ok: true; version: string; ms: number }
  /** No answer: `error` is the network code (ECONNREFUSED, TIMEOUT, …), `message` its text. */
  | { ok: false; problem: 'UNREACHABLE'; error: string; message: string }
  /** An answer to /version without a Kubernetes version. */
  | { ok: false; problem: 'NOT_KUBERNETES'; status: number }
  | { ok: false; problem: 'UNAUTHORIZED' }
  /** Each review refused, as "verb * /* in namespace ns" or "… cluster-wide", in review order. */
  | { ok: false; problem: 'PERMISSIONS_MISSING'; version: string; missing: string[] };

export type ClusterProblem = Extract<ClusterCheck, { ok: false }>;

interface Review {
  namespace: string;
  verb: string;
}

const describeReview = (r: Review): string =>
  `${r.verb} */* ${r.namespace === '' ? 'cluster-wide' : `in namespace ${r.namespace}`}`;

const unreachable = (err: ClusterNetworkError): ClusterProblem => ({
  ok: false,
  problem: 'UNREACHABLE',
  error: err.code,
  message: err.message,
});

/**
 * Checks the cluster: its version, and with `namespaces` given, Argo CD's permissions there (an
 * empty list: cluster-wide). Never throws for what the cluster answers or a network failure.
 */
export async function checkCluster(
  conn: ClusterConnection,
  opts: { namespaces?: readonly string[] | undefined; signal: AbortSignal },
): Promise<ClusterCheck> {
  const started = performance.now();
  let answer;
  try {
    answer = await kubeRequest(conn, 'GET', VERSION_PATH, { signal: opts.signal });
  } catch (err) {
    if (err instanceof ClusterNetworkError) return unreachable(err);
    throw err;
  }
  if (answer.status === 401) return { ok: false, problem: 'UNAUTHORIZED' };
  const version = gitVersionOf(answer.body);
  if (answer.status !== 200 || typeof version !== 'string')
    return { ok: false, problem: 'NOT_KUBERNETES', status: answer.status };
  const ms = Math.round(performance.now() - started);
  if (opts.namespaces === undefined) return { ok: true, version, ms };

  const reviews: Review[] = (opts.namespaces.length ? opts.namespaces : ['']).flatMap((namespace) =>
    ARGO_CD_VERBS.map((verb) => ({ namespace, verb })),
  );
  const missing: string[] = [];
  let failed: ClusterProblem | undefined;
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < reviews.length && !failed) {
      const review = reviews[next++]!;
      let reviewed;
      try {
        reviewed = await kubeRequest(conn, 'POST', SELF_SUBJECT_ACCESS_REVIEWS_PATH, {
          signal: opts.signal,
          body: selfSubjectAccessReview({ namespace: review.namespace, verb: review.verb, group: '*', resource: '*' }),
        });
      } catch (err) {
        if (err instanceof ClusterNetworkError) {
          failed ??= unreachable(err);
          return;
        }
        throw err;
      }
      if (reviewed.status === 401) {
        failed ??= { ok: false, problem: 'UNAUTHORIZED' };
        return;
      }
      if (!reviewAllowed(reviewed.body)) missing.push(describeReview(review));
    }
  };
  await Promise.all(Array.from({ length: Math.min(REVIEW_CONCURRENCY, reviews.length) }, worker));
  if (failed) return failed;
  if (missing.length > 0) {
    const order = new Map(reviews.map((r, i) => [describeReview(r), i]));
    return {
      ok: false,
      problem: 'PERMISSIONS_MISSING',
      version,
      missing: missing.sort((a, b) => order.get(a)! - order.get(b)!),
    };
  }
  return { ok: true, version, ms };
}
