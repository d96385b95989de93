/**
 * The request router: the tunnel client's one upstream inside the runtime. `/api/*` goes to the
 * app-proxy, `/webhooks/*` to the Argo Events event source (with the `/webhooks` prefix removed),
 * `/healthz` is its own health, anything else is 404. Bodies are streamed both ways.
 */
import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import https from 'node:https';
import pino, { type BaseLogger } from 'pino';
import { headerListFrom, headersObject } from '../../protocol/headers.ts';
import { retriableUpstreamError } from '../common/retry.ts';

export interface RouterOptions {
  /** Base URL of the app-proxy. */
  appProxyUrl: string;
  /** Base URL of the Argo Events webhook event source. */
  eventSourceUrl: string;
  logger?: BaseLogger;
  /** Keep-alive sockets per upstream (default 256). */
  maxSockets?: number;
  /** Upstream response head timeout (default 30 s). */
  upstreamTimeoutMs?: number;
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
  const timeoutMs = opts.upstreamTimeoutMs ?? 30_000;

  function proxy(target: Upstream, path: string, req: IncomingMessage, res: ServerResponse): void {
    const headers = headerListFrom(req.rawHeaders, new Set(['host']));
    headers.push(['x-forwarded-host', req.headers.host ?? '']);
    const basePath = target.url.pathname.replace(/\/$/, '');
    let bodyBytes = 0;
    req.on('data', (c: Buffer) => {
      bodyBytes += c.length;
    });
    let current: http.ClientRequest | null = null;
    res.on('close', () => {
      if (!res.writableFinished) current?.destroy();
    });
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

  const handler = (req: IncomingMessage, res: ServerResponse): void => {
    const url = req.url ?? '/';
    const pathname = url.split('?', 1)[0]!;
    if (pathname === '/api' || pathname.startsWith('/api/')) {
      proxy(api, url, req, res);
    } else if (pathname === '/webhooks' || pathname.startsWith('/webhooks/')) {
      const rest = url.slice('/webhooks'.length);
      proxy(events, rest.startsWith('/') ? rest : `/${rest}`, req, res);
    } else if (pathname === '/healthz' && (req.method === 'GET' || req.method === 'HEAD')) {
      sendJson(res, 200, { status: 'ok' });
    } else {
      req.resume();
      sendJson(res, 404, {
        error: {
          code: 'ROUTE_NOT_FOUND',
          message: `no route for ${req.method ?? ''} ${pathname}: the runtime serves /api/* and /webhooks/*`,
        },
      });
    }
  };

  return {
    handler,
    close() {
      api.agent.destroy();
      events.agent.destroy();
    },
  };
}
