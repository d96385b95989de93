/**
 * Relays a request for a runtime whose tunnel is held by another provisioner replica to that
 * replica's own `/v1/tenants/:id/runtime/*` route, and streams its answer back.
 *
 * The request goes as it came, with the caller's credentials: the other replica authenticates
 * and authorizes the caller again, signs the request for the runtime and forwards it through
 * its tunnel. RELAY_HEADER marks the hop; a relayed request is never relayed again, so a
 * directory that is out of date cannot make requests circle between replicas.
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
  /** The caller's request: method, raw URL and raw headers are passed on. */
  raw: IncomingMessage;
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

export function relayToReplica(input: RelayInput): Promise<RelayResponse> {
  const target = new URL(input.raw.url ?? '/', input.owner.url);
  const headers = headersObject([
    ...headerListFrom(input.raw.rawHeaders, REPLACED),
    [RELAY_HEADER, input.replicaId],
    ['x-request-id', input.requestId],
  ]);
  const isHttps = target.protocol === 'https:';
  return new Promise<RelayResponse>((resolve, reject) => {
    let settled = false;
    const req = (isHttps ? https : http).request(target, {
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
