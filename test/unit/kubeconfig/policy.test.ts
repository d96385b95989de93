/**
 * The kubeconfig policy on its own: what it refuses (with the field's path), what it keeps, and
 * that the sanitised copy holds only the current context.
 */
import t from 'tap';
import { stringify } from 'yaml';
import {
  checkKubeconfig,
  KubeconfigPolicyError,
  pinKubeconfig,
  STRICT_KUBECONFIG_POLICY,
} from '../../../kubeconfig-policy/policy.ts';
import { kubeconfigSecrets } from '../../../provisioner/reconciler/log-writer.ts';

type Doc = Record<string, unknown>;
const base = (cluster: Doc = {}, user: Doc = {}): Doc => ({
  apiVersion: 'v1',
  kind: 'Config',
  clusters: [
    {
      name: 'c',
      cluster: { server: 'https://203.0.113.10:6443', 'certificate-authority-data': 'Q0EtZGF0YQ==', ...cluster },
    },
  ],
  users: [{ name: 'u', user: { token: 'inline-token-0123456789', ...user } }],
  contexts: [{ name: 'x', context: { cluster: 'c', user: 'u' } }],
  'current-context': 'x',
});

const refusedOf = (doc: Doc | string, policy = STRICT_KUBECONFIG_POLICY): KubeconfigPolicyError => {
  try {
    checkKubeconfig(typeof doc === 'string' ? doc : stringify(doc), policy);
  } catch (err) {
    if (err instanceof KubeconfigPolicyError) return err;
    throw err;
  }
  throw new Error('accepted');
};

t.test('every field that runs a command, reads a file or bypasses TLS is refused with its path', async (t) => {
  const cases: Array<[Doc, string]> = [
    [
      base({}, { exec: { apiVersion: 'client.authentication.k8s.io/v1', command: '/bin/sh', args: ['-c', 'id'] } }),
      'users[0].user.exec',
    ],
    [base({}, { 'auth-provider': { name: 'gcp', config: {} } }), 'users[0].user.auth-provider'],
    [base({}, { 'token-file': '/etc/passwd' }), 'users[0].user.token-file'],
    [base({}, { tokenFile: '/etc/passwd' }), 'users[0].user.tokenFile'],
    [base({}, { 'client-certificate': '/etc/cert.pem' }), 'users[0].user.client-certificate'],
    [base({}, { 'client-key': '/etc/key.pem' }), 'users[0].user.client-key'],
    [base({ 'certificate-authority': '/etc/ca.pem' }), 'clusters[0].cluster.certificate-authority'],
    [base({ 'proxy-url': 'http://10.0.0.2:3128' }), 'clusters[0].cluster.proxy-url'],
    [base({ 'insecure-skip-tls-verify': true }), 'clusters[0].cluster.insecure-skip-tls-verify'],
    [base({}, { 'made-up': 'x' }), 'users[0].user.made-up'],
    [{ ...base(), 'current-context': 'nope' }, 'current-context'],
    [base({ server: 'ftp://x' }), 'clusters[0].cluster.server'],
  ];
  for (const [doc, path] of cases) {
    const err = refusedOf(doc);
    t.equal(err.path, path, `refused at ${path}`);
    t.match(err.message, path, `the message names ${path}`);
  }
});

t.test('a refused entry is refused even when the current context does not use it', async (t) => {
  const doc = base();
  (doc.users as Doc[]).push({ name: 'other', user: { exec: { command: '/bin/sh' } } });
  t.equal(refusedOf(doc).path, 'users[1].user.exec');
});

t.test('JSON kubeconfigs are checked the same way', async (t) => {
  t.equal(refusedOf(JSON.stringify(base({}, { 'token-file': '/x' }))).path, 'users[0].user.token-file');
  t.equal(checkKubeconfig(JSON.stringify(base())).server.host, '203.0.113.10:6443');
});

t.test('exec is accepted only for a command the operator listed, never interactive', async (t) => {
  const policy = { ...STRICT_KUBECONFIG_POLICY, execCommands: ['/usr/local/bin/aws-iam-authenticator'] };
  t.equal(refusedOf(base({}, { exec: { command: '/bin/sh' } }), policy).path, 'users[0].user.exec.command');
  const ok = checkKubeconfig(
    stringify(
      base(
        {},
        { exec: { command: '/usr/local/bin/aws-iam-authenticator', args: ['token'], interactiveMode: 'Always' } },
      ),
    ),
    policy,
  );
  t.match(JSON.parse(ok.text).users[0].user.exec, {
    command: '/usr/local/bin/aws-iam-authenticator',
    interactiveMode: 'Never',
  });
  t.ok(
    checkKubeconfig(stringify(base({ 'insecure-skip-tls-verify': true })), {
      ...STRICT_KUBECONFIG_POLICY,
      allowInsecureTls: true,
    }),
    'insecure TLS only when allowed',
  );
});

t.test('the sanitised copy holds only the current context, its cluster and user, with inline data', async (t) => {
  const doc = base();
  (doc.clusters as Doc[]).push({ name: 'unused', cluster: { server: 'https://203.0.113.99' } });
  doc.preferences = {};
  const checked = checkKubeconfig(stringify(doc));
  const out = JSON.parse(checked.text);
  t.same(
    out.clusters.map((c: Doc) => c.name),
    ['c'],
  );
  t.same(out.users, [{ name: 'u', user: { token: 'inline-token-0123456789' } }]);
  t.same(checked.secrets, ['inline-token-0123456789']);
  t.notOk('preferences' in out);
});

t.test('unparsable, aliased bombs and duplicate keys are refused without a path', async (t) => {
  t.match(refusedOf('not: [valid').message, /could not be parsed/);
  t.match(refusedOf('a: 1\na: 2\n').message, /could not be parsed/);
  const bomb =
    'a: &a ["x","x"]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]\n';
  t.match(refusedOf(bomb).message, /could not be parsed|not a kubeconfig field/);
});

t.test('deep nesting is refused with a plain message before the parser can exhaust its stack', async (t) => {
  for (const [label, text] of [
    ['JSON arrays', '['.repeat(20_000) + ']'.repeat(20_000)],
    ['YAML flow maps', 'a: ' + '{b: '.repeat(20_000) + '1' + '}'.repeat(20_000)],
    ["after a quote inside a plain scalar (don't)", "x: don't\ny: " + '['.repeat(20_000)],
  ] as const) {
    const err = refusedOf(text);
    t.match(err.message, /nested more than 32 levels deep/, `${label}: the message names the nesting`);
    t.notMatch(err.message, /call stack/i, `${label}: no parser internals in the message`);
  }
  // Brackets inside quoted strings are data, not nesting: a valid kubeconfig with one is accepted.
  const quoted = stringify(base({ 'tls-server-name': '[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[' }));
  t.doesNotThrow(() => checkKubeconfig(quoted), 'brackets inside a quoted value do not count as nesting');
});

t.test('log masking parses the kubeconfig: JSON and YAML, every quoting', async (t) => {
  const token = 'json-token-abcdefghijklmnop';
  t.same(kubeconfigSecrets(JSON.stringify(base({}, { token }))).sort(), ['Q0EtZGF0YQ==', token].sort());
  t.ok(
    kubeconfigSecrets(`users: [{name: u, user: {"token": '${token}'}}]`).includes(token),
    'flow YAML with quoted keys',
  );
  t.ok(
    kubeconfigSecrets(
      stringify({
        users: [
          { name: 'u', user: { exec: { command: 'x', env: [{ name: 'AWS_SECRET', value: 'env-secret-value' }] } } },
        ],
      }),
    ).includes('env-secret-value'),
    'exec env values',
  );
  t.same(kubeconfigSecrets('not: [valid'), []);
});

t.test(
  'server addresses: link-local, unspecified and multicast always refused; loopback and private unless allowed',
  async (t) => {
    const refused = [
      'https://127.0.0.1:6443',
      'https://[::1]:5432',
      'https://169.254.169.254',
      'https://[::ffff:169.254.169.254]',
      'https://0.0.0.0:22',
      'https://2130706433:6443',
      'https://0x7f000001:6443',
      'https://127.1',
      'https://10.1.2.3',
      'https://192.168.1.1',
      'https://172.16.0.1',
      'https://[fd00::1]',
      'https://[fe80::1]',
      'https://224.0.0.1',
      'https://[ff02::1]',
      'http://203.0.113.10',
    ];
    for (const server of refused) {
      t.equal(refusedOf(base({ server })).path, 'clusters[0].cluster.server', `${server} refused`);
    }
    const operator = { ...STRICT_KUBECONFIG_POLICY, allowedCidrs: ['127.0.0.0/8', '10.0.0.0/8'] };
    t.ok(
      checkKubeconfig(stringify(base({ server: 'https://127.0.0.1:6443' })), operator),
      'loopback when the operator allows it',
    );
    t.ok(
      checkKubeconfig(stringify(base({ server: 'https://10.1.2.3' })), operator),
      'private when the operator allows it',
    );
    t.equal(
      refusedOf(base({ server: 'https://169.254.169.254' }), { ...operator, allowedCidrs: ['0.0.0.0/0'] }).path,
      'clusters[0].cluster.server',
      'link-local even when everything is allowed',
    );
    t.equal(
      refusedOf(base({ server: 'https://[::ffff:169.254.169.254]' }), {
        ...operator,
        allowedCidrs: ['0.0.0.0/0', '::/0'],
      }).path,
      'clusters[0].cluster.server',
      'IPv6-mapped link-local too',
    );
    t.ok(
      checkKubeconfig(stringify(base({ server: 'http://203.0.113.10' })), {
        ...STRICT_KUBECONFIG_POLICY,
        allowHttp: true,
      }),
      'http only when allowed',
    );
  },
);

t.test('a name is resolved once, every address checked, and the copy pinned to the checked address', async (t) => {
  const doc = stringify(base({ server: 'https://api.cluster.example:6443' }));
  let lookups = 0;
  const publicOnly = (): Promise<Array<{ address: string }>> => {
    lookups += 1;
    return Promise.resolve([{ address: '203.0.113.7' }]);
  };
  const pinned = await pinKubeconfig(doc, STRICT_KUBECONFIG_POLICY, publicOnly);
  const cluster = JSON.parse(pinned.text).clusters[0].cluster;
  t.equal(cluster.server, 'https://203.0.113.7:6443', 'the client connects to the checked address');
  t.equal(cluster['tls-server-name'], 'api.cluster.example', 'TLS still verifies the name');
  t.equal(lookups, 1, 'one lookup');
  const mixed = () => Promise.resolve([{ address: '203.0.113.7' }, { address: '169.254.169.254' }]);
  const err = await pinKubeconfig(doc, STRICT_KUBECONFIG_POLICY, mixed).catch((e: unknown) => e);
  t.ok(err instanceof KubeconfigPolicyError);
  t.match(
    (err as KubeconfigPolicyError).message,
    /clusters\[0\]\.cluster\.server: 'api\.cluster\.example' resolves to 169\.254\.169\.254 is a link-local/,
  );
  const loopbackName = await pinKubeconfig(stringify(base({ server: 'https://localhost:6443' }))).catch(
    (e: unknown) => e,
  );
  t.match(
    (loopbackName as Error).message,
    /'localhost' resolves to (127\.0\.0\.1|::1) is a loopback address/,
    'localhost (real resolver) refused',
  );
  const missing = await pinKubeconfig(doc, STRICT_KUBECONFIG_POLICY, () =>
    Promise.reject(Object.assign(new Error('x'), { code: 'ENOTFOUND' })),
  ).catch((e: unknown) => e);
  t.match((missing as Error).message, /does not resolve \(ENOTFOUND\)/);
});
