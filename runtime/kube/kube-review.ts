/**
 * What the probes of a Kubernetes API server ask and read (the root clusters' probe,
 * clusters/probe.ts, and the managed clusters' validation, managed-clusters/validate.ts): the
 * `/version` answer's git version and SelfSubjectAccessReviews, built and read in one place.
 */

export const VERSION_PATH = '/version';
export const SELF_SUBJECT_ACCESS_REVIEWS_PATH = '/apis/authorization.k8s.io/v1/selfsubjectaccessreviews';

export interface ReviewAttributes {
  verb: string;
  group: string;
  resource: string;
  name?: string | undefined;
  namespace?: string | undefined;
}

/** The body of a SelfSubjectAccessReview of `attributes` (no namespace: cluster-wide). */
export function selfSubjectAccessReview(attributes: ReviewAttributes): object {
  const { namespace, name, ...rest } = attributes;
  return {
    apiVersion: 'authorization.k8s.io/v1',
    kind: 'SelfSubjectAccessReview',
    spec: {
      resourceAttributes: { ...(namespace ? { namespace } : {}), ...rest, ...(name !== undefined ? { name } : {}) },
    },
  };
}

/** Parses a body given as text (invalid JSON: undefined). */
function parsed(body: unknown): unknown {
  if (typeof body !== 'string') return body;
  try {
    return JSON.parse(body);
  } catch {
    return undefined;
  }
}

/** Whether a review's answer (parsed JSON or its text) allows it; unreadable counts as not allowed. */
export function reviewAllowed(body: unknown): boolean {
  return (parsed(body) as { status?: { allowed?: unknown } } | undefined)?.status?.allowed === true;
}

/** The git version in a `/version` answer (parsed JSON or its text); undefined when there is none. */
export function gitVersionOf(body: unknown): string | undefined {
  const v = (parsed(body) as { gitVersion?: unknown } | undefined)?.gitVersion;
  return typeof v === 'string' ? v : undefined;
}
