/**
 * The managed clusters' health probe against a real kube-apiserver from the toolchain, stopped and
 * started again: the registration's Reachable condition goes False (well within the 90 s the
 * issue allows; the probe interval is 1 s here, PROVISIONER_MANAGED_CLUSTER_PROBE_SECONDS) and
 * True again when it is back, in GET …/managed-clusters and in the tenant's status, where
 * ActionRequired says how to connect a cluster while none is reachable (or none is registered).
 */
import t from 'tap';
import { createTestApi } from '../helpers/api.ts';
import { startApiServers } from '../../sandbox/control-plane.ts';
import { until } from '../../sandbox/processes.ts';

t.setTimeout(6 * 60_000);

const servers = await startApiServers('hrt-e2e-managed-health-', ['managed']);
const cluster = servers.servers.managed;
const api = await createTestApi({
  env: { PROVISIONER_MANAGED_CLUSTER_ALLOWED_CIDRS: '127.0.0.0/8', PROVISIONER_MANAGED_CLUSTER_PROBE_SECONDS: '1' },
});
t.teardown(async () => {
  await api.close();
  await servers.stop();
});

interface Condition {
  type: string;
  status: string;
  reason: string;
  message: string;
}
const tenant = await api.signup();
const list = async () =>
  (await api.request('GET', `/v1/tenants/${tenant.tenantId}/managed-clusters`, { key: tenant.apiKey })).json<{
    items: Array<{ name: string; conditions: Condition[]; lastProbeAt: string | null }>;
  }>().items;
const reachable = async () => (await list())[0]?.conditions.find((c) => c.type === 'Reachable');
const status = async () =>
  (await api.request('GET', `/v1/tenants/${tenant.tenantId}`, { key: tenant.apiKey })).json<{
    status: { conditions: Condition[]; managedClusters?: Array<{ name: string; reachable: string }> };
  }>().status;
const actionRequired = async () => (await status()).conditions.find((c) => c.type === 'ActionRequired');

t.test('a tenant with no managed cluster is told how to connect one', async (t) => {
  const action = await actionRequired();
  t.equal(action?.status, 'True', 'ActionRequired=True');
  t.equal(action?.reason, 'NoManagedCluster', 'reason NoManagedCluster');
  t.match(
    action?.message,
    `POST /v1/tenants/${tenant.tenantId}/managed-clusters`,
    'the message says how to connect one',
  );
  t.same((await status()).managedClusters, [], 'status.managedClusters is empty');
});

t.test('Reachable follows the API server going away and coming back', async (t) => {
  const res = await api.request('POST', `/v1/tenants/${tenant.tenantId}/managed-clusters`, {
    key: tenant.apiKey,
    body: { name: 'edge', kubeconfig: cluster.kubeconfig },
  });
  t.equal(res.statusCode, 201, `registered (${res.body.slice(0, 200)})`);
  const probed = await until('a probe after the registration', 30_000, async () => {
    const c = await reachable();
    return c?.reason === 'Responding' && c;
  });
  t.equal(probed.status, 'True', 'the probe finds it reachable');
  t.match(probed.message, /^Kubernetes v1\.\d+\.\d+ answered in \d+ ms$/, 'with the version and the answer time');
  t.equal(await actionRequired(), undefined, 'no ActionRequired while a cluster is reachable');
  t.same(
    (await status()).managedClusters,
    [{ name: 'edge', server: cluster.server, reachable: 'True' }],
    'listed in the tenant status as reachable',
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
  t.match(down.message, /could not be reached: ECONNREFUSED/, 'the message names the network error');
  const action = await actionRequired();
  t.equal(action?.reason, 'NoReachableManagedCluster', 'the tenant shows ActionRequired: no reachable cluster');
  t.match(action?.message, /none of the connected clusters \(edge\) is reachable/, 'naming the cluster');
  t.same(
    (await status()).managedClusters,
    [{ name: 'edge', server: cluster.server, reachable: 'False' }],
    'listed in the tenant status as unreachable',
  );

  await cluster.startApiServer();
  const back = await until('Reachable=True again', 90_000, async () => {
    const c = await reachable();
    return c?.status === 'True' && c;
  });
  t.equal(back.reason, 'Responding', 'reachable again once the API server is back');
  t.equal(await actionRequired(), undefined, 'ActionRequired is gone');
});
