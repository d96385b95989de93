/**
 * An application's diff, fetched on demand from its runtime (docs/api.md "Application history"):
 * `GET /api/applications/:namespace/:name/diff[?revision=R]` of the runtime's app-proxy, which asks
 * the runtime's Source Server (runtime/protocol/sources.ts ApplicationDiff). The request takes the
 * way every proxied call takes (tunnel/route.ts): this replica's tunnel to the runtime, signed with
 * the control plane's request token bound to that runtime, within the tunnel's limits; a hybrid
 * runtime registered with `access: ingress` over https (tunnel/ingress.ts); a runtime whose tunnel
 * another replica holds through that replica (tunnel/relay.ts: the same route there, once).
 *
 * The answer is read whole, at most MAX_DIFF_BYTES and a margin (a larger one is refused as 502),
 * and answered as JSON; the runtime's refusals become the API's errors:
 *  - no tunnel (or the replica holding it unreachable): 503 RUNTIME_UNREACHABLE with Retry-After;
 *  - an app-proxy without the route, or without a Source Server (a runtime before 1.7.0): 409
 *    SOURCE_SERVER_NOT_INSTALLED naming the version;
 *  - an Application the runtime does not have: 404 RUNTIME_OBJECT_NOT_FOUND;
 *  - a revision the Source Server cannot use: 400 naming `revision`;
 *  - the Source Server or Argo CD unavailable: 503 RUNTIME_UNREACHABLE; another failure: 502.
 */
import type { Readable } from 'node:stream';
import type { FastifyRequest } from 'fastify';
import { AppError, errors } from '../errors.ts';
import { MAX_DIFF_BYTES } from '../../runtime/protocol/sources.ts';
import type { HeaderList } from '../../runtime/protocol/frames.ts';
import type { TunnelOwner } from '../tunnel/directory.ts';
import type { IngressForwarder } from '../tunnel/ingress.ts';
import { RELAY_HEADER, relayToReplica } from '../tunnel/relay.ts';
import { appErrorFromTunnel } from '../tunnel/route.ts';
import { TunnelError, type TunnelServer } from '../tunnel/server.ts';

/** The runtime version whose runtimes have a Source Server (the catalog's first with it). */
export const SOURCE_SERVER_VERSION = '1.7.0';

/** The largest answer read from a runtime: a whole diff and room for the JSON around it. */
export const MAX_DIFF_ANSWER_BYTES = MAX_DIFF_BYTES + 64 * 1024;

/** Longest text of a runtime's message repeated in an error. */
const MESSAGE_CHARS = 500;

export interface DiffTransport {
  tunnel: TunnelServer;
  ingress?: IngressForwarder | undefined;
  peers?: {
    replicaId: string;
    owner: (tenantId: string) => Promise<TunnelOwner | undefined>;
    runtimeOwner: (runtimeId: string) => Promise<TunnelOwner | undefined>;
  };
}

/** The runtime asked: the tenant's hosted runtime, or one of its hybrid runtimes. */
export interface DiffRuntime {
  tenantId: string;
  name: string;
  mode: 'hosted' | 'hybrid';
  id: string;
  access: 'tunnel' | 'ingress' | null;
  ingressUrl: string | null;
  state: 'awaiting-install' | 'installed' | 'removed' | null;
}

export interface DiffRequest {
  namespace: string;
  name: string;
  revision?: string | undefined;
  /** The route's own path and query, rebuilt from its validated parameters: where a relay goes on another replica. */
  routePath: string;
  /** The caller's API key id, recorded in the request token. */
  subject?: string | undefined;
}

interface Answer {
  status: number;
  headers: HeaderList | Record<string, unknown>;
  body: Readable;
}

class TooLarge extends Error {}

/** Reads `body` whole, failing with TooLarge past `limit` bytes (the rest is not read). */
async function readLimited(body: Readable, limit: number): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of body) {
    const b = Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk as string);
    size += b.length;
    if (size > limit) {
      body.destroy();
      throw new TooLarge();
    }
    chunks.push(b);
  }
  return Buffer.concat(chunks);
}

/** A runtime's message, as an error of this API may repeat it: one line, no control characters, bounded. */
function shown(v: unknown): string | undefined {
  if (typeof v !== 'string' || v === '') return undefined;
  // eslint-disable-next-line no-control-regex -- a runtime's text is shown in terminals: no control characters
  const line = v.replace(/[\u0000-\u001f\u007f-\u009f]+/g, ' ').trim();
  return line.length > MESSAGE_CHARS ? `${line.slice(0, MESSAGE_CHARS)}…` : line;
}

/** The `{error: {code, message}}` of an answer, when it has that shape. */
function errorOf(json: unknown): { code?: string; message?: string } | undefined {
  if (typeof json !== 'object' || json === null) return undefined;
  const e = (json as { error?: unknown }).error;
  if (typeof e !== 'object' || e === null) return undefined;
  const { code, message } = e as { code?: unknown; message?: unknown };
  return {
    ...(typeof code === 'string' ? { code } : {}),
    ...(shown(message) !== undefined ? { message: shown(message)! } : {}),
  };
}

/** The path the runtime's request router passes to its app-proxy. */
export function runtimeDiffPath(r: Pick<DiffRequest, 'namespace' | 'name' | 'revision'>): string {
  const q = r.revision === undefined ? '' : `?${new URLSearchParams({ revision: r.revision }).toString()}`;
  return `/api/applications/${encodeURIComponent(r.namespace)}/${encodeURIComponent(r.name)}/diff${q}`;
}

/**
 * Fetches the diff from the runtime and answers what the route sends: the diff (200) or an
 * AppError. A relayed request's answer (another replica's, already in this API's shape) comes
 * back as it is (`relayed`).
 */
export async function fetchDiff(
  transport: DiffTransport,
  request: FastifyRequest,
  runtime: DiffRuntime,
  diff: DiffRequest,
): Promise<{ relayed: { status: number; body: Buffer; retryAfter?: string } } | { diff: Record<string, unknown> }> {
  const { tenantId } = runtime;
  const who = runtime.mode === 'hosted' ? "the tenant's runtime" : `runtime '${runtime.name}'`;
  if (runtime.mode === 'hybrid' && runtime.state !== 'installed')
    throw new AppError(
      'RUNTIME_NOT_INSTALLED',
      `runtime '${runtime.name}' is not installed yet: apply its install bundle in your cluster; its diffs can be asked once its agents are running`,
    );
  const aborter = new AbortController();
  request.raw.once('close', () => aborter.abort());

  const ingress = runtime.mode === 'hybrid' && runtime.access === 'ingress';
  const servedHere = (): boolean =>
    ingress ||
    (transport.tunnel.accepting &&
      (runtime.mode === 'hosted'
        ? transport.tunnel.status(tenantId).connected
        : transport.tunnel.runtimeStatus(runtime.id).connected));
  const read = async (answer: Answer): Promise<Buffer> => {
    try {
      return await readLimited(answer.body, MAX_DIFF_ANSWER_BYTES);
    } catch (err) {
      if (err instanceof TooLarge)
        throw new AppError(
          'RUNTIME_BAD_RESPONSE',
          `${who} answered a diff larger than ${MAX_DIFF_ANSWER_BYTES} bytes, more than a Source Server sends (MAX_DIFF_BYTES)`,
        );
      throw new AppError('RUNTIME_DISCONNECTED', `${who} broke off its answer: retry`, { cause: err });
    }
  };

  // Another replica holds the tunnel: ask the same route there (once: a relayed request is served here or not at all).
  if (transport.peers && !servedHere() && request.headers[RELAY_HEADER] === undefined) {
    const owner =
      runtime.mode === 'hosted'
        ? await transport.peers.owner(tenantId)
        : await transport.peers.runtimeOwner(runtime.id);
    if (owner) {
      const res = await relayToReplica({
        owner,
        tenantId,
        replicaId: transport.peers.replicaId,
        raw: request.raw,
        path: diff.routePath,
        body: null,
        requestId: request.id,
        timeoutMs: transport.tunnel.limits.requestTimeoutMs + 5000,
        idleTimeoutMs: transport.tunnel.limits.idleTimeoutMs + 5000,
        signal: aborter.signal,
      });
      const body = await read(res);
      const retryAfter = res.headers['retry-after'];
      return {
        relayed: { status: res.status, body, ...(typeof retryAfter === 'string' ? { retryAfter } : {}) },
      };
    }
  }

  const forward = {
    method: 'GET',
    path: runtimeDiffPath(diff),
    headers: [
      ['accept', 'application/json'],
      ['x-request-id', request.id],
    ] satisfies HeaderList,
    body: null,
    signal: aborter.signal,
    ...(diff.subject !== undefined ? { subject: diff.subject } : {}),
  };
  let answer: Answer;
  try {
    if (runtime.mode === 'hosted') answer = await transport.tunnel.forward(tenantId, forward);
    else if (ingress) {
      if (!transport.ingress || runtime.ingressUrl === null)
        throw errors.runtimeUnreachable(
          `runtime '${runtime.name}' is reached through its ingress, which this control plane is not configured to call; ask the operator`,
        );
      answer = await transport.ingress.forward({
        tenantId,
        runtimeId: runtime.id,
        ingressUrl: runtime.ingressUrl,
        ...forward,
      });
    } else answer = await transport.tunnel.forwardRuntime(tenantId, runtime.id, forward);
  } catch (err) {
    if (err instanceof TunnelError && err.code === 'RUNTIME_UNREACHABLE')
      throw errors.runtimeUnreachable(
        `${who} is not connected to the control plane: its tunnel client may be starting or down; retry later`,
      );
    throw err instanceof TunnelError ? appErrorFromTunnel(err) : err;
  }
  const body = await read(answer);
  let json: unknown;
  try {
    json = body.length === 0 ? undefined : JSON.parse(body.toString('utf8'));
  } catch {
    json = undefined;
  }
  const status = answer.status;
  const problem = errorOf(json);
  const said = problem?.message ? `: ${problem.message}` : '';
  if (status === 200) {
    if (typeof json !== 'object' || json === null || Array.isArray(json))
      throw new AppError('RUNTIME_BAD_RESPONSE', `${who} answered the diff with something that is not a JSON object`);
    return { diff: json as Record<string, unknown> };
  }
  if (status === 404 && (problem?.code === undefined || problem.code === 'SOURCE_SERVER_NOT_INSTALLED'))
    throw new AppError(
      'SOURCE_SERVER_NOT_INSTALLED',
      `${who} has no Source Server, which serves diffs: upgrade it to runtime version ${SOURCE_SERVER_VERSION} or later`,
      { details: { runtimeVersion: SOURCE_SERVER_VERSION } },
    );
  if (status === 404)
    throw new AppError(
      'RUNTIME_OBJECT_NOT_FOUND',
      `Application '${diff.namespace}/${diff.name}' is not in ${who}${said}`,
    );
  if (status === 400 || status === 422)
    throw errors.validation(`${who}'s Source Server cannot diff at this revision${said}`, 'revision');
  if (status === 503 || status === 504)
    throw errors.runtimeUnreachable(`${who} could not serve the diff right now${said}; retry later`);
  throw new AppError('RUNTIME_UPSTREAM_ERROR', `${who} answered the diff with HTTP ${status}${said}`);
}
