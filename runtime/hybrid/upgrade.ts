/**
 * Upgrading a hybrid runtime the customer applies: the upgrade bundle at the target catalog version
 * (bundle.ts with purpose=upgrade: no bootstrap token or Job) and what it changes against the
 * bundle of the version the runtime was moved from, as a unified diff of the two and as lists of
 * the objects and Argo charts added, changed and removed. The command upgrades the charts that
 * changed, applies the manifest, and deletes what the new version no longer has (an apply alone
 * leaves such objects behind), but the CRDs shared with the cluster's other runtimes
 * (bundle.ts SHARED_KINDS), which stay. Pure: no I/O. Both bundles are functions of the runtime's settings
 * and the two catalog entries, so the diff is exactly what applying the new bundle changes in a
 * cluster that runs the old one as it was given.
 */
import { createTwoFilesPatch } from 'diff';
import { stringify } from 'yaml';
import type { RuntimeVersion } from '../versions.ts';
import {
  helmUninstall,
  hybridInstallBundle,
  installCommand,
  manifestFileName,
  SHARED_KINDS,
  type BundleChart,
  type InstallBundle,
  type InstallBundleInput,
  type KubeObject,
} from './bundle.ts';
import { shellCommand } from './shell.ts';
import { yamlText } from './yaml-text.ts';

export type UpgradeBundleInput = Omit<InstallBundleInput, 'version' | 'bootstrapToken' | 'purpose'>;

export interface ObjectChange {
  kind: string;
  /** Absent for cluster-scoped objects. */
  namespace?: string;
  name: string;
  change: 'added' | 'changed' | 'removed';
}

export interface ChartChange {
  release: string;
  namespace: string;
  /** The chart version before (absent: added) and after (absent: removed). */
  from?: string;
  to?: string;
  change: 'added' | 'changed' | 'removed';
}

export interface UpgradeBundle {
  from: string;
  to: string;
  /** The target version's upgrade bundle; `command` applies exactly the changes below. */
  install: Omit<InstallBundle, 'objects'>;
  /** Unified diff of the two bundles (manifests, then each chart's version and values). */
  diff: string;
  changes: { objects: ObjectChange[]; charts: ChartChange[] };
}

const objectKey = (o: KubeObject): string => `${o.kind}/${o.metadata.namespace ?? ''}/${o.metadata.name}`;
const chartKey = (c: BundleChart): string => `${c.namespace}/${c.release}`;

/** The text the diff compares: the manifests, then each Argo chart's pin (a YAML document) and values. */
function diffText(b: InstallBundle): string {
  const charts = b.charts.map(
    (c) =>
      yamlText({
        helmRelease: {
          release: c.release,
          namespace: c.namespace,
          chart: c.chart,
          version: c.version,
          repository: c.repository,
        },
      }) +
      '---\n' +
      c.values,
  );
  return [b.manifests, ...charts].join('---\n');
}

/** `kubectl delete` of one object the new version no longer has. */
function deleteCommand(o: KubeObject): string {
  const kind = `${o.kind.toLowerCase()}${o.apiVersion.includes('/') ? `.${o.apiVersion.split('/')[0]}` : ''}`;
  return shellCommand([
    'kubectl',
    'delete',
    kind,
    o.metadata.name,
    ...(o.metadata.namespace ? ['--namespace', o.metadata.namespace] : []),
    '--ignore-not-found',
  ]);
}

export function upgradeBundle(input: UpgradeBundleInput, from: RuntimeVersion, to: RuntimeVersion): UpgradeBundle {
  const before = hybridInstallBundle({ ...input, version: from, purpose: 'upgrade' });
  const after = hybridInstallBundle({ ...input, version: to, purpose: 'upgrade' });
  return compareBundles(before, after, { name: input.runtime.name, from: from.version, to: to.version });
}

/** What applying the upgrade bundle `after` over a cluster that runs `before` changes, and the command that does it. */
export function compareBundles(
  before: InstallBundle,
  after: InstallBundle,
  runtime: { name: string; from: string; to: string },
): UpgradeBundle {
  const old = new Map(before.objects.map((o) => [objectKey(o), o]));
  const next = new Map(after.objects.map((o) => [objectKey(o), o]));
  const change = (o: KubeObject, c: ObjectChange['change']): ObjectChange => ({
    kind: o.kind,
    ...(o.metadata.namespace ? { namespace: o.metadata.namespace } : {}),
    name: o.metadata.name,
    change: c,
  });
  const objects: ObjectChange[] = [];
  for (const [key, o] of next) {
    const was = old.get(key);
    if (!was) objects.push(change(o, 'added'));
    else if (stringify(was) !== stringify(o)) objects.push(change(o, 'changed'));
  }
  // The shared CRDs stay when a version without them follows (a rollback before the GitOps
  // Operator): other runtimes in the cluster may use them, and deleting one deletes every object of
  // its kind. Not deleted, they are not a change either.
  const removed = [...old].filter(([key, o]) => !next.has(key) && !SHARED_KINDS.includes(o.kind)).map(([, o]) => o);
  objects.push(...removed.map((o) => change(o, 'removed')));

  const oldCharts = new Map(before.charts.map((c) => [chartKey(c), c]));
  const newCharts = new Map(after.charts.map((c) => [chartKey(c), c]));
  const charts: ChartChange[] = [];
  const changedCharts: BundleChart[] = [];
  for (const [key, c] of newCharts) {
    const was = oldCharts.get(key);
    if (was && was.version === c.version && was.values === c.values && was.chart === c.chart) continue;
    changedCharts.push(c);
    charts.push({
      release: c.release,
      namespace: c.namespace,
      ...(was ? { from: was.version } : {}),
      to: c.version,
      change: was ? 'changed' : 'added',
    });
  }
  for (const [key, c] of oldCharts)
    if (!newCharts.has(key))
      charts.push({ release: c.release, namespace: c.namespace, from: c.version, change: 'removed' });

  const file = manifestFileName(runtime.name, runtime.to);
  const command = [
    installCommand(changedCharts, file),
    ...removed.reverse().map(deleteCommand),
    ...charts.filter((c) => c.change === 'removed').map(helmUninstall),
  ].join('\n');

  const diff = createTwoFilesPatch(
    manifestFileName(runtime.name, runtime.from),
    file,
    diffText(before),
    diffText(after),
    `runtime version ${runtime.from}`,
    `runtime version ${runtime.to}`,
    { context: 3 },
  );
  return {
    from: runtime.from,
    to: runtime.to,
    install: {
      manifests: after.manifests,
      charts: after.charts,
      command,
      removeCommand: after.removeCommand,
      namespace: after.namespace,
      unpinnedImages: after.unpinnedImages,
    },
    diff,
    changes: { objects, charts },
  };
}
