/**
 * A managed cluster only the tenant's runtime reaches (`reach: runtime`), with the real pieces on
 * loopback: the provisioner's API and tunnel server in-process (createTestApi: real app, real
 * Postgres), the runtime's tunnel client, request router and app-proxy, and a real kube-apiserver
 * from the toolchain playing the tenant's cluster. The control plane's address policy is left at
 * its default, which refuses loopback: the cluster is reachable by the runtime only.
 *
 * Covered: the registration checked by the runtime (accepted; refused with the control plane's
 * own codes for a rejected token and for missing permissions; 503 while the tunnel is down), the
 * health probe through the tunnel (True, False within 90 s of the API server stopping, True again
 * when it is back; the probe interval is 1 s here) and RuntimeUnreachable while the tunnel is down;
 * the CLI's `managed-clusters add --via-runtime`.
 */
import t from 'tap';
import http from 'node:http';
import { once } from 'node:events';
import { CoreV1Api, RbacAuthorizationV1Api } from '@kubernetes/client-node';
import { buildAppProxy } from '../../runtime/agents/app-proxy/app.ts';
import { loadPublicKey } from '../../runtime/agents/app-proxy/request-token.ts';
import { staticRuntimeInfo } from '../../runtime/agents/app-proxy/runtime-info.ts';
import { createRouter } from '../../runtime/agents/request-router/router.ts';
import { main } from '../../provisioner/cli/main.ts';
import { createTestApi } from '../helpers/api.ts';
import { connectRuntime, type ConnectedRuntime } from '../helpers/runtime.ts';
import { startApiServers } from '../../sandbox/control-plane.ts';
import { until } from '../../sandbox/processes.ts';

t.setTimeout(6 * 60_000);

const servers = await startApiServers('hrt-e2e-managed-runtime-', ['managed']);
const cluster = servers.servers.managed;
// No PROVISIONER_MANAGED_CLUSTER_ALLOWED_CIDRS: the control plane itself may not connect to loopback.
const api = await createTestApi({ env: { PROVISIONER_MANAGED_CLUSTER_PROBE_SECONDS: '1' } });
const base = await api.app.listen({ port: 0, host: '127.0.0.1' });
const tenant = await api.signup();

const proxy = await buildAppProxy({
  tenantId: tenant.tenantId,
  publicKey: loadPublicKey(api.services.signer.publicKeyPem),
  runtimeInfo: staticRuntimeInfo({ runtimeVersion: '1.4.0', components: { argoCd: '7.9.1' } }),
});
const proxyUrl = await proxy.listen({ port: 0, host: '127.0.0.1' });
const router = createRouter({ appProxyUrl: proxyUrl, eventSourceUrl: 'http://127.0.0.1:9' });
const routerServer = http.createServer(router.handler).listen(0, '127.0.0.1');
await once(routerServer, 'listening');
let runtime: ConnectedRuntime | undefined = await connectRuntime(api, base, tenant.tenantId, routerServer);
t.teardown(async () => {
  await runtime?.client.close();
  router.close();
  routerServer.close();
  await proxy.close();
  await api.close();
  await servers.stop();
});

// On the cluster: a ServiceAccount allowed everything in `apps`, one only allowed to read there.
const core = cluster.kc.makeApiClient(CoreV1Api);
const rbac = cluster.kc.makeApiClient(RbacAuthorizationV1Api);
for (const name of ['apps', 'deployer']) await core.createNamespace({ body: { metadata: { name } } });
async function serviceAccountToken(name: string, verbs: string[]): Promise<string> {
  await core.createNamespacedServiceAccount({ namespace: 'deployer', body: { metadata: { name } } });
  await rbac.createNamespacedRole({
    namespace: 'apps',
    body: { metadata: { name }, rules: [{ apiGroups: ['*'], resources: ['*'], verbs }] },
  });
  await rbac.createNamespacedRoleBinding({
    namespace: 'apps',
    body: {
      metadata: { name },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name },
      subjects: [{ kind: 'ServiceAccount', name, namespace: 'deployer' }],
    },
  });
  const answer = await core.createNamespacedServiceAccountToken({
    name,
    namespace: 'deployer',
    body: { spec: { audiences: [], expirationSeconds: 3600 } },
  });
  return answer.status!.token!;
}
const deployerToken = await serviceAccountToken('argocd-manager', ['*']);
const readerToken = await serviceAccountToken('reader', ['get', 'list', 'watch']);
const caData = Buffer.from(cluster.ca.certPem).toString('base64');

interface Condition {
  type: string;
  status: string;
  reason: string;
  message: string;
}
const path = `/v1/tenants/${tenant.tenantId}/managed-clusters`;
const post = (body: Record<string, unknown>) => api.request('POST', path, { key: tenant.apiKey, body });
const reachable = async (): Promise<Condition | undefined> =>
  (await api.request('GET', `${path}/edge`, { key: tenant.apiKey }))
    .json<{ conditions: Condition[] }>()
    .conditions.find((c) => c.type === 'Reachable');

t.test('the control plane itself may not reach the cluster (its address policy refuses loopback)', async (t) => {
  const res = await post({
    name: 'direct',
    server: cluster.server,
    token: deployerToken,
    caData,
    namespaces: ['apps'],
  });
  t.equal(res.statusCode, 400, `refused by the control plane's policy (${res.body.slice(0, 200)})`);
  t.match(res.json().error.message, /loopback/, 'the message names the address policy');
});

t.test("a registration through the runtime is refused with the control plane's own codes", async (t) => {
  const unauthorized = await post({
    name: 'other',
    reach: 'runtime',
    server: cluster.server,
    token: 'not-a-valid-token',
    caData,
    namespaces: ['apps'],
  });
  t.equal(unauthorized.statusCode, 422, `a token the server rejects: 422 (${unauthorized.body.slice(0, 200)})`);
  t.equal(unauthorized.json().error.code, 'MANAGED_CLUSTER_UNAUTHORIZED', 'MANAGED_CLUSTER_UNAUTHORIZED');
  t.match(unauthorized.json().error.message, /refused the credentials \(401 Unauthorized\)/, 'the message says why');

  const missing = await post({
    name: 'other',
    reach: 'runtime',
    server: cluster.server,
    token: readerToken,
    caData,
    namespaces: ['apps'],
  });
  t.equal(missing.statusCode, 422, `a token lacking permissions: 422 (${missing.body.slice(0, 200)})`);
  t.equal(missing.json().error.code, 'MANAGED_CLUSTER_PERMISSIONS_MISSING', 'MANAGED_CLUSTER_PERMISSIONS_MISSING');
  t.same(
    missing.json().error.details.missing,
    [
      'create */* in namespace apps',
      'update */* in namespace apps',
      'patch */* in namespace apps',
      'delete */* in namespace apps',
    ],
    'each missing verb is listed, as the runtime reviewed them',
  );
  const list = await api.request('GET', path, { key: tenant.apiKey });
  t.same(list.json().items, [], 'nothing was registered');
});

t.test('registered through the runtime; the probe follows the API server away and back', async (t) => {
  const res = await post({
    name: 'edge',
    reach: 'runtime',
    server: cluster.server,
    token: deployerToken,
    caData,
    namespaces: ['apps'],
  });
  t.equal(res.statusCode, 201, `registered (${res.body.slice(0, 300)})`);
  t.equal(res.json().managedCluster.reach, 'runtime', 'the registration says it is reached through the runtime');
  t.match(
    res.json().managedCluster.conditions,
    [{ type: 'Reachable', status: 'True', reason: 'Validated', message: /answered the runtime/ }],
    'Reachable=True from the check the runtime made',
  );
  const probed = await until('a probe through the runtime', 30_000, async () => {
    const c = await reachable();
    return c?.reason === 'Responding' && c;
  });
  t.match(
    probed.message,
    /^Kubernetes v1\.\d+\.\d+ answered the runtime in \d+ ms$/,
    'the probe went through the runtime',
  );

  const stoppedAt = Date.now();
  await cluster.stopApiServer();
  const down = await until('Reachable=False', 90_000, async () => {
    const c = await reachable();
    return c?.status === 'False' && c;
  });
  const tookSeconds = (Date.now() - stoppedAt) / 1000;
  t.ok(tookSeconds < 90, `Reachable=False ${tookSeconds.toFixed(1)} s after the API server was stopped (at most 90 s)`);
  t.equal(down.reason, 'Unreachable', 'reason Unreachable');
  t.match(down.message, /could not be reached: ECONNREFUSED.*\(from the runtime\)/, 'the runtime’s network error');

  await cluster.startApiServer();
  const back = await until('Reachable=True again', 90_000, async () => {
    const c = await reachable();
    return c?.status === 'True' && c;
  });
  t.equal(back.reason, 'Responding', 'reachable again once the API server is back');
});

t.test('the tunnel down: RuntimeUnreachable, and a registration through the runtime is a 503', async (t) => {
  await runtime!.client.close();
  runtime = undefined;
  const down = await until('Reachable=False RuntimeUnreachable', 90_000, async () => {
    const c = await reachable();
    return c?.reason === 'RuntimeUnreachable' && c;
  });
  t.equal(down.status, 'False', 'Reachable=False');
  // A probe in flight when the tunnel closes reports the closing; the next finds no tunnel.
  t.match(
    down.message,
    /^(the runtime's tunnel is not connected|the runtime could not check the cluster: the runtime disconnected during the request: .*)$/,
    `the message says the tunnel is down (${down.message})`,
  );
  const steady = await until("the next probe: the runtime's tunnel is not connected", 30_000, async () => {
    const c = await reachable();
    return c?.reason === 'RuntimeUnreachable' && c.message === "the runtime's tunnel is not connected" && c;
  });
  t.equal(steady.status, 'False', 'still Reachable=False while the tunnel is down');

  const res = await post({
    name: 'later',
    reach: 'runtime',
    // Another spelling of the same server: the first registration holds 127.0.0.1's.
    server: cluster.server.replace('127.0.0.1', 'localhost'),
    token: deployerToken,
    caData,
    namespaces: ['apps'],
  });
  t.equal(res.statusCode, 503, `503 while the tunnel is down (${res.body.slice(0, 200)})`);
  t.equal(res.json().error.code, 'RUNTIME_UNREACHABLE', 'RUNTIME_UNREACHABLE');
  t.ok(Number(res.headers['retry-after']) > 0, `with Retry-After (${String(res.headers['retry-after'])})`);
  t.match(res.json().error.message, /tunnel is not connected/, 'the message says the tunnel is down');

  runtime = await connectRuntime(api, base, tenant.tenantId, routerServer, 'runtime again');
  const back = await until('Reachable=True once the runtime is back', 90_000, async () => {
    const c = await reachable();
    return c?.status === 'True' && c;
  });
  t.equal(back.reason, 'Responding', 'probed through the new tunnel');
});

t.test('the CLI registers a cluster through the runtime (--via-runtime)', async (t) => {
  const removed = await api.request('DELETE', `${path}/edge`, { key: tenant.apiKey });
  t.equal(removed.statusCode, 202, 'the first registration of the server removed');
  const out: string[] = [];
  const err: string[] = [];
  const code = await main(
    [
      '--url',
      base,
      '--token',
      tenant.apiKey,
      'managed-clusters',
      'add',
      tenant.tenantId,
      'lab',
      '--kubeconfig',
      cluster.kubeconfigFile,
      '--namespace',
      'apps',
      '--via-runtime',
    ],
    { out: (s) => out.push(s), err: (s) => err.push(s), env: {} },
  );
  t.equal(code, 0, `add succeeded (${err.join(' ')})`);
  t.match(out.join('\n'), /registered managed cluster lab .*reached through the runtime/, 'it says so');
  const lab = (await api.request('GET', `${path}/lab`, { key: tenant.apiKey })).json<{ reach: string }>();
  t.equal(lab.reach, 'runtime', 'registered with reach runtime');
});
