/**
 * Upgrading a tenant between two catalog versions changes exactly the pinned components: the
 * registered inputs of both runs differ only in resources whose pins changed.
 */
import t from 'tap';
import { catalog } from '../../../runtime/catalog.ts';
import { agentsAt } from '../../../runtime/component/agents.ts';
import type { ComponentPins } from '../../../runtime/versions.ts';
import { createTenantProgram } from '../../../tenants/program.ts';
import type { VclusterValues } from '../../../tenants/vcluster-values.ts';
import { releaseOf, runProgram, type Registered } from './harness.ts';
import { recordingWaiter, tenantConfig, ROOT_ACCESS } from './fixtures.ts';

/** Suspended runs delete no pod: there is no cluster (tenants/synced-pods.ts; suspended-pods.test.ts). */
const noEviction = () => Promise.resolve(0);

const run = (runtimeVersion: string, suspended = false) =>
  runProgram(
    createTenantProgram({
      rootAccess: ROOT_ACCESS,
      waitForSecret: recordingWaiter().waiter,
      evictSyncedPods: noEviction,
    }),
    tenantConfig({ runtimeVersion, suspended }),
  );

/**
 * Resources whose inputs changed; resources added must be those of the agents `added` (agentsAt),
 * and with the GitOps Operator the promotion CRDs (`-runtime-crd-`).
 */
function changed(a: Registered[], b: Registered[], added: readonly string[] = []): string[] {
  const before = new Map(a.map((r) => [r.name, JSON.stringify(r.inputs)]));
  const after = new Map(b.map((r) => [r.name, JSON.stringify(r.inputs)]));
  const isAdded = (n: string) =>
    added.some((agent) => n.includes(`-runtime-${agent}-`)) ||
    (added.includes('gitops-operator') && n.includes('-runtime-crd-'));
  t.same(
    [...before.keys()].sort(),
    [...after.keys()].filter((n) => before.has(n) || !isAdded(n)).sort(),
    'same resources before and after, besides those of the agents the version adds',
  );
  t.ok(
    [...after.keys()].filter((n) => !before.has(n)).every(isAdded),
    `only resources of the added agents (${added.join(', ') || 'none'}) are new`,
  );
  return [...after.keys()].filter((n) => before.has(n) && before.get(n) !== after.get(n)).sort();
}

const suffixFor: Record<keyof ComponentPins, string[]> = {
  vcluster: ['-vcluster-release'],
  kubernetes: ['-vcluster-release'],
  argoCd: ['-runtime-argo-cd'],
  argoWorkflows: ['-runtime-argo-workflows'],
  argoRollouts: ['-runtime-argo-rollouts'],
  argoEvents: ['-runtime-argo-events'],
  // The Deployments of the agents both versions have (agentsFor below).
  agents: [],
};

/** The agents' Deployments an agents pin change touches: those of the agents both versions install. */
const agentsFor = (from: string, to: string): string[] =>
  agentsAt(from)
    .filter((a) => agentsAt(to).some((b) => b.name === a.name))
    .map((a) => `-runtime-${a.name}-deployment`);

const versions = catalog.versions;
for (let i = 1; i < versions.length; i++) {
  const from = versions[i - 1]!;
  const to = versions[i]!;
  t.test(`upgrade ${from.version} -> ${to.version} changes exactly the pinned components`, async (t) => {
    const a = await run(from.version);
    const b = await run(to.version);
    const diffPins = (Object.keys(to.components) as (keyof ComponentPins)[]).filter(
      (k) => from.components[k] !== to.components[k],
    );
    const expected = new Set(
      diffPins.flatMap((k) => (k === 'agents' ? agentsFor(from.version, to.version) : suffixFor[k])),
    );
    expected.add('-runtime-versions'); // the versions ConfigMap always records the new version
    const had = new Set(agentsAt(from.version).map((x) => x.name));
    const added = agentsAt(to.version)
      .map((x) => x.name)
      .filter((n) => !had.has(n));
    // The Source Server comes with Argo CD's account for it (source-server-account.ts).
    if (added.includes('source-server')) expected.add('-runtime-argo-cd');
    const got = changed(a.resources, b.resources, added).map((n) =>
      n.replace(/^tenant-[0-9a-f-]+?(?=-(runtime|vcluster|ns)\b)/, ''),
    );
    t.same(got, [...expected].sort(), `pins changed: ${diffPins.join(', ')}`);
  });
}

t.test('a patch release that changes only Argo Workflows and the agents leaves Argo CD alone', async (t) => {
  const a = await run('1.4.0');
  const b = await run('1.4.1');
  const names = changed(a.resources, b.resources);
  t.notOk(names.some((n) => n.endsWith('-argo-cd') || n.endsWith('-vcluster-release')));
  t.ok(names.some((n) => n.endsWith('-argo-workflows')));
});

t.test('suspension scales the vcluster to zero and leaves the runtime untouched', async (t) => {
  const running = await run('1.5.0', false);
  const suspended = await run('1.5.0', true);
  const names = changed(running.resources, suspended.resources);
  t.same(
    names.map((n) => n.replace(/^tenant-[0-9a-f-]+?(?=-vcluster)/, '')),
    ['-vcluster-release'],
    'only the vcluster release changes',
  );
  const release = releaseOf<VclusterValues>(suspended.resources.find((r) => r.name.endsWith('-vcluster-release'))!);
  t.equal(release.values.controlPlane.statefulSet.highAvailability.replicas, 0);
  t.equal(release.skipAwait, true, 'no ready pods to wait for');
  t.equal(suspended.outputs.suspended, true);
  const resumed = await run('1.5.0', false);
  t.same(changed(running.resources, resumed.resources), [], 'resuming restores the running state exactly');
});

t.test('while suspended the program does not wait for the kubeconfig to (re)appear', async (t) => {
  const waiter = recordingWaiter();
  await runProgram(
    createTenantProgram({ rootAccess: ROOT_ACCESS, waitForSecret: waiter.waiter, evictSyncedPods: noEviction }),
    tenantConfig({ suspended: true }),
  );
  t.equal(waiter.calls.length, 0);
});
