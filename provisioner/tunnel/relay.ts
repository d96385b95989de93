/**
 * Relays a request for a runtime whose tunnel is held by another provisioner replica to that
 * replica's own route for it (`/v1/tenants/:id/runtime/*` or `/v1/tenants/:id/runtimes/:name/proxy/*`),
 * and streams its answer back.
 *
 * The request goes with the caller's method, headers (its credentials included) and body: the
 * other replica authenticates and authorizes the caller again, audits an action, signs the request
 * for the runtime and forwards it through its tunnel. Where it goes is never the caller's: the
 * owner replica's origin (scheme, host and port of its advertised URL, from the directory) and a
 * path the route rebuilt from its validated parameters, given to http.request as separate options,
 * so that no request target (an absolute URL, dot segments, `//host`) can aim the relay at another
 * host or another route. RELAY_HEADER marks the hop; a relayed request is never relayed again, so
 * a directory that is out of date cannot make requests circle between replicas.
 */
import http, { type IncomingMessage, type OutgoingHttpHeaders } from 'node:http';
import https from 'node:https';
import type { Readable } from 'node:stream';
import { AppError, errors } from '../errors.ts';
import { headerListFrom, headersObject } from '../../runtime/protocol/headers.ts';
import type { TunnelOwner } from './directory.ts';

/** Set on a relayed request to the id of the replica that relayed it. */
export const RELAY_HEADER = 'x-provisioner-relayed-by';

/** Besides hop-by-hop headers (dropped by headerListFrom): those the hop sets itself. */
const REPLACED = new Set(['host', 'expect', 'x-request-id', RELAY_HEADER]);

const agents = {
  http: new http.Agent({ keepAlive: true, maxSockets: 256 }),
  https: new https.Agent({ keepAlive: true, maxSockets: 256 }),
};

export interface RelayInput {
  owner: TunnelOwner;
  tenantId: string;
  /** This replica's id, sent in RELAY_HEADER. */
  replicaId: string;
  /** The caller's request: its method and raw headers are passed on (never its URL). */
  raw: IncomingMessage;
  /**
   * Path and query on the owner replica, built by the route from its validated parameters (the
   * route's base and the runtime-side path): starts with a single `/`.
   */
  path: string;
  /** The body to send (the raw request, or it wrapped in a size limit); null for none. */
  body: Readable | null;
  requestId: string;
  /** Time allowed for the other replica's response head. */
  timeoutMs: number;
  /** Then, the longest pause in the response body (the tunnel's own stream idle timeout applies behind it). */
  idleTimeoutMs: number;
  signal: AbortSignal;
}

export interface RelayResponse {
  status: number;
  headers: OutgoingHttpHeaders;
  body: IncomingMessage;
}

function unreachable(input: RelayInput, detail: string): AppError {
  return errors.runtimeUnreachable(
    `the runtime of tenant '${input.tenantId}' is connected to provisioner replica ${input.owner.replicaId}, which could not be reached (${detail}); retry shortly`,
  );
}

/** Where the relay connects: the origin of the owner's URL only; undefined when it is not http(s). */
function originOf(url: string): { protocol: 'http:' | 'https:'; hostname: string; port: number } | undefined {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return undefined;
  }
  if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') return undefined;
  return {
    protocol: parsed.protocol,
    // An IPv6 literal without its brackets, as http.request takes it.
    hostname: parsed.hostname.replace(/^\[|\]$/g, ''),
    port: parsed.port === '' ? (parsed.protocol === 'https:' ? 443 : 80) : Number(parsed.port),
  };
}

export function relayToReplica(input: RelayInput): Promise<RelayResponse> {
  const origin = originOf(input.owner.url);
  if (!origin) return Promise.reject(unreachable(input, `its advertised URL is not an http(s) URL`));
  // The route builds it; checked here too, as nothing but a path may follow the origin.
  if (!input.path.startsWith('/') || input.path.startsWith('//'))
    return Promise.reject(new Error(`relay path must start with a single '/'`));
  const headers = headersObject([
    ...headerListFrom(input.raw.rawHeaders, REPLACED),
    [RELAY_HEADER, input.replicaId],
    ['x-request-id', input.requestId],
  ]);
  const isHttps = origin.protocol === 'https:';
  return new Promise<RelayResponse>((resolve, reject) => {
    let settled = false;
    const req = (isHttps ? https : http).request({
      ...origin,
      path: input.path,
      method: input.raw.method ?? 'GET',
      headers,
      agent: isHttps ? agents.https : agents.http,
      timeout: input.timeoutMs,
    });
    const fail = (err: AppError): void => {
      if (settled) return;
      settled = true;
      reject(err);
    };
    const onAbort = (): void => {
      req.destroy();
      fail(errors.requestCancelled());
    };
    input.signal.addEventListener('abort', onAbort, { once: true });
    req.on('timeout', () =>
      req.destroy(
        new Error(settled ? `response idle for ${input.idleTimeoutMs} ms` : `no response within ${input.timeoutMs} ms`),
      ),
    );
    req.on('error', (err) => {
      // A body over the limit fails the body stream first; the route reports that itself.
      fail(unreachable(input, err.message));
    });
    req.on('response', (res) => {
      input.signal.removeEventListener('abort', onAbort);
      settled = true;
      req.setTimeout(input.idleTimeoutMs);
      resolve({ status: res.statusCode ?? 502, headers: headersObject(headerListFrom(res.rawHeaders)), body: res });
    });
    if (input.body) {
      input.body.on('error', (err) => req.destroy(err));
      input.body.pipe(req);
    } else {
      req.end();
    }
  });
}
