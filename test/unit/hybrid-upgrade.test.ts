/**
 * Upgrading a hybrid runtime (runtime/hybrid/upgrade.ts, bundle.ts's purpose=upgrade): the upgrade
 * bundle carries no token and no bootstrap Job (an apply could not change the Job's pod template),
 * keeps every other object of the install, and the changes and diff name exactly what moves between
 * two catalog versions: the agents' images, the versions ConfigMap, the Argo charts' pins.
 */
import t from 'tap';
import { parseAllDocuments } from 'yaml';
import {
  BOOTSTRAP_JOB,
  HybridBundleError,
  hybridInstallBundle,
  type InstallBundleInput,
  type KubeObject,
} from '../../runtime/hybrid/bundle.ts';
import { compareBundles, upgradeBundle, type UpgradeBundleInput } from '../../runtime/hybrid/upgrade.ts';
import { catalog } from '../../runtime/catalog.ts';
import { AGENTS } from '../../runtime/component/agents.ts';
import { promotionCrds } from '../../runtime/component/promotion-crds.ts';
import { BOOTSTRAP_SECRET } from '../../runtime/protocol/bootstrap.ts';
import type { RuntimeVersion } from '../../runtime/versions.ts';

const TOKEN = 'hrth_' + 'A'.repeat(43);
const version = (v: string): RuntimeVersion => catalog.get(v)!;

function input(over: Partial<InstallBundleInput['runtime']> = {}): UpgradeBundleInput {
  return {
    runtime: {
      tenantId: '3f6c1a52-6a0e-4c1b-9a57-2d8e0f4b7c11',
      runtimeId: '8d1e5b7a-0c2f-4e7d-b1a3-6f9e2c4d8a10',
      name: 'plant-a',
      access: 'tunnel',
      argo: 'new',
      upgrader: false,
      ...over,
    },
    controlPlaneUrl: 'https://cp.example.test',
    tunnelUrl: 'wss://cp.example.test/v1/tunnel',
    publicKey: '-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEA\n-----END PUBLIC KEY-----\n',
  };
}

const key = (o: KubeObject) => `${o.kind} ${o.metadata.namespace ?? ''}/${o.metadata.name}`;

t.test('an upgrade bundle is the install bundle without the bootstrap token, Secret and Job', async (t) => {
  const v = version('1.5.0');
  const install = hybridInstallBundle({ ...input(), version: v, bootstrapToken: TOKEN });
  const upgrade = hybridInstallBundle({ ...input(), version: v, purpose: 'upgrade' });
  const bootstrap = new Set([
    `Secret hosted-runtime/${BOOTSTRAP_SECRET}`,
    ...['ServiceAccount', 'Role', 'RoleBinding', 'Job'].map((k) => `${k} hosted-runtime/${BOOTSTRAP_JOB}`),
  ]);
  t.same(
    upgrade.objects.map(key),
    install.objects.map(key).filter((k) => !bootstrap.has(k)),
    'the same objects in the same order, less the five bootstrap objects',
  );
  t.same(
    install.objects.filter((o) => bootstrap.has(key(o))).length,
    5,
    'the install bundle has the five bootstrap objects the upgrade leaves out',
  );
  t.notOk(upgrade.manifests.includes('hrth_'), 'no bootstrap token anywhere in the upgrade manifest');
  const parsed = parseAllDocuments(upgrade.manifests).map((d) => d.toJSON() as KubeObject);
  t.same(parsed.map(key), upgrade.objects.map(key), 'its YAML parses to the same objects');
  t.equal(
    upgrade.removeCommand,
    install.removeCommand,
    'removal deletes the same kinds (the bootstrap Job and Secret included)',
  );
  t.match(
    upgrade.command,
    /kubectl apply -f hybrid-runtime-plant-a-1\.5\.0\.yaml$/,
    'the command applies the versioned file',
  );
  t.throws(
    () => hybridInstallBundle({ ...input(), version: v, purpose: 'upgrade', bootstrapToken: TOKEN }),
    HybridBundleError,
    'an upgrade bundle refuses a bootstrap token',
  );
  t.throws(() => hybridInstallBundle({ ...input(), version: v }), HybridBundleError, 'an install bundle needs one');
});

t.test('1.4.1 -> 1.5.0: the agents, the versions ConfigMap and the changed Argo charts, nothing else', async (t) => {
  const from = version('1.4.1');
  const to = version('1.5.0');
  const u = upgradeBundle(input(), from, to);
  t.equal(u.from, '1.4.1');
  t.equal(u.to, '1.5.0');
  const changed = u.changes.objects.filter((o) => o.change === 'changed').map((o) => `${o.kind} ${o.name}`);
  t.same(
    changed.sort(),
    [...AGENTS.map((a) => `Deployment ${a.name}`), 'ConfigMap runtime-versions'].sort(),
    'the four agents (new image) and the versions ConfigMap change',
  );
  t.same(
    u.changes.objects.filter((o) => o.change !== 'changed'),
    [],
    'nothing added or removed between two versions of the same agents',
  );
  for (const a of AGENTS) {
    t.ok(
      u.diff.includes(`-          image: hosted-runtimes/${a.name}:1.4.1`) || u.diff.includes(`/${a.name}:1.4.1`),
      `the diff shows ${a.name}'s old image`,
    );
    t.ok(u.diff.includes(`/${a.name}:1.5.0`), `the diff shows ${a.name}'s new image`);
  }
  // Argo CD 7.9.1 -> 8.0.17, Workflows 0.45.13 -> 0.45.19, Rollouts 2.39.5 -> 2.39.6; Events unchanged at 2.4.15.
  const charts = Object.fromEntries(u.changes.charts.map((c) => [c.release, `${c.from} -> ${c.to}`]));
  t.same(
    Object.values(charts).sort(),
    ['0.45.13 -> 0.45.19', '2.39.5 -> 2.39.6', '7.9.1 -> 8.0.17'],
    'three Argo charts move; Argo Events (2.4.15 in both) does not',
  );
  const helm = u.install.command.split('\n').filter((l) => l.startsWith('helm upgrade'));
  t.equal(helm.length, 3, 'the command upgrades only the three charts that changed');
  t.match(u.install.command, /kubectl apply -f hybrid-runtime-plant-a-1\.5\.0\.yaml$/m, 'then applies the manifest');
  t.notOk(u.install.manifests.includes('hrth_'), 'no token in the bundle');
  t.match(u.diff, /^--- hybrid-runtime-plant-a-1\.4\.1\.yaml/m, 'a unified diff from the old bundle');
  t.match(u.diff, /^\+\+\+ hybrid-runtime-plant-a-1\.5\.0\.yaml/m, 'to the new one');
});

t.test('existing Argo CD: no charts in either bundle, so none in the changes or the command', async (t) => {
  const u = upgradeBundle(input({ argo: 'existing', argoNamespace: 'gitops' }), version('1.4.1'), version('1.5.0'));
  t.same(u.changes.charts, [], 'no chart changes');
  t.notMatch(u.install.command, /helm/, 'no helm in the command');
  t.ok(u.changes.objects.length > 0, 'the agents still change');
});

t.test('the same version: no changes, an empty diff, and a command that only re-applies', async (t) => {
  const v = version('1.5.0');
  const u = upgradeBundle(input(), v, v);
  t.same(u.changes, { objects: [], charts: [] }, 'nothing changes');
  t.notMatch(u.diff, /^[-+][^-+]/m, 'the diff has no changed line');
  t.equal(u.install.command, 'kubectl apply -f hybrid-runtime-plant-a-1.5.0.yaml', 'only the apply');
});

t.test('an object the new bundle no longer has is listed as removed and deleted by the command', async (t) => {
  // No two catalog versions differ in their objects yet; a runtime's settings do: from a tunnel
  // runtime's bundle to an ingress one's, the tunnel client's four objects go.
  const v = version('1.5.0');
  const before = hybridInstallBundle({ ...input(), version: v, purpose: 'upgrade' });
  const after = hybridInstallBundle({
    ...input({ access: 'ingress', ingressUrl: 'https://rt.example.test' }),
    version: v,
    purpose: 'upgrade',
  });
  const u = compareBundles(before, after, { name: 'plant-a', from: '1.5.0', to: '1.5.0' });
  const removed = u.changes.objects.filter((o) => o.change === 'removed').map((o) => `${o.kind} ${o.name}`);
  t.ok(removed.includes('Deployment tunnel-client'), 'the tunnel client Deployment is removed');
  t.ok(
    removed.includes('ClusterRole hosted-runtime:tunnel-client') ||
      removed.some((r) => r.startsWith('ServiceAccount tunnel-client')),
    'and its account',
  );
  for (const r of u.changes.objects.filter((o) => o.change === 'removed'))
    t.match(
      u.install.command,
      new RegExp(
        `^kubectl delete ${r.kind.toLowerCase()}(\\.[a-z.]+)? ${r.name.replace(/[.:]/g, '\\$&')}( --namespace ${r.namespace ?? ''})? --ignore-not-found$`,
        'm',
      ),
      `the command deletes ${r.kind} ${r.name}`,
    );
  const apply = u.install.command.split('\n').findIndex((l) => l.startsWith('kubectl apply'));
  const firstDelete = u.install.command.split('\n').findIndex((l) => l.startsWith('kubectl delete'));
  t.ok(apply >= 0 && firstDelete > apply, 'deletes come after the apply (the new objects are in place first)');
});

t.test('1.7.0 -> 1.8.0 adds the GitOps Operator and the promotion CRDs; going back keeps the CRDs', async (t) => {
  for (const over of [{}, { argo: 'existing' as const, argoNamespace: 'gitops' }]) {
    const mode = over.argo ?? 'new';
    const u = upgradeBundle(input(over), version('1.7.0'), version('1.8.0'));
    const added = u.changes.objects.filter((o) => o.change === 'added').map((o) => `${o.kind} ${o.name}`);
    const argoNs = over.argo === 'existing' ? 'gitops' : 'argocd';
    t.same(
      added.sort(),
      [
        ...promotionCrds().map((c) => `CustomResourceDefinition ${(c.metadata as { name: string }).name}`),
        'Deployment gitops-operator',
        'Role hosted-runtime:gitops-operator',
        'RoleBinding hosted-runtime:gitops-operator',
        'ServiceAccount gitops-operator',
      ].sort(),
      `${mode}: the seven CRDs, the operator's account, Role (in ${argoNs}) and Deployment are added`,
    );
    t.same(
      u.changes.objects.filter((o) => o.kind === 'Role' && o.name.endsWith(':gitops-operator')).map((o) => o.namespace),
      [argoNs],
      `${mode}: its Role is in the Argo CD beside the runtime`,
    );
    t.same(
      u.changes.objects.filter((o) => o.change === 'removed'),
      [],
      `${mode}: nothing removed`,
    );
    t.match(
      u.install.command,
      /kubectl apply -f hybrid-runtime-plant-a-1\.8\.0\.yaml$/m,
      `${mode}: one apply adds them`,
    );
    t.notMatch(u.install.command, /kubectl delete/, `${mode}: and deletes nothing`);
    if (over.argo === 'existing')
      t.ok(
        u.changes.objects.some(
          (o) => o.kind === 'Role' && o.name === 'hosted-runtime-app-proxy' && o.change === 'changed',
        ),
        "existing: the app-proxy's Role there gains the promotion rules",
      );

    const back = upgradeBundle(input(over), version('1.8.0'), version('1.7.0'));
    const removed = back.changes.objects.filter((o) => o.change === 'removed').map((o) => `${o.kind} ${o.name}`);
    t.same(
      removed.sort(),
      [
        'Deployment gitops-operator',
        'Role hosted-runtime:gitops-operator',
        'RoleBinding hosted-runtime:gitops-operator',
        'ServiceAccount gitops-operator',
      ],
      `${mode}: back to 1.7.0 the operator's objects go, the CRDs are no change (other runtimes may use them)`,
    );
    t.notMatch(back.install.command, /customresourcedefinition/i, `${mode}: the command deletes no CRD`);
    t.match(
      back.install.command,
      /^kubectl delete deployment\.apps gitops-operator --namespace hosted-runtime --ignore-not-found$/m,
      `${mode}: it deletes the operator`,
    );
  }
});
