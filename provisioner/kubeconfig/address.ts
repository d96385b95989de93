/**
 * The outbound address policy for every connection the control plane makes to a server a caller
 * named (a kubeconfig's cluster server today). Checked on the address actually connected to: a
 * name is resolved once, every address it resolves to is checked, and the connection is pinned
 * to the checked address (no second lookup a DNS rebinding could answer differently).
 *
 * Always refused: link-local (169.254.0.0/16 with the cloud metadata address, fe80::/10),
 * unspecified and "this network" (0.0.0.0/8, ::), multicast and reserved (224.0.0.0/3, ff00::/8).
 * Refused unless the operator lists the range (PROVISIONER_CLUSTER_ALLOWED_CIDRS, for
 * operator-registered clusters only): loopback, private, shared and unique-local ranges.
 * Numeric spellings (2130706433, 0x7f000001, 127.1) and IPv4-mapped IPv6 are normalised by the
 * URL parser and matched as the IPv4 address they are.
 */
import { BlockList, isIP } from 'node:net';
import { lookup as dnsLookup } from 'node:dns/promises';

type Range = [address: string, prefix: number, family: 'ipv4' | 'ipv6', what: string];

const NEVER: Range[] = [
  ['0.0.0.0', 8, 'ipv4', 'an unspecified ("this network") address'],
  ['169.254.0.0', 16, 'ipv4', 'a link-local address (cloud metadata lives there)'],
  ['224.0.0.0', 4, 'ipv4', 'a multicast address'],
  ['240.0.0.0', 4, 'ipv4', 'a reserved address'],
  ['::', 128, 'ipv6', 'the unspecified address'],
  ['fe80::', 10, 'ipv6', 'a link-local address'],
  ['ff00::', 8, 'ipv6', 'a multicast address'],
];

const INTERNAL: Range[] = [
  ['127.0.0.0', 8, 'ipv4', 'a loopback address'],
  ['10.0.0.0', 8, 'ipv4', 'a private address'],
  ['172.16.0.0', 12, 'ipv4', 'a private address'],
  ['192.168.0.0', 16, 'ipv4', 'a private address'],
  ['100.64.0.0', 10, 'ipv4', 'a shared (carrier-grade NAT) address'],
  ['198.18.0.0', 15, 'ipv4', 'a benchmarking address'],
  ['::1', 128, 'ipv6', 'a loopback address'],
  ['fc00::', 7, 'ipv6', 'a unique-local (private) address'],
  ['fec0::', 10, 'ipv6', 'a site-local (private) address'],
  ['64:ff9b::', 96, 'ipv6', 'a NAT64 address (it reaches IPv4 addresses)'],
];

function listOf(ranges: Range[]): Array<[BlockList, string]> {
  return ranges.map(([address, prefix, family, what]) => {
    const list = new BlockList();
    list.addSubnet(address, prefix, family);
    return [list, what];
  });
}
const NEVER_LISTS = listOf(NEVER);
const INTERNAL_LISTS = listOf(INTERNAL);

/** Parses `a.b.c.d/n` or `x:y::/n`; undefined when it is not a CIDR. */
export function parseCidr(cidr: string): { address: string; prefix: number; family: 'ipv4' | 'ipv6' } | undefined {
  const m = /^([^/]+)\/(\d{1,3})$/.exec(cidr.trim());
  if (!m) return undefined;
  const version = isIP(m[1]!);
  const prefix = Number(m[2]);
  if (version === 0 || prefix > (version === 4 ? 32 : 128)) return undefined;
  return { address: m[1]!, prefix, family: version === 4 ? 'ipv4' : 'ipv6' };
}

/** Which addresses a connection may go to. */
export interface AddressPolicy {
  /** Loopback and private ranges allowed (CIDRs); the always-refused ranges stay refused. */
  allowedCidrs: readonly string[];
}

function allowList(cidrs: readonly string[]): BlockList {
  const list = new BlockList();
  for (const c of cidrs) {
    const parsed = parseCidr(c);
    if (parsed) list.addSubnet(parsed.address, parsed.prefix, parsed.family);
  }
  return list;
}

/** Why an address is refused, or undefined when a connection may go there. */
export function addressProblem(address: string, policy: AddressPolicy): string | undefined {
  const version = isIP(address);
  if (version === 0) return `'${address}' is not an IP address`;
  const family = version === 4 ? 'ipv4' : 'ipv6';
  for (const [list, what] of NEVER_LISTS)
    if (list.check(address, family)) return `${address} is ${what}; the control plane never connects there`;
  for (const [list, what] of INTERNAL_LISTS) {
    if (list.check(address, family) && !allowList(policy.allowedCidrs).check(address, family)) {
      return `${address} is ${what}; the control plane only connects there when PROVISIONER_CLUSTER_ALLOWED_CIDRS lists its range`;
    }
  }
  return undefined;
}

/** The host of a URL without IPv6 brackets. */
export function hostOf(url: URL): string {
  return url.hostname.startsWith('[') ? url.hostname.slice(1, -1) : url.hostname;
}

export type Lookup = (host: string) => Promise<Array<{ address: string }>>;
const defaultLookup: Lookup = (host) => dnsLookup(host, { all: true, verbatim: true });

export class AddressRefusedError extends Error {
  override name = 'AddressRefusedError';
}

/**
 * Resolves a URL's host once and checks every address it resolves to. Returns the address to
 * connect to (the host itself when it is an IP literal).
 */
export async function resolveChecked(url: URL, policy: AddressPolicy, lookup: Lookup = defaultLookup): Promise<string> {
  const host = hostOf(url);
  if (isIP(host) !== 0) {
    const problem = addressProblem(host, policy);
    if (problem) throw new AddressRefusedError(problem);
    return host;
  }
  let addresses: Array<{ address: string }>;
  try {
    addresses = await lookup(host);
  } catch (err) {
    const code = typeof err === 'object' && err !== null && 'code' in err ? String(err.code) : 'lookup failed';
    throw new AddressRefusedError(`'${host}' does not resolve (${code})`);
  }
  if (addresses.length === 0) throw new AddressRefusedError(`'${host}' does not resolve`);
  for (const { address } of addresses) {
    const problem = addressProblem(address, policy);
    if (problem) throw new AddressRefusedError(`'${host}' resolves to ${problem}`);
  }
  return addresses[0]!.address;
}
