/**
 * What a managed cluster must show before it is registered, asked of its API server with the
 * tenant's credentials: it answers `/version` as a Kubernetes API server, it accepts the
 * credentials, and SelfSubjectAccessReviews say the credentials may do what Argo CD does in each
 * listed namespace (or cluster-wide when none is listed). The checks themselves are shared with the
 * runtime's app-proxy (runtime/kube/cluster-check.ts), which makes them for a cluster only the
 * runtime reaches; here a failed check becomes an AppError with its own code, whichever side made
 * it. The caller bounds the whole by an AbortSignal (10 s).
 */
import { AppError } from '../errors.ts';
import { checkCluster, type ClusterConnection, type ClusterProblem } from '../../runtime/kube/cluster-check.ts';

export { ARGO_CD_VERBS } from '../../runtime/kube/cluster-check.ts';

/** The AppError a failed check is refused (or a probe reports) with. */
export function checkError(server: string, p: ClusterProblem): AppError {
  switch (p.problem) {
    case 'UNREACHABLE':
      return new AppError(
        'MANAGED_CLUSTER_UNREACHABLE',
        `the managed cluster at ${server} could not be reached: ${p.error === 'TIMEOUT' ? 'no answer within 10 s' : p.message}`,
        { field: 'server', details: { error: p.error } },
      );
    case 'NOT_KUBERNETES':
      return new AppError(
        'MANAGED_CLUSTER_UNREACHABLE',
        `the managed cluster at ${server} could not be reached: GET /version answered ${p.status} without a Kubernetes version: not a Kubernetes API server`,
        { field: 'server', details: { error: 'NOT_KUBERNETES' } },
      );
    case 'UNAUTHORIZED':
      return new AppError(
        'MANAGED_CLUSTER_UNAUTHORIZED',
        `the API server at ${server} refused the credentials (401 Unauthorized): check the token or client certificate`,
        { field: 'credentials' },
      );
    case 'PERMISSIONS_MISSING':
      return new AppError(
        'MANAGED_CLUSTER_PERMISSIONS_MISSING',
        `the credentials lack what Argo CD needs on ${server}: ${p.missing.join('; ')}. Grant them (a Role with all verbs on all resources in each listed namespace, or a ClusterRole when no namespace is listed) or list only the namespaces Argo CD should manage`,
        { field: 'namespaces', details: { missing: p.missing } },
      );
  }
}

/** The server's answer to `/version`: its git version, or the error a probe or a registration reports. */
export async function serverVersion(conn: ClusterConnection, server: string, signal: AbortSignal): Promise<string> {
  const checked = await checkCluster(conn, { signal });
  if (!checked.ok) throw checkError(server, checked);
  return checked.version;
}

/** Everything a registration checks on the cluster; the server's version when it passes. */
export async function validateCluster(
  conn: ClusterConnection,
  server: string,
  namespaces: readonly string[],
  signal: AbortSignal,
): Promise<string> {
  const checked = await checkCluster(conn, { namespaces, signal });
  if (!checked.ok) throw checkError(server, checked);
  return checked.version;
}
