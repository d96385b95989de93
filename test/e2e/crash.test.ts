/**
 * End-to-end: crash recovery with the real provisioner process and Pulumi. SIGKILL the
 * provisioner (its whole process group, the Pulumi CLI and provider included) while its engine is
 * creating the tenant's resources, start it again: the tenant reaches Ready, the stack has no
 * pending operations and no stale lock, and no resource exists twice.
 *
 * The crash lands while the engine creates the vcluster's Helm release: the Helm record stays
 * `pending-install`, which recovery removes (provisioner/engine/helm-recovery.ts) before it
 * refreshes with pending creates cleared; the next install adopts what the dead one created.
 * A second test crashes an upgrade that moves the vcluster to its next minor while the vcluster
 * release is `pending-upgrade`: recovery removes only that revision's record, the upgrade
 * completes, and the vcluster runs the new version over what the old one stored. A third crashes a
 * delete (of the first test's tenant): the restarted provisioner finishes the destroy and nothing
 * of the tenant is left.
 */
import t from 'tap';
import { PROVISION_TIMEOUT, provisioningSuite } from './harness/suite.ts';
import { exists, helmHistory, kube, vclusterChartVersion } from './harness/kube.ts';
import { stateKeys } from '../helpers/pulumi-state.ts';
import { until } from '../../sandbox/processes.ts';
import { catalog } from '../../runtime/catalog.ts';

const VERSION = '1.4.1';
/**
 * An upgrade the catalog allows that changes the vcluster release: its chart, vcluster 0.33.1 →
 * 0.34.0 (the pod is replaced and the runner starts the other binary on the same /data), and its
 * values (the Kubernetes version v1.32.1 → v1.33.4), so that Helm upgrades it.
 */
const UPGRADE_FROM = '1.5.0';
const UPGRADE_TO = '1.6.0';
await provisioningSuite(t, async (e2e, root) => {
  interface StackExport {
    deployment?: {
      pending_operations?: unknown[];
      resources?: Array<{ urn: string; type: string; id?: string; delete?: boolean }>;
    };
  }

  /** The first test's tenant once it recovered and is Ready: the delete test deletes it. */
  let recovered: string | undefined;

  t.test('crash during a provisioning up: a restarted provisioner recovers the stack and finishes', async (t) => {
    const signup = await e2e.signup('crashco', VERSION);
    const tenantId = signup.tenant.id;
    const ns = `tenant-${tenantId}`;
    // Wait until the engine is in the middle of the vcluster's Helm install: its release record
    // exists and is still pending (Helm waits for the control plane to become ready).
    await until(
      'the vcluster Helm install to be under way',
      180_000,
      async () => {
        if (!(await exists(() => root.core.readNamespace({ name: ns })))) return false;
        const pending = await root.core.listNamespacedSecret({
          namespace: ns,
          labelSelector: 'owner=helm,name=vcluster,status=pending-install',
        });
        return pending.items.length > 0;
      },
      100,
    );
    const killedAt = Date.now();
    await e2e.provisioner.process.kill();
    await t.rejects(
      fetch(`${e2e.provisioner.url}/healthz`),
      'the provisioner, killed with SIGKILL in the middle of the up, no longer answers',
    );
    t.equal(await e2e.api.operation(signup.operationId).catch(() => undefined), undefined, 'the API is down');

    await e2e.restartProvisioner();
    // The recovery's own lines, shown whatever happens next.
    const recovery = await until(
      'the restarted provisioner to finish its recovery',
      PROVISION_TIMEOUT,
      async () => {
        const lines = await e2e.api.logLines(signup.operationId);
        return lines.some((l) => l.startsWith('recovery: done'))
          ? lines.filter((l) => l.startsWith('recovery:'))
          : undefined;
      },
      500,
    );
    for (const line of recovery) t.comment(line);
    const ready = await e2e.api.waitForPhase(tenantId, 'Ready', PROVISION_TIMEOUT);
    e2e.timing('crash → restart → Ready', (Date.now() - killedAt) / 1000);
    t.equal(ready.status.runtimeVersion, VERSION, 'the tenant is Ready on its version');

    const ops = await e2e.api.operations(tenantId);
    t.notOk(
      ops.some((o) => o.state === 'running' || o.state === 'queued'),
      'no operation is left open',
    );
    const finishing = ops.find((o) => o.state === 'succeeded');
    t.ok(finishing, 'an operation succeeded after the restart');
    const lines = await e2e.api.logLines(finishing!.id);
    t.ok(
      lines.some((l) => /recovery: operation .* did not finish/.test(l)),
      'the log records the recovery',
    );
    t.ok(
      lines.some((l) => l.startsWith('recovery: cancel')),
      'the stale lock was cleared',
    );
    t.ok(
      lines.some((l) => l.startsWith('recovery: refresh --clear-pending-creates')),
      'pending creates were cleared',
    );
    t.ok(
      lines.some((l) =>
        /^recovery: Helm release .*: removed record\(s\) sh\.helm\.release\.v1\.vcluster\.v1 \(pending-install\)/.test(
          l,
        ),
      ),
      'the pending Helm record of the interrupted install was removed',
    );

    const exported = JSON.parse(
      (await e2e.pulumi(['stack', 'export', '--stack', `organization/tenants/tenant-${tenantId}`])).stdout,
    ) as StackExport;
    t.same(exported.deployment?.pending_operations ?? [], [], 'the stack has no pending operations');
    const resources = exported.deployment?.resources ?? [];
    t.ok(resources.length > 20, `the stack holds the tenant's resources (${resources.length})`);
    const urns = resources.filter((r) => !r.delete).map((r) => r.urn);
    t.equal(new Set(urns).size, urns.length, 'no resource is in the stack twice');
    t.same(await stateKeys(e2e.db.pool, { under: 'locks' }), [], 'no lock is left in the state backend');

    // And in the clusters: one vcluster, one Helm release record of it, one of each runtime release.
    const sets = await root.apps.listNamespacedStatefulSet({ namespace: ns });
    t.same(
      sets.items.map((s) => s.metadata?.name),
      ['vcluster'],
      'one vcluster StatefulSet on the root',
    );
    const releases = await root.core.listNamespacedSecret({
      namespace: ns,
      labelSelector: 'owner=helm,name=vcluster,status=deployed',
    });
    t.equal(releases.items.length, 1, 'one deployed Helm release of the vcluster');
    const vc = kube(await e2e.tenantKubeconfig(tenantId));
    for (const [namespace, release] of [
      ['argocd', 'argocd'],
      ['argo', 'argo-workflows'],
      ['argo-rollouts', 'argo-rollouts'],
      ['argo-events', 'argo-events'],
    ] as const) {
      const deployed = await vc.core.listNamespacedSecret({
        namespace,
        labelSelector: `owner=helm,name=${release},status=deployed`,
      });
      t.equal(deployed.items.length, 1, `one deployed Helm release ${release} in the vcluster`);
    }
    const agents = await vc.apps.listNamespacedDeployment({ namespace: 'hosted-runtime' });
    const names = agents.items.map((d) => d.metadata?.name ?? '');
    t.equal(new Set(names).size, names.length, 'each agent Deployment exists once');
    if (ready.status.phase === 'Ready') recovered = tenantId;
  });

  t.test('crash during an upgrade: the pending Helm upgrade record is removed and the upgrade completes', async (t) => {
    t.not(
      catalog.get(UPGRADE_FROM)!.components.kubernetes,
      catalog.get(UPGRADE_TO)!.components.kubernetes,
      `precondition: ${UPGRADE_FROM} → ${UPGRADE_TO} changes the vcluster release (its Kubernetes version)`,
    );
    const fromPins = catalog.get(UPGRADE_FROM)!.components;
    const toPins = catalog.get(UPGRADE_TO)!.components;
    t.not(fromPins.vcluster, toPins.vcluster, `precondition: ${UPGRADE_FROM} → ${UPGRADE_TO} upgrades vcluster`);
    const signup = await e2e.signup('crashup', UPGRADE_FROM);
    const tenantId = signup.tenant.id;
    const ns = `tenant-${tenantId}`;
    await e2e.api.waitForPhase(tenantId, 'Ready', PROVISION_TIMEOUT);
    const before = e2e.vclusters.get(ns);
    t.equal(
      before?.version,
      fromPins.vcluster,
      `before the upgrade the vcluster pod runs vcluster ${fromPins.vcluster}`,
    );
    // Something the old vcluster stored, to be read back through the new one.
    const marker = { name: 'before-upgrade', namespace: 'default' };
    await kube(await e2e.tenantKubeconfig(tenantId)).core.createNamespacedConfigMap({
      namespace: marker.namespace,
      body: { metadata: { name: marker.name }, data: { vcluster: fromPins.vcluster } },
    });
    const accepted = await e2e.api.expectStatus(
      'POST /v1/tenants/:id/upgrade',
      { params: { id: tenantId }, body: { version: UPGRADE_TO } },
      202,
    );
    // Kill while Helm upgrades the vcluster release: its new revision's record is pending-upgrade.
    await until(
      'the vcluster Helm upgrade to be under way',
      180_000,
      async () => {
        const pending = await root.core.listNamespacedSecret({
          namespace: ns,
          labelSelector: 'owner=helm,name=vcluster,status=pending-upgrade',
        });
        return pending.items.length > 0;
      },
      100,
    );
    const killedAt = Date.now();
    await e2e.provisioner.process.kill();
    await t.rejects(
      fetch(`${e2e.provisioner.url}/healthz`),
      'the provisioner, killed with SIGKILL in the middle of the upgrade, no longer answers',
    );

    await e2e.restartProvisioner();
    const ready = await until(`the tenant on ${UPGRADE_TO}`, PROVISION_TIMEOUT, async () => {
      const x = await e2e.api.waitForPhase(tenantId, 'Ready', PROVISION_TIMEOUT);
      return x.status.runtimeVersion === UPGRADE_TO ? x : undefined;
    });
    e2e.timing('crash during upgrade → restart → Ready', (Date.now() - killedAt) / 1000);
    t.equal(ready.status.previousRuntimeVersion, UPGRADE_FROM, 'the upgrade completed');
    const lines = await e2e.api.logLines(accepted.operationId);
    for (const line of lines.filter((l) => l.startsWith('recovery:'))) t.comment(line);
    t.ok(
      lines.some((l) =>
        /^recovery: \d+ pending operation\(s\) in the stack: .*updating kubernetes:helm\.sh\/v3:Release/.test(l),
      ),
      'recovery saw the interrupted update',
    );
    t.ok(
      lines.some((l) =>
        /^recovery: Helm release .*\/vcluster: removed record\(s\) sh\.helm\.release\.v1\.vcluster\.v2 \(pending-upgrade\)$/.test(
          l,
        ),
      ),
      'only the pending revision of the vcluster release was removed',
    );

    const records = await root.core.listNamespacedSecret({ namespace: ns, labelSelector: 'owner=helm,name=vcluster' });
    const statuses = records.items.map((r) => r.metadata?.labels?.status).sort();
    t.same(
      statuses,
      ['deployed', 'superseded'],
      'the release history: the first install superseded, the upgrade deployed',
    );
    t.equal(
      await vclusterChartVersion(root, ns),
      toPins.vcluster,
      `the vcluster runs the real chart ${toPins.vcluster} (its StatefulSet's chart label)`,
    );
    const after = e2e.vclusters.get(ns);
    t.equal(after?.version, toPins.vcluster, `the vcluster pod now runs vcluster ${toPins.vcluster}`);
    t.not(after?.podUid, before?.podUid, 'in a new pod (the upgrade replaced it)');
    const vc = kube(await e2e.tenantKubeconfig(tenantId));
    const kept = await vc.core.readNamespacedConfigMap(marker);
    t.same(
      kept.data,
      { vcluster: fromPins.vcluster },
      `what vcluster ${fromPins.vcluster} stored is there after the upgrade`,
    );
    const cd = await helmHistory(vc, 'argocd', 'argocd');
    t.same(
      cd.map((r) => [r.status, r.chartVersion]),
      [
        ['superseded', fromPins.argoCd],
        ['deployed', toPins.argoCd],
      ],
      `the Argo CD release's history in the vcluster: installed under vcluster ${fromPins.vcluster}, upgraded under ${toPins.vcluster}`,
    );
    const exported = JSON.parse(
      (await e2e.pulumi(['stack', 'export', '--stack', `organization/tenants/tenant-${tenantId}`])).stdout,
    ) as StackExport;
    t.same(exported.deployment?.pending_operations ?? [], [], 'the stack has no pending operations');
  });

  t.test('crash during a delete: the restarted provisioner finishes the destroy', async (t) => {
    // The tenant the first crash left Ready (one provisioning fewer for the file), or its own.
    const tenantId = recovered ?? (await e2e.signup('crashdel', VERSION)).tenant.id;
    const ns = `tenant-${tenantId}`;
    const stack = `tenant-${tenantId}`;
    await e2e.api.waitForPhase(tenantId, 'Ready', PROVISION_TIMEOUT);
    await e2e.api.expectStatus('DELETE /v1/tenants/:id', { params: { id: tenantId } }, 202);
    // Kill while the destroy runs: Helm is uninstalling the vcluster release or the namespace is terminating.
    await until(
      'the destroy to be under way',
      180_000,
      async () => {
        const uninstalling = await root.core
          .listNamespacedSecret({ namespace: ns, labelSelector: 'owner=helm,name=vcluster,status=uninstalling' })
          .catch(() => undefined);
        if (uninstalling && uninstalling.items.length > 0) return true;
        const namespace = await root.core.readNamespace({ name: ns }).catch(() => undefined);
        return namespace?.metadata?.deletionTimestamp !== undefined;
      },
      100,
    );
    const killedAt = Date.now();
    await e2e.provisioner.process.kill();
    await t.rejects(
      fetch(`${e2e.provisioner.url}/healthz`),
      'the provisioner, killed with SIGKILL in the middle of the destroy, no longer answers',
    );

    await e2e.restartProvisioner();
    const tombstone = await e2e.api.waitForPhase(tenantId, 'Deleted', PROVISION_TIMEOUT);
    e2e.timing('crash during delete → restart → Deleted', (Date.now() - killedAt) / 1000);
    t.ok(tombstone.deletedAt, 'the tenant is a tombstone');
    const ops = await e2e.api.operations(tenantId);
    t.notOk(
      ops.some((o) => o.state === 'running' || o.state === 'queued'),
      'no operation is left open',
    );
    const deleteOp = ops.find((o) => o.kind === 'delete');
    t.ok(deleteOp, 'the delete operation is in the tenant’s operations');
    const lines = await e2e.api.logLines(deleteOp!.id);
    t.ok(
      lines.some((l) => /recovery: operation .* did not finish/.test(l)),
      'the delete ran again through recovery',
    );
    await until(
      `namespace ${ns} to be gone`,
      60_000,
      async () => !(await exists(() => root.core.readNamespace({ name: ns }))),
    );
    t.notOk(await exists(() => root.core.readNamespace({ name: ns })), 'the namespace is gone from the root');
    t.same(
      await stateKeys(e2e.db.pool, { containing: `/${stack}` }),
      [],
      'nothing of the stack is left in the state backend',
    );
  });
});
