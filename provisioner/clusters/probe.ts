/**
 * Probes a root cluster with a kubeconfig the policy accepted: is its API server reachable (GET
 * /version), does it take the kubeconfig's credentials, and may they do what the tenants program
 * does (one SelfSubjectAccessReview per permission; a permission the program holds in tenant
 * namespaces through the ClusterRole it binds there is looked up in that ClusterRole's rules,
 * since no tenant namespace need exist yet). Used when a cluster is registered and by
 * `provisioner doctor`. The kubeconfig goes through pinKubeconfig first (never a file read, never
 * a command run unless the operator allowed it, the connection pinned to the checked address);
 * nothing of an answer's body but its status and the reviews' verdicts is kept.
 */
import { request as httpRequest, type RequestOptions } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { KubeConfig } from '@kubernetes/client-node';
import {
  describeMissing,
  grantedByRules,
  REVIEW_NAMESPACE,
  TENANT_CLUSTER_ROLE,
  type PolicyRule,
  type RootPermission,
} from '../../tenants/root-permissions.ts';
import { pinKubeconfig, type KubeconfigPolicy } from '../../kubeconfig-policy/policy.ts';
import {
  gitVersionOf,
  reviewAllowed,
  selfSubjectAccessReview,
  SELF_SUBJECT_ACCESS_REVIEWS_PATH,
  VERSION_PATH,
  type ReviewAttributes,
} from '../../runtime/kube/kube-review.ts';

export type ProbeResult =
  /** The API server answered and every permission asked about is granted. */
  | { outcome: 'ok'; server: string; version: string }
  /** No HTTP answer (refused, timed out, DNS, TLS): `error` says which. */
  | { outcome: 'unreachable'; server: string; error: string }
  /** The credentials were refused (401). */
  | { outcome: 'unauthorized'; server: string; error: string }
  /** Authenticated, but some permissions are not granted (or could not be reviewed). */
  | { outcome: 'forbidden'; server: string; version: string; missing: RootPermission[]; error: string };

export interface ProbeOptions {
  /** Bound of each request (default 5 s). */
  timeoutMs?: number;
  /** Permissions to review (none: reachability and credentials only). */
  permissions?: readonly RootPermission[];
}

interface Answer {
  status: number;
  body: string;
}

/** Words for a network error: the code and what it usually means. */
export function describeNetworkError(err: unknown): string {
  const e = err as { code?: unknown; message?: unknown };
  const code = typeof e?.code === 'string' ? e.code : undefined;
  const message = typeof e?.message === 'string' ? e.message : String(err);
  const hint: Record<string, string> = {
    ECONNREFUSED: 'nothing listens there',
    ETIMEDOUT: 'no answer in time',
    ENOTFOUND: 'the name does not resolve',
    EHOSTUNREACH: 'no route to the host',
    ECONNRESET: 'the connection was reset',
    DEPTH_ZERO_SELF_SIGNED_CERT:
      "the server's certificate is self-signed and not the kubeconfig's certificate-authority-data",
    SELF_SIGNED_CERT_IN_CHAIN: "the server's certificate is not signed by the kubeconfig's certificate-authority-data",
    UNABLE_TO_VERIFY_LEAF_SIGNATURE:
      "the server's certificate is not signed by the kubeconfig's certificate-authority-data",
    ERR_TLS_CERT_ALTNAME_INVALID: "the server's certificate is not valid for the server's name",
    CERT_HAS_EXPIRED: "the server's certificate has expired",
  };
  const why = code && hint[code] ? ` (${hint[code]})` : '';
  return `${message}${why}`;
}

function call(
  base: URL,
  options: RequestOptions,
  method: 'GET' | 'POST',
  path: string,
  timeoutMs: number,
  body?: unknown,
): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const url = new URL(path, base);
    const payload = body === undefined ? undefined : JSON.stringify(body);
    const req = (url.protocol === 'https:' ? httpsRequest : httpRequest)(
      url,
      {
        ...options,
        method,
        timeout: timeoutMs,
        headers: {
          ...(options.headers as Record<string, string> | undefined),
          accept: 'application/json',
          ...(payload ? { 'content-type': 'application/json' } : {}),
        },
      },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (d: string) => {
          if (text.length < 64 * 1024) text += d;
        });
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text }));
        res.on('error', reject);
      },
    );
    req.once('timeout', () =>
      req.destroy(Object.assign(new Error(`no answer within ${timeoutMs} ms`), { code: 'ETIMEDOUT' })),
    );
    req.once('error', reject);
    req.end(payload);
  });
}

/** Probes the cluster the kubeconfig's current context names (see the module comment). */
export async function probeCluster(
  kubeconfig: string,
  policy: KubeconfigPolicy,
  opts: ProbeOptions = {},
): Promise<ProbeResult> {
  const timeoutMs = opts.timeoutMs ?? 5000;
  const checked = await pinKubeconfig(kubeconfig, policy);
  const server = checked.server.href.replace(/\/$/, '');
  const kc = new KubeConfig();
  kc.loadFromString(checked.text);
  const base = new URL(kc.getCurrentCluster()!.server);
  const options: RequestOptions = {};
  await kc.applyToHTTPSOptions(options);

  let version: Answer;
  try {
    version = await call(base, options, 'GET', VERSION_PATH, timeoutMs);
  } catch (err) {
    return { outcome: 'unreachable', server, error: `cannot reach ${server}: ${describeNetworkError(err)}` };
  }
  if (version.status === 401) return { outcome: 'unauthorized', server, error: unauthorized(server) };
  let gitVersion = 'unknown';
  if (version.status === 200) {
    gitVersion = gitVersionOf(version.body) ?? gitVersion; // not JSON: checked below through the reviews' answers
  } else if (version.status !== 403) {
    return {
      outcome: 'unreachable',
      server,
      error: `${server} answered GET /version with HTTP ${version.status}: it does not look like a Kubernetes API server`,
    };
  }

  const permissions = opts.permissions ?? [];
  // Also proves the credentials: every authenticated user may create a SelfSubjectAccessReview.
  const reviews =
    permissions.length > 0
      ? permissions
      : [{ verb: 'get', group: '', resource: 'namespaces', scope: 'cluster', why: '' } as const];
  const missing: RootPermission[] = [];
  let reviewError: string | undefined;
  try {
    const answers = await Promise.all(
      reviews.map((p) =>
        call(
          base,
          options,
          'POST',
          SELF_SUBJECT_ACCESS_REVIEWS_PATH,
          timeoutMs,
          selfSubjectAccessReview(reviewAttributes(p)),
        ),
      ),
    );
    for (const [i, a] of answers.entries()) {
      if (a.status === 401) return { outcome: 'unauthorized', server, error: unauthorized(server) };
      if (a.status !== 201 && a.status !== 200) {
        reviewError = `${server} answered a SelfSubjectAccessReview with HTTP ${a.status}, so the permissions could not be checked`;
        missing.push(...permissions);
        break;
      }
      const allowed = reviewAllowed(a.body); // an unreadable review counts as not allowed
      if (!allowed && permissions.length > 0) missing.push(permissions[i]!);
    }
    // Permissions of tenant namespaces not granted cluster-wide: granted by the ClusterRole the
    // program binds in each tenant namespace?
    let roleNote = '';
    if (reviewError === undefined && missing.some((p) => p.scope === 'bound')) {
      const role = await call(
        base,
        options,
        'GET',
        `/apis/rbac.authorization.k8s.io/v1/clusterroles/${encodeURIComponent(TENANT_CLUSTER_ROLE)}`,
        timeoutMs,
      );
      let rules: PolicyRule[] | undefined;
      if (role.status === 200) {
        try {
          rules = (JSON.parse(role.body) as { rules?: PolicyRule[] }).rules ?? [];
        } catch {
          // unreadable: the permissions stay missing
        }
      }
      if (rules) {
        const byRole = rules;
        missing.splice(0, missing.length, ...missing.filter((p) => p.scope !== 'bound' || !grantedByRules(byRole, p)));
        if (missing.some((p) => p.scope === 'bound'))
          roleNote = ` (ClusterRole ${TENANT_CLUSTER_ROLE} does not grant those of tenant namespaces either)`;
      } else {
        roleNote = ` (ClusterRole ${TENANT_CLUSTER_ROLE} ${role.status === 404 ? 'does not exist' : `could not be read: HTTP ${role.status}`})`;
      }
    }
    if (missing.length > 0) {
      return {
        outcome: 'forbidden',
        server,
        version: gitVersion,
        missing,
        error:
          reviewError ??
          `the kubeconfig's credentials lack ${missing.length} of the ${permissions.length} permissions the tenants program needs: ${describeMissing(missing)}${roleNote}`,
      };
    }
  } catch (err) {
    return { outcome: 'unreachable', server, error: `cannot reach ${server}: ${describeNetworkError(err)}` };
  }
  return { outcome: 'ok', server, version: gitVersion };
}

/** What a SelfSubjectAccessReview asks for `p`: tenant-namespace permissions in a tenant namespace's name. */
export function reviewAttributes(p: RootPermission): ReviewAttributes {
  return {
    verb: p.verb,
    group: p.group,
    resource: p.resource,
    ...(p.name !== undefined ? { name: p.name } : {}),
    ...(p.scope !== 'cluster' ? { namespace: REVIEW_NAMESPACE } : {}),
  };
}

function unauthorized(server: string): string {
  return `${server} refused the kubeconfig's credentials (HTTP 401): the token or client certificate is not valid for this cluster`;
}
