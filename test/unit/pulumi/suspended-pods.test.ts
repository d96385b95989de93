/**
 * A suspended tenant's vcluster: once its release is applied, the pods the vcluster synced onto
 * the tenant namespace are deleted (tenants/synced-pods.ts, as `vcluster pause` does), through the
 * root kubeconfig, by the selector `vcluster.loft.sh/managed-by=<release>`; never when running,
 * never in a preview. Under Pulumi mocks, with the deletion injected and recorded.
 */
import t from 'tap';
import * as pulumi from '@pulumi/pulumi';
import { createTenantProgram } from '../../../tenants/program.ts';
import { checkKubeconfig } from '../../../kubeconfig-policy/policy.ts';
import { VCLUSTER_RELEASE, VirtualCluster } from '../../../tenants/virtual-cluster.ts';
import { MANAGED_BY_LABEL, type SyncedPodsRequest } from '../../../tenants/synced-pods.ts';
import { FAKE_KUBECONFIG, runProgram } from './harness.ts';
import { recordingWaiter, tenantConfig, tenantInput, ROOT_ACCESS, ROOT_KUBECONFIG } from './fixtures.ts';

const SELECTOR = `${MANAGED_BY_LABEL}=${VCLUSTER_RELEASE}`;

/** An evictor that records its calls and answers `count`. */
function recordingEvictor(count = 3) {
  const calls: SyncedPodsRequest[] = [];
  return {
    calls,
    evict: (r: SyncedPodsRequest) => {
      calls.push(r);
      return Promise.resolve(count);
    },
  };
}

/**
 * The VirtualCluster component alone under mocks, as an update (`preview: false`) or a preview:
 * the value of its evictedPods, and the types registered when the eviction ran.
 */
async function runVirtualCluster(o: {
  suspended: boolean;
  preview: boolean;
  evict: (r: SyncedPodsRequest) => Promise<number>;
}): Promise<{ evicted: unknown; registeredBefore?: string[] }> {
  const types: string[] = [];
  let registeredBefore: string[] | undefined;
  pulumi.runtime.setMocks(
    {
      newResource(args) {
        types.push(args.type);
        const state: Record<string, unknown> = { ...args.inputs };
        if (args.type === 'kubernetes:helm.sh/v3:Release') state.status = { status: 'deployed' };
        if (args.type === 'kubernetes:core/v1:Secret' && args.id)
          state.data = { config: Buffer.from(FAKE_KUBECONFIG).toString('base64') };
        return { id: args.id || `${args.name}-id`, state };
      },
      call: (args) => args.inputs,
    },
    'tenant-test',
    'test',
    o.preview,
  );
  pulumi.runtime.setAllConfig({});
  let evicted: unknown;
  await pulumi.runtime.runInPulumiStack(async () => {
    const vc = new VirtualCluster('vc', {
      namespace: 'tenant-a',
      runtimeVersion: '1.4.0',
      plan: 'team',
      suspended: o.suspended,
      serverTemplate: 'https://{release}.{namespace}.svc:443',
      priorityClassName: '',
      rootKubeconfig: pulumi.secret(ROOT_KUBECONFIG),
      kubeconfigTimeoutSeconds: 30,
      waitForSecret: () => Promise.resolve(),
      evictSyncedPods: (r) => {
        registeredBefore = [...types];
        return o.evict(r);
      },
    });
    evicted = await new Promise((resolve) => vc.evictedPods.apply(resolve));
    return Promise.resolve({});
  });
  await pulumi.runtime.disconnect();
  return { evicted, ...(registeredBefore ? { registeredBefore } : {}) };
}

t.test('suspended: the synced pods are deleted after the release, by the managed-by selector', async (t) => {
  t.equal(SELECTOR, 'vcluster.loft.sh/managed-by=vcluster', 'the selector `vcluster pause` uses for release vcluster');
  const evictor = recordingEvictor(3);
  const { evicted, registeredBefore } = await runVirtualCluster({
    suspended: true,
    preview: false,
    evict: evictor.evict,
  });
  t.equal(evictor.calls.length, 1, 'the eviction ran once');
  t.ok(registeredBefore?.includes('kubernetes:helm.sh/v3:Release'), 'after the release was applied');
  t.match(evictor.calls[0], { namespace: 'tenant-a', labelSelector: SELECTOR, kubeconfig: ROOT_KUBECONFIG });
  t.equal(evictor.calls[0]!.policy, undefined, 'no policy given: the default (strict) one applies');
  t.equal(evicted, 3, 'evictedPods reports how many were deleted');
});

t.test('running: nothing is deleted and evictedPods is 0', async (t) => {
  const running = recordingEvictor();
  const r = await runVirtualCluster({ suspended: false, preview: false, evict: running.evict });
  t.equal(running.calls.length, 0, 'a running vcluster keeps its pods');
  t.equal(r.evicted, 0);
  // The same component suspended does delete: the check above is about suspension, not a deletion that never runs.
  const suspended = recordingEvictor();
  await runVirtualCluster({ suspended: true, preview: false, evict: suspended.evict });
  t.equal(suspended.calls.length, 1, 'suspended, it deletes');
});

t.test('a preview deletes nothing, even suspended', async (t) => {
  const previewed = recordingEvictor();
  const p = await runVirtualCluster({ suspended: true, preview: true, evict: previewed.evict });
  t.equal(previewed.calls.length, 0, 'no pod is deleted in a preview');
  t.equal(p.evicted, 0, 'and the preview reports none');
  // The same run as an update deletes them.
  const updated = recordingEvictor();
  const u = await runVirtualCluster({ suspended: true, preview: false, evict: updated.evict });
  t.equal(updated.calls.length, 1, 'the update deletes them');
  t.equal(u.evicted, 3);
});

t.test('the tenant program hands the eviction the tenant namespace and its root kubeconfig', async (t) => {
  const id = tenantInput().tenantId;
  const suspended = recordingEvictor();
  await runProgram(
    createTenantProgram({
      rootAccess: ROOT_ACCESS,
      waitForSecret: recordingWaiter().waiter,
      evictSyncedPods: suspended.evict,
    }),
    tenantConfig({ suspended: true }),
  );
  t.equal(suspended.calls.length, 1, 'a suspended tenant: its synced pods are deleted');
  t.match(suspended.calls[0], {
    namespace: `tenant-${id}`,
    labelSelector: SELECTOR,
    kubeconfig: checkKubeconfig(ROOT_KUBECONFIG).text,
  });
  t.ok(suspended.calls[0]!.policy, "with the tenant's kubeconfig policy");

  const running = recordingEvictor();
  await runProgram(
    createTenantProgram({
      rootAccess: ROOT_ACCESS,
      waitForSecret: recordingWaiter().waiter,
      evictSyncedPods: running.evict,
    }),
    tenantConfig({ suspended: false }),
  );
  t.equal(running.calls.length, 0, 'a running tenant: none');
});
