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

/**
 * The longest line the rules below read (and the longest line of the tenant-visible text): a
 * longer line is cut before any pattern runs, so that the work per line is bounded whatever the
 * engine prints. The word the cut falls in is dropped too (a credential cut in two must not show
 * its first half), and `…` marks the cut.
 */
export const MAX_VISIBLE_LINE = 4000;

/** A line cut to MAX_VISIBLE_LINE characters (with `…`), without the word the cut falls in. */
function capLine(line: string): string {
  if (line.length <= MAX_VISIBLE_LINE) return line;
  let end = MAX_VISIBLE_LINE - 1;
  // Back to the last whitespace before the cut (a plain loop: a pattern here would be the slow part).
  while (end > 0 && !/\s/.test(line[end - 1]!)) end--;
  return line.slice(0, end) + '…';
}

// Every pattern below is linear in the line it reads: each begins with a literal or a bounded
// run, and none has a quantified part followed by something that may fail after it (a failed
// match gives up after a bounded number of characters, or consumes what it read).

/** A URL: a scheme (at most 32 characters), `://` and the rest up to whitespace, a quote or `<`/`>`. */
const URL = /([a-z][a-z0-9+.-]{0,31}:\/\/)([^\s"'<>]*)/gi;

/** A URL's user info masked and its query string dropped; the scheme, host and path kept. */
function maskUrl(_m: string, scheme: string, rest: string): string {
  let out = rest;
  // https://user:password@host: the first `@` before the path.
  const at = out.indexOf('@');
  const slash = out.indexOf('/');
  if (at > 0 && (slash < 0 || at < slash)) out = `[secret]${out.slice(at)}`;
  // A query string (access_token=…, token=…, X-Amz-Signature=…): dropped as a whole.
  const query = out.indexOf('?');
  if (query > 0) out = `${out.slice(0, query)}?[query withheld]`;
  return scheme + out;
}

/** Credentials that look like credentials wherever they appear, and URL parts that carry them. */
function maskCredentials(text: string): string {
  return (
    text
      // Authorization header values.
      .replace(/\b(Bearer|Basic)\s+[A-Za-z0-9._~+/=-]{6,}/gi, '$1 [secret]')
      .replace(URL, maskUrl)
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

/** Index of the `"` closing the string opened at `start` (escapes honoured), or -1. */
function closingQuote(text: string, start: number): number {
  for (let i = start + 1; i < text.length; i++) {
    const c = text[i];
    if (c === '\\') i++;
    else if (c === '"') return i;
  }
  return -1;
}

/**
 * JSON objects (`{"…`) in one line replaced by WITHHELD; an unclosed one is withheld to the end of
 * the line (the lines of a JSON document printed over several lines are withheld line by line).
 */
function withholdJson(line: string): string {
  const open = /\{\s*"/g;
  let out = '';
  let i = 0;
  for (;;) {
    open.lastIndex = i;
    const m = open.exec(line);
    if (!m) return out + line.slice(i);
    out += line.slice(i, m.index) + WITHHELD;
    const end = closingBrace(line, m.index);
    if (end < 0) return out;
    i = end + 1;
  }
}

const SERVER_ERROR = 'an error on the server (';
const PREVENTED = ') has prevented the request from succeeding';

/**
 * client-go: `an error on the server ("<body>") has prevented the request from succeeding (get
 * pods)`: the body withheld, line by line. A body that does not end on its line is withheld to the
 * end of the line, and the lines after it up to the one where it ends (`inBody` carries that from
 * line to line).
 */
function withholdServerBodies(line: string, state: { inBody: boolean }): string {
  let out = '';
  let i = 0;
  if (state.inBody) {
    const end = line.indexOf(PREVENTED);
    if (end < 0) return WITHHELD;
    out = WITHHELD;
    i = end;
    state.inBody = false;
  }
  for (;;) {
    const p = line.indexOf(SERVER_ERROR, i);
    if (p < 0) return out + line.slice(i);
    const bodyStart = p + SERVER_ERROR.length;
    let end = -1;
    // A quoted body ends at its closing quote (it may hold the words that end it unquoted).
    if (line[bodyStart] === '"') {
      const q = closingQuote(line, bodyStart);
      if (q >= 0 && line.startsWith(PREVENTED, q + 1)) end = q + 1;
    }
    if (end < 0) end = line.indexOf(PREVENTED, bodyStart);
    out += line.slice(i, bodyStart) + WITHHELD;
    if (end < 0) {
      state.inBody = true;
      return out;
    }
    i = end;
  }
}

/**
 * One line: HTML and `body:` tails cut, the members of a multi-line JSON document withheld. A line
 * of a bracket alone (`{`, `}`, `],`) holds nothing to withhold and is kept: the engine's own
 * `Outputs:` close an object output with one, and a withheld one read as if the tenant's outputs
 * had come from upstream.
 */
function withholdInLine(line: string): string {
  let out = line;
  const body = /\b(?:response body|body)\s*:\s*/i.exec(out);
  if (body) out = out.slice(0, body.index + body[0].length) + WITHHELD;
  const tag = HTML_TAG.exec(out);
  if (tag) out = out.slice(0, tag.index) + WITHHELD;
  // A JSON document printed over several lines: its `"member": …` lines.
  if (/^\s*"[^"]*"\s*:.*$/.test(out)) out = out.replace(/\S.*$/, WITHHELD);
  return out;
}

/** Runs of withheld parts (only whitespace between them) read as one. */
function mergeWithheld(text: string): string {
  const parts = text.split(WITHHELD);
  let out = parts[0]!;
  for (let i = 1; i < parts.length; i++) {
    const part = parts[i]!;
    if (i < parts.length - 1 && part.trim() === '') continue;
    out += WITHHELD + part;
  }
  return out;
}

/**
 * The tenant-visible form of an engine text (one line or many): secrets masked, upstream bodies
 * withheld, the error's class and resource kept, every line at most MAX_VISIBLE_LINE characters.
 * Idempotent, and linear in the text's length: the known secrets are masked in the whole text,
 * then each line is cut to MAX_VISIBLE_LINE before any pattern reads it.
 */
export function tenantVisible(text: string, secrets: readonly string[] = []): string {
  const state = { inBody: false };
  const visible = maskSecrets(text, secrets)
    .split('\n')
    .map((l) => withholdInLine(withholdJson(withholdServerBodies(maskCredentials(capLine(l)), state))))
    .join('\n');
  return mergeWithheld(visible);
}
