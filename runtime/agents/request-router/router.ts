/**
 * The request router: the tunnel client's one upstream inside the runtime. `/api/*` goes to the
 * app-proxy, `/webhooks/*` to the Argo Events event source (with the `/webhooks` prefix removed),
 * `/argo-cd/*` to Argo CD's API server (prefix removed; a tenant's `argoCdUrl`), `/healthz` and
 * `/readyz` are its own health (runtime/agents/common/health.ts), anything else is 404. Bodies are
 * streamed both ways.
 *
 * In ingress mode (`requestTokens`) the router is what the customer's ingress exposes, so it
 * refuses every request but `/healthz` and `/readyz` without a valid control-plane request token for this
 * runtime (401, nothing forwarded): the same check as the app-proxy's, with its own replay cache.
 * Behind a tunnel it needs none: only the control plane reaches it there, and the app-proxy checks.
 */
import type { KeyObject } from 'node:crypto';
import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import https from 'node:https';
import pino, { type BaseLogger } from 'pino';
import { headerListFrom, headersObject } from '../../protocol/headers.ts';
import { REQUEST_TOKEN_HEADER } from '../../protocol/request-token.ts';
import { ReplayCache, verifyRequestToken } from '../app-proxy/request-token.ts';
import { AgentHealth } from '../common/health.ts';
import { RefusedConnectionRetry, refusedUpstreamConnection, retriableUpstreamError } from '../common/retry.ts';

/** What the router needs to verify request tokens itself (ingress mode). */
export interface RouterTokenCheck {
  /** The control plane's Ed25519 public key. */
  publicKey: KeyObject;
  tenantId: string;
  /** This hybrid runtime's id: only tokens for it are accepted. */
  runtimeId: string;
  now?: () => number;
  skewSeconds?: number;
}

export interface RouterOptions {
  /** Base URL of the app-proxy. */
  appProxyUrl: string;
  /** Base URL of the Argo Events webhook event source. */
  eventSourceUrl: string;
  /** Base URL of Argo CD's API server (`/argo-cd/*`); without it that route answers 404. */
  argoCdServerUrl?: string;
  logger?: BaseLogger;
  /** Keep-alive sockets per upstream (default 256). */
  maxSockets?: number;
  /** Upstream response head timeout (default 30 s). */
  upstreamTimeoutMs?: number;
  /**
   * How long a request without a body is tried again while its upstream refuses connections
   * (default 10 s; 0: answer 502 at once). A woken runtime's tunnel can be up before Argo CD's
   * server listens: the first requests then wait for it instead of failing.
   */
  connectRetryMs?: number;
  /** Ingress mode: every request but /healthz needs a valid request token for this runtime. */
  requestTokens?: RouterTokenCheck;
}

interface Upstream {
  url: URL;
  agent: http.Agent;
  request: typeof http.request;
  name: string;
}

function upstream(name: string, base: string, maxSockets: number): Upstream {
  const url = new URL(base);
  const isHttps = url.protocol === 'https:';
  return {
    name,
    url,
    agent: isHttps ? new https.Agent({ keepAlive: true, maxSockets }) : new http.Agent({ keepAlive: true, maxSockets }),
    request: isHttps ? https.request : http.request,
  };
}

function sendJson(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, {
    'content-type': 'application/json; charset=utf-8',
    'content-length': Buffer.byteLength(text),
  });
  res.end(text);
}

export interface Router {
  handler: (req: IncomingMessage, res: ServerResponse) => void;
  close(): void;
}

export function createRouter(opts: RouterOptions): Router {
  const log = opts.logger ?? pino({ enabled: false });
  const maxSockets = opts.maxSockets ?? 256;
  const api = upstream('app-proxy', opts.appProxyUrl, maxSockets);
  const events = upstream('event-source', opts.eventSourceUrl, maxSockets);
  const argoCd = opts.argoCdServerUrl ? upstream('argocd-server', opts.argoCdServerUrl, maxSockets) : undefined;
  const timeoutMs = opts.upstreamTimeoutMs ?? 30_000;
  const connectRetryMs = opts.connectRetryMs ?? 10_000;
  // The router's own /healthz and /readyz (runtime/agents/common/health.ts): it has no loops; it is
  // ready while it answers (an upstream down is that upstream's 502, not the router's).
  const health = new AgentHealth();

  function proxy(target: Upstream, path: string, req: IncomingMessage, res: ServerResponse): void {
    const headers = headerListFrom(req.rawHeaders, new Set(['host']));
    headers.push(['x-forwarded-host', req.headers.host ?? '']);
    const basePath = target.url.pathname.replace(/\/$/, '');
    let bodyBytes = 0;
    req.on('data', (c: Buffer) => {
      bodyBytes += c.length;
    });
    let current: http.ClientRequest | null = null;
    let pause: NodeJS.Timeout | undefined;
    res.on('close', () => {
      clearTimeout(pause);
      if (!res.writableFinished) current?.destroy();
    });
    const refused = new RefusedConnectionRetry(connectRetryMs);
    const send = (retry: boolean): void => {
      const up = target.request({
        protocol: target.url.protocol,
        hostname: target.url.hostname,
        port: target.url.port,
        method: req.method,
        path: basePath + path,
        headers: headersObject(headers),
        agent: target.agent,
        timeout: timeoutMs,
      });
      current = up;
      up.on('timeout', () => up.destroy(new Error(`no response within ${timeoutMs} ms`)));
      up.on('response', (upRes) => {
        res.writeHead(upRes.statusCode ?? 502, headersObject(headerListFrom(upRes.rawHeaders)));
        // pipe, not pipeline (which costs an AbortController and a DOMException per request).
        upRes.on('error', () => res.destroy());
        upRes.pipe(res);
      });
      up.on('error', (err) => {
        if (
          !retry &&
          !res.headersSent &&
          !res.destroyed &&
          retriableUpstreamError(up, err, req.method ?? '') &&
          bodyBytes === 0 &&
          req.complete
        ) {
          log.debug(
            { upstream: target.name, err: err.message, path },
            'kept-alive upstream connection was closed under the request; retrying on a new one',
          );
          send(true);
          return;
        }
        // Nothing listens yet (a server starting): the request was never delivered. Tried again
        // after 100 ms, doubling to 1 s, until connectRetryMs has passed.
        const wait =
          refusedUpstreamConnection(err) && !res.headersSent && !res.destroyed && bodyBytes === 0 && req.complete
            ? refused.next()
            : undefined;
        if (wait !== undefined) {
          if (refused.tries === 1)
            log.info({ upstream: target.name, path }, 'upstream refused the connection; trying again');
          pause = setTimeout(() => send(true), wait);
          return;
        }
        log.warn({ upstream: target.name, err: err.message, path }, 'upstream request failed');
        if (!res.headersSent)
          sendJson(res, 502, {
            error: { code: 'UPSTREAM_UNAVAILABLE', message: `${target.name} could not be reached: ${err.message}` },
          });
        else res.destroy();
      });
      if (retry) up.end();
      else {
        req.on('error', () => up.destroy());
        req.pipe(up);
      }
    };
    send(false);
  }

  const check = opts.requestTokens;
  const replay = new ReplayCache();
  /** Ingress mode: why the request is refused (the app-proxy's codes), or undefined when its token is valid (and now used). */
  const refusal = (req: IncomingMessage, url: string): { code: string; message: string } | undefined => {
    if (!check) return undefined;
    const raw = req.headers[REQUEST_TOKEN_HEADER];
    if (typeof raw !== 'string' || raw === '')
      return {
        code: 'UNAUTHENTICATED',
        message: `a request needs the control plane's request token (${REQUEST_TOKEN_HEADER}): this runtime is reached through its control plane only`,
      };
    const nowMs = (check.now ?? Date.now)();
    const result = verifyRequestToken(raw, {
      publicKey: check.publicKey,
      tenantId: check.tenantId,
      runtimeId: check.runtimeId,
      method: req.method ?? '',
      path: url,
      nowMs,
      ...(check.skewSeconds !== undefined ? { skewSeconds: check.skewSeconds } : {}),
    });
    if (!result.ok) return { code: 'INVALID_REQUEST_TOKEN', message: `request token refused: ${result.reason}` };
    if (!replay.use(result.claims.jti, result.claims.exp, nowMs))
      return { code: 'INVALID_REQUEST_TOKEN', message: 'request token refused: already used' };
    return undefined;
  };

  const handler = (req: IncomingMessage, res: ServerResponse): void => {
    const url = req.url ?? '/';
    const pathname = url.split('?', 1)[0]!;
    const isHealth =
      (pathname === '/healthz' || pathname === '/readyz') && (req.method === 'GET' || req.method === 'HEAD');
    const refused = isHealth ? undefined : refusal(req, url);
    if (refused !== undefined) {
      log.warn({ method: req.method, path: pathname, reason: refused.message }, 'request token refused');
      req.resume();
      sendJson(res, 401, { error: refused });
      return;
    }
    if (pathname === '/api' || pathname.startsWith('/api/')) {
      proxy(api, url, req, res);
    } else if (pathname === '/webhooks' || pathname.startsWith('/webhooks/')) {
      const rest = url.slice('/webhooks'.length);
      proxy(events, rest.startsWith('/') ? rest : `/${rest}`, req, res);
    } else if (argoCd && (pathname === '/argo-cd' || pathname.startsWith('/argo-cd/'))) {
      const rest = url.slice('/argo-cd'.length);
      proxy(argoCd, rest.startsWith('/') ? rest : `/${rest}`, req, res);
    } else if (isHealth) {
      health.handle(req, res);
    } else {
      req.resume();
      sendJson(res, 404, {
        error: {
          code: 'ROUTE_NOT_FOUND',
          message: `no route for ${req.method ?? ''} ${pathname}: the runtime serves /api/*, /webhooks/*${argoCd ? ' and /argo-cd/*' : ''}`,
        },
      });
    }
  };

  return {
    handler,
    close() {
      api.agent.destroy();
      events.agent.destroy();
      argoCd?.agent.destroy();
    },
  };
}
