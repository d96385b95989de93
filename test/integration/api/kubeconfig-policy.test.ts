/**
 * Cluster registration on a running server: a kubeconfig that would run a command, read a file,
 * go through a proxy or skip TLS verification is refused with 400 naming the field, before
 * anything reads a file or starts a process.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { stringify } from 'yaml';
import { ApiClient } from '../../../provisioner/http/api-client.ts';
import type { ErrorBody } from '../../../provisioner/api/types.ts';
import { createTestApi } from '../../helpers/api.ts';

const api = await createTestApi();
t.teardown(() => api.close());
const base = await api.app.listen({ port: 0, host: '127.0.0.1' });
// Over the socket: the FIFO case asks /healthz while a registration is handled.
const operator = new ApiClient({ baseUrl: base, token: api.operatorKey });
const dir = mkdtempSync(join(tmpdir(), 'kubeconfig-policy-'));
t.teardown(() => rmSync(dir, { recursive: true, force: true }));

type Doc = Record<string, unknown>;
const kubeconfig = (cluster: Doc = {}, user: Doc = {}): string =>
  stringify({
    apiVersion: 'v1',
    kind: 'Config',
    'current-context': 'x',
    clusters: [{ name: 'c', cluster: { server: 'https://203.0.113.10:6443', ...cluster } }],
    users: [{ name: 'u', user: { token: 'inline-token-0123456789', ...user } }],
    contexts: [{ name: 'x', context: { cluster: 'c', user: 'u' } }],
  });

let n = 0;
async function register(text: string): Promise<{ status: number; body: Partial<ErrorBody> }> {
  n += 1;
  const res = await operator.request('POST /v1/clusters', {
    // force: the servers here are made up; the policy applies with force too (the probe is
    // tested against a real API server in clusters-add.test.ts).
    body: { name: `c-${n}`, region: 'eu', capacity: 1, kubeconfig: text, force: true },
  });
  return { status: res.status, body: res.ok ? {} : res.body };
}

t.test('each refused kubeconfig field is a 400 naming it; nothing is stored', async (t) => {
  const marker = join(dir, 'exec-marker');
  const cases: Array<[string, string]> = [
    [
      kubeconfig(
        {},
        {
          exec: { apiVersion: 'client.authentication.k8s.io/v1', command: '/bin/sh', args: ['-c', `touch ${marker}`] },
        },
      ),
      'users[0].user.exec',
    ],
    [
      kubeconfig({}, { 'auth-provider': { name: 'oidc', config: { 'idp-issuer-url': 'https://x' } } }),
      'users[0].user.auth-provider',
    ],
    [kubeconfig({}, { 'token-file': '/etc/hostname' }), 'users[0].user.token-file'],
    [kubeconfig({}, { tokenFile: '/etc/hostname' }), 'users[0].user.tokenFile'],
    [kubeconfig({}, { 'client-certificate': '/etc/hostname' }), 'users[0].user.client-certificate'],
    [kubeconfig({}, { 'client-key': '/etc/hostname' }), 'users[0].user.client-key'],
    [kubeconfig({ 'certificate-authority': '/etc/hostname' }), 'clusters[0].cluster.certificate-authority'],
    [kubeconfig({ 'proxy-url': 'http://10.0.0.9:3128' }), 'clusters[0].cluster.proxy-url'],
    [kubeconfig({ 'insecure-skip-tls-verify': true }), 'clusters[0].cluster.insecure-skip-tls-verify'],
    [
      JSON.stringify({
        apiVersion: 'v1',
        kind: 'Config',
        'current-context': 'x',
        clusters: [{ name: 'c', cluster: { server: 'https://203.0.113.10' } }],
        contexts: [{ name: 'x', context: { cluster: 'c', user: 'u' } }],
        users: [{ name: 'u', user: { 'token-file': '/etc/hostname' } }],
      }),
      'users[0].user.token-file',
    ],
  ];
  for (const [text, path] of cases) {
    const res = await register(text);
    t.equal(res.status, 400, `${path}: 400`);
    t.equal(res.body.error?.code, 'VALIDATION_FAILED', `${path}: VALIDATION_FAILED`);
    t.equal(res.body.error?.field, 'kubeconfig', `${path}: field kubeconfig`);
    t.match(res.body.error?.message, path, `${path}: the message names the field`);
  }
  t.notOk(existsSync(marker), 'the exec command never ran');
  const list = await operator.call('GET /v1/clusters');
  t.equal(list.items.length, 0, 'nothing was registered');
});

t.test(
  'a token-file naming a FIFO does not stall the server, and the answer tells nothing about the path',
  async (t) => {
    const fifo = join(dir, 'fifo');
    execFileSync('mkfifo', [fifo]);
    const registering = register(kubeconfig({}, { token: undefined, 'token-file': fifo }));
    const started = Date.now();
    const health = await fetch(`${base}/healthz`, { signal: AbortSignal.timeout(5000) });
    t.equal(health.status, 200, '/healthz answers while the registration is handled');
    t.ok(Date.now() - started < 1000, `/healthz answered within 1 s (took ${Date.now() - started} ms)`);
    const res = await registering;
    t.equal(res.status, 400);
    t.notMatch(res.body.error?.message, /ENOENT|EISDIR|no such file/i, 'no hint whether a path exists');
    const missing = await register(kubeconfig({}, { token: undefined, 'token-file': join(dir, 'does-not-exist') }));
    t.equal(
      missing.body.error?.message,
      res.body.error?.message?.replace(fifo, join(dir, 'does-not-exist')),
      'an existing and a missing path get the same answer',
    );
  },
);

t.test('an inline-credential kubeconfig in JSON is accepted', async (t) => {
  const res = await register(
    JSON.stringify({
      apiVersion: 'v1',
      kind: 'Config',
      'current-context': 'x',
      clusters: [{ name: 'c', cluster: { server: 'https://203.0.113.10:6443', 'certificate-authority-data': 'Q0E=' } }],
      contexts: [{ name: 'x', context: { cluster: 'c', user: 'u' } }],
      users: [{ name: 'u', user: { 'client-certificate-data': 'Q0VSVA==', 'client-key-data': 'S0VZ' } }],
    }),
  );
  t.equal(res.status, 201, JSON.stringify(res.body));
});

t.test(
  'server addresses the control plane must not reach are refused at registration, naming the server',
  async (t) => {
    const servers = [
      'https://127.0.0.1:6443',
      'https://[::1]:5432',
      'https://169.254.169.254',
      'https://[::ffff:169.254.169.254]',
      'https://0.0.0.0:22',
      'https://2130706433:6443',
      'https://0x7f000001:6443',
      'https://localhost:6443',
      'http://203.0.113.10:6443',
    ];
    for (const server of servers) {
      const res = await register(kubeconfig({ server }));
      t.equal(res.status, 400, `${server}: 400`);
      t.match(res.body.error?.message, 'clusters[0].cluster.server', `${server}: the message names the server field`);
    }
  },
);

t.test('an operator may allow loopback ranges at start-up; link-local stays refused', async (t) => {
  const allowing = await createTestApi({ env: { PROVISIONER_CLUSTER_ALLOWED_CIDRS: '127.0.0.0/8,::1/128' } });
  t.teardown(() => allowing.close());
  const send = (server: string, name: string) =>
    allowing.as(allowing.operatorKey).request('POST /v1/clusters', {
      body: { name, region: 'eu', capacity: 1, kubeconfig: kubeconfig({ server }), force: true },
    });
  t.equal(
    (await send('https://127.0.0.1:6443', 'loop')).status,
    201,
    'loopback allowed by PROVISIONER_CLUSTER_ALLOWED_CIDRS',
  );
  t.equal((await send('https://localhost:6443', 'loop-name')).status, 201, 'a name resolving to loopback too');
  const metadata = await send('https://169.254.169.254', 'meta');
  t.equal(metadata.status, 400, 'link-local is never allowed');
  t.match(metadata.ok ? undefined : metadata.body.error.message, /link-local/);
});
