/**
 * What of the engine's text a tenant may read. Engine output, engine events and engine errors go
 * to the tenant-readable operation log, to the operation's error and to the tenant's conditions;
 * they quote what the Kubernetes provider, Helm and client-go received from a cluster's API server
 * (or from whatever answered at the cluster's address) and the URLs they called. The rule
 * (docs/security.md "Engine errors a tenant sees"):
 *
 *  - kept: the error's class and the resource it concerns: Pulumi's resource header and URN,
 *    "failed to create resource", "the server responded with the status code 502", client-go's
 *    "(post namespaces)", Go's network errors (`dial tcp …: connection refused`), status codes;
 *  - withheld, replaced by `[upstream response withheld]`: upstream bodies: client-go's quoted
 *    body in `an error on the server ("…")`, anything after `body:`, HTML, JSON objects, the
 *    members of a JSON document printed over several lines;
 *  - masked as `[secret]`: the known secret values (maskSecrets: the tenant's runtime token, the
 *    root kubeconfig's credentials, the backend passwords), `Bearer`/`Basic` credentials, a URL's
 *    user info; a URL's query string is dropped (`?[query withheld]`: tokens travel there).
 *
 * The full text, with secrets masked, goes to the operator's server log only.
 */

export const WITHHELD = '[upstream response withheld]';

/** Replaces every known secret value (8 characters or more, longest first) with `[secret]`. */
export function maskSecrets(text: string, secrets: readonly string[]): string {
  let out = text;
  for (const s of secrets) if (s.length >= 8) out = out.split(s).join('[secret]');
  return out;
}

/** Secrets in the shape of a sorted list for maskSecrets (longest first, short ones dropped). */
export function secretList(secrets: readonly string[]): string[] {
  return [...new Set(secrets.filter((s) => s.length >= 8))].sort((a, b) => b.length - a.length);
}

/** Credentials that look like credentials wherever they appear, and URL parts that carry them. */
function maskCredentials(text: string): string {
  return (
    text
      // Authorization header values.
      .replace(/\b(Bearer|Basic)\s+[A-Za-z0-9._~+/=-]{6,}/gi, '$1 [secret]')
      // https://user:password@host
      .replace(/\b([a-z][a-z0-9+.-]*:\/\/)[^\s/@"'<>]+@/gi, '$1[secret]@')
      // A query string (access_token=…, token=…, X-Amz-Signature=…): dropped as a whole.
      .replace(/\b([a-z][a-z0-9+.-]*:\/\/[^\s?"'<>]+)\?[^\s"'<>]*/gi, '$1?[query withheld]')
      // key=value pairs named like secrets (a query string outside a URL, a form body).
      .replace(
        /\b((?:access_?token|id_?token|refresh_?token|token|password|passwd|secret|api_?key|client_?secret)=)[^\s"',;&]{4,}/gi,
        '$1[secret]',
      )
  );
}

const HTML_TAG =
  /<\s*(?:!doctype|\/?(?:html|head|body|title|h[1-6]|p|pre|div|span|center|hr|br|a|script|style|meta|link|table|tr|td)\b)/i;

/** Index of the `}` closing the `{` at `start` (strings and escapes honoured), or -1. */
function closingBrace(text: string, start: number): number {
  let depth = 0;
  let inString = false;
  for (let i = start; i < text.length; i++) {
    const c = text[i];
    if (inString) {
      if (c === '\\') i++;
      else if (c === '"') inString = false;
    } else if (c === '"') inString = true;
    else if (c === '{') depth++;
    else if (c === '}' && --depth === 0) return i;
  }
  return -1;
}

/** JSON objects (`{"…`) replaced by WITHHELD; an unclosed one is withheld to the end of its line. */
function withholdJson(text: string): string {
  let out = '';
  let i = 0;
  for (;;) {
    const m = /\{\s*"/.exec(text.slice(i));
    if (!m) return out + text.slice(i);
    const start = i + m.index;
    out += text.slice(i, start) + WITHHELD;
    const end = closingBrace(text, start);
    if (end >= 0) i = end + 1;
    else {
      const eol = text.indexOf('\n', start);
      if (eol < 0) return out;
      i = eol;
    }
  }
}

/** One line: HTML and `body:` tails cut, lines of a multi-line JSON document withheld. */
function withholdInLine(line: string): string {
  let out = line;
  const body = /\b(?:response body|body)\s*:\s*/i.exec(out);
  if (body) out = out.slice(0, body.index + body[0].length) + WITHHELD;
  const tag = HTML_TAG.exec(out);
  if (tag) out = out.slice(0, tag.index) + WITHHELD;
  // A JSON document printed over several lines: `{`, `}`, `"member": …`, `],` lines.
  if (/^\s*(?:[{}[\]],?|"[^"]*"\s*:.*)\s*$/.test(out) && out.trim() !== '') out = out.replace(/\S.*$/, WITHHELD);
  return out;
}

/**
 * The tenant-visible form of an engine text (one line or many): secrets masked, upstream bodies
 * withheld, the error's class and resource kept. Idempotent.
 */
export function tenantVisible(text: string, secrets: readonly string[] = []): string {
  let out = maskCredentials(maskSecrets(text, secrets));
  // client-go: an error on the server ("<body>") has prevented the request from succeeding (get pods)
  out = out.replace(
    /(an error on the server \()("(?:[^"\\]|\\.)*"|[\s\S]*?)(\) has prevented the request from succeeding)/g,
    (_m, a: string, _b: string, c: string) => `${a}${WITHHELD}${c}`,
  );
  out = withholdJson(out);
  out = out
    .split('\n')
    .map((l) => withholdInLine(l))
    .join('\n');
  // Runs of withheld parts read as one.
  return out.replace(new RegExp(`(?:${escape(WITHHELD)}\\s*)+${escape(WITHHELD)}`, 'g'), WITHHELD);
}

function escape(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}
