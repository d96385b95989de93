/**
 * The bounded wait for the vcluster's exported kubeconfig Secret, against a fake API server.
 */
import t from 'tap';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { KubeconfigTimeoutError, waitForSecretKey } from '../../../tenants/kubeconfig-wait.ts';
import { KubeconfigPolicyError } from '../../../kubeconfig-policy/policy.ts';
import { execMarkerKubeconfig } from '../../helpers/exec-kubeconfig.ts';

/** The fake API server speaks plain http on loopback: these waits run with http, loopback and no TLS verification, allowed explicitly. */
const PLAIN_HTTP_TEST_POLICY = {
  execCommands: [],
  allowInsecureTls: true,
  allowedCidrs: ['127.0.0.0/8'],
  allowHttp: true,
};

async function fakeApi(answers: (n: number) => { status: number; body: unknown }) {
  let calls = 0;
  const paths: string[] = [];
  const server = createServer((req, res) => {
    paths.push(req.url ?? '');
    const a = answers(calls++);
    res.writeHead(a.status, { 'content-type': 'application/json' });
    res.end(JSON.stringify(a.body));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as AddressInfo;
  const kubeconfig = `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: 'http://127.0.0.1:${port}', insecure-skip-tls-verify: true}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
users: [{name: u, user: {token: t}}]
`;
  return {
    kubeconfig,
    paths,
    get calls() {
      return calls;
    },
    close: () => new Promise((r) => server.close(r)),
  };
}

const notFound = {
  status: 404,
  body: { kind: 'Status', apiVersion: 'v1', status: 'Failure', reason: 'NotFound', code: 404 },
};
const secret = (data: Record<string, string>) => ({
  status: 200,
  body: { kind: 'Secret', apiVersion: 'v1', metadata: { name: 'vc-vcluster' }, data },
});

t.test('resolves once the Secret appears with its key', async (t) => {
  const api = await fakeApi((n) => (n < 2 ? notFound : n < 3 ? secret({ other: 'eA==' }) : secret({ config: 'eA==' })));
  t.teardown(api.close);
  await waitForSecretKey({
    kubeconfig: api.kubeconfig,
    namespace: 'tenant-a',
    name: 'vc-vcluster',
    key: 'config',
    timeoutMs: 5000,
    intervalMs: 10,
    policy: PLAIN_HTTP_TEST_POLICY,
  });
  t.equal(api.calls, 4);
  t.equal(api.paths[0], '/api/v1/namespaces/tenant-a/secrets/vc-vcluster');
});

t.test('gives up after the bound with a message naming the Secret', async (t) => {
  const api = await fakeApi(() => notFound);
  t.teardown(api.close);
  const started = Date.now();
  const err = await waitForSecretKey({
    kubeconfig: api.kubeconfig,
    namespace: 'tenant-a',
    name: 'vc-vcluster',
    key: 'config',
    timeoutMs: 200,
    intervalMs: 20,
    policy: PLAIN_HTTP_TEST_POLICY,
  }).then(
    () => undefined,
    (e: unknown) => e,
  );
  t.ok(err instanceof KubeconfigTimeoutError);
  t.match((err as Error).message, /tenant-a\/vc-vcluster did not appear within 0.2 s \(last: not found\)/);
  t.ok(Date.now() - started < 2000, 'the bound holds');
});

t.test('a permission error fails at once instead of waiting, without the upstream body', async (t) => {
  const api = await fakeApi(() => ({
    status: 403,
    body: { kind: 'Status', code: 403, reason: 'Forbidden', message: 'upstream-private-text' },
  }));
  t.teardown(api.close);
  await t.rejects(
    waitForSecretKey({
      kubeconfig: api.kubeconfig,
      namespace: 'n',
      name: 'vc-vcluster',
      key: 'config',
      timeoutMs: 5000,
      intervalMs: 10,
      policy: PLAIN_HTTP_TEST_POLICY,
    }),
  );
  t.equal(api.calls, 1);
  const err = await waitForSecretKey({
    kubeconfig: api.kubeconfig,
    namespace: 'n',
    name: 'vc-vcluster',
    key: 'config',
    timeoutMs: 5000,
    intervalMs: 10,
    policy: PLAIN_HTTP_TEST_POLICY,
  }).then(
    () => undefined,
    (e: unknown) => e,
  );
  t.equal(
    (err as Error).message,
    'reading Secret n/vc-vcluster on the root cluster: the API server answered HTTP 403',
    'status only',
  );
  t.notMatch((err as Error).message, /upstream-private-text/, 'the upstream body is not in the error');
});

t.test('a kubeconfig whose exec would write a marker runs nothing and is refused naming the field', async (t) => {
  const { kubeconfig, ran } = execMarkerKubeconfig(t);
  const err = await waitForSecretKey({
    kubeconfig,
    namespace: 'n',
    name: 'vc-vcluster',
    key: 'config',
    timeoutMs: 300,
    intervalMs: 10,
  }).then(
    () => undefined,
    (e: unknown) => e,
  );
  t.ok(err instanceof KubeconfigPolicyError, 'refused by the kubeconfig policy');
  t.match((err as Error).message, 'users[0].user.exec');
  t.notOk(ran(), 'the exec command never ran');
});

t.test('a token-file naming a FIFO is refused without opening it', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'kc-fifo-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const fifo = join(dir, 'fifo');
  execFileSync('mkfifo', [fifo]);
  const kubeconfig = `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: 'https://203.0.113.10:6443'}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
users: [{name: u, user: {token-file: '${fifo}'}}]
`;
  const started = Date.now();
  const err = await waitForSecretKey({
    kubeconfig,
    namespace: 'n',
    name: 'vc-vcluster',
    key: 'config',
    timeoutMs: 300,
    intervalMs: 10,
  }).then(
    () => undefined,
    (e: unknown) => e,
  );
  t.match((err as KubeconfigPolicyError).path, 'users[0].user.token-file');
  t.ok(Date.now() - started < 1000, 'nothing blocked on the FIFO');
});
