/**
 * What a managed cluster must show before it is registered, asked of its API server with the
 * tenant's credentials: it answers `/version` as a Kubernetes API server, it accepts the
 * credentials, and SelfSubjectAccessReviews say the credentials may do what Argo CD does in each
 * listed namespace (or cluster-wide when none is listed). Every refusal is an AppError with its
 * own code; the caller bounds the whole by an AbortSignal (10 s).
 */
import { AppError } from '../errors.ts';
import {
  gitVersionOf,
  reviewAllowed,
  selfSubjectAccessReview,
  SELF_SUBJECT_ACCESS_REVIEWS_PATH,
  VERSION_PATH,
} from '../kubeconfig/kube-review.ts';
import { ClusterNetworkError, kubeRequest, type ClusterConnection } from './kube-api.ts';

/**
 * The verbs Argo CD uses on the resources it manages: reads for its cache and diffs, writes for
 * syncs and prunes. Asked for every resource of every group (`*`), which is what Argo CD's own
 * `argocd cluster add --namespace` grants in a namespace.
 */
export const ARGO_CD_VERBS = ['get', 'list', 'watch', 'create', 'update', 'patch', 'delete'] as const;

/** At most this many reviews in flight at once. */
const REVIEW_CONCURRENCY = 8;

export function unreachable(server: string, err: ClusterNetworkError | string): AppError {
  const why = typeof err === 'string' ? err : err.code === 'TIMEOUT' ? 'no answer within 10 s' : err.message;
  return new AppError('MANAGED_CLUSTER_UNREACHABLE', `the managed cluster at ${server} could not be reached: ${why}`, {
    field: 'server',
    details: { error: typeof err === 'string' ? 'NOT_KUBERNETES' : err.code },
  });
}

function unauthorized(server: string): AppError {
  return new AppError(
    'MANAGED_CLUSTER_UNAUTHORIZED',
    `the API server at ${server} refused the credentials (401 Unauthorized): check the token or client certificate`,
    { field: 'credentials' },
  );
}

/** The server's answer to `/version`: its git version, or the error a probe or a registration reports. */
export async function serverVersion(conn: ClusterConnection, server: string, signal: AbortSignal): Promise<string> {
  let answer;
  try {
    answer = await kubeRequest(conn, 'GET', VERSION_PATH, { signal });
  } catch (err) {
    if (err instanceof ClusterNetworkError) throw unreachable(server, err);
    throw err;
  }
  if (answer.status === 401) throw unauthorized(server);
  const version = gitVersionOf(answer.body);
  if (answer.status !== 200 || typeof version !== 'string')
    throw unreachable(
      server,
      `GET /version answered ${answer.status} without a Kubernetes version: not a Kubernetes API server`,
    );
  return version;
}

interface Review {
  namespace: string;
  verb: string;
}

const describeReview = (r: Review): string =>
  `${r.verb} */* ${r.namespace === '' ? 'cluster-wide' : `in namespace ${r.namespace}`}`;

/**
 * The reviews Argo CD's permissions need that the credentials fail, each as "list" plus all
 * resources "in namespace ns" (or "cluster-wide"); empty when every one is allowed.
 */
export async function missingPermissions(
  conn: ClusterConnection,
  server: string,
  namespaces: readonly string[],
  signal: AbortSignal,
): Promise<string[]> {
  const reviews: Review[] = (namespaces.length ? namespaces : ['']).flatMap((namespace) =>
    ARGO_CD_VERBS.map((verb) => ({ namespace, verb })),
  );
  const missing: string[] = [];
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < reviews.length) {
      const review = reviews[next++]!;
      let answer;
      try {
        answer = await kubeRequest(conn, 'POST', SELF_SUBJECT_ACCESS_REVIEWS_PATH, {
          signal,
          body: selfSubjectAccessReview({ namespace: review.namespace, verb: review.verb, group: '*', resource: '*' }),
        });
      } catch (err) {
        if (err instanceof ClusterNetworkError) throw unreachable(server, err);
        throw err;
      }
      if (answer.status === 401) throw unauthorized(server);
      const allowed = reviewAllowed(answer.body);
      if (!allowed) missing.push(describeReview(review));
    }
  };
  await Promise.all(Array.from({ length: Math.min(REVIEW_CONCURRENCY, reviews.length) }, worker));
  const order = new Map(reviews.map((r, i) => [describeReview(r), i]));
  return missing.sort((a, b) => order.get(a)! - order.get(b)!);
}

/** Everything a registration checks on the cluster; the server's version when it passes. */
export async function validateCluster(
  conn: ClusterConnection,
  server: string,
  namespaces: readonly string[],
  signal: AbortSignal,
): Promise<string> {
  const version = await serverVersion(conn, server, signal);
  const missing = await missingPermissions(conn, server, namespaces, signal);
  if (missing.length > 0) {
    throw new AppError(
      'MANAGED_CLUSTER_PERMISSIONS_MISSING',
      `the credentials lack what Argo CD needs on ${server}: ${missing.join('; ')}. Grant them (a Role with all verbs on all resources in each listed namespace, or a ClusterRole when no namespace is listed) or list only the namespaces Argo CD should manage`,
      { field: 'namespaces', details: { missing } },
    );
  }
  return version;
}
