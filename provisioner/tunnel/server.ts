/**
 * The tunnel server: accepts runtime connections at the HTTP upgrade of `/v1/tunnel`
 * (authenticated before the upgrade, never in verifyClient), keeps one tunnel per tenant for its
 * hosted runtime and one per hybrid runtime, and forwards HTTP exchanges to a runtime as streams
 * with flow control.
 *
 * It never touches the database: authentication and revocation come in through `authenticate`
 * and `disconnectKey` / `disconnectTenant`.
 */
import { randomUUID } from 'node:crypto';
import { EventEmitter } from 'node:events';
import type { IncomingMessage } from 'node:http';
import type { Duplex, Readable } from 'node:stream';
import pino, { type BaseLogger } from 'pino';
import { WebSocketServer, type WebSocket } from 'ws';
import { CloseCode, type HeaderList, ResetCode, SUBPROTOCOL, TUNNEL_PATH } from '../../runtime/protocol/frames.ts';
import { startHeartbeat } from '../../runtime/protocol/heartbeat.ts';
import { Mux, type TunnelStream, TunnelStreamError } from '../../runtime/protocol/mux.ts';
import { REQUEST_TOKEN_HEADER } from '../../runtime/protocol/request-token.ts';
import { statusOf, type ErrorCode } from '../errors.ts';
import { RateLimitedLog } from '../logger.ts';
import { DEFAULT_TUNNEL_LIMITS, tunnelLimitProblems, type TunnelLimits } from './limits.ts';
import { TunnelRegistry, type TunnelConnection } from './registry.ts';
import type { RequestSigner } from './request-token.ts';

/** pino's logger, or fastify's `app.log`. */
export type TunnelLogger = BaseLogger & { child(bindings: Record<string, unknown>): BaseLogger };

export interface TunnelIdentity {
  tenantId: string;
  /**
   * A hybrid runtime's key: the runtime's id. Its tunnel is held apart from the tenant's hosted
   * runtime's (one per runtime), announced by the `hybrid-connect` and `hybrid-disconnect`
   * events only, and requests reach it through `forwardRuntime`.
   */
  runtimeId?: string | undefined;
  /** Id of the runtime API key; used to close its tunnel when the key is revoked. */
  keyId: string;
}

export { DEFAULT_TUNNEL_LIMITS, type TunnelLimits } from './limits.ts';

export interface TunnelServerOptions extends Partial<TunnelLimits> {
  /** Resolves a runtime token to its tenant (and a hybrid runtime's key to its runtime), or null when unknown or revoked. */
  authenticate: (token: string) => Promise<TunnelIdentity | null>;
  /** Signs each forwarded request for the runtime's app-proxy; without it no token is attached. */
  signer?: RequestSigner;
  logger?: TunnelLogger;
  /** Upgrade path (default /v1/tunnel). */
  path?: string;
}

export interface ForwardRequest {
  method: string;
  /** Path and query as the runtime sees it, starting with '/'. */
  path: string;
  /** Header pairs without hop-by-hop headers; a caller's request token header is dropped. */
  headers: HeaderList;
  /** Request body, streamed; null for none. */
  body: Readable | null;
  /** Caller's API key id, recorded in the request token. */
  subject?: string;
  /** Aborting resets the stream (the caller went away). */
  signal?: AbortSignal;
}

export interface ForwardResponse {
  status: number;
  headers: HeaderList;
  /** The response body; it errors with a TunnelStreamError if the stream breaks mid-body. */
  body: Readable;
  stream: TunnelStream;
}

/** Codes of forward() failures before a response head arrived (from the provisioner's list, errors.ts). */
export type TunnelErrorCode = Extract<
  ErrorCode,
  | 'RUNTIME_UNREACHABLE'
  | 'RUNTIME_BUSY'
  | 'RUNTIME_TIMEOUT'
  | 'REQUEST_HEADERS_TOO_LARGE'
  | 'RUNTIME_BAD_RESPONSE'
  | 'RUNTIME_UPSTREAM_ERROR'
  | 'RUNTIME_DISCONNECTED'
  | 'REQUEST_CANCELLED'
  | 'SHUTTING_DOWN'
>;

export class TunnelError extends Error {
  readonly code: TunnelErrorCode;
  /** The HTTP status the code answers with (errors.ts). */
  readonly statusCode: number;
  constructor(code: TunnelErrorCode, message: string, cause?: unknown) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = 'TunnelError';
    this.code = code;
    this.statusCode = statusOf(code);
  }
}

export interface TunnelStatus {
  connected: boolean;
  /** ISO time the current tunnel connected. */
  since?: string;
  activeStreams?: number;
  /** Id of the current connection. */
  connectionId?: string;
}

/** A tunnel of this process, as the connect/disconnect events and connections() describe it. */
export interface TunnelInfo {
  tenantId: string;
  /** A hybrid runtime's tunnel: the runtime's id. */
  runtimeId?: string;
  connectionId: string;
  since: Date;
}

export interface TunnelStats {
  tunnels: number;
  streams: number;
  /** Body bytes held in memory by this process for all streams (received, not yet consumed). */
  bufferedBytes: number;
}

interface TunnelServerEvents {
  connect: [TunnelIdentity, TunnelInfo];
  disconnect: [TunnelIdentity, number, string, TunnelInfo];
  replace: [TunnelIdentity];
  /** A hybrid runtime's tunnel (its identity names the runtime): kept out of the tenant's events. */
  'hybrid-connect': [TunnelIdentity, TunnelInfo];
  'hybrid-disconnect': [TunnelIdentity, number, string, TunnelInfo];
}

export interface TunnelServer {
  /** For `server.on('upgrade')`: returns false (and does nothing) when the path is not the tunnel's. */
  handleUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer): boolean;
  forward(tenantId: string, request: ForwardRequest): Promise<ForwardResponse>;
  /** Forwards to a hybrid runtime of the tenant through its own tunnel, signed for that runtime only. */
  forwardRuntime(tenantId: string, runtimeId: string, request: ForwardRequest): Promise<ForwardResponse>;
  status(tenantId: string): TunnelStatus;
  /** Whether this process holds a hybrid runtime's tunnel, and since when. */
  runtimeStatus(runtimeId: string): TunnelStatus;
  /** Requests in flight through all of one tenant's tunnels on this process (limits.maxStreamsPerTenant). */
  tenantStreams(tenantId: string): number;
  stats(): TunnelStats;
  /** Closes tunnels using this runtime key (call after revoking it); returns how many. */
  disconnectKey(keyId: string): number;
  /** Closes the tenant's tunnel; returns how many. */
  disconnectTenant(tenantId: string): number;
  /** Closes the tenant's tunnel with CloseCode.replaced if it is still `connectionId`. */
  closeReplaced(tenantId: string, connectionId: string): boolean;
  /** Closes a hybrid runtime's tunnel with CloseCode.replaced if it is still `connectionId`. */
  closeReplacedRuntime(runtimeId: string, connectionId: string): boolean;
  /** The hosted runtimes' tunnels of this process. */
  connections(): TunnelInfo[];
  /** The hybrid runtimes' tunnels of this process. */
  runtimeConnections(): TunnelInfo[];
  /** connect / disconnect / replace events, for logs, metrics and tests. */
  readonly events: EventEmitter<TunnelServerEvents>;
  readonly limits: Readonly<TunnelLimits>;
  /** False once close() began: no new tunnels, no new requests through this process's tunnels. */
  readonly accepting: boolean;
  /**
   * Refuses new tunnels and new requests, then drains: runtimes that understand it get a goaway
   * (they dial a new connection, which the load balancer sends to another replica) while their
   * requests in flight finish here, for at most `drainTimeoutMs`; the rest, and runtimes that do
   * not understand goaway, are closed with 1001 (going away).
   */
  close(): Promise<void>;
}

function reject(socket: Duplex, code: ErrorCode, message: string, extra: Record<string, string> = {}): void {
  if (socket.destroyed) return;
  const status = statusOf(code);
  const body = JSON.stringify({ error: { code, message } });
  const headers = [
    `HTTP/1.1 ${status} ${status === 401 ? 'Unauthorized' : status === 403 ? 'Forbidden' : status === 400 ? 'Bad Request' : status === 429 ? 'Too Many Requests' : status === 503 ? 'Service Unavailable' : 'Error'}`,
    'Connection: close',
    'Content-Type: application/json',
    `Content-Length: ${Buffer.byteLength(body)}`,
    ...Object.entries(extra).map(([k, v]) => `${k}: ${v}`),
  ];
  socket.end(`${headers.join('\r\n')}\r\n\r\n${body}`);
}

function bearer(header: string | undefined): string | null {
  const m = header === undefined ? null : /^Bearer ([\x21-\x7e]{1,512})$/i.exec(header);
  return m ? m[1]! : null;
}

function errorFromReset(err: TunnelStreamError, headSent: boolean): TunnelError {
  switch (err.code) {
    case ResetCode.refused:
      return new TunnelError('RUNTIME_BUSY', `the runtime is busy: ${err.message}; retry shortly`, err);
    case ResetCode.timeout:
    case ResetCode.idle:
      return new TunnelError('RUNTIME_TIMEOUT', `the runtime did not answer in time: ${err.message}`, err);
    case ResetCode.headersTooLarge:
      return !err.remote && headSent
        ? new TunnelError('RUNTIME_BAD_RESPONSE', `the runtime's response was refused: ${err.message}`, err)
        : new TunnelError('REQUEST_HEADERS_TOO_LARGE', `request headers are too large: ${err.message}`, err);
    case ResetCode.upstream:
      return new TunnelError('RUNTIME_UPSTREAM_ERROR', `the runtime could not serve the request: ${err.message}`, err);
    case ResetCode.connectionLost:
      return new TunnelError(
        'RUNTIME_DISCONNECTED',
        `the runtime disconnected during the request: ${err.message}`,
        err,
      );
    case ResetCode.cancelled:
      return new TunnelError('REQUEST_CANCELLED', 'the request was cancelled', err);
    default:
      return new TunnelError('RUNTIME_BAD_RESPONSE', `the runtime broke the protocol: ${err.code} ${err.message}`, err);
  }
}

/** A connection as the connect/disconnect events and connections() describe it. */
function infoOf(conn: TunnelConnection): TunnelInfo {
  return {
    tenantId: conn.tenantId,
    ...(conn.runtimeId !== undefined ? { runtimeId: conn.runtimeId } : {}),
    connectionId: conn.connectionId,
    since: conn.since,
  };
}

function tunnelStatusOf(conn: TunnelConnection | undefined): TunnelStatus {
  return conn
    ? {
        connected: true,
        since: conn.since.toISOString(),
        activeStreams: conn.mux.streamCount,
        connectionId: conn.connectionId,
      }
    : { connected: false };
}

export function createTunnelServer(opts: TunnelServerOptions): TunnelServer {
  const limits: TunnelLimits = { ...DEFAULT_TUNNEL_LIMITS };
  for (const k of Object.keys(DEFAULT_TUNNEL_LIMITS) as Array<keyof TunnelLimits>) {
    const v = opts[k];
    if (v !== undefined) limits[k] = v;
  }
  const problems = tunnelLimitProblems(limits);
  if (problems.length > 0)
    throw new RangeError(`tunnel limits: ${problems.map((p) => `${p.limit} ${p.message}`).join('; ')}`);
  const log: TunnelLogger = opts.logger ?? pino({ enabled: false });
  const path = opts.path ?? TUNNEL_PATH;
  const registry = new TunnelRegistry(limits.drainTimeoutMs);
  /** Hybrid runtimes' tunnels, one per runtime. */
  const hybrid = new TunnelRegistry(limits.drainTimeoutMs, (conn) => conn.runtimeId ?? conn.tenantId);
  const events = new EventEmitter<TunnelServerEvents>();
  const pending = new Set<Mux>();
  /** Connections of each tenant upgraded but still waiting for their hello (limits.maxPendingHandshakesPerTenant). */
  const pendingByTenant = new Map<string, number>();
  /** Streams open through each tenant's tunnels, hosted and hybrid (limits.maxStreamsPerTenant; entries removed at zero). */
  const streamsByTenant = new Map<string, number>();
  /** Upgrades whose token is being checked (shed above limits.maxPendingHandshakes). */
  let authenticating = 0;
  /** Authentication failures (the database is down): one line per 10 s, not one per runtime. */
  const authFailureLog = new RateLimitedLog(10_000);
  /** Upgrades refused for a tenant with too many connections waiting for their hello: one line per tenant per 10 s. */
  const handshakeFloodLog = new RateLimitedLog(10_000);
  let closing = false;

  const wss = new WebSocketServer({
    noServer: true,
    maxPayload: limits.maxPayload,
    perMessageDeflate: false,
    clientTracking: false,
    skipUTF8Validation: true,
    handleProtocols: (protocols) => (protocols.has(SUBPROTOCOL) ? SUBPROTOCOL : false),
  });

  function onConnection(ws: WebSocket, id: TunnelIdentity, token: string, req: IncomingMessage): void {
    const mux = new Mux(ws, {
      role: 'server',
      window: limits.streamWindow,
      maxMessageBytes: limits.maxPayload,
      maxStreams: limits.maxStreams,
      maxHeaderBytes: limits.maxHeaderBytes,
      idleTimeoutMs: limits.idleTimeoutMs,
      maxChunkBytes: limits.maxChunkBytes,
    });
    pending.add(mux);
    pendingByTenant.set(id.tenantId, (pendingByTenant.get(id.tenantId) ?? 0) + 1);
    let counted = true;
    const uncount = (): void => {
      if (!counted) return;
      counted = false;
      const n = (pendingByTenant.get(id.tenantId) ?? 1) - 1;
      if (n > 0) pendingByTenant.set(id.tenantId, n);
      else pendingByTenant.delete(id.tenantId);
    };
    const remoteAddress = req.socket.remoteAddress;
    const clog = log.child({
      tenantId: id.tenantId,
      ...(id.runtimeId ? { runtimeId: id.runtimeId } : {}),
      keyId: id.keyId,
      remoteAddress,
    });
    /** Where this connection is held: the tenant's hosted runtime's tunnels, or the hybrid runtimes'. */
    const held = id.runtimeId ? hybrid : registry;
    ws.on('error', (err) => clog.warn({ err: err.message }, 'tunnel socket error'));
    startHeartbeat(ws, limits.heartbeatIntervalMs, () => clog.warn('tunnel missed its heartbeat; terminating'));
    const helloTimer = setTimeout(
      () => mux.close(CloseCode.protocolError, 'no hello in time'),
      limits.handshakeTimeoutMs,
    );
    helloTimer.unref();
    let conn: TunnelConnection | undefined;
    let revalidate: NodeJS.Timeout | undefined;

    mux.once('ready', () => {
      clearTimeout(helloTimer);
      pending.delete(mux);
      uncount();
      if (closing) {
        mux.close(CloseCode.goingAway, 'server shutting down');
        return;
      }
      conn = {
        connectionId: randomUUID(),
        tenantId: id.tenantId,
        ...(id.runtimeId ? { runtimeId: id.runtimeId } : {}),
        keyId: id.keyId,
        since: new Date(),
        remoteAddress,
        mux,
      };
      const old = held.set(conn);
      if (old) {
        clog.info({ replacedSince: old.since.toISOString() }, 'tunnel replaced an older connection');
        events.emit('replace', id);
      }
      const current = conn;
      mux.once('goaway', (message) => {
        // The runtime is shutting down: route nothing new to it; it closes when its requests are done.
        clog.info({ message, openRequests: mux.streamCount }, 'runtime is going away; no new requests for this tunnel');
        held.delete(current);
      });
      clog.info({ connectionId: conn.connectionId }, 'tunnel connected');
      if (id.runtimeId) events.emit('hybrid-connect', id, infoOf(conn));
      else events.emit('connect', id, infoOf(conn));
      if (limits.revalidateIntervalMs > 0) {
        revalidate = setInterval(() => {
          opts.authenticate(token).then(
            (still) => {
              if (still === null || still.tenantId !== id.tenantId || still.runtimeId !== id.runtimeId) {
                clog.info('runtime token no longer valid; closing tunnel');
                if (conn) held.delete(conn);
                mux.close(CloseCode.revoked, 'runtime token revoked');
              }
            },
            (err: unknown) =>
              clog.warn(
                { err: err instanceof Error ? err.message : String(err) },
                'could not revalidate runtime token',
              ),
          );
        }, limits.revalidateIntervalMs);
        revalidate.unref();
      }
    });

    mux.once('close', (code, reason) => {
      clearTimeout(helloTimer);
      clearInterval(revalidate);
      pending.delete(mux);
      uncount();
      if (conn) {
        held.delete(conn);
        clog.info({ code, reason, connectionId: conn.connectionId }, 'tunnel disconnected');
        if (id.runtimeId) events.emit('hybrid-disconnect', id, code, reason, infoOf(conn));
        else events.emit('disconnect', id, code, reason, infoOf(conn));
      }
    });
  }

  function handleUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer): boolean {
    const url = req.url ?? '';
    const q = url.indexOf('?');
    if ((q === -1 ? url : url.slice(0, q)) !== path) return false;
    socket.on('error', () => socket.destroy());
    if (closing) {
      reject(socket, 'SHUTTING_DOWN', 'the control plane is shutting down; reconnect to another replica', {
        'Retry-After': '1',
      });
      return true;
    }
    const offered = (req.headers['sec-websocket-protocol'] ?? '').split(',').map((s) => s.trim());
    if (!offered.includes(SUBPROTOCOL)) {
      reject(socket, 'UNSUPPORTED_TUNNEL_PROTOCOL', `offer the WebSocket subprotocol '${SUBPROTOCOL}'`);
      return true;
    }
    const token = bearer(req.headers.authorization);
    if (token === null) {
      reject(socket, 'UNAUTHENTICATED', 'send "Authorization: Bearer <runtime token>"', {
        'WWW-Authenticate': 'Bearer',
      });
      return true;
    }
    if (authenticating >= limits.maxPendingHandshakes) {
      reject(socket, 'AUTH_UNAVAILABLE', 'too many tunnel handshakes in progress; retry shortly', {
        'Retry-After': '1',
      });
      return true;
    }
    authenticating++;
    let settled = false;
    const settle = (): boolean => {
      if (settled) return false;
      settled = true;
      authenticating--;
      clearTimeout(timer);
      return true;
    };
    const timer = setTimeout(() => {
      if (settle()) reject(socket, 'AUTH_TIMEOUT', 'authentication took too long; retry', { 'Retry-After': '1' });
    }, limits.handshakeTimeoutMs);
    timer.unref();
    opts.authenticate(token).then(
      (id) => {
        if (!settle() || socket.destroyed) return;
        if (id === null) {
          log.info({ remoteAddress: req.socket.remoteAddress }, 'tunnel refused: invalid or revoked runtime token');
          reject(socket, 'INVALID_API_KEY', 'runtime token is not valid or has been revoked', {
            'WWW-Authenticate': 'Bearer',
          });
          return;
        }
        if (closing) {
          reject(socket, 'SHUTTING_DOWN', 'the control plane is shutting down');
          return;
        }
        if ((pendingByTenant.get(id.tenantId) ?? 0) >= limits.maxPendingHandshakesPerTenant) {
          handshakeFloodLog.maybe(id.tenantId, (suppressed) =>
            log.warn(
              {
                tenantId: id.tenantId,
                remoteAddress: req.socket.remoteAddress,
                ...(suppressed > 0 ? { suppressed } : {}),
              },
              'tunnel refused: too many connections of this tenant waiting for their hello',
            ),
          );
          reject(
            socket,
            'TOO_MANY_TUNNEL_HANDSHAKES',
            `tenant ${id.tenantId} already has ${limits.maxPendingHandshakesPerTenant} tunnel connections waiting for their hello; retry after they finish`,
            { 'Retry-After': '5' },
          );
          return;
        }
        wss.handleUpgrade(req, socket, head, (ws) => onConnection(ws, id, token, req));
      },
      (err: unknown) => {
        if (!settle()) return;
        authFailureLog.maybe('auth', (suppressed) =>
          log.warn(
            { err: err instanceof Error ? err.message : String(err), ...(suppressed > 0 ? { suppressed } : {}) },
            'tunnel authentication failed',
          ),
        );
        reject(socket, 'AUTH_UNAVAILABLE', 'authentication is unavailable; retry', { 'Retry-After': '2' });
      },
    );
    return true;
  }

  const shuttingDown = (cause?: unknown): TunnelError =>
    new TunnelError(
      'SHUTTING_DOWN',
      'the control plane is shutting down; retry the request (another replica will serve it)',
      cause,
    );

  const forward = (tenantId: string, request: ForwardRequest): Promise<ForwardResponse> =>
    forwardOn(registry.get(tenantId), { tenantId }, `the runtime of tenant '${tenantId}'`, request);

  const forwardRuntime = (tenantId: string, runtimeId: string, request: ForwardRequest): Promise<ForwardResponse> => {
    const conn = hybrid.get(runtimeId);
    // The registry is keyed by runtime; the tenant check keeps a caller to its own tenant's runtimes.
    return forwardOn(
      conn?.tenantId === tenantId ? conn : undefined,
      { tenantId, runtimeId },
      `runtime '${runtimeId}' of tenant '${tenantId}'`,
      request,
    );
  };

  /** Forwards through one connection (none: not connected), the request token signed for `audience`. */
  function forwardOn(
    conn: TunnelConnection | undefined,
    audience: { tenantId: string; runtimeId?: string },
    what: string,
    request: ForwardRequest,
  ): Promise<ForwardResponse> {
    if (closing) return Promise.reject(shuttingDown());
    if (!conn || !conn.mux.ready) {
      return Promise.reject(
        new TunnelError(
          'RUNTIME_UNREACHABLE',
          `${what} is not connected; it may be starting or unreachable, retry later`,
        ),
      );
    }
    // One budget for all of a tenant's tunnels: more runtimes do not multiply what it may hold open.
    const tenantStreams = streamsByTenant.get(conn.tenantId) ?? 0;
    if (tenantStreams >= limits.maxStreamsPerTenant)
      return Promise.reject(
        new TunnelError(
          'RUNTIME_BUSY',
          `tenant ${conn.tenantId} already has ${limits.maxStreamsPerTenant} requests in flight through its runtimes' tunnels, the most one tenant may have (PROVISIONER_TUNNEL_MAX_STREAMS_PER_TENANT); retry shortly`,
        ),
      );
    const headers = request.headers.filter(([k]) => k !== REQUEST_TOKEN_HEADER);
    if (opts.signer) {
      headers.push([
        REQUEST_TOKEN_HEADER,
        opts.signer.sign({
          ...audience,
          method: request.method,
          path: request.path,
          ...(request.subject !== undefined ? { subject: request.subject } : {}),
        }),
      ]);
    }
    let stream: TunnelStream;
    try {
      stream = conn.mux.open({ method: request.method, path: request.path, headers });
    } catch (err) {
      if (err instanceof TunnelStreamError) return Promise.reject(errorFromReset(err, false));
      return Promise.reject(err instanceof Error ? err : new Error(String(err)));
    }
    streamsByTenant.set(conn.tenantId, tenantStreams + 1);
    stream.once('close', () => {
      const n = (streamsByTenant.get(conn.tenantId) ?? 1) - 1;
      if (n > 0) streamsByTenant.set(conn.tenantId, n);
      else streamsByTenant.delete(conn.tenantId);
    });
    return new Promise<ForwardResponse>((resolve, rejectPromise) => {
      let settled = false;
      const timer = setTimeout(
        () => stream.reset(ResetCode.timeout, `no response within ${limits.requestTimeoutMs} ms`),
        limits.requestTimeoutMs,
      );
      timer.unref();
      const onAbort = (): void => stream.reset(ResetCode.cancelled, 'the caller went away');
      request.signal?.addEventListener('abort', onAbort, { once: true });
      stream.once('close', () => request.signal?.removeEventListener('abort', onAbort));
      stream.once('response', (head) => {
        clearTimeout(timer);
        settled = true;
        resolve({ status: head.status, headers: head.headers, body: stream.body, stream });
      });
      stream.once('reset', (err) => {
        clearTimeout(timer);
        if (!settled) {
          settled = true;
          // Streams cut by close() fail as a shutdown, not as a runtime that went away.
          rejectPromise(
            closing && err.code === ResetCode.connectionLost ? shuttingDown(err) : errorFromReset(err, true),
          );
        }
      });
      if (request.signal?.aborted) onAbort();
      stream.sendBody(request.body);
    });
  }

  return {
    handleUpgrade,
    forward,
    forwardRuntime,
    events,
    limits,
    status: (tenantId) => tunnelStatusOf(registry.get(tenantId)),
    runtimeStatus: (runtimeId) => tunnelStatusOf(hybrid.get(runtimeId)),
    tenantStreams: (tenantId) => streamsByTenant.get(tenantId) ?? 0,
    stats() {
      let streams = 0;
      let bufferedBytes = 0;
      const all = [...registry.all(), ...hybrid.all()];
      for (const c of all) {
        streams += c.mux.streamCount;
        bufferedBytes += c.mux.bufferedBytes;
      }
      return { tunnels: all.length, streams, bufferedBytes };
    },
    disconnectKey: (keyId) => registry.disconnectKey(keyId) + hybrid.disconnectKey(keyId),
    disconnectTenant: (tenantId) => registry.disconnectTenant(tenantId) + hybrid.disconnectTenant(tenantId),
    closeReplaced: (tenantId, connectionId) => registry.closeReplaced(tenantId, connectionId),
    closeReplacedRuntime: (runtimeId, connectionId) => hybrid.closeReplaced(runtimeId, connectionId),
    connections: () => registry.all().map(infoOf),
    runtimeConnections: () => hybrid.all().map(infoOf),
    get accepting() {
      return !closing;
    },
    async close() {
      closing = true;
      for (const m of pending) m.close(CloseCode.goingAway, 'server shutting down');
      pending.clear();
      const draining = [...registry.all(), ...hybrid.all()].filter(
        (conn) => limits.drainTimeoutMs > 0 && conn.mux.goAway('the control plane replica is shutting down; reconnect'),
      );
      for (const conn of draining) {
        if (conn.mux.streamCount > 0)
          log.info(
            { tenantId: conn.tenantId, streams: conn.mux.streamCount },
            'tunnel draining: requests in flight finish while the runtime reconnects',
          );
      }
      await Promise.all(draining.map((conn) => conn.mux.idle(limits.drainTimeoutMs)));
      for (const conn of [...registry.all(), ...hybrid.all()]) {
        if (conn.mux.streamCount > 0)
          log.warn(
            { tenantId: conn.tenantId, streams: conn.mux.streamCount },
            'drain time is up: cutting requests still in flight',
          );
      }
      registry.closeAll(CloseCode.goingAway, 'server shutting down');
      hybrid.closeAll(CloseCode.goingAway, 'server shutting down');
      await new Promise<void>((resolve) => wss.close(() => resolve()));
    },
  };
}
