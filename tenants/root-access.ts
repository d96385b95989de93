/**
 * The tenants program's own access to a tenant namespace on the root cluster. Under infra/'s
 * grants the provisioner holds its namespaced permissions only through the RoleBinding the
 * program creates in each tenant namespace (TenantNamespace): `whoAmI` names the subject to bind
 * (whoever the root kubeconfig authenticates as: a SelfSubjectReview), and `waitForAccess` waits
 * until the API server's authorizer applies the new binding (SelfSubjectAccessReviews of every
 * permission the program needs there), so that the objects created next are not refused in the
 * moment between the binding's creation and its effect, and a ClusterRole that lacks a permission
 * fails the run naming it instead of a Helm install failing half-way.
 */
import { AuthenticationV1Api, AuthorizationV1Api } from '@kubernetes/client-node';
import { kubeConfigFrom } from '../kubeconfig-policy/client.ts';
import type { KubeconfigPolicy } from '../kubeconfig-policy/policy.ts';
import { BOUND_PERMISSIONS, describePermission, TENANT_CLUSTER_ROLE } from './root-permissions.ts';

/** A RoleBinding subject. */
export interface RootSubject {
  kind: 'ServiceAccount' | 'User';
  name: string;
  namespace?: string;
  apiGroup?: string;
}

export interface AccessWaitRequest {
  /** Kubeconfig contents of the root cluster. */
  kubeconfig: string;
  namespace: string;
  timeoutMs: number;
  /** Delay between reviews (default 250 ms). */
  intervalMs?: number;
  policy?: KubeconfigPolicy;
}

export interface RootAccess {
  /** The subject the root kubeconfig authenticates as. */
  whoAmI(kubeconfig: string, policy?: KubeconfigPolicy): Promise<RootSubject>;
  /** Resolves once every permission of the tenant namespace is granted; rejects naming the missing after `timeoutMs`. */
  waitForAccess(request: AccessWaitRequest): Promise<void>;
}

export class AccessTimeoutError extends Error {
  override name = 'AccessTimeoutError';
}

const SERVICE_ACCOUNT = /^system:serviceaccount:([^:]+):([^:]+)$/;

/** The RoleBinding subject of a username (`system:serviceaccount:<ns>:<name>` is a ServiceAccount). */
export function subjectOf(username: string): RootSubject {
  const sa = SERVICE_ACCOUNT.exec(username);
  return sa
    ? { kind: 'ServiceAccount', name: sa[2]!, namespace: sa[1]! }
    : { kind: 'User', apiGroup: 'rbac.authorization.k8s.io', name: username };
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

export const kubeRootAccess: RootAccess = {
  async whoAmI(kubeconfig, policy) {
    const kc = await kubeConfigFrom(kubeconfig, policy);
    let username: string | undefined;
    try {
      const review = await kc
        .makeApiClient(AuthenticationV1Api)
        .createSelfSubjectReview({ body: { apiVersion: 'authentication.k8s.io/v1', kind: 'SelfSubjectReview' } });
      username = review.status?.userInfo?.username;
    } catch (err) {
      // Only the status travels on: the error carries the upstream's answer body.
      // eslint-disable-next-line preserve-caught-error -- the cause holds the upstream's body
      throw new Error(`asking the root cluster who its kubeconfig is (SelfSubjectReview): ${statusText(err)}`);
    }
    if (!username) throw new Error('the root cluster named no user in its SelfSubjectReview answer');
    return subjectOf(username);
  },

  async waitForAccess(request) {
    const kc = await kubeConfigFrom(request.kubeconfig, request.policy);
    const api = kc.makeApiClient(AuthorizationV1Api);
    const deadline = Date.now() + request.timeoutMs;
    let pending = [...BOUND_PERMISSIONS];
    for (;;) {
      const answers = await Promise.all(
        pending.map((p) =>
          api
            .createSelfSubjectAccessReview({
              body: {
                apiVersion: 'authorization.k8s.io/v1',
                kind: 'SelfSubjectAccessReview',
                spec: {
                  resourceAttributes: {
                    verb: p.verb,
                    group: p.group,
                    resource: p.resource,
                    namespace: request.namespace,
                    ...(p.name !== undefined ? { name: p.name } : {}),
                  },
                },
              },
            })
            .then(
              (r) => r.status?.allowed === true,
              (err: unknown) => {
                throw new Error(`reviewing the provisioner's permissions in ${request.namespace}: ${statusText(err)}`);
              },
            ),
        ),
      );
      pending = pending.filter((_, i) => !answers[i]);
      if (pending.length === 0) return;
      const left = deadline - Date.now();
      if (left <= 0) {
        throw new AccessTimeoutError(
          `in namespace ${request.namespace} the root kubeconfig still lacks, ${request.timeoutMs / 1000} s after ` +
            `its RoleBinding of ClusterRole ${TENANT_CLUSTER_ROLE} was made: ${pending.map(describePermission).join(', ')}; ` +
            `that ClusterRole (created by the root infrastructure, infra/) must grant them`,
        );
      }
      await sleep(Math.min(request.intervalMs ?? 250, left));
    }
  },
};

function statusText(err: unknown): string {
  const code = typeof err === 'object' && err !== null && 'code' in err ? err.code : undefined;
  if (typeof code === 'number') return `the API server answered HTTP ${code}`;
  return typeof code === 'string'
    ? `the API server could not be reached (${code})`
    : 'the API server could not be reached';
}
