/**
 * End-to-end: drift correction by the periodic resync (the safety net behind the root-cluster
 * watch, which is off here) with the real provisioner process and Pulumi. Delete the tenant's
 * ResourceQuota by hand on the root cluster: the next periodic resync (refresh + update) restores
 * it, and its operation log says so.
 */
import t from 'tap';
import { PROVISION_TIMEOUT, provisioningSuite } from './harness/suite.ts';
import { exists } from './harness/kube.ts';
import { until } from '../../sandbox/processes.ts';

const VERSION = '1.4.1';
const RESYNC_SECONDS = 30;
await provisioningSuite(
  t,
  async (e2e, root) => {
    t.test('drift: a ResourceQuota deleted by hand is restored by the next resync, and the log says so', async (t) => {
      const signup = await e2e.signup('driftco', VERSION);
      const tenantId = signup.tenant.id;
      const ns = `tenant-${tenantId}`;
      await e2e.api.waitForPhase(tenantId, 'Ready', PROVISION_TIMEOUT);
      const quotas = await root.core.listNamespacedResourceQuota({ namespace: ns });
      t.equal(quotas.items.length, 1, 'the tenant has its quota');
      const quota = quotas.items[0]!.metadata!.name!;
      const before = new Set((await e2e.api.operations(tenantId)).map((o) => o.id));
      await root.core.deleteNamespacedResourceQuota({ name: quota, namespace: ns });
      const deletedAt = Date.now();
      t.notOk(
        await exists(() => root.core.readNamespacedResourceQuota({ name: quota, namespace: ns })),
        'quota deleted by hand',
      );

      // A resync that started after the deletion and corrected it.
      const op = await until(
        'a resync that corrects the drift',
        (RESYNC_SECONDS + 240) * 1000,
        async () => {
          for (const o of await e2e.api.operations(tenantId)) {
            if (before.has(o.id) || o.kind !== 'resync' || o.state !== 'succeeded') continue;
            const lines = await e2e.api.logLines(o.id);
            if (lines.some((l) => l.startsWith('drift detected: '))) return { op: o, lines };
          }
          return undefined;
        },
        2000,
      );
      e2e.timing('drift → corrected by resync', (Date.now() - deletedAt) / 1000);
      for (const line of op.lines.filter((l) => /drift|nothing to correct/.test(l)))
        t.comment(`correcting resync: ${line}`);
      t.same(
        op.lines.filter((l) => l.startsWith('drift detected: ')),
        [`drift detected: ResourceQuota ${ns}/${quota}: deleted`],
        'the log names the deleted quota as the one drift',
      );
      t.same(
        op.lines.filter((l) => l.startsWith('drift corrected: ')),
        [`drift corrected: ResourceQuota ${ns}/${quota}: created`],
        'and the update that created it again as the one correction',
      );
      t.ok(
        await exists(() => root.core.readNamespacedResourceQuota({ name: quota, namespace: ns })),
        'the quota is back',
      );
      const tenant = await e2e.api.tenant(tenantId);
      t.equal(tenant.status.phase, 'Ready', 'the tenant stays Ready');

      // The next resync of the now untouched tenant has nothing to correct.
      const next = await until(
        'the next resync',
        (RESYNC_SECONDS + 240) * 1000,
        async () => {
          for (const o of await e2e.api.operations(tenantId)) {
            if (before.has(o.id) || o.id === op.op.id || o.kind !== 'resync' || o.state !== 'succeeded') continue;
            return { op: o, lines: await e2e.api.logLines(o.id) };
          }
          return undefined;
        },
        2000,
      );
      for (const line of next.lines.filter((l) => /drift|nothing to correct/.test(l)))
        t.comment(`next resync: ${line}`);
      t.ok(
        next.lines.includes('preview with refresh: nothing to change (no drift, no program change); no update'),
        'the next resync of an untouched tenant: its preview against the live objects finds nothing to change',
      );
      t.notOk(
        next.lines.some((l) => l.startsWith('drift ')),
        'so no refresh and no update ran (no drift lines)',
      );
      t.equal((await e2e.api.tenant(tenantId)).status.phase, 'Ready');
    });
  },
  // The periodic resync alone (the safety net): the root-cluster watch is off here (drift-watch.test.ts tests it).
  { resyncSeconds: RESYNC_SECONDS, extraEnv: { PROVISIONER_DRIFT_WATCH: 'false' } },
);
