/**
 * An ingressUrl as registered (provisioner/tunnel/ingress-address.ts): the raw string is checked,
 * not only what the URL parser keeps (it drops tab, CR and LF and resolves dot segments without a
 * word), and what is accepted is stored as its origin. NAT64 addresses: the local-use prefix is
 * internal, and through the well-known prefix the IPv4 address it carries is what is checked.
 */
import t from 'tap';
import {
  ingressRegistrationProblem,
  ingressUrlShapeProblem,
  normalIngressUrl,
  resolveIngress,
  AddressRefusedError,
  type IngressAddressPolicy,
  type Lookup,
} from '../../../provisioner/tunnel/ingress-address.ts';

t.test('a control, format or whitespace character anywhere is refused, even where the parser drops it', async (t) => {
  const chars: Array<[string, string]> = [
    ['tab', '\t'],
    ['CR', '\r'],
    ['LF', '\n'],
    ['space', ' '],
    ['NUL', '\u0000'],
    ['ESC', '\u001b'],
    ['US', '\u001f'],
    ['DEL', '\u007f'],
    ['NEL', '\u0085'],
    ['no-break space', '\u00a0'],
    ['zero-width space', '\u200b'],
    ['line separator', '\u2028'],
    ['paragraph separator', '\u2029'],
    ['right-to-left override', '\u202e'],
    ['ideographic space', '\u3000'],
    ['byte order mark', '\ufeff'],
  ];
  for (const [name, c] of chars)
    for (const raw of [
      `https://runtime.customer.example${c}`,
      `https://runtime${c}.customer.example`,
      `${c}https://runtime.customer.example`,
    ]) {
      const problem = ingressUrlShapeProblem(raw) ?? 'accepted';
      t.match(
        problem,
        /^ingressUrl '.*' (holds a control, format or whitespace character|is not a URL)/,
        `${name} at ${raw.indexOf(c)}: refused`,
      );
      t.notMatch(problem, /[^\x20-\x7e]/, `${name}: the message quotes the value printable`);
    }
});

t.test("the finding's ingressUrl: line breaks and dot segments the parser would hide", async (t) => {
  const finding =
    'https://runtime.customer.example/\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\n---\n/../..';
  t.equal(new URL(finding).href, 'https://runtime.customer.example/', 'the parser alone sees a plain origin');
  t.match(
    ingressUrlShapeProblem(finding),
    /holds a control, format or whitespace character/,
    'refused for its line breaks',
  );
  t.match(
    ingressUrlShapeProblem('https://runtime.customer.example/a/..'),
    /must be written as https:\/\/host/,
    'dot segments that remove a path are refused',
  );
});

t.test('credentials, a query, a fragment and spellings the parser rewrites are refused', async (t) => {
  const cases: Array<[string, RegExp]> = [
    ['https://@runtime.customer.example', /must not carry credentials/],
    ['https://user@runtime.customer.example', /must not carry credentials/],
    ['https://runtime.customer.example?', /must not have a query/],
    ['https://runtime.customer.example#', /must not have a fragment/],
    ['https:runtime.customer.example', /must be written as https:\/\/host/],
    ['https:\\\\runtime.customer.example', /must be written as https:\/\/host/],
    ['https://runtime.customer.example\\', /must be written as https:\/\/host/],
    ['https:///runtime.customer.example', /must be written as https:\/\/host/],
  ];
  for (const [raw, why] of cases) t.match(ingressUrlShapeProblem(raw) ?? 'accepted', why, `${raw}: ${why}`);
});

t.test('an accepted ingressUrl is stored as its origin', async (t) => {
  const cases: Array<[string, string]> = [
    ['https://runtime.customer.example', 'https://runtime.customer.example'],
    ['https://runtime.customer.example/', 'https://runtime.customer.example'],
    ['HTTPS://Runtime.Customer.EXAMPLE:443/', 'https://runtime.customer.example'],
    ['https://runtime.customer.example:8443', 'https://runtime.customer.example:8443'],
    ['https://[2001:DB8:0::1]:8443/', 'https://[2001:db8::1]:8443'],
    ['https://bücher.customer.example', 'https://xn--bcher-kva.customer.example'],
  ];
  for (const [raw, stored] of cases) {
    t.equal(ingressUrlShapeProblem(raw), undefined, `${raw} accepted`);
    t.equal(normalIngressUrl(raw), stored, `${raw} stored as ${stored}`);
  }
  t.throws(() => normalIngressUrl('https://a.example\n'), /control/, 'a refused URL has no stored form');
});

const names: Record<string, string[]> = {
  'nat64-metadata.customer.example': ['64:ff9b::a9fe:a9fe'],
  'nat64-public.customer.example': ['64:ff9b::cb00:710a'],
};
const lookup: Lookup = async (host) => {
  const found = names[host];
  if (!found) throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${host}`), { code: 'ENOTFOUND' });
  return found.map((address) => ({ address }));
};
const policy = (allowedCidrs: string[]): IngressAddressPolicy => ({
  allowedCidrs,
  allowedCidrsVariable: 'PROVISIONER_HYBRID_INGRESS_ALLOWED_CIDRS',
});

t.test('NAT64: the local-use prefix is internal; the well-known one is checked on its IPv4 address', async (t) => {
  t.match(
    (await ingressRegistrationProblem('https://[64:ff9b:1::cb00:710a]', policy([]), lookup)) ?? 'accepted',
    /local-use NAT64 address.*PROVISIONER_HYBRID_INGRESS_ALLOWED_CIDRS lists its range/,
    'the local-use prefix 64:ff9b:1::/48 is refused like a private range',
  );
  const nat64 = policy(['64:ff9b::/96']);
  const refused: Array<[string, RegExp]> = [
    ['https://[64:ff9b::a9fe:a9fe]', /NAT64 form of 169\.254\.169\.254, a link-local address.*never connects there/],
    ['https://[64:ff9b::169.254.169.254]', /NAT64 form of 169\.254\.169\.254/],
    ['https://[64:ff9b::7f00:1]', /NAT64 form of 127\.0\.0\.1, a loopback address.*lists the IPv4 address's range/],
    ['https://[64:ff9b::a00:1]', /NAT64 form of 10\.0\.0\.1, a private address/],
    ['https://nat64-metadata.customer.example', /resolves to 64:ff9b::a9fe:a9fe is a NAT64 form of 169\.254\.169\.254/],
  ];
  for (const [url, why] of refused)
    t.match(
      (await ingressRegistrationProblem(url, nat64, lookup)) ?? 'accepted',
      why,
      `with 64:ff9b::/96 allowed, ${url} is refused at registration`,
    );
  await t.rejects(
    resolveIngress(new URL('https://nat64-metadata.customer.example'), nat64, lookup),
    AddressRefusedError,
    'and on connecting',
  );
  t.equal(
    await ingressRegistrationProblem('https://nat64-public.customer.example', nat64, lookup),
    undefined,
    'a public IPv4 address through the allowed prefix is accepted',
  );
  t.equal(
    await ingressRegistrationProblem('https://[64:ff9b::a00:1]', policy(['64:ff9b::/96', '10.0.0.0/8']), lookup),
    undefined,
    'a private IPv4 address through it when its IPv4 range is allowed too',
  );
});
