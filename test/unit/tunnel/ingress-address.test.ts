/**
 * The address policy of an ingress-based hybrid runtime's ingressUrl (provisioner/tunnel/ingress-address.ts):
 * its spelling, the addresses a name resolves to at registration and at connect time, the
 * operator's setting that allows private ranges, and the control plane's own address.
 * Name resolution is a table here (the lookup the functions take); the integration tier
 * (test/integration/runtime/hybrid-ingress.test.ts) uses the system's.
 */
import t from 'tap';
import {
  AddressRefusedError,
  ingressRegistrationProblem,
  ingressUrlShapeProblem,
  REGISTRATION_LOOKUP_TIMEOUT_MS,
  resolveIngress,
  type IngressAddressPolicy,
  type Lookup,
} from '../../../provisioner/tunnel/ingress-address.ts';

const strict: IngressAddressPolicy = {
  allowedCidrs: [],
  allowedCidrsVariable: 'PROVISIONER_HYBRID_INGRESS_ALLOWED_CIDRS',
  ownUrl: 'https://cp.example.com',
};

const names: Record<string, string[]> = {
  'runtime.customer.example': ['203.0.113.10'],
  'internal.customer.example': ['203.0.113.11', '10.1.2.3'],
  'metadata.customer.example': ['169.254.169.254'],
  'loop.customer.example': ['127.0.0.1'],
  'cp.example.com': ['198.51.100.20'],
  'alias-of-cp.customer.example': ['198.51.100.20'],
};
const lookup: Lookup = async (host) => {
  const found = names[host];
  if (!found) throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${host}`), { code: 'ENOTFOUND' });
  return found.map((address) => ({ address }));
};

t.test('the spelling: https only, no credentials, query, fragment or path', async (t) => {
  const cases: Array<[string, RegExp]> = [
    ['http://runtime.customer.example', /must be an https URL/],
    ['https://user:pw@runtime.customer.example', /must not carry credentials/],
    ['https://runtime.customer.example/?a=1', /must not have a query/],
    ['https://runtime.customer.example/#top', /must not have a fragment/],
    ['https://runtime.customer.example/argo', /must not have a path/],
    ['not a url', /is not a URL/],
  ];
  for (const [url, why] of cases) t.match(ingressUrlShapeProblem(url) ?? 'accepted', why, `${url} refused: ${why}`);
  t.equal(ingressUrlShapeProblem('https://runtime.customer.example'), undefined, 'an https origin is accepted');
  t.equal(ingressUrlShapeProblem('https://runtime.customer.example:8443/'), undefined, 'with a port and a / path');
});

t.test('registration refuses loopback, private, link-local and the control plane itself, naming why', async (t) => {
  const cases: Array<[string, RegExp]> = [
    ['https://127.0.0.1', /127\.0\.0\.1 is a loopback address.*PROVISIONER_HYBRID_INGRESS_ALLOWED_CIDRS/],
    ['https://[::1]:8443', /::1 is a loopback address/],
    ['https://10.0.0.7', /10\.0\.0\.7 is a private address/],
    ['https://169.254.169.254', /link-local address.*never connects there/],
    ['https://loop.customer.example', /'loop\.customer\.example' resolves to 127\.0\.0\.1 is a loopback address/],
    ['https://internal.customer.example', /resolves to 10\.1\.2\.3 is a private address/],
    ['https://metadata.customer.example', /169\.254\.169\.254 is a link-local address/],
    ['https://cp.example.com', /the control plane's own address \(PROVISIONER_PUBLIC_URL\)/],
    ['https://alias-of-cp.customer.example:443', /the control plane's own address/],
    ['https://[::ffff:7f00:1]', /::ffff:7f00:1 is a loopback address/],
  ];
  for (const [url, why] of cases) {
    const problem = await ingressRegistrationProblem(url, strict, lookup);
    t.match(problem ?? 'accepted', why, `${url} refused: ${problem ?? 'accepted'}`);
  }
});

t.test('registration accepts public addresses, and a name that does not resolve yet', async (t) => {
  t.equal(await ingressRegistrationProblem('https://runtime.customer.example', strict, lookup), undefined, 'public');
  t.equal(await ingressRegistrationProblem('https://203.0.113.9:8443', strict, lookup), undefined, 'public literal');
  t.equal(
    await ingressRegistrationProblem('https://cp.example.com:8443', strict, lookup),
    undefined,
    "the control plane's host on another port is not the control plane",
  );
  t.equal(
    await ingressRegistrationProblem('https://not-yet.customer.example', strict, lookup),
    undefined,
    'a name without a DNS record yet (checked again on every connection)',
  );
});

t.test('registration does not wait for a name server that does not answer', async (t) => {
  const silent: Lookup = () => new Promise(() => undefined);
  t.equal(
    await ingressRegistrationProblem('https://slow.customer.example', strict, silent),
    undefined,
    `a name without an answer within REGISTRATION_LOOKUP_TIMEOUT_MS (${REGISTRATION_LOOKUP_TIMEOUT_MS} ms) is taken as not resolving yet`,
  );
});

t.test('the operator setting allows the private ranges it lists, never link-local', async (t) => {
  const allowing = { ...strict, allowedCidrs: ['127.0.0.0/8', '10.0.0.0/8', '169.254.0.0/16'] };
  t.equal(await ingressRegistrationProblem('https://loop.customer.example', allowing, lookup), undefined, 'loopback');
  t.equal(await ingressRegistrationProblem('https://10.0.0.7', allowing, lookup), undefined, 'private');
  t.match(
    await ingressRegistrationProblem('https://169.254.169.254', allowing, lookup),
    /never connects there/,
    'link-local stays refused even when listed',
  );
  t.match(
    await ingressRegistrationProblem('https://192.168.1.1', allowing, lookup),
    /private address/,
    'a private range not listed stays refused',
  );
});

t.test('at connect time: the checked address to connect to, or a refusal (a missing name included)', async (t) => {
  t.equal(await resolveIngress(new URL('https://runtime.customer.example'), strict, lookup), '203.0.113.10');
  const refused = async (url: string) =>
    resolveIngress(new URL(url), strict, lookup).then(
      () => 'accepted',
      (err: unknown) => (err instanceof AddressRefusedError ? err.message : `other error: ${String(err)}`),
    );
  t.match(await refused('https://internal.customer.example'), /10\.1\.2\.3 is a private address/);
  t.match(await refused('https://not-yet.customer.example'), /does not resolve \(ENOTFOUND\)/);
  t.match(await refused('https://alias-of-cp.customer.example'), /the control plane's own address/);
  t.match(await refused('https://127.0.0.1:8443'), /loopback/);
});
