/**
 * The reconciler hands a tenant's managed clusters to its program: after a registration (a row
 * with sealed credentials, and the generation bump the API makes), the engine's input carries
 * each registration with its credentials in Argo CD's config format, the operation log masks
 * those credentials wherever the engine prints them, and a removal leaves the next input without
 * it. The engine is the ScriptedEngine TEST DOUBLE (the end-to-end tier runs the real one:
 * test/e2e/managed-cluster-secret.test.ts).
 */
import t from 'tap';
import { withTx } from '../../../provisioner/db/tx.ts';
import { ManagedClusterService } from '../../../provisioner/managed-clusters/service.ts';
import { STRICT_KUBECONFIG_POLICY } from '../../../kubeconfig-policy/policy.ts';
import {
  credentialsAad,
  deleteManagedCluster,
  insertManagedCluster,
} from '../../../provisioner/store/managed-clusters.ts';
import { changeSpec, getTenantRow } from '../../../provisioner/store/tenants.ts';
import { createHarness, scripted } from './harness.ts';
import { until } from '../../../sandbox/until.ts';

const h = await createHarness();
t.teardown(() => h.close());
await h.addCluster('root-a');

const TOKEN = 'managed-cluster-bearer-token-0123456789abcdef';
const KEY = 'LS0tLS1CRUdJTiBQUklWQVRFIEtFWS0tLS0tCm1hbmFnZWQta2V5LWRhdGEK';
const service = new ManagedClusterService({
  pool: h.db.pool,
  box: h.box,
  policy: STRICT_KUBECONFIG_POLICY,
  rootPolicy: STRICT_KUBECONFIG_POLICY,
  probeIntervalMs: 3_600_000,
  tokens: { lifetimeSeconds: 3600, refreshMs: 0 },
});

t.test(
  'registrations reach the program with their credentials, masked in the log, and leave it when removed',
  async (t) => {
    const engine = scripted({
      // The engine prints what it was given, as a failing provider might quote its inputs.
      script: (call) => ({
        lines: (call.input.managedClusters ?? []).map(
          (m) =>
            `cluster ${m.name}: token ${m.config.bearerToken ?? ''} key ${m.config.tlsClientConfig?.keyData ?? ''}`,
        ),
      }),
    });
    await h.reconciler(engine, { managedClusters: (id) => service.forProgram(h.db.pool, id) });
    const { id } = await h.createTenant();
    await until('Ready', 10_000, async () => (await h.tenant(id)).phase === 'Ready');
    t.equal(engine.calls.at(-1)?.input.managedClusters, undefined, 'no registration: no managed clusters in the input');

    const config = { bearerToken: TOKEN, tlsClientConfig: { insecure: false, caData: 'Y2E=', keyData: KEY } };
    const register = await withTx(h.db.pool, async (tx) => {
      await insertManagedCluster(tx, {
        tenantId: id,
        name: 'prod',
        server: 'https://203.0.113.20:6443',
        serverKey: 'https://203.0.113.20:6443',
        namespaces: ['apps'],
        authMethod: 'token',
        credentialsEnc: h.box.encrypt(
          JSON.stringify({ server: 'https://203.0.113.20:6443', config }),
          credentialsAad(id, 'prod'),
        ),
        serverVersion: 'v1.34.0',
        conditions: [],
        probeInMs: 3_600_000,
      });
      return changeSpec(tx, (await getTenantRow(tx, id, true))!, {}, 'update', "managed cluster 'prod' registered");
    });
    await until('the registration reconciled', 10_000, async () => {
      const row = await h.tenant(id);
      return row.observed_generation === register.generation && row.phase === 'Ready';
    });
    const input = engine.calls.filter((c) => c.kind === 'up').at(-1)!.input;
    t.same(
      input.managedClusters,
      [{ name: 'prod', server: 'https://203.0.113.20:6443', namespaces: ['apps'], config }],
      'the engine gets the registration with its credentials, as Argo CD reads them',
    );
    const lines = await h.logLines(register.id);
    t.ok(
      lines.some((l) => l.startsWith('cluster prod: token ')),
      'the engine output quoting the credentials is in the log',
    );
    t.notOk(
      lines.some((l) => l.includes(TOKEN)),
      'the bearer token is masked in the operation log',
    );
    t.notOk(
      lines.some((l) => l.includes(KEY)),
      'the client key is masked in the operation log',
    );

    const remove = await withTx(h.db.pool, async (tx) => {
      await deleteManagedCluster(tx, id, 'prod');
      return changeSpec(tx, (await getTenantRow(tx, id, true))!, {}, 'update', "managed cluster 'prod' removed");
    });
    await until('the removal reconciled', 10_000, async () => {
      const row = await h.tenant(id);
      return row.observed_generation === remove.generation && row.phase === 'Ready';
    });
    t.equal(
      engine.calls.filter((c) => c.kind === 'up').at(-1)!.input.managedClusters,
      undefined,
      'after the removal the input has no managed clusters (the program deletes the Secret)',
    );
  },
);
