/**
 * The outbound address policy on IPv6 forms that carry an IPv4 address: IPv4-compatible
 * (`::7f00:1`), 6to4 (`2002:7f00:1::`) and Teredo (`2001:0::/32`, the client address obfuscated)
 * are refused when the address they carry is; and a refusal names the setting that would allow it.
 */
import t from 'tap';
import { addressProblem } from '../../../kubeconfig-policy/address.ts';

const strict = { allowedCidrs: [] };

/** A Teredo address: server IPv4, flags and port aside, the client IPv4 with every bit flipped. */
function teredo(server: string, client: string): string {
  const hex = (ip: string, flip: boolean) => {
    const b = ip.split('.').map((x) => (flip ? Number(x) ^ 0xff : Number(x)));
    return `${((b[0]! << 8) | b[1]!).toString(16)}:${((b[2]! << 8) | b[3]!).toString(16)}`;
  };
  return `2001:0:${hex(server, false)}:0:f227:${hex(client, true)}`;
}

t.test('IPv4-compatible, 6to4 and Teredo forms of refused ranges are refused', async (t) => {
  const cases: Array<[string, RegExp]> = [
    ['::7f00:1', /IPv4-compatible form of 127\.0\.0\.1, a loopback address/],
    ['::127.0.0.1', /IPv4-compatible form of 127\.0\.0\.1/],
    ['::a9fe:a9fe', /IPv4-compatible form of 169\.254\.169\.254, a link-local address.*never connects there/],
    ['2002:7f00:1::', /6to4 form of 127\.0\.0\.1, a loopback address/],
    ['2002:a9fe:a9fe::1', /6to4 form of 169\.254\.169\.254.*never/],
    ['2002:0a00:0001:1::5', /6to4 form of 10\.0\.0\.1, a private address/],
    [teredo('203.0.113.5', '127.0.0.1'), /Teredo form \(client\) of 127\.0\.0\.1, a loopback address/],
    [teredo('203.0.113.5', '169.254.169.254'), /Teredo form \(client\) of 169\.254\.169\.254.*never/],
    [teredo('10.0.0.1', '203.0.113.9'), /Teredo form \(server\) of 10\.0\.0\.1/],
  ];
  for (const [address, why] of cases) {
    const problem = addressProblem(address, strict);
    t.match(problem ?? 'accepted', why, `${address} refused: ${problem ?? 'accepted'}`);
  }
});

t.test('the same forms of public addresses, and other public IPv6 addresses, pass', async (t) => {
  for (const address of ['2002:cb00:7107::1', teredo('203.0.113.5', '198.51.100.7'), '2001:db8::1', '2606:4700::1111'])
    t.equal(addressProblem(address, strict), undefined, `${address} accepted`);
});

t.test('an allowed IPv6 range lets an internal form through, never a link-local one', async (t) => {
  const all = { allowedCidrs: ['0.0.0.0/0', '::/0'] };
  t.equal(addressProblem('2002:0a00:0001::1', all), undefined, '6to4 of a private address when ::/0 is allowed');
  t.match(addressProblem('2002:a9fe:a9fe::1', all) ?? 'accepted', /never connects there/, 'link-local never');
  t.match(
    addressProblem('2002:0a00:0001::1', { allowedCidrs: ['10.0.0.0/8'] }) ?? 'accepted',
    /lists the IPv6 address's range/,
    "allowing the IPv4 range alone does not allow the IPv6 form (the connection goes to the IPv6 address's route)",
  );
});

t.test('a refusal names the setting of the policy it comes from', async (t) => {
  t.match(addressProblem('10.0.0.1', strict), /PROVISIONER_CLUSTER_ALLOWED_CIDRS lists/, 'root clusters: the default');
  t.match(
    addressProblem('10.0.0.1', { allowedCidrs: [], allowedCidrsVariable: 'PROVISIONER_MANAGED_CLUSTER_ALLOWED_CIDRS' }),
    /PROVISIONER_MANAGED_CLUSTER_ALLOWED_CIDRS lists/,
    'managed clusters: their own setting',
  );
});
