/**
 * The managed clusters' health probe without a cluster to reach (the end-to-end tier probes a real
 * kube-apiserver going away and back: test/e2e/managed-cluster-health.test.ts): a registration
 * whose server refuses connections turns Reachable=False with the network error, keeping the
 * condition's transition time across probes; stored credentials the policy no longer accepts turn
 * it False (Refused) without any connection; a deleted tenant's registrations are not probed; and
 * probers running at once share the due registrations; a registration reached through the
 * runtime is probed by the replica holding the runtime's tunnel, or by any when none holds it
 * (the probe through a real tunnel: test/e2e/managed-cluster-via-runtime.test.ts).
 */
import t from 'tap';
import { createServer } from 'node:net';
import { withTx } from '../../../provisioner/db/tx.ts';
import { ManagedClusterProber } from '../../../provisioner/managed-clusters/health.ts';
import { credentialsAad, insertManagedCluster } from '../../../provisioner/store/managed-clusters.ts';
import { condition } from '../../../provisioner/store/tenants.ts';
import { createTestApi } from '../../helpers/api.ts';
import { makeProbeDue, managedClusterProbes } from '../../helpers/managed-clusters.ts';
import { dropTunnelRow, putTunnelRow } from '../../helpers/tunnels.ts';

// PROVISIONER_MANAGED_CLUSTER_PROBE_SECONDS=0: the services' own prober stays off; the test runs rounds itself.
const api = await createTestApi({
  env: { PROVISIONER_MANAGED_CLUSTER_PROBE_SECONDS: '0', PROVISIONER_MANAGED_CLUSTER_ALLOWED_CIDRS: '127.0.0.0/8' },
});
t.teardown(() => api.close());

/** A port nothing listens on (bound, then closed). */
async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

async function register(
  tenantId: string,
  name: string,
  server: string,
  reach: 'controlPlane' | 'runtime' = 'controlPlane',
): Promise<void> {
  await withTx(api.db.pool, (tx) =>
    insertManagedCluster(tx, {
      tenantId,
      name,
      server,
      serverKey: server,
      namespaces: [],
      authMethod: 'token',
      credentialsEnc: api.services.box.encrypt(
        JSON.stringify({ server, config: { bearerToken: 'probe-test-token', tlsClientConfig: { insecure: false } } }),
        credentialsAad(tenantId, name),
      ),
      serverVersion: 'v1.34.0',
      conditions: [condition('Reachable', 'True', 'Validated', 'registered', new Date('2026-01-01T00:00:00Z'))],
      probeInMs: 0,
      reach,
    }),
  );
}

const reachable = async (tenantId: string, name: string) => {
  const rows = await managedClusterProbes(api.db.pool, tenantId, name);
  return { condition: rows[0]!.conditions.find((c) => c.type === 'Reachable'), probedAt: rows[0]!.last_probe_at };
};

const prober = (intervalMs = 60_000) =>
  new ManagedClusterProber({
    pool: api.db.pool,
    box: api.services.box,
    policy: api.config.managedClusters.kubeconfig,
    intervalMs,
  });

t.test('a server that refuses connections is Reachable=False with the network error', async (t) => {
  const { tenantId } = await api.signup();
  await register(tenantId, 'gone', `https://127.0.0.1:${await closedPort()}`);
  const registered = await reachable(tenantId, 'gone');
  await prober().round();
  const first = await reachable(tenantId, 'gone');
  t.equal(first.condition?.status, 'False', 'Reachable=False');
  t.equal(first.condition?.reason, 'Unreachable', 'reason Unreachable');
  t.match(first.condition?.message, /could not be reached: ECONNREFUSED/, 'the message names the network error');
  t.ok(first.probedAt! > registered.probedAt!, 'lastProbeAt moves on from the registration');
  const listed = await api.client.call('GET /v1/tenants/:id/managed-clusters', { params: { id: tenantId } });
  t.match(
    listed.items,
    [{ name: 'gone', conditions: [{ type: 'Reachable', status: 'False' }] }],
    'GET lists it as unreachable',
  );

  await makeProbeDue(api.db.pool, tenantId);
  await prober().round();
  const second = await reachable(tenantId, 'gone');
  t.equal(
    second.condition?.lastTransitionTime,
    first.condition?.lastTransitionTime,
    'a second failed probe keeps the time it went False',
  );
});

t.test('stored credentials the policy refuses now are Reachable=False (Refused), with no connection', async (t) => {
  const { tenantId } = await api.signup();
  // Registered while loopback was allowed; the strict policy (no allowed ranges) refuses it now.
  await register(tenantId, 'private', `https://127.0.0.1:${await closedPort()}`);
  await new ManagedClusterProber({
    pool: api.db.pool,
    box: api.services.box,
    policy: { ...api.config.managedClusters.kubeconfig, allowedCidrs: [] },
    intervalMs: 60_000,
  }).round();
  const { condition: c } = await reachable(tenantId, 'private');
  t.equal(c?.reason, 'Refused', 'reason Refused');
  t.match(c?.message, /refused by the current settings: .*loopback address/, 'the message says why and what to do');
});

t.test("a deleted tenant's registrations are not probed", async (t) => {
  const { tenantId, apiKey } = await api.signup();
  await register(tenantId, 'orphan', `https://127.0.0.1:${await closedPort()}`);
  const deleted = await api.as(apiKey).request('DELETE /v1/tenants/:id', { params: { id: tenantId } });
  t.equal(deleted.status, 202, 'tenant deleted');
  const before = await reachable(tenantId, 'orphan');
  await prober().round();
  const after = await reachable(tenantId, 'orphan');
  t.equal(after.condition?.reason, 'Validated', "the condition is still the registration's");
  t.same(after.probedAt, before.probedAt, 'lastProbeAt is unchanged: never probed');
});

t.test(
  'probers running at once share the due registrations: each is probed, its next probe an interval ahead',
  async (t) => {
    const { tenantId } = await api.signup();
    const port = await closedPort();
    for (let i = 0; i < 6; i++) await register(tenantId, `c${i}`, `https://127.0.0.1:${port}/c${i}`);
    const before = Date.now();
    await Promise.all([prober().round(), prober().round(), prober().round()]);
    const probed = (await managedClusterProbes(api.db.pool, tenantId)).filter((m) =>
      m.conditions.some((c) => c.type === 'Reachable' && c.reason === 'Unreachable'),
    );
    t.equal(probed.length, 6, 'every registration was probed');
    const due = Math.min(...probed.map((m) => m.probe_due_at?.getTime() ?? -Infinity));
    t.ok(due >= before + 50_000, 'and its next probe is an interval ahead');
  },
);

t.test(
  "a registration reached through the runtime is probed by the replica holding the runtime's tunnel, or by any when none does",
  async (t) => {
    const { tenantId } = await api.signup();
    await register(tenantId, 'behind', `https://10.1.2.3:6443`, 'runtime');
    const at = (replicaId: string) =>
      new ManagedClusterProber({
        pool: api.db.pool,
        box: api.services.box,
        policy: api.config.managedClusters.kubeconfig,
        intervalMs: 60_000,
        replicaId,
      }).round();
    await putTunnelRow(api.db.pool, tenantId, { replicaId: 'replica-b', replicaUrl: 'http://127.0.0.1:9' });
    await at('replica-a');
    t.equal(
      (await reachable(tenantId, 'behind')).condition?.reason,
      'Validated',
      'a replica without the tunnel leaves it to the replica holding it',
    );
    await at('replica-b');
    const held = (await reachable(tenantId, 'behind')).condition;
    t.equal(held?.reason, 'RuntimeUnreachable', 'the replica holding it (per the directory) probes it');
    t.equal(held?.message, "the runtime's tunnel is not connected", 'and says the tunnel is not connected here');

    await dropTunnelRow(api.db.pool, tenantId);
    await makeProbeDue(api.db.pool, tenantId, { clearConditions: true });
    await at('replica-a');
    const none = (await reachable(tenantId, 'behind')).condition;
    t.equal(none?.status, 'False', 'no replica holds the tunnel: any replica probes it, Reachable=False');
    t.equal(none?.reason, 'RuntimeUnreachable', 'reason RuntimeUnreachable');
  },
);
