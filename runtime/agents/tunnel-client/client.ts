/**
 * The tunnel client: dials out to the control plane's tunnel endpoint with the runtime token,
 * serves every stream the control plane opens by making the same HTTP request to the request
 * router, and keeps the tunnel up (heartbeats; reconnect with exponential backoff and jitter).
 *
 * A runtime token read from a file (a mounted Secret) is read again at every connect and every
 * `tokenCheckMs`: when it changed (a warm pool entry's key exchanged at its claim, a rotation), the
 * client dials with the new one at once — beside the open connection, whose open requests finish
 * while the control plane replaces it, or instead of a reconnect that was waiting (the old key
 * revoked before the new file arrived) — so the runtime stays reachable through the change.
 */
import { EventEmitter } from 'node:events';
import http from 'node:http';
import https from 'node:https';
import pino, { type BaseLogger } from 'pino';
import WebSocket from 'ws';
import { CloseCode, type RequestHead, ResetCode, SUBPROTOCOL } from '../../protocol/frames.ts';
import { headerListFrom, headersObject } from '../../protocol/headers.ts';
import { startHeartbeat } from '../../protocol/heartbeat.ts';
import { Mux, type TunnelStream } from '../../protocol/mux.ts';
import { RefusedConnectionRetry, refusedUpstreamConnection, retriableUpstreamError } from '../common/retry.ts';
import { backoffDelay, type BackoffOptions, DEFAULT_BACKOFF, slowRetryDelay } from '../common/backoff.ts';

export interface TunnelClientOptions {
  /** ws:// or wss:// URL of the control plane's /v1/tunnel. */
  url: string;
  /** The runtime token; a function is called on every connect and every `tokenCheckMs` (a rotated Secret is picked up). */
  token: string | (() => string);
  /**
   * How often a token function is called while connected or waiting to reconnect; a value other
   * than the one last dialled with dials again at once (default 5 s; 0: only at connects).
   */
  tokenCheckMs?: number;
  /** Base URL of the request router, e.g. http://127.0.0.1:8081. */
  upstream: string;
  logger?: BaseLogger;
  /** Per-stream window granted to the server (default 256 KiB). */
  window?: number;
  /** Largest WebSocket message accepted (default 1 MiB). */
  maxPayload?: number;
  /** Concurrent streams served (default 512). */
  maxStreams?: number;
  /** Largest request head accepted (default 16 KiB). */
  maxHeaderBytes?: number;
  /** Largest body chunk per frame (default 64 KiB). */
  maxChunkBytes?: number;
  /** Streams without traffic for this long are reset (default 120 s). */
  idleTimeoutMs?: number;
  /** Ping interval; a server silent for a whole interval is dropped and redialled (default 15 s). */
  heartbeatIntervalMs?: number;
  /** Time allowed for the WebSocket handshake (default 10 s). */
  handshakeTimeoutMs?: number;
  backoff?: Partial<BackoffOptions>;
  /** Upstream keep-alive sockets (default 256). */
  maxUpstreamSockets?: number;
  /**
   * How long a request without a body is tried again while the router refuses connections (its pod
   * still starting after a wake; default 10 s, 100 ms doubling to 1 s; 0: never).
   */
  upstreamConnectRetryMs?: number;
}

interface TunnelClientEvents {
  /** The tunnel is up and serving. */
  connected: [];
  /** The tunnel went down; a reconnect follows unless the client is closing. */
  disconnected: [number, string];
  /** The control plane refused the upgrade (401: bad or revoked token). */
  rejected: [number];
  /** The control plane replica is going away: a new connection is being dialled, open requests finish on the old one. */
  draining: [string];
  reconnecting: [number, number];
  /** The runtime token changed: the client dials with the new one. */
  rekeying: [];
}

export interface TunnelClient {
  readonly events: EventEmitter<TunnelClientEvents>;
  readonly connected: boolean;
  /** When the current tunnel came up. */
  readonly since: Date | null;
  readonly activeStreams: number;
  /**
   * Stops reconnecting and closes the tunnel (1001). With `graceMs`, requests in flight get that
   * long to finish first (a runtime pod being replaced: its successor has taken the new ones).
   */
  close(opts?: { graceMs?: number }): Promise<void>;
}

/** Zero masks make ws skip masking: the tunnel is TLS between two servers, no proxy cache to poison. */
function zeroMask(mask: Buffer): void {
  mask.fill(0);
}

export function startTunnelClient(opts: TunnelClientOptions): TunnelClient {
  const log = opts.logger ?? pino({ enabled: false });
  const upstream = new URL(opts.upstream);
  const isHttps = upstream.protocol === 'https:';
  const agent = isHttps
    ? new https.Agent({ keepAlive: true, maxSockets: opts.maxUpstreamSockets ?? 256 })
    : new http.Agent({ keepAlive: true, maxSockets: opts.maxUpstreamSockets ?? 256 });
  const request = isHttps ? https.request : http.request;
  const backoff: BackoffOptions = { ...DEFAULT_BACKOFF, ...opts.backoff };
  const maxPayload = opts.maxPayload ?? 1024 * 1024;
  const connectRetryMs = opts.upstreamConnectRetryMs ?? 10_000;
  const events = new EventEmitter<TunnelClientEvents>();
  let ws: WebSocket | null = null;
  let mux: Mux | null = null;
  let since: Date | null = null;
  let attempt = 0;
  let retryTimer: NodeJS.Timeout | null = null;
  let closing = false;
  let closed: (() => void) | null = null;
  /** Connections told to go away, finishing their open requests. */
  const draining = new Set<Mux>();
  /** The token of the last dial (undefined before the first). */
  let dialledWith: string | undefined;
  /** Hands the live connection over to a new one (it finishes its open requests); set while one is up. */
  let handOver: ((why: string) => void) | null = null;

  function serve(stream: TunnelStream, head: RequestHead): void {
    let bodyBytes = 0;
    stream.body.on('data', (c: Buffer) => {
      bodyBytes += c.length;
    });
    let current: http.ClientRequest | null = null;
    let pause: NodeJS.Timeout | undefined;
    stream.once('reset', () => {
      clearTimeout(pause);
      current?.destroy();
    });
    const refused = new RefusedConnectionRetry(connectRetryMs);
    const send = (retry: boolean): void => {
      const req = request({
        protocol: upstream.protocol,
        hostname: upstream.hostname,
        port: upstream.port,
        method: head.method,
        path: head.path,
        headers: headersObject(head.headers),
        agent,
      });
      current = req;
      let answered = false;
      req.on('response', (res) => {
        answered = true;
        stream.respond({ status: res.statusCode ?? 502, headers: headerListFrom(res.rawHeaders) });
        stream.sendBody(res);
      });
      req.on('error', (err) => {
        if (stream.closed) return;
        if (
          !retry &&
          !answered &&
          retriableUpstreamError(req, err, head.method) &&
          bodyBytes === 0 &&
          stream.body.readableEnded
        ) {
          log.debug(
            { err: err.message },
            'kept-alive router connection was closed under the request; retrying on a new one',
          );
          send(true);
          return;
        }
        // The router not listening yet (its pod starting beside this one after a wake): the
        // request was never delivered, so it is tried again, paced, within connectRetryMs.
        const wait =
          refusedUpstreamConnection(err) && !answered && bodyBytes === 0 && stream.body.readableEnded
            ? refused.next()
            : undefined;
        if (wait !== undefined) {
          if (refused.tries === 1)
            log.info({ path: head.path }, 'the request router refused the connection; trying again');
          pause = setTimeout(() => {
            if (!stream.closed) send(true);
          }, wait);
          return;
        }
        stream.reset(ResetCode.upstream, `request router: ${err.message}`);
      });
      if (retry) req.end();
      // pipe, not pipeline: pipeline allocates an AbortController and throws a DOMException into
      // it for every request, a measurable cost per request; a reset destroys `req` (above).
      else stream.body.pipe(req);
    };
    send(false);
  }

  function schedule(delay: number): void {
    if (closing) return;
    events.emit('reconnecting', attempt, delay);
    // The first retries at info, then every tenth: a long outage is not a line every few seconds.
    if (attempt < 3 || attempt % 10 === 0) log.info({ attempt, delayMs: delay }, 'reconnecting');
    else log.debug({ attempt, delayMs: delay }, 'reconnecting');
    attempt++;
    retryTimer = setTimeout(connect, delay);
  }

  function connect(): void {
    retryTimer = null;
    if (closing) return;
    let status = 0;
    let token: string;
    try {
      token = typeof opts.token === 'function' ? opts.token() : opts.token;
    } catch (err) {
      log.error({ err: err instanceof Error ? err.message : String(err) }, 'cannot read the runtime token');
      schedule(backoffDelay(attempt, backoff));
      return;
    }
    dialledWith = token;
    /** Set when the server sent goaway on this connection and a new one was dialled. */
    let drained: Mux | null = null;
    const socket = new WebSocket(opts.url, SUBPROTOCOL, {
      headers: { authorization: `Bearer ${token}` },
      maxPayload,
      perMessageDeflate: false,
      handshakeTimeout: opts.handshakeTimeoutMs ?? 10_000,
      skipUTF8Validation: true,
      generateMask: zeroMask,
    });
    ws = socket;
    socket.on('unexpected-response', (_req, res) => {
      status = res.statusCode ?? 0;
      res.resume();
      log.warn(
        { status },
        status === 401 ? 'control plane refused the runtime token' : 'control plane refused the tunnel',
      );
      events.emit('rejected', status);
      socket.terminate();
    });
    socket.on('error', (err) => log.debug({ err: err.message }, 'tunnel socket error'));
    socket.on('open', () => {
      const m = new Mux(socket, {
        role: 'client',
        window: opts.window ?? 256 * 1024,
        maxMessageBytes: maxPayload,
        maxStreams: opts.maxStreams ?? 512,
        maxHeaderBytes: opts.maxHeaderBytes ?? 16 * 1024,
        idleTimeoutMs: opts.idleTimeoutMs ?? 120_000,
        maxChunkBytes: opts.maxChunkBytes ?? 64 * 1024,
      });
      mux = m;
      startHeartbeat(socket, opts.heartbeatIntervalMs ?? 15_000, () =>
        log.warn('control plane missed its heartbeat; redialling'),
      );
      m.on('stream', serve);
      /** Hands this connection over: it only finishes its open requests from now; the next one is dialled at once. */
      const handOverThis = (why: string, goaway?: string): void => {
        if (ws !== socket || closing || drained) return;
        log.info({ ...(goaway === undefined ? {} : { message: goaway }), openRequests: m.streamCount }, why);
        if (goaway !== undefined) events.emit('draining', goaway);
        handOver = null;
        drained = m;
        draining.add(m);
        ws = null;
        mux = null;
        since = null;
        attempt = 0;
        connect();
      };
      m.once('goaway', (message, reconnect) => {
        if (!reconnect) {
          // Another connection of this runtime (a newer pod, or this client's own dial with a new
          // token) took over: finish the open requests; the server then closes this one as replaced.
          log.info({ message, openRequests: m.streamCount }, 'tunnel replaced; finishing open requests');
          return;
        }
        handOverThis('control plane is going away; reconnecting while open requests finish', message);
      });
      m.once('ready', () => {
        attempt = 0;
        since = new Date();
        if (ws === socket) handOver = handOverThis;
        log.info('tunnel connected');
        events.emit('connected');
      });
    });
    socket.once('close', (code, reasonBuf) => {
      const reason = reasonBuf.toString('utf8');
      if (drained) {
        // A drained connection ending: its successor was dialled when the goaway came.
        draining.delete(drained);
        log.info({ code, reason }, 'drained tunnel closed');
        return;
      }
      if (ws !== socket) return; // a connection already handed over (its successor is being dialled)
      const wasUp = since !== null;
      ws = null;
      mux = null;
      since = null;
      handOver = null;
      if (wasUp) {
        log.info({ code, reason }, 'tunnel disconnected');
        events.emit('disconnected', code, reason);
      }
      if (closing) {
        closed?.();
        return;
      }
      // Replaced, revoked or refused: another instance holds the tunnel or the token is bad;
      // retry slowly rather than fight over it.
      const slow = code === CloseCode.replaced || code === CloseCode.revoked || status === 401 || status === 403;
      // A 503 (the server sheds handshakes it cannot take yet, or is shutting down) is retried with
      // the normal backoff: it is what the full jitter spreads.
      schedule(slow ? slowRetryDelay() : backoffDelay(attempt, backoff));
    });
  }

  /**
   * A round of the token check: a token other than the one last dialled with is dialled at once,
   * handing the live connection over, or instead of the reconnect that waits (slowly, after a
   * refusal or a revocation). A dial in flight is left to finish.
   */
  function checkToken(): void {
    if (closing || typeof opts.token !== 'function') return;
    let now: string;
    try {
      now = opts.token();
    } catch {
      return; // said at the next connect
    }
    if (now === dialledWith) return;
    if (retryTimer) {
      clearTimeout(retryTimer);
      retryTimer = null;
      attempt = 0;
      log.info('the runtime token changed: reconnecting with the new one now');
      events.emit('rekeying');
      connect();
    } else if (handOver) {
      events.emit('rekeying');
      handOver('the runtime token changed: dialling with the new one while open requests finish on this connection');
    }
  }
  const tokenCheckMs = opts.tokenCheckMs ?? 5_000;
  const tokenTimer =
    typeof opts.token === 'function' && tokenCheckMs > 0 ? setInterval(checkToken, tokenCheckMs) : undefined;
  tokenTimer?.unref();

  connect();

  return {
    events,
    get connected() {
      return mux?.ready ?? false;
    },
    get since() {
      return since;
    },
    get activeStreams() {
      return mux?.streamCount ?? 0;
    },
    async close(opts = {}) {
      closing = true;
      if (retryTimer) clearTimeout(retryTimer);
      clearInterval(tokenTimer);
      const graceMs = opts.graceMs ?? 0;
      if (graceMs > 0) {
        // Ask the control plane to send nothing new (a control plane without goaway keeps sending).
        if (mux && mux.streamCount > 0) mux.goAway('runtime shutting down', { reconnect: false });
        const open = [mux, ...draining].filter((m): m is Mux => m !== null && m.streamCount > 0);
        if (open.length > 0)
          log.info(
            { openRequests: open.reduce((n, m) => n + m.streamCount, 0), graceMs },
            'letting open requests finish before closing the tunnel',
          );
        await Promise.all(open.map((m) => m.idle(graceMs)));
      }
      agent.destroy();
      for (const d of draining) d.close(CloseCode.goingAway, 'runtime shutting down');
      draining.clear();
      const socket = ws;
      if (!socket || socket.readyState === socket.CLOSED) return Promise.resolve();
      return new Promise<void>((resolve) => {
        closed = resolve;
        if (socket.readyState === socket.CONNECTING) socket.terminate();
        else if (mux) mux.close(CloseCode.goingAway, 'runtime shutting down');
        else socket.close(CloseCode.goingAway, 'runtime shutting down');
        setTimeout(() => socket.terminate(), 2000).unref();
      });
    },
  };
}
