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
 * URL parser and matched as the IPv4 address they are. IPv6 forms that carry an IPv4 address
 * (IPv4-compatible `::a.b.c.d`, 6to4 `2002:aabb:ccdd::/48`, Teredo `2001:0::/32` with its server
 * and its obfuscated client address) are refused when the IPv4 address they carry is, unless the
 * allowed ranges list the IPv6 address itself. NAT64 (`64:ff9b::/96`, and the local-use
 * `64:ff9b:1::/48`) is internal; where the operator allows the well-known prefix, the IPv4 address
 * in its last 32 bits is what the gateway connects to, so it is checked under the IPv4 policy.
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
  ['64:ff9b:1::', 48, 'ipv6', 'a local-use NAT64 address (it reaches IPv4 addresses)'],
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
  /** The setting that lists allowedCidrs, named in refusals (default PROVISIONER_CLUSTER_ALLOWED_CIDRS). */
  allowedCidrsVariable?: string;
}

/** The 16 bytes of an IPv6 address (`isIP` says it is one), a trailing dotted quad included. */
function ipv6Bytes(address: string): number[] {
  let text = address.toLowerCase().replace(/%.*$/, '');
  const quad = /(\d+)\.(\d+)\.(\d+)\.(\d+)$/.exec(text);
  if (quad) {
    const [a, b, c, d] = quad.slice(1).map(Number) as [number, number, number, number];
    text = `${text.slice(0, quad.index)}${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
  }
  const [head = '', tail] = text.split('::');
  const groups = (part: string | undefined) => (part ? part.split(':').filter((g) => g !== '') : []);
  const h = groups(head);
  const t = groups(tail);
  const all = [...h, ...Array<string>(8 - h.length - t.length).fill('0'), ...t];
  return all.flatMap((g) => {
    const n = parseInt(g, 16);
    return [n >> 8, n & 0xff];
  });
}

const quad = (b: number[]): string => b.join('.');

/** The well-known NAT64 prefix 64:ff9b::/96: the gateway connects to the IPv4 address in the last 32 bits. */
const NAT64_FORM = 'a NAT64 form';

/** The IPv4 addresses an IPv6 address carries, each with the name of the form that carries it. */
function embeddedIpv4(address: string): Array<[ipv4: string, form: string]> {
  const b = ipv6Bytes(address);
  const zeros = (from: number, to: number) => b.slice(from, to).every((x) => x === 0);
  // ::a.b.c.d (deprecated IPv4-compatible); :: and ::1 are themselves listed above.
  if (zeros(0, 12) && !zeros(12, 15)) return [[quad(b.slice(12, 16)), 'an IPv4-compatible form']];
  if (b[0] === 0x20 && b[1] === 0x02) return [[quad(b.slice(2, 6)), 'a 6to4 form']];
  if (b[0] === 0 && b[1] === 0x64 && b[2] === 0xff && b[3] === 0x9b && zeros(4, 12))
    return [[quad(b.slice(12, 16)), NAT64_FORM]];
  if (b[0] === 0x20 && b[1] === 0x01 && b[2] === 0 && b[3] === 0)
    return [
      [quad(b.slice(4, 8)), 'a Teredo form (server)'],
      [quad(b.slice(12, 16).map((x) => x ^ 0xff)), 'a Teredo form (client)'],
    ];
  return [];
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
  const setting = policy.allowedCidrsVariable ?? 'PROVISIONER_CLUSTER_ALLOWED_CIDRS';
  for (const [list, what] of INTERNAL_LISTS) {
    if (list.check(address, family) && !allowList(policy.allowedCidrs).check(address, family)) {
      return `${address} is ${what}; the control plane only connects there when ${setting} lists its range`;
    }
  }
  if (family === 'ipv6') {
    const allowed = allowList(policy.allowedCidrs).check(address, family);
    for (const [ipv4, form] of embeddedIpv4(address)) {
      for (const [list, what] of NEVER_LISTS)
        if (list.check(ipv4, 'ipv4'))
          return `${address} is ${form} of ${ipv4}, ${what}; the control plane never connects there`;
      // Through NAT64 the connection reaches the IPv4 address itself: allowing the prefix lets
      // the control plane reach IPv4 hosts, each under the IPv4 policy, not every one of them.
      if (form === NAT64_FORM) {
        if (!allowList(policy.allowedCidrs).check(ipv4, 'ipv4'))
          for (const [list, what] of INTERNAL_LISTS)
            if (list.check(ipv4, 'ipv4'))
              return `${address} is ${form} of ${ipv4}, ${what}; the control plane only connects there when ${setting} lists the IPv4 address's range`;
        continue;
      }
      if (allowed) continue;
      for (const [list, what] of INTERNAL_LISTS)
        if (list.check(ipv4, 'ipv4'))
          return `${address} is ${form} of ${ipv4}, ${what}; the control plane only connects there when ${setting} lists the IPv6 address's range`;
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
