/**
 * The ops console (console/, built into console/dist by scripts/build-console.ts): its files are
 * read once when the app is built, kept in memory and served from that fixed list, so no request
 * path ever reaches the file system. `/console` answers the page; `/console/assets/<name>` its
 * hashed assets (cached for a year). Everything the page shows it reads through the public API
 * with the key the user typed (kept in the tab's sessionStorage, never in a URL).
 *
 * The page gets its own Content-Security-Policy: its scripts, styles and requests from this
 * origin only, nothing inline, no frames.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { FastifyPluginAsync, FastifyReply } from 'fastify';
import { Type } from 'typebox';
import { AppError, errors } from '../../errors.ts';

export const CONSOLE_DIST = fileURLToPath(new URL('../../../console/dist/', import.meta.url));

export const CONSOLE_CSP =
  "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; " +
  "base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

const TYPES: Record<string, string> = {
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.map': 'application/json; charset=utf-8',
};

interface Asset {
  body: Buffer;
  type: string;
}

/** The built console's files, or undefined when it was not built. */
export function loadConsole(dir = CONSOLE_DIST): { index: Buffer; assets: Map<string, Asset> } | undefined {
  let index: Buffer;
  try {
    index = readFileSync(`${dir}index.html`);
  } catch {
    return undefined;
  }
  const assets = new Map<string, Asset>();
  for (const name of readdirSync(`${dir}assets`)) {
    const type = TYPES[name.slice(name.lastIndexOf('.'))];
    if (type) assets.set(name, { body: readFileSync(`${dir}assets/${name}`), type });
  }
  return { index, assets };
}

export const consoleRoutes =
  (built = loadConsole()): FastifyPluginAsync =>
  async (app) => {
    // Runs after the API's own onSend hook (this scope is a child of it): the page's policy replaces the API's.
    app.addHook('onSend', async (_request, reply, payload) => {
      if (reply.statusCode < 400) reply.header('content-security-policy', CONSOLE_CSP);
      return payload;
    });
    const page = async (_request: unknown, reply: FastifyReply) => {
      if (!built)
        throw new AppError(
          'ROUTE_NOT_FOUND',
          'the console is not built: `npm start` builds it (scripts/build-console.ts, with the dev dependencies installed)',
        );
      return reply
        .type('text/html; charset=utf-8')
        .header('cache-control', 'no-cache')
        .header('referrer-policy', 'no-referrer')
        .send(built.index);
    };
    for (const url of ['/console', '/console/'])
      app.get(url, { config: { public: true }, schema: { hide: true } }, page);
    app.get(
      '/console/assets/:name',
      {
        config: { public: true },
        schema: {
          hide: true,
          params: Type.Object({ name: Type.String({ maxLength: 100 }) }, { additionalProperties: false }),
        },
      },
      async (request, reply) => {
        const asset = built?.assets.get((request.params as { name: string }).name);
        if (!asset) throw errors.routeNotFound('GET', request.url);
        return reply.type(asset.type).header('cache-control', 'public, max-age=31536000, immutable').send(asset.body);
      },
    );
  };
