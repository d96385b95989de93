/**
 * A fetch over fastify's inject: the one API client (provisioner/http/api-client.ts) calls an app
 * under test in process, with no socket, when given this as its `fetch`:
 *
 *     new ApiClient({ token: key, fetch: injectFetch(app) })
 *
 * The request's method, path, headers and body go to `app.inject`; its answer comes back as a
 * Response (status, headers, body). An answer is read whole before it returns, so a stream route
 * (Server-Sent Events) is not for this fetch: a test reads those from a listening server.
 */
import type { FastifyInstance } from 'fastify';

export function injectFetch(app: FastifyInstance): typeof fetch {
  return async (input, init) => {
    // the client's default base URL is '' (the page's origin): a path alone is the app's
    const req = new Request(
      typeof input === 'string' && input.startsWith('/') ? `http://localhost${input}` : input,
      init,
    );
    const url = new URL(req.url);
    const body = req.body ? Buffer.from(await req.arrayBuffer()) : undefined;
    const res = await app.inject({
      method: req.method as 'GET',
      url: url.pathname + url.search,
      headers: Object.fromEntries(req.headers),
      ...(body !== undefined ? { payload: body } : {}),
    });
    const headers = new Headers();
    for (const [name, value] of Object.entries(res.headers)) {
      if (value === undefined) continue;
      for (const v of Array.isArray(value) ? value : [value]) headers.append(name, String(v));
    }
    const empty = res.statusCode === 204 || res.statusCode === 304 || req.method === 'HEAD';
    return new Response(empty ? null : res.rawPayload, {
      status: res.statusCode,
      statusText: res.statusMessage,
      headers,
    });
  };
}
