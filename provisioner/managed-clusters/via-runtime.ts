/**
 * The check of a managed cluster only the tenant's runtime reaches (`reach: runtime`): sent
 * through the tenant's tunnel to the app-proxy's `POST /api/managed-clusters/check`
 * (runtime/agents/app-proxy/managed-clusters.ts) with the control plane's signed request token
 * (subject `control-plane`, which that route requires), and answered with the same ClusterCheck
 * the control plane's own check gives (runtime/kube/cluster-check.ts). The runtime's answer is
 * read up to 64 KiB and checked for shape; a tunnel that is not connected, a runtime that does not
 * answer in time or answers something else is a RuntimeCheckError, never a verdict on the cluster.
 */
import { Readable } from 'node:stream';
import type { ManagedClusterConfig } from '../../runtime/component/cluster-secret.ts';
import type { ClusterCheck } from '../../runtime/kube/cluster-check.ts';
import { CONTROL_PLANE_SUBJECT } from '../../runtime/protocol/request-token.ts';
import type { TunnelServer } from '../tunnel/server.ts';

/** The app-proxy's route, as the runtime's request router receives it. */
export const RUNTIME_CHECK_PATH = '/api/managed-clusters/check';
const MAX_ANSWER_BYTES = 64 * 1024;

/** The runtime could not make the check: `connected` says whether its tunnel was up at all. */
export class RuntimeCheckError extends Error {
  override name = 'RuntimeCheckError';
  readonly connected: boolean;
  constructor(connected: boolean, message: string, cause?: unknown) {
    super(message, cause === undefined ? undefined : { cause });
    this.connected = connected;
  }
}

export interface RuntimeCheckInput {
  server: string;
  config: ManagedClusterConfig;
  /** Argo CD's permissions in these namespaces are reviewed too (empty: cluster-wide); absent: the version only. */
  namespaces?: readonly string[] | undefined;
}

const PROBLEMS = new Set(['UNREACHABLE', 'NOT_KUBERNETES', 'UNAUTHORIZED', 'PERMISSIONS_MISSING']);

function asCheck(v: unknown): ClusterCheck | undefined {
  if (typeof v !== 'object' || v === null) return undefined;
  const c = v as Record<string, unknown>;
  if (c.ok === true && typeof c.version === 'string' && typeof c.ms === 'number') return c as ClusterCheck;
  if (c.ok !== false || typeof c.problem !== 'string' || !PROBLEMS.has(c.problem)) return undefined;
  if (c.problem === 'UNREACHABLE' && (typeof c.error !== 'string' || typeof c.message !== 'string')) return undefined;
  if (c.problem === 'NOT_KUBERNETES' && typeof c.status !== 'number') return undefined;
  if (
    c.problem === 'PERMISSIONS_MISSING' &&
    !(Array.isArray(c.missing) && c.missing.every((m) => typeof m === 'string'))
  )
    return undefined;
  return c as ClusterCheck;
}

/** Asks the tenant's runtime to check the cluster; bounded by `signal` (the caller's 10 s). */
export async function checkThroughRuntime(
  tunnel: Pick<TunnelServer, 'forward'>,
  tenantId: string,
  input: RuntimeCheckInput,
  signal: AbortSignal,
): Promise<ClusterCheck> {
  const body = Buffer.from(
    JSON.stringify({
      server: input.server,
      config: input.config,
      ...(input.namespaces !== undefined ? { namespaces: input.namespaces } : {}),
    }),
  );
  let res;
  try {
    res = await tunnel.forward(tenantId, {
      method: 'POST',
      path: RUNTIME_CHECK_PATH,
      headers: [
        ['content-type', 'application/json'],
        ['content-length', String(body.length)],
      ],
      body: Readable.from([body]),
      subject: CONTROL_PLANE_SUBJECT,
      signal,
    });
  } catch (err) {
    const code = (err as { code?: unknown }).code;
    if (code === 'RUNTIME_UNREACHABLE')
      throw new RuntimeCheckError(false, "the runtime's tunnel is not connected", err);
    const why = signal.aborted ? 'no answer within 10 s' : err instanceof Error ? err.message : String(err);
    throw new RuntimeCheckError(true, `the runtime could not check the cluster: ${why}`, err);
  }
  const chunks: Buffer[] = [];
  let size = 0;
  try {
    for await (const chunk of res.body as AsyncIterable<Buffer>) {
      size += chunk.length;
      if (size > MAX_ANSWER_BYTES) {
        res.body.destroy();
        throw new Error('its answer is over 64 KiB');
      }
      chunks.push(chunk);
    }
  } catch (err) {
    throw new RuntimeCheckError(
      true,
      `the runtime could not check the cluster: ${signal.aborted ? 'no answer within 10 s' : err instanceof Error ? err.message : String(err)}`,
      err,
    );
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(Buffer.concat(chunks).toString('utf8'));
  } catch {
    parsed = undefined;
  }
  const check = res.status === 200 ? asCheck(parsed) : undefined;
  if (!check) {
    const message = (parsed as { error?: { message?: unknown } } | undefined)?.error?.message;
    throw new RuntimeCheckError(
      true,
      `the runtime could not check the cluster: its app-proxy answered ${res.status}${typeof message === 'string' ? ` (${message})` : ''}; is it at the current version?`,
    );
  }
  return check;
}
