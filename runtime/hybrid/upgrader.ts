/**
 * The in-cluster upgrader of a hybrid runtime (`upgrades: agent`, opted in at registration): what
 * the install bundle adds for it, what it may change, and the plan of one upgrade. Pure: no I/O.
 *
 * The upgrader (runtime/agents/upgrader/) asks the control plane with the runtime key for the
 * upgrade it was asked to apply (GET UPGRADER_PATH), applies the plan with its own
 * ServiceAccount, waits for the agents' rollout, and reports (POST UPGRADER_PATH); when the rollout
 * fails it applies the plan's rollback (the same objects as the version before had them).
 *
 * Its rights are exactly what a catalog version moves in a runtime whose Argo CD the customer
 * runs: `get` and `patch` of the agents' Deployments and of the versions ConfigMap, by name. It can
 * create, delete or widen nothing: an upgrade that adds or removes objects, changes any other
 * object (RBAC, Services, the credentials Secret) or an Argo chart (argo=new) is the customer's to
 * apply (`agentRefusal` names why), as with `upgrades: customer`. So is the version that adds the
 * GitOps Operator (1.8.0): cluster-wide CRDs and a Role that lists Secrets in Argo CD's namespace
 * are far beyond these rights (docs/decisions.md, issue 53).
 *
 * Within those rights it applies an upgrade and nothing else: before applying a plan it compares
 * each object with the one it runs and refuses the whole plan over any change a version upgrade
 * does not make (`planDifferences`, runtime/protocol/upgrade-check.ts, where the upgrader's image
 * finds it). The plans `upgraderPlan` builds pass that check for every catalog version (tested).
 */
import { VERSIONS_CONFIGMAP } from '../component/agents.ts';
import type { InstallBundle, KubeObject } from './bundle.ts';
import type { ObjectChange, UpgradeBundle } from './upgrade.ts';
import { UPGRADER, UPGRADER_PATH } from '../protocol/upgrade.ts';

export { UPGRADER, UPGRADER_PATH };
export {
  formatDifference,
  PINNED_CONTAINER,
  PINNED_POD,
  planDifferences,
  planRefusal,
  repositoryOf,
  VERSION_ENV,
  type PlanDifference,
} from '../protocol/upgrade-check.ts';
export { upgraderObjects } from './upgrader-objects.ts';

/** The objects the upgrader may patch, by kind and name, in the runtime's namespace. */
export function upgraderPatchable(bundle: Pick<InstallBundle, 'objects' | 'namespace'>): {
  namespace: string;
  deployments: string[];
  configMaps: string[];
} {
  const deployments = bundle.objects
    .filter((o) => o.kind === 'Deployment' && o.metadata.namespace === bundle.namespace)
    .map((o) => o.metadata.name);
  return {
    namespace: bundle.namespace,
    deployments: [...new Set([...deployments, UPGRADER])].sort(),
    configMaps: [VERSIONS_CONFIGMAP],
  };
}

const describe = (c: ObjectChange): string =>
  `${c.kind} ${c.namespace ? `${c.namespace}/` : ''}${c.name} (${c.change})`;

/**
 * Why the upgrader cannot apply this upgrade (its customer must), or undefined when it can: every
 * changed object is one it may patch, nothing is added or removed, and no Argo chart changes.
 */
export function agentRefusal(
  up: Pick<UpgradeBundle, 'changes'>,
  patchable: { namespace: string; deployments: readonly string[]; configMaps: readonly string[] },
): string | undefined {
  const outside = up.changes.objects.filter(
    (c) =>
      c.change !== 'changed' ||
      c.namespace !== patchable.namespace ||
      !(
        (c.kind === 'Deployment' && patchable.deployments.includes(c.name)) ||
        (c.kind === 'ConfigMap' && patchable.configMaps.includes(c.name))
      ),
  );
  const charts = up.changes.charts;
  if (outside.length === 0 && charts.length === 0) return undefined;
  // The Deployments first (an added agent is what the customer recognises), cluster-scoped objects last.
  const rank = (c: ObjectChange) => (c.kind === 'Deployment' ? 0 : c.namespace === undefined ? 2 : 1);
  outside.sort((a, b) => rank(a) - rank(b));
  const parts = [
    ...(outside.length > 0
      ? [
          `it changes objects the upgrader may not: ${outside.slice(0, 5).map(describe).join(', ')}${outside.length > 5 ? `, and ${outside.length - 5} more` : ''}`,
        ]
      : []),
    ...(charts.length > 0 ? [`it changes the Argo charts ${charts.map((c) => c.release).join(', ')} (helm)`] : []),
  ];
  return `the in-cluster upgrader cannot apply this upgrade: ${parts.join('; ')}; apply the bundle yourself`;
}

const key = (o: KubeObject): string => `${o.kind}/${o.metadata.namespace ?? ''}/${o.metadata.name}`;

/**
 * The objects one upgrade patches, from the two upgrade bundles (`before`: the version the runtime
 * runs, `after`: the target): those that differ, the versions ConfigMap first and the upgrader's
 * own Deployment last (patching it restarts the upgrader, so it goes once the rest rolled out),
 * and the same objects as `before` has them for the rollback.
 */
export function upgraderPlan(
  before: InstallBundle,
  after: InstallBundle,
): { apply: KubeObject[]; rollback: KubeObject[] } {
  const old = new Map(before.objects.map((o) => [key(o), o]));
  const rank = (o: KubeObject) => (o.kind === 'ConfigMap' ? 0 : o.metadata.name === UPGRADER ? 2 : 1);
  const changed = after.objects
    .filter((o) => {
      const was = old.get(key(o));
      return was !== undefined && JSON.stringify(was) !== JSON.stringify(o);
    })
    .map((o, i) => ({ o, i }))
    .sort((a, b) => rank(a.o) - rank(b.o) || a.i - b.i)
    .map(({ o }) => o);
  return { apply: changed, rollback: changed.map((o) => old.get(key(o))!) };
}
