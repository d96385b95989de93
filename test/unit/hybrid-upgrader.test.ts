/**
 * The in-cluster upgrader's part of a hybrid runtime (runtime/hybrid/upgrader.ts): what the bundle
 * adds when the customer opted in (an account whose rights are get and patch of named objects
 * only), which upgrades it may apply (and why not the others), and the plan it applies.
 */
import t from 'tap';
import { hybridInstallBundle, type InstallBundleInput, type KubeObject } from '../../runtime/hybrid/bundle.ts';
import { upgradeBundle, type UpgradeBundleInput } from '../../runtime/hybrid/upgrade.ts';
import { agentRefusal, UPGRADER, upgraderPatchable, upgraderPlan } from '../../runtime/hybrid/upgrader.ts';
import { catalog } from '../../runtime/catalog.ts';
import { RUNTIME_NAMESPACE, VERSIONS_CONFIGMAP } from '../../runtime/component/agents.ts';

type Obj = Record<string, unknown>;

function input(over: Partial<InstallBundleInput['runtime']> = {}): UpgradeBundleInput {
  return {
    runtime: {
      tenantId: '3f6c1a52-6a0e-4c1b-9a57-2d8e0f4b7c11',
      runtimeId: '8d1e5b7a-0c2f-4e7d-b1a3-6f9e2c4d8a10',
      name: 'plant-a',
      access: 'tunnel',
      argo: 'existing',
      argoNamespace: 'gitops',
      upgrader: true,
      ...over,
    },
    controlPlaneUrl: 'https://cp.example.test',
    tunnelUrl: 'wss://cp.example.test/v1/tunnel',
    publicKey: '-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEA\n-----END PUBLIC KEY-----\n',
  };
}

const at = (v: string, over: Partial<InstallBundleInput['runtime']> = {}) =>
  hybridInstallBundle({ ...input(over), version: catalog.get(v)!, purpose: 'upgrade' });
const named = (objects: KubeObject[], kind: string, name: string) =>
  objects.find((o) => o.kind === kind && o.metadata.name === name);

t.test(
  'opted in, the bundle has the upgrader with rights on named objects only; not opted in, nothing of it',
  async (t) => {
    const b = at('1.5.0');
    const role = named(b.objects, 'Role', UPGRADER) as unknown as { rules: Obj[] } | undefined;
    t.ok(named(b.objects, 'Deployment', UPGRADER), 'its Deployment');
    t.ok(named(b.objects, 'ServiceAccount', UPGRADER), 'its ServiceAccount');
    t.ok(named(b.objects, 'RoleBinding', UPGRADER), 'its RoleBinding');
    t.same(
      role?.rules,
      [
        {
          apiGroups: ['apps'],
          resources: ['deployments'],
          resourceNames: ['app-proxy', 'event-reporter', 'request-router', UPGRADER, 'tunnel-client'],
          verbs: ['get', 'patch'],
        },
        { apiGroups: [''], resources: ['configmaps'], resourceNames: [VERSIONS_CONFIGMAP], verbs: ['get', 'patch'] },
      ],
      'get and patch of the agents’ Deployments and the versions ConfigMap, by name: no create, delete, list or RBAC',
    );
    t.notOk(
      b.objects.some((o) => o.kind === 'ClusterRole' && o.metadata.name.includes('upgrader')),
      'nothing cluster-wide for it',
    );
    const deployment = named(b.objects, 'Deployment', UPGRADER) as unknown as {
      metadata: { namespace: string; labels: Record<string, string> };
      spec: { replicas: number; template: { spec: { containers: Array<{ image: string; env: Obj[] }> } } };
    };
    t.equal(deployment.metadata.namespace, RUNTIME_NAMESPACE);
    t.equal(deployment.spec.replicas, 1, 'one replica: two would apply the same upgrade twice');
    t.equal(deployment.spec.template.spec.containers[0]!.image, 'hosted-runtimes/upgrader:1.5.0', 'the agents’ tag');
    t.match(
      JSON.stringify(deployment.spec.template.spec.containers[0]!.env),
      /"RUNTIME_TOKEN".*"secretKeyRef":\{"name":"runtime-credentials","key":"runtime-token"\}/,
      'the runtime key from the credentials Secret the bootstrap writes (no secret in the bundle)',
    );
    t.equal(deployment.metadata.labels['hosted-runtimes.io/runtime'], 'plant-a', 'labelled: removal deletes it');

    const ingress = at('1.5.0', { access: 'ingress', ingressUrl: 'https://plant.example.test' });
    const ingressRole = named(ingress.objects, 'Role', UPGRADER) as unknown as {
      rules: Array<{ resourceNames: string[] }>;
    };
    t.notOk(ingressRole.rules[0]!.resourceNames.includes('tunnel-client'), 'only Deployments the bundle has');

    const optedOut = at('1.5.0', { upgrader: false });
    t.notOk(
      optedOut.objects.some((o) => o.metadata.name === UPGRADER),
      'upgrades: customer: no upgrader object at all',
    );
  },
);

t.test('the upgrader may apply an upgrade that only changes the agents and the versions ConfigMap', async (t) => {
  const up = upgradeBundle(input(), catalog.get('1.5.0')!, catalog.get('1.6.0')!);
  t.ok(up.changes.objects.length > 0, 'the upgrade changes objects');
  t.equal(agentRefusal(up, upgraderPatchable(at('1.6.0'))), undefined, 'argo=existing 1.5.0 → 1.6.0: the upgrader may');

  const plan = upgraderPlan(at('1.5.0'), at('1.6.0'));
  t.same(
    plan.apply.map((o) => `${o.kind} ${o.metadata.name}`).sort(),
    up.changes.objects.map((c) => `${c.kind} ${c.name}`).sort(),
    'the plan applies exactly the objects the upgrade changes',
  );
  t.equal(plan.apply[0]!.kind, 'ConfigMap', 'the versions ConfigMap first');
  t.equal(plan.apply.at(-1)!.metadata.name, UPGRADER, 'the upgrader’s own Deployment last (patching it restarts it)');
  t.same(
    plan.rollback.map((o) => `${o.kind} ${o.metadata.name}`),
    plan.apply.map((o) => `${o.kind} ${o.metadata.name}`),
    'the rollback names the same objects',
  );
  const image = (o: KubeObject) =>
    (o as unknown as { spec: { template: { spec: { containers: Array<{ image: string }> } } } }).spec.template.spec
      .containers[0]!.image;
  const proxy = (l: KubeObject[]) => l.find((o) => o.kind === 'Deployment' && o.metadata.name === 'app-proxy')!;
  t.equal(image(proxy(plan.apply)), 'hosted-runtimes/app-proxy:1.6.0', 'applied at the target');
  t.equal(image(proxy(plan.rollback)), 'hosted-runtimes/app-proxy:1.5.0', 'rolled back to the version before');
});

t.test(
  'an upgrade with objects the upgrader may not change, or Argo charts, is the customer’s; the reason says which',
  async (t) => {
    const withCharts = upgradeBundle(
      input({ argo: 'new', argoNamespace: undefined }),
      catalog.get('1.5.0')!,
      catalog.get('1.6.0')!,
    );
    const why = agentRefusal(withCharts, upgraderPatchable(at('1.6.0', { argo: 'new', argoNamespace: undefined })));
    t.match(why, /Argo charts argocd, argo-workflows/, `argo=new: the charts need helm: ${why}`);
    t.match(why, /apply the bundle yourself/);

    const rbac = agentRefusal(
      {
        changes: {
          objects: [
            { kind: 'Deployment', namespace: RUNTIME_NAMESPACE, name: 'app-proxy', change: 'changed' },
            { kind: 'Role', namespace: RUNTIME_NAMESPACE, name: 'app-proxy', change: 'changed' },
            { kind: 'Service', namespace: RUNTIME_NAMESPACE, name: 'app-proxy', change: 'added' },
            { kind: 'Deployment', namespace: RUNTIME_NAMESPACE, name: 'old-agent', change: 'removed' },
          ],
          charts: [],
        },
      },
      upgraderPatchable(at('1.6.0')),
    );
    t.match(rbac, /Role hosted-runtime\/app-proxy \(changed\)/, 'a changed Role: RBAC is never the upgrader’s');
    t.match(rbac, /Service hosted-runtime\/app-proxy \(added\)/, 'an added object: it may not create');
    t.match(rbac, /Deployment hosted-runtime\/old-agent \(removed\)/, 'a removed object: it may not delete');
    t.notMatch(rbac, /Deployment hosted-runtime\/app-proxy \(changed\)/, 'the changes it may make are not named');
  },
);

t.test(
  'adding the GitOps Operator (1.7.0 → 1.8.0) is the customer’s: CRDs, a Role listing Secrets, a Deployment to create',
  async (t) => {
    for (const over of [{}, { argo: 'new' as const, argoNamespace: undefined }]) {
      const mode = JSON.stringify(over);
      const up = upgradeBundle(input(over), catalog.get('1.7.0')!, catalog.get('1.8.0')!);
      const why = agentRefusal(up, upgraderPatchable(at('1.7.0', over)));
      t.match(
        why,
        /^the in-cluster upgrader cannot apply this upgrade: it changes objects the upgrader may not: Deployment hosted-runtime\/gitops-operator \(added\)/,
        `${mode}: refused, naming the operator's Deployment first: ${why}`,
      );
      t.match(why, /and \d+ more; apply the bundle yourself$/, `${mode}: the CRDs and RBAC among the rest`);
      const role = named(at('1.8.0', over).objects, 'Role', UPGRADER) as unknown as { rules: Obj[] };
      t.same(
        role.rules.map((r) => [r.apiGroups, r.resources, r.verbs]),
        [
          [['apps'], ['deployments'], ['get', 'patch']],
          [[''], ['configmaps'], ['get', 'patch']],
        ],
        `${mode}: its rights stay get and patch of named objects (the operator's Deployment now among them): nothing cluster-wide, no create`,
      );
      t.ok(
        (role.rules[0]!.resourceNames as string[]).includes('gitops-operator'),
        `${mode}: so later versions' operator images are its to apply`,
      );
      t.notOk(
        at('1.8.0', over).objects.some((o) => o.kind === 'ClusterRole' && o.metadata.name.includes(UPGRADER)),
        `${mode}: no ClusterRole for it`,
      );
    }
  },
);
