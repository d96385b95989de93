/**
 * A root-cluster kubeconfig stored before the policy existed (or written to the database by other
 * means) is checked again when the reconciler loads it: placement and reconcile never hand a
 * kubeconfig with `exec` to the engine, so its command never runs.
 */
import t from 'tap';
import { insertCluster } from '../../../provisioner/store/clusters.ts';
import { waitForSecretKey } from '../../../tenants/kubeconfig-wait.ts';
import { createHarness, scripted } from './harness.ts';
import { execMarkerKubeconfig } from '../../helpers/exec-kubeconfig.ts';
import { until } from '../../../sandbox/until.ts';

const h = await createHarness();
t.teardown(() => h.close());

t.test(
  'a stored kubeconfig with exec fails the operation before the engine runs; the command never runs',
  async (t) => {
    const { kubeconfig, ran } = execMarkerKubeconfig(t, 'reconcile-exec-');
    await insertCluster(h.db.pool, {
      name: 'exec-root',
      region: 'eu-1',
      labels: {},
      capacity: 10,
      plans: [],
      kubeconfigEnc: h.box.encrypt(kubeconfig, 'cluster/exec-root'),
    });
    // TEST DOUBLE for the tenant program: like the real one, it waits for the vcluster's kubeconfig
    // through the root kubeconfig it was given (tenants/kubeconfig-wait.ts).
    const waits: Promise<unknown>[] = [];
    const engine = scripted({
      script: (call) => {
        waits.push(
          waitForSecretKey({
            kubeconfig: call.input.rootKubeconfig,
            namespace: 'n',
            name: 'vc-vcluster',
            key: 'config',
            timeoutMs: 200,
            intervalMs: 50,
          }).catch((e: unknown) => e),
        );
        return undefined;
      },
    });
    await h.reconciler(engine);
    const { id, operationId } = await h.createTenant();
    const failed = await until('the operation to fail', 10_000, async () => {
      const [op] = await h.operations(id);
      return op?.state === 'failed' || op?.state === 'succeeded' || (op?.error ? op : undefined) ? op : undefined;
    });
    await Promise.all(waits);
    t.equal((await h.tenant(id)).cluster_name, 'exec-root', 'placed on the cluster');
    t.match(
      failed.error?.message,
      /kubeconfig of root cluster 'exec-root' is refused: users\[0\]\.user\.exec/,
      'the operation error names the field',
    );
    t.equal(engine.calls.length, 0, 'the engine was never called');
    t.notOk(ran(), 'the exec command never ran');
    t.ok(
      (await h.logLines(operationId)).some((l) => l.includes('users[0].user.exec')),
      'the operation log says why',
    );
  },
);
