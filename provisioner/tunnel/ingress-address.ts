/**
 * The address policy of an ingress-based hybrid runtime's `ingressUrl`. The URL is a tenant's,
 * so the control plane calling it must not become a way into the control plane's own network:
 * the same outbound policy as managed clusters' API servers (kubeconfig-policy/address.ts:
 * link-local and metadata never, loopback and private ranges only when the operator lists them,
 * in PROVISIONER_HYBRID_INGRESS_ALLOWED_CIDRS), plus the control plane's own public address and
 * port (a runtime cannot make the control plane call itself).
 *
 * Checked at registration (a 400 naming what is wrong) and again on every new connection (DNS
 * can change between the two): the name is resolved once, every address checked, and the
 * connection made to the checked address (ingress.ts).
 */
import { lookup as dnsLookup } from 'node:dns/promises';
import { isIP } from 'node:net';
import { quoted } from '../errors.ts';
import {
  addressProblem,
  AddressRefusedError,
  hostOf,
  resolveChecked,
  type AddressPolicy,
  type Lookup,
} from '../../kubeconfig-policy/address.ts';

export { AddressRefusedError, type Lookup } from '../../kubeconfig-policy/address.ts';

export interface IngressAddressPolicy extends AddressPolicy {
  /** The control plane's own public URL (PROVISIONER_PUBLIC_URL): its host and port are refused. */
  ownUrl?: string | undefined;
}

/**
 * Characters an ingressUrl never holds: every control (C0, DEL, C1), format character (U+200B,
 * U+FEFF, the bidirectional marks) and separator or space (U+0020, U+00A0, U+2028, U+2029, …).
 * Checked on the raw string: the URL parser drops tab, CR and LF without a word, so a URL that
 * parses can still carry them.
 */
const NOT_IN_A_URL = /[\p{Cc}\p{Cf}\p{Z}]/u;

/**
 * Why `raw` cannot be an ingressUrl by its spelling alone, or undefined: an https origin
 * (`https://host[:port]`, a trailing `/` at most) with no character the URL parser would drop or
 * rewrite, no credentials, query, fragment or path. Messages quote the value printable and short.
 */
export function ingressUrlShapeProblem(raw: string): string | undefined {
  const shown = quoted(raw);
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return `ingressUrl '${shown}' is not a URL`;
  }
  if (NOT_IN_A_URL.test(raw))
    return `ingressUrl '${shown}' holds a control, format or whitespace character (shown as ?): give the URL alone`;
  if (url.protocol !== 'https:')
    return `ingressUrl '${shown}' must be an https URL (the runtime is called over TLS only)`;
  if (url.username !== '' || url.password !== '' || raw.includes('@'))
    return `ingressUrl '${shown}' must not carry credentials (the control plane signs each request itself)`;
  if (url.search !== '' || raw.includes('?')) return `ingressUrl '${shown}' must not have a query`;
  if (url.hash !== '' || raw.includes('#')) return `ingressUrl '${shown}' must not have a fragment`;
  if (url.pathname !== '/')
    return `ingressUrl '${shown}' must not have a path: the ingress serves the request router at the root (it answers /api/* and /webhooks/*)`;
  // What the parser rewrites without a word: `https:host`, `https:\\host`, `https://host\`.
  if (!/^https:\/\/[^/\\]+\/?$/i.test(raw))
    return `ingressUrl '${shown}' must be written as https://host or https://host:port`;
  return undefined;
}

/**
 * The stored form of an ingressUrl that ingressUrlShapeProblem accepts: its origin (lower-case
 * host, IDN as punycode, IPv6 in brackets, the default port dropped, no trailing `/`).
 */
export function normalIngressUrl(raw: string): string {
  const problem = ingressUrlShapeProblem(raw);
  if (problem) throw new Error(problem);
  return new URL(raw).origin;
}

const portOf = (url: URL): string => url.port || (url.protocol === 'https:' || url.protocol === 'wss:' ? '443' : '80');

/** The control plane's own host and port, when `url` names them. */
function ownProblem(
  url: URL,
  addresses: readonly string[],
  policy: IngressAddressPolicy,
  ownAddresses: readonly string[],
) {
  if (policy.ownUrl === undefined) return undefined;
  const own = new URL(policy.ownUrl);
  if (portOf(own) !== portOf(url)) return undefined;
  if (hostOf(own).toLowerCase() === hostOf(url).toLowerCase() || addresses.some((a) => ownAddresses.includes(a)))
    return `ingressUrl '${url.href}' is the control plane's own address (PROVISIONER_PUBLIC_URL); name the runtime's ingress`;
  return undefined;
}

async function addressesOf(host: string, lookup: Lookup): Promise<string[]> {
  if (isIP(host) !== 0) return [host];
  return (await lookup(host)).map((a) => a.address);
}

const defaultLookup: Lookup = (host) => dnsLookup(host, { all: true, verbatim: true });

/** The longest a registration waits for a name to resolve; then it is taken as not resolving yet. */
export const REGISTRATION_LOOKUP_TIMEOUT_MS = 3000;

/** `lookup`, failing after `ms`. */
function bounded(lookup: Lookup, ms: number): Lookup {
  return (host) =>
    new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no answer for '${host}' within ${ms} ms`)), ms);
      lookup(host).then(
        (found) => {
          clearTimeout(timer);
          resolve(found);
        },
        (err: unknown) => {
          clearTimeout(timer);
          reject(err instanceof Error ? err : new Error(String(err)));
        },
      );
    });
}

/**
 * At registration: why the URL's addresses are refused, or undefined. A name that does not
 * resolve (yet, or within REGISTRATION_LOOKUP_TIMEOUT_MS) passes: the customer may create its DNS
 * record with the ingress, after registering; the check on every connection refuses whatever it
 * resolves to then.
 */
export async function ingressRegistrationProblem(
  raw: string,
  policy: IngressAddressPolicy,
  givenLookup: Lookup = defaultLookup,
): Promise<string | undefined> {
  const lookup = bounded(givenLookup, REGISTRATION_LOOKUP_TIMEOUT_MS);
  const shape = ingressUrlShapeProblem(raw);
  if (shape) return shape;
  const url = new URL(raw);
  const host = hostOf(url);
  let addresses: string[];
  try {
    addresses = await addressesOf(host, lookup);
  } catch {
    addresses = [];
  }
  for (const address of addresses) {
    const problem = addressProblem(address, policy);
    if (problem) return `ingressUrl '${raw}': ${isIP(host) === 0 ? `'${host}' resolves to ` : ''}${problem}`;
  }
  return ownProblem(url, addresses, policy, await ownAddresses(policy, lookup));
}

async function ownAddresses(policy: IngressAddressPolicy, lookup: Lookup): Promise<string[]> {
  if (policy.ownUrl === undefined) return [];
  try {
    return await addressesOf(hostOf(new URL(policy.ownUrl)), lookup);
  } catch {
    return [];
  }
}

/**
 * At connect time: resolves the host once, checks every address, and returns the one to connect
 * to; throws AddressRefusedError naming why not (a name that does not resolve included).
 */
export async function resolveIngress(
  url: URL,
  policy: IngressAddressPolicy,
  lookup: Lookup = defaultLookup,
): Promise<string> {
  const address = await resolveChecked(url, policy, lookup);
  const own = ownProblem(url, [address], policy, await ownAddresses(policy, lookup));
  if (own) throw new AddressRefusedError(own);
  return address;
}
