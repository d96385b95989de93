/**
 * The ingress transport: how the control plane reaches a hybrid runtime registered with
 * `access: ingress`. The customer's ingress exposes the runtime's request router at `ingressUrl`
 * (https); the control plane calls it directly, with the same signed request token as a request
 * through a tunnel, and the router refuses anything unsigned (runtime/agents/request-router).
 *
 * - TLS is always verified: the default CAs plus the operator's CA bundle
 *   (PROVISIONER_HYBRID_INGRESS_CA_FILE), against the ingressUrl's host name (SNI and Host).
 * - Every new connection resolves the host once, checks every address with the ingress address
 *   policy (ingress-address.ts) and connects to the checked address.
 * - One runtime cannot take the sockets of others: each runtime has its own keep-alive agent and
 *   a budget of requests in flight (PROVISIONER_HYBRID_INGRESS_REQUESTS_PER_RUNTIME) that is also
 *   its most open connections; past it, 503 RUNTIME_BUSY naming the budget. One tenant cannot
 *   multiply that budget by registering more runtimes: all of its runtimes together have
 *   PROVISIONER_HYBRID_INGRESS_REQUESTS_PER_TENANT in flight at most, answered the same way.
 * - The tunnel's limits apply (limits.ts): the response head within requestTimeoutMs, no traffic
 *   for idleTimeoutMs resets the request, heads of at most maxHeaderBytes. The route bounds the
 *   request body (maxRequestBodyBytes) before it gets here.
 * - Failures answer with the tunnel's codes: RUNTIME_UNREACHABLE (503, Retry-After) naming the
 *   cause (refused address, TLS, connection), RUNTIME_TIMEOUT, RUNTIME_BAD_RESPONSE,
 *   REQUEST_HEADERS_TOO_LARGE, REQUEST_CANCELLED.
 */
import https from 'node:https';
import type { LookupAddress, LookupOptions } from 'node:dns';
import { isIP } from 'node:net';
import type { Readable } from 'node:stream';
import tls from 'node:tls';
import pino, { type BaseLogger } from 'pino';
import type { HeaderList } from '../../runtime/protocol/frames.ts';
import { headerListFrom, headersObject } from '../../runtime/protocol/headers.ts';
import { REQUEST_TOKEN_HEADER } from '../../runtime/protocol/request-token.ts';
import { AddressRefusedError, resolveIngress, type IngressAddressPolicy, type Lookup } from './ingress-address.ts';
import type { TunnelLimits } from './limits.ts';
import type { RequestSigner } from './request-token.ts';
import { TunnelError, type ForwardResponse } from './server.ts';

export interface IngressForwardInput {
  tenantId: string;
  runtimeId: string;
  /** The https base URL the customer registered. */
  ingressUrl: string;
  method: string;
  /** Path and query exactly as the runtime receives it. */
  path: string;
  /** Caller headers, already filtered (the route drops credentials and forwarding headers). */
  headers: HeaderList;
  body: Readable | null;
  /** The caller's API key id, recorded in the request token. */
  subject?: string;
  signal: AbortSignal;
}

/** A runtime's answer: as a tunnel's, without the tunnel stream. */
export type IngressResponse = Omit<ForwardResponse, 'stream'>;

export interface IngressForwarder {
  forward(input: IngressForwardInput): Promise<IngressResponse>;
}

export interface IngressTransportOptions {
  signer: RequestSigner;
  limits: Pick<TunnelLimits, 'requestTimeoutMs' | 'idleTimeoutMs' | 'maxHeaderBytes'>;
  /** Where an ingressUrl may point (config.hybrid.ingress, with the public URL as the control plane's own). */
  policy: IngressAddressPolicy;
  /** PEM certificates trusted besides the default CAs (config.hybrid.ingress.caPem). */
  caPem?: string | undefined;
  /** Requests in flight (and open connections) per runtime on this replica. */
  requestsPerRuntime: number;
  /** Requests in flight across all of one tenant's runtimes on this replica (default twice requestsPerRuntime). */
  requestsPerTenant?: number;
  /** Name resolution (default the system's). */
  lookup?: Lookup;
  logger?: BaseLogger;
}

export interface IngressTransport extends IngressForwarder {
  /** Requests in flight to one runtime on this replica. */
  inFlight(runtimeId: string): number;
  /** Requests in flight to all of one tenant's runtimes on this replica. */
  tenantInFlight(tenantId: string): number;
  /** Closes every kept-alive connection (shutdown). */
  close(): void;
}

/** The longest a kept-alive connection to a runtime stays open unused. */
const FREE_SOCKET_TIMEOUT_MS = 30_000;

interface RuntimeSlot {
  agent: https.Agent;
  inFlight: number;
}

type LookupCallback = (err: NodeJS.ErrnoException | null, address: string | LookupAddress[], family?: number) => void;

/** TLS failures: the runtime's certificate was not accepted, or the handshake failed. */
function isTlsError(err: NodeJS.ErrnoException): boolean {
  const code = err.code ?? '';
  return (
    code.startsWith('ERR_TLS_') ||
    code.startsWith('ERR_SSL_') ||
    code.startsWith('CERT_') ||
    code === 'EPROTO' ||
    code === 'UNABLE_TO_VERIFY_LEAF_SIGNATURE' ||
    code === 'UNABLE_TO_GET_ISSUER_CERT' ||
    code === 'UNABLE_TO_GET_ISSUER_CERT_LOCALLY' ||
    code === 'DEPTH_ZERO_SELF_SIGNED_CERT' ||
    code === 'SELF_SIGNED_CERT_IN_CHAIN' ||
    code === 'HOSTNAME_MISMATCH'
  );
}

export function createIngressTransport(opts: IngressTransportOptions): IngressTransport {
  const log = opts.logger ?? pino({ enabled: false });
  const ca = [...tls.getCACertificates('default'), ...(opts.caPem ? [opts.caPem] : [])];
  const slots = new Map<string, RuntimeSlot>();
  /** Requests in flight per tenant (entries removed at zero). */
  const byTenant = new Map<string, number>();
  const requestsPerTenant = opts.requestsPerTenant ?? opts.requestsPerRuntime * 2;
  const { requestTimeoutMs, idleTimeoutMs, maxHeaderBytes } = opts.limits;

  function slotOf(runtimeId: string): RuntimeSlot {
    let slot = slots.get(runtimeId);
    if (!slot) {
      slot = {
        agent: new https.Agent({
          keepAlive: true,
          maxSockets: opts.requestsPerRuntime,
          maxFreeSockets: Math.min(opts.requestsPerRuntime, 8),
          // Kept-alive connections left unused this long are closed from this side.
          timeout: Math.min(idleTimeoutMs, FREE_SOCKET_TIMEOUT_MS),
          scheduling: 'lifo',
        }),
        inFlight: 0,
      };
      slots.set(runtimeId, slot);
    }
    return slot;
  }

  /** For new connections: the checked address of the URL's host, never a second lookup. */
  const checkedLookup =
    (url: URL) =>
    (_hostname: string, options: LookupOptions, callback: LookupCallback): void => {
      resolveIngress(url, opts.policy, opts.lookup).then(
        (address) => {
          const family = isIP(address);
          if (options.all) callback(null, [{ address, family }]);
          else callback(null, address, family);
        },
        (err: unknown) => callback(err as NodeJS.ErrnoException, ''),
      );
    };

  function unreachable(input: IngressForwardInput, err: unknown): TunnelError {
    if (err instanceof TunnelError) return err;
    const e = err as NodeJS.ErrnoException;
    const where = `runtime ${input.runtimeId}'s ingress ${input.ingressUrl}`;
    if (err instanceof AddressRefusedError)
      return new TunnelError('RUNTIME_UNREACHABLE', `${where} is not called: ${e.message}`, err);
    if (isTlsError(e))
      return new TunnelError(
        'RUNTIME_UNREACHABLE',
        `TLS with ${where} failed (${e.code ?? 'handshake'}: ${e.message}): it must present a valid certificate for its host name from a CA the control plane trusts (the default CAs or PROVISIONER_HYBRID_INGRESS_CA_FILE)`,
        err,
      );
    if (e.code === 'HPE_HEADER_OVERFLOW')
      return new TunnelError(
        'RUNTIME_BAD_RESPONSE',
        `the runtime's response head is larger than ${maxHeaderBytes} bytes`,
        err,
      );
    if (typeof e.code === 'string' && e.code.startsWith('HPE_'))
      return new TunnelError('RUNTIME_BAD_RESPONSE', `the runtime's response is not valid HTTP (${e.code})`, err);
    return new TunnelError(
      'RUNTIME_UNREACHABLE',
      `${where} could not be reached (${e.code ?? e.message}); check the ingress and the request-router Service, then retry`,
      err,
    );
  }

  function forward(input: IngressForwardInput): Promise<IngressResponse> {
    const url = new URL(input.ingressUrl);
    const headers: HeaderList = input.headers.filter(([k]) => k !== REQUEST_TOKEN_HEADER && k !== 'host');
    // The token is for this runtime only (its audience names it), this method and this path.
    headers.push([
      REQUEST_TOKEN_HEADER,
      opts.signer.sign({
        tenantId: input.tenantId,
        runtimeId: input.runtimeId,
        method: input.method,
        path: input.path,
        ...(input.subject !== undefined ? { subject: input.subject } : {}),
      }),
    ]);
    const headBytes = headers.reduce(
      (n, [k, v]) => n + k.length + v.length + 4,
      input.method.length + input.path.length,
    );
    if (headBytes > maxHeaderBytes)
      return Promise.reject(
        new TunnelError(
          'REQUEST_HEADERS_TOO_LARGE',
          `request headers are too large: ${headBytes} bytes, over the limit of ${maxHeaderBytes} bytes for a runtime`,
        ),
      );
    const slot = slotOf(input.runtimeId);
    if (slot.inFlight >= opts.requestsPerRuntime)
      return Promise.reject(
        new TunnelError(
          'RUNTIME_BUSY',
          `runtime ${input.runtimeId} already has ${opts.requestsPerRuntime} requests in flight over its ingress, the most one runtime may have (PROVISIONER_HYBRID_INGRESS_REQUESTS_PER_RUNTIME); retry shortly`,
        ),
      );
    const tenantInFlight = byTenant.get(input.tenantId) ?? 0;
    if (tenantInFlight >= requestsPerTenant)
      return Promise.reject(
        new TunnelError(
          'RUNTIME_BUSY',
          `tenant ${input.tenantId} already has ${requestsPerTenant} requests in flight over its runtimes' ingresses, the most one tenant may have (PROVISIONER_HYBRID_INGRESS_REQUESTS_PER_TENANT); retry shortly`,
        ),
      );
    slot.inFlight += 1;
    byTenant.set(input.tenantId, tenantInFlight + 1);
    let released = false;
    const release = (): void => {
      if (released) return;
      released = true;
      slot.inFlight -= 1;
      const n = (byTenant.get(input.tenantId) ?? 1) - 1;
      if (n > 0) byTenant.set(input.tenantId, n);
      else byTenant.delete(input.tenantId);
    };

    return new Promise<IngressResponse>((resolve, reject) => {
      let settled = false;
      const fail = (err: unknown): void => {
        if (settled) return;
        settled = true;
        release();
        reject(unreachable(input, err));
      };
      const start = (): void => {
        const req = https.request({
          protocol: 'https:',
          hostname: url.hostname,
          port: url.port === '' ? 443 : Number(url.port),
          method: input.method,
          path: input.path,
          headers: headersObject(headers),
          agent: slot.agent,
          ca,
          lookup: checkedLookup(url),
          maxHeaderSize: maxHeaderBytes,
          rejectUnauthorized: true,
        });
        const timer = setTimeout(
          () =>
            req.destroy(new TunnelError('RUNTIME_TIMEOUT', `the runtime did not answer within ${requestTimeoutMs} ms`)),
          requestTimeoutMs,
        );
        timer.unref();
        req.setTimeout(idleTimeoutMs, () =>
          req.destroy(
            new TunnelError('RUNTIME_TIMEOUT', `the runtime's connection had no traffic for ${idleTimeoutMs} ms`),
          ),
        );
        const onAbort = (): void => {
          req.destroy(new TunnelError('REQUEST_CANCELLED', 'the request was cancelled'));
        };
        input.signal.addEventListener('abort', onAbort, { once: true });
        req.once('close', () => {
          clearTimeout(timer);
          input.signal.removeEventListener('abort', onAbort);
          if (!settled) fail(new Error('the connection closed before a response'));
        });
        req.on('error', fail);
        req.once('response', (res) => {
          clearTimeout(timer);
          if (settled) {
            res.destroy();
            return;
          }
          settled = true;
          res.once('close', release);
          res.on('error', (err) =>
            log.debug({ runtimeId: input.runtimeId, err: err.message }, 'runtime response broke off'),
          );
          resolve({ status: res.statusCode ?? 502, headers: headerListFrom(res.rawHeaders), body: res });
        });
        if (input.signal.aborted) onAbort();
        if (input.body === null) req.end();
        else {
          input.body.on('error', (err) => req.destroy(err));
          input.body.pipe(req);
        }
      };
      // An address literal is never looked up, so the policy is applied to it here.
      if (isIP(url.hostname.replace(/^\[|\]$/g, '')) !== 0)
        resolveIngress(url, opts.policy, opts.lookup).then(start, fail);
      else start();
    });
  }

  return {
    forward,
    inFlight: (runtimeId) => slots.get(runtimeId)?.inFlight ?? 0,
    tenantInFlight: (tenantId) => byTenant.get(tenantId) ?? 0,
    close() {
      for (const slot of slots.values()) slot.agent.destroy();
      slots.clear();
    },
  };
}
