/**
 * `POST /api/managed-clusters/check`: the check of a managed cluster that only the runtime can
 * reach (a registration with `reach: runtime`), made from inside the runtime for the control
 * plane, which sends it through the tunnel with its signed request token. The body names the
 * server and the credentials to use (the control plane's current ones: the same Argo CD gets), and
 * `namespaces` when Argo CD's permissions are to be reviewed too (at registration; absent for a
 * health probe). Only the control plane's own requests (request token subject `control-plane`)
 * are served: a tenant's API call relayed through the tunnel gets 403. The answer is the check's outcome as JSON (runtime/kube/cluster-check.ts), 200
 * whatever the cluster said; 400 for a body that is not a check. Bounded: 10 s for the whole check,
 * 1 MiB per answer from the cluster, 64 KiB of request body.
 *
 * No address policy applies here: the runtime reaches what its own network reaches, which is the
 * point (docs/decisions.md, "Managed clusters only the runtime reaches"). The answer carries no
 * more than a version, a network error code and the refused reviews.
 */
import type { FastifyPluginAsync, FastifyRequest } from 'fastify';
import { CONTROL_PLANE_SUBJECT } from '../../protocol/request-token.ts';
import { checkCluster, connectionOfCredentials, type ClusterCredentials } from '../../kube/cluster-check.ts';

export const CHECK_PATH = '/api/managed-clusters/check';
/** Longest a check may take, the cluster's answers included. */
export const CHECK_TIMEOUT_MS = 10_000;

const NAMESPACE = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/;

type Json = Record<string, unknown>;
const isObject = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);
const optString = (v: unknown): boolean => v === undefined || typeof v === 'string';

/** The check a body asks for, or the problem with it. */
export function parseCheck(
  body: unknown,
): { server: string; credentials: ClusterCredentials; namespaces?: string[] } | { field: string; problem: string } {
  if (!isObject(body)) return { field: 'body', problem: 'the body must be a JSON object' };
  const { server, config, namespaces } = body;
  if (typeof server !== 'string') return { field: 'server', problem: 'server must be an https URL' };
  try {
    if (new URL(server).protocol !== 'https:') return { field: 'server', problem: 'server must be an https URL' };
  } catch {
    return { field: 'server', problem: 'server must be an https URL' };
  }
  if (!isObject(config)) return { field: 'config', problem: 'config must be an Argo CD cluster config object' };
  const tls = config.tlsClientConfig ?? {};
  if (!isObject(tls)) return { field: 'config.tlsClientConfig', problem: 'must be an object' };
  if (tls.insecure === true)
    return { field: 'config.tlsClientConfig.insecure', problem: 'a managed cluster is checked with TLS verification' };
  for (const [k, v] of Object.entries({ ...config, ...tls }))
    if (k !== 'tlsClientConfig' && k !== 'insecure' && !optString(v))
      return { field: `config.${k}`, problem: 'must be a string' };
  if (namespaces !== undefined) {
    if (!Array.isArray(namespaces) || namespaces.length > 100)
      return { field: 'namespaces', problem: 'namespaces must be a list of at most 100 namespace names' };
    const bad = (namespaces as unknown[]).find((n) => typeof n !== 'string' || !NAMESPACE.test(n));
    if (bad !== undefined) return { field: 'namespaces', problem: `${JSON.stringify(bad)} is not a namespace name` };
  }
  return {
    server,
    credentials: config,
    ...(Array.isArray(namespaces) ? { namespaces: namespaces as string[] } : {}),
  };
}

export const managedClusterRoutes: FastifyPluginAsync<{
  subjectOf: (request: FastifyRequest) => string | undefined;
}> = async (api, opts) => {
  api.post(CHECK_PATH, { bodyLimit: 64 * 1024 }, async (request, reply) => {
    // The control plane's own request only: a tenant's API call relayed through the tunnel carries
    // its key id, and must not make the runtime connect to addresses of its choosing.
    if (opts.subjectOf(request) !== CONTROL_PLANE_SUBJECT)
      return reply.code(403).send({
        error: { code: 'FORBIDDEN', message: 'the managed-cluster check is made for the control plane only' },
      });
    const parsed = parseCheck(request.body);
    if ('problem' in parsed)
      return reply.code(400).send({
        error: { code: 'VALIDATION_FAILED', message: `${parsed.field}: ${parsed.problem}`, field: parsed.field },
      });
    const checked = await checkCluster(connectionOfCredentials(parsed.server, parsed.credentials), {
      namespaces: parsed.namespaces,
      signal: AbortSignal.timeout(CHECK_TIMEOUT_MS),
    });
    request.log.debug(
      { server: parsed.server, ok: checked.ok, ...(checked.ok ? {} : { problem: checked.problem }) },
      'managed cluster checked',
    );
    return checked;
  });
};
