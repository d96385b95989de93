/**
 * Deleting a suspended vcluster's synced pods (tenants/synced-pods.ts) against a fake API server:
 * the list by selector (every page), one delete per pod not already terminating, a pod gone in
 * between is fine, and a refusal or an unreachable server fails naming the namespace and the
 * selector, without the upstream's body. The same against a real kube-apiserver:
 * test/integration/infra/synced-pods.test.ts.
 */
import t from 'tap';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { deleteSyncedPods, syncedPodSelector } from '../../../tenants/synced-pods.ts';
import { KubeconfigPolicyError } from '../../../kubeconfig-policy/policy.ts';
import { execMarkerKubeconfig } from '../../helpers/exec-kubeconfig.ts';

/** The fake API server speaks plain http on loopback, allowed explicitly. */
const PLAIN_HTTP_TEST_POLICY = {
  execCommands: [],
  allowInsecureTls: true,
  allowedCidrs: ['127.0.0.0/8'],
  allowHttp: true,
};
const SELECTOR = syncedPodSelector('vcluster');

const kubeconfigFor = (server: string) => `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: '${server}', insecure-skip-tls-verify: true}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
users: [{name: u, user: {token: t}}]
`;

interface Answer {
  status: number;
  body: unknown;
}

/** A fake API server answering each request with `answer(method, url)`; it records the requests. */
async function fakeApi(answer: (method: string, url: URL) => Answer) {
  const requests: string[] = [];
  const server = createServer((req, res) => {
    requests.push(`${req.method} ${req.url}`);
    const a = answer(req.method ?? '', new URL(req.url ?? '/', 'http://x'));
    res.writeHead(a.status, { 'content-type': 'application/json' });
    res.end(JSON.stringify(a.body));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as AddressInfo;
  return {
    kubeconfig: kubeconfigFor(`http://127.0.0.1:${port}`),
    requests,
    deletes: () => requests.filter((r) => r.startsWith('DELETE ')).map((r) => r.split('?')[0]!.split('/').pop()),
    close: () => new Promise((r) => server.close(r)),
  };
}

const pod = (name: string, terminating = false) => ({
  metadata: { name, namespace: 'tenant-a', ...(terminating ? { deletionTimestamp: '2026-01-01T00:00:00Z' } : {}) },
});
const list = (items: unknown[], next?: string): Answer => ({
  status: 200,
  body: { kind: 'PodList', apiVersion: 'v1', metadata: next ? { continue: next } : {}, items },
});
const status = (code: number, reason: string): Answer => ({
  status: code,
  body: { kind: 'Status', apiVersion: 'v1', status: 'Failure', reason, code, message: 'upstream-private-text' },
});

t.test('lists by the selector, every page, and deletes each pod not already terminating', async (t) => {
  const api = await fakeApi((method, url) => {
    if (method === 'GET')
      return url.searchParams.get('continue') === 'page-2'
        ? list([pod('c'), pod('d', true)])
        : list([pod('a'), pod('b')], 'page-2');
    return { status: 200, body: pod(url.pathname.split('/').pop()!) };
  });
  t.teardown(api.close);
  const deleted = await deleteSyncedPods({
    kubeconfig: api.kubeconfig,
    namespace: 'tenant-a',
    labelSelector: SELECTOR,
    policy: PLAIN_HTTP_TEST_POLICY,
  });
  t.equal(deleted, 3, 'three deleted');
  const lists = api.requests.filter((r) => r.startsWith('GET '));
  t.equal(lists.length, 2, 'both pages listed');
  const first = new URL(lists[0]!.slice(4), 'http://x');
  t.equal(first.pathname, '/api/v1/namespaces/tenant-a/pods');
  t.equal(first.searchParams.get('labelSelector'), 'vcluster.loft.sh/managed-by=vcluster');
  t.same(api.deletes().sort(), ['a', 'b', 'c'], 'the terminating pod d is left to finish');
  t.ok(
    api.requests
      .filter((r) => r.startsWith('DELETE '))
      .every((r) => r.startsWith('DELETE /api/v1/namespaces/tenant-a/pods/')),
    'each delete in the namespace',
  );
});

t.test('a pod already gone (404) is fine and not counted; none at all deletes nothing', async (t) => {
  const api = await fakeApi((method, url) => {
    if (method === 'GET') return list([pod('gone'), pod('here')]);
    return url.pathname.endsWith('/gone') ? status(404, 'NotFound') : { status: 200, body: pod('here') };
  });
  t.teardown(api.close);
  const req = {
    kubeconfig: api.kubeconfig,
    namespace: 'tenant-a',
    labelSelector: SELECTOR,
    policy: PLAIN_HTTP_TEST_POLICY,
  };
  t.equal(await deleteSyncedPods(req), 1, 'only the one deleted counts');
  t.same(api.deletes().sort(), ['gone', 'here']);

  const empty = await fakeApi(() => list([]));
  t.teardown(empty.close);
  t.equal(await deleteSyncedPods({ ...req, kubeconfig: empty.kubeconfig }), 0);
  t.equal(empty.requests.length, 1, 'one list, no delete');
});

t.test('a refused list or delete fails naming the namespace and the selector, status only', async (t) => {
  const forbidden = await fakeApi(() => status(403, 'Forbidden'));
  t.teardown(forbidden.close);
  const req = {
    kubeconfig: forbidden.kubeconfig,
    namespace: 'tenant-a',
    labelSelector: SELECTOR,
    policy: PLAIN_HTTP_TEST_POLICY,
  };
  const err = await deleteSyncedPods(req).then(
    () => undefined,
    (e: unknown) => e as Error,
  );
  t.equal(
    err?.message,
    "deleting the vcluster's synced pods (vcluster.loft.sh/managed-by=vcluster) in namespace tenant-a on the root cluster: " +
      'listing them: the API server answered HTTP 403',
  );
  t.notMatch(err?.message, /upstream-private-text/, 'the upstream body is not in the error');

  const noDelete = await fakeApi((method) => (method === 'GET' ? list([pod('p1')]) : status(403, 'Forbidden')));
  t.teardown(noDelete.close);
  const err2 = await deleteSyncedPods({ ...req, kubeconfig: noDelete.kubeconfig }).then(
    () => undefined,
    (e: unknown) => e as Error,
  );
  t.match(
    err2?.message,
    /vcluster\.loft\.sh\/managed-by=vcluster\) in namespace tenant-a .*: pod p1: the API server answered HTTP 403$/,
  );
});

t.test('an unreachable API server fails naming the namespace, the selector and the network error', async (t) => {
  // A port that was free a moment ago: nothing listens there.
  const closed = createServer();
  await new Promise<void>((r) => closed.listen(0, '127.0.0.1', r));
  const { port } = closed.address() as AddressInfo;
  await new Promise((r) => closed.close(r));
  const err = await deleteSyncedPods({
    kubeconfig: kubeconfigFor(`http://127.0.0.1:${port}`),
    namespace: 'tenant-a',
    labelSelector: SELECTOR,
    policy: PLAIN_HTTP_TEST_POLICY,
  }).then(
    () => undefined,
    (e: unknown) => e as Error,
  );
  t.match(
    err?.message,
    /^deleting the vcluster's synced pods \(vcluster\.loft\.sh\/managed-by=vcluster\) in namespace tenant-a on the root cluster: listing them: the API server could not be reached \(ECONNREFUSED\)$/,
  );
});

t.test('a kubeconfig whose exec would write a marker runs nothing and is refused naming the field', async (t) => {
  const { kubeconfig, ran } = execMarkerKubeconfig(t);
  const err = await deleteSyncedPods({ kubeconfig, namespace: 'tenant-a', labelSelector: SELECTOR }).then(
    () => undefined,
    (e: unknown) => e,
  );
  t.ok(err instanceof KubeconfigPolicyError, 'refused by the kubeconfig policy');
  t.match((err as Error).message, 'users[0].user.exec');
  t.notOk(ran(), 'the exec command never ran');
});
