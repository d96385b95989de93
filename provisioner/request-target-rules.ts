/**
 * The request target every API request must have: checked in the HTTP server's request listener
 * (http/request-target.ts) before fastify routes the request, and again by the runtime proxy
 * (tunnel/route.ts) and the webhooks route on the path they pass on.
 *
 * - Origin-form only: the target starts with `/`. Node accepts an absolute-form request line
 *   (`GET http://host/path HTTP/1.1`) and fastify's router matches it by its path, so a target
 *   that names another host would reach a route with its host still in `request.url`; `*`
 *   (`OPTIONS *`) and authority-form are refused too. The API is never a forward proxy.
 * - No fragment (`#`): clients never send one, and the router cuts the path there while a
 *   forwarded path would keep what follows.
 * - No dot segments (`.` or `..`, plain or percent-encoded: `%2e`, `.%2E`, …), no backslash
 *   (URL parsers read it as `/`) in the path, nor a path starting with `//`: no route of the API
 *   has such a path, and a proxied path is passed on to a runtime (or relayed to another replica)
 *   as it came, where a hop that resolves it would see another path than the one authorized
 *   here. The query is not checked: it is never resolved as a path.
 * - A proxied path (the runtime routes, tunnel/route.ts) holds no encoded slash or backslash
 *   (`%2F`, `%5C`) either: a hop that decodes before it resolves would turn `..%2F` into a dot
 *   segment (proxiedPathProblem). Other routes' parameters never take one (their patterns refuse
 *   it), and a file route answers such a path 404 like any unknown file.
 */

/** Why a request target is refused (the answer's message), or undefined when it is served. */
export function requestTargetProblem(target: string): string | undefined {
  if (!target.startsWith('/'))
    return 'the request target must be a path starting with "/" (origin-form): an absolute URL, an authority or "*" is not served';
  if (target.includes('#')) return 'the request target must not contain "#" (a fragment is never sent)';
  const q = target.indexOf('?');
  const path = q === -1 ? target : target.slice(0, q);
  if (path.startsWith('//')) return 'the path must not start with "//"';
  if (path.includes('\\')) return 'the path must not contain a backslash';
  for (const segment of path.split('/')) {
    const decoded = segment.replace(/%2e/gi, '.');
    if (decoded === '.' || decoded === '..')
      return 'the path must not contain dot segments ("." or "..", plain or percent-encoded): send the path they resolve to';
  }
  return undefined;
}

/**
 * Why a path passed on to a runtime is refused besides requestTargetProblem (an encoded slash or
 * backslash), or undefined. `path` is the request target or the part of it that is passed on.
 */
export function proxiedPathProblem(path: string): string | undefined {
  const q = path.indexOf('?');
  const p = q === -1 ? path : path.slice(0, q);
  if (/%2f/i.test(p)) return 'the path must not contain an encoded slash (%2F): send "/" or another character';
  if (/%5c/i.test(p)) return 'the path must not contain an encoded backslash (%5C)';
  return undefined;
}
