/**
 * Header handling shared by the tunnel ends and the request router: hop-by-hop headers belong to
 * one HTTP connection and never cross a proxy (RFC 9110 §7.6.1).
 */
import type { OutgoingHttpHeaders } from 'node:http';
import type { HeaderList } from './frames.ts';

const HOP_BY_HOP = new Set([
  'connection',
  'keep-alive',
  'proxy-authenticate',
  'proxy-authorization',
  'proxy-connection',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
  'http2-settings',
]);

/** Header pairs from Node's `rawHeaders`, lower-cased, without hop-by-hop headers (nor those `Connection` names) or `drop`. */
export function headerListFrom(rawHeaders: readonly string[], drop: ReadonlySet<string> = new Set()): HeaderList {
  const named = new Set<string>();
  for (let i = 0; i + 1 < rawHeaders.length; i += 2) {
    if (rawHeaders[i]!.toLowerCase() === 'connection') {
      for (const t of rawHeaders[i + 1]!.split(',')) named.add(t.trim().toLowerCase());
    }
  }
  const out: HeaderList = [];
  for (let i = 0; i + 1 < rawHeaders.length; i += 2) {
    const name = rawHeaders[i]!.toLowerCase();
    if (HOP_BY_HOP.has(name) || named.has(name) || drop.has(name)) continue;
    out.push([name, rawHeaders[i + 1]!]);
  }
  return out;
}

/** Header pairs as an object for `http.request` / `writeHead`; repeated names become arrays. */
export function headersObject(list: HeaderList): OutgoingHttpHeaders {
  const out: Record<string, string | string[]> = {};
  for (const [k, v] of list) {
    const prev = out[k];
    if (prev === undefined) out[k] = v;
    else if (Array.isArray(prev)) prev.push(v);
    else out[k] = [prev, v];
  }
  return out;
}

/** Value of the first header `name` in `list`. */
export function headerValue(list: HeaderList, name: string): string | undefined {
  for (const [k, v] of list) if (k === name) return v;
  return undefined;
}
