/**
 * The tenant program for every plan and every catalog version: what it registers, where, with
 * which values; every plain object valid against the Kubernetes schemas.
 */
import { agentsAt } from '../../../runtime/component/agents.ts';
import t from 'tap';
import { catalog } from '../../../runtime/catalog.ts';
import { PLANS, PLAN_NAMES } from '../../../tenants/plans.ts';
import { createTenantProgram } from '../../../tenants/program.ts';
import { PRIVATE_RANGES } from '../../../tenants/network-policies.ts';
import type { IDeployment } from 'kubernetes-models/apps/v1';
import type { ILimitRange, IResourceQuota, ISecret } from 'kubernetes-models/v1';
import type { INetworkPolicy } from 'kubernetes-models/networking.k8s.io/v1';
import type { IRoleBinding } from 'kubernetes-models/rbac.authorization.k8s.io/v1';
import { subjectOf, type AccessWaitRequest, type RootAccess } from '../../../tenants/root-access.ts';
import { TENANT_CLUSTER_ROLE, TENANT_ROLE_BINDING } from '../../../tenants/root-permissions.ts';
import type { VclusterValues } from '../../../tenants/vcluster-values.ts';
import { inputsOf, metaOf, releaseOf, runProgram, type RunResult } from './harness.ts';
import { providerName, recordingWaiter, tenantConfig, tenantInput, ROOT_ACCESS } from './fixtures.ts';
import { validateObjects, plainObjects } from './validate-manifests.ts';

const id = tenantInput().tenantId;
const ns = `tenant-${id}`;
const rootName = 'root';
const vclusterProvider = `tenant-${id}-vcluster-provider`;
const releases = (r: RunResult) => r.ofType('kubernetes:helm.sh/v3:Release');

for (const planName of PLAN_NAMES) {
  for (const version of catalog.versions) {
    t.test(`plan ${planName}, runtime ${version.version}`, async (t) => {
      const waiter = recordingWaiter();
      const r = await runProgram(
        createTenantProgram({ rootAccess: ROOT_ACCESS, waitForSecret: waiter.waiter }),
        tenantConfig({ plan: planName, runtimeVersion: version.version }),
      );
      const plan = PLANS[planName]!;
      const pins = version.components;

      t.test('every plain Kubernetes object is valid against its schema', async (t) => {
        t.same(validateObjects(r.resources), []);
        t.ok(plainObjects(r.resources).length > 20);
      });

      t.test('root-cluster objects all live in the tenant namespace', async (t) => {
        const onRoot = r.resources.filter((x) => providerName(x.provider) === rootName);
        t.ok(onRoot.length > 0);
        for (const x of onRoot) {
          const where =
            x.type === 'kubernetes:core/v1:Namespace'
              ? metaOf(x).name
              : (metaOf(x).namespace ?? x.inputs.namespace ?? x.id?.split('/')[0]);
          t.equal(where, ns, `${x.type} ${x.name} is in ${ns}`);
        }
      });

      t.test('runtime objects go through the vcluster provider and are children of the runtime', async (t) => {
        const runtimeChildren = r.resources.filter((x) => x.parent === `tenant-${id}-runtime`);
        t.ok(runtimeChildren.length >= 20);
        for (const x of runtimeChildren) t.equal(providerName(x.provider), vclusterProvider, `${x.type} ${x.name}`);
        const components = r.resources.filter((x) => !x.custom).map((x) => `${x.type} ${x.name} <- ${x.parent}`);
        t.same(
          components.sort(),
          [
            `hosted:runtime:GitOpsRuntime tenant-${id}-runtime <- tenant-${id}`,
            `hosted:tenant:Tenant tenant-${id} <- `,
            `hosted:tenant:TenantNamespace tenant-${id}-ns <- tenant-${id}`,
            `hosted:tenant:VirtualCluster tenant-${id}-vcluster <- tenant-${id}`,
            `pulumi:pulumi:Stack tenant-test-test <- `,
          ].sort(),
        );
      });

      t.test('namespace carries Pod Security restricted and ownership labels', async (t) => {
        const nsObj = r.byName(`tenant-${id}-ns-namespace`);
        t.match(metaOf(nsObj).labels, {
          'pod-security.kubernetes.io/enforce': 'restricted',
          'hosted.gitops/tenant-id': id,
          'hosted.gitops/plan': planName,
        });
        t.equal(metaOf(nsObj).annotations?.['hosted.gitops/organization'], 'acme');
      });

      t.test('quota and limit range come from the plan', async (t) => {
        const quota = inputsOf<IResourceQuota>(r.byName(`tenant-${id}-ns-quota`)).spec!.hard!;
        t.equal(quota['requests.cpu'], plan.quota.cpu);
        t.equal(quota['requests.memory'], plan.quota.memory);
        t.equal(quota.pods, String(plan.quota.pods));
        t.equal(quota['requests.storage'], plan.quota.storage);
        t.equal(quota['services.loadbalancers'], '0', 'no direct exposure');
        const limits = inputsOf<ILimitRange>(r.byName(`tenant-${id}-ns-limits`)).spec!.limits;
        const container = limits.find((l) => l.type === 'Container')!;
        t.same(container.max, plan.container.max);
        t.same(container.defaultRequest, plan.container.defaultRequest);
      });

      t.test('vcluster release is pinned by the catalog, with plan resources and export address', async (t) => {
        const vcResource = releases(r).find((x) => x.inputs.chart === 'vcluster')!;
        const vc = releaseOf<VclusterValues>(vcResource);
        t.equal(vc.version, pins.vcluster);
        t.equal(vc.namespace, ns);
        t.equal(providerName(vcResource.provider), rootName);
        const values = vc.values;
        t.equal(values.controlPlane.statefulSet.highAvailability.replicas, 1);
        t.same(
          values.controlPlane.distro.k8s.controllerManager.extraArgs,
          ['--leader-elect=false'],
          "one replica: its controller manager does not wait a dead instance's lease out at each start",
        );
        t.same(values.controlPlane.statefulSet.resources.requests, plan.controlPlane.requests);
        t.equal(values.controlPlane.statefulSet.persistence.volumeClaim.size, plan.controlPlane.storage);
        t.equal(values.exportKubeConfig.server, `https://vcluster.${ns}.svc:443`);
        t.same(
          values.controlPlane.proxy.extraSANs,
          [`vcluster.${ns}.svc`],
          "vcluster's serving certificate names the exported kubeconfig's host (else TLS verification fails)",
        );
        t.equal(values.policies.podSecurityStandard, 'restricted');
        t.equal(values.policies.resourceQuota.enabled, false, 'the program owns the quota');
        const k8sDistro = values.controlPlane.distro.k8s;
        const kubeVersion = k8sDistro.image?.tag ?? k8sDistro.version;
        t.equal(kubeVersion, pins.kubernetes);
        t.equal('version' in k8sDistro && 'image' in k8sDistro, false, 'one place for the Kubernetes version');
      });

      t.test("every container of the runtime gets the plan's requests and limits", async (t) => {
        const vc = releaseOf<VclusterValues>(releases(r).find((x) => x.inputs.chart === 'vcluster')!).values;
        t.same(vc.controlPlane.statefulSet.resources.limits, plan.controlPlane.limits, 'control plane limits');
        t.same(vc.controlPlane.distro.k8s.resources, plan.controlPlaneInit, "control plane init containers'");
        t.same(vc.controlPlane.coredns.deployment.resources, plan.coreDns, "CoreDNS's");
        const values = (chart: string) => releaseOf(releases(r).find((x) => x.inputs.chart === chart)!).values;
        const at = (v: Record<string, unknown>, path: string): unknown =>
          path.split('.').reduce<unknown>((o, k) => (o as Record<string, unknown> | undefined)?.[k], v);
        const rt = plan.runtime;
        const expected: [string, string, unknown][] = [
          ['argo-cd', 'controller.resources', rt.argoCd.applicationController],
          ['argo-cd', 'repoServer.resources', rt.argoCd.repoServer],
          ['argo-cd', 'server.resources', rt.argoCd.server],
          ['argo-cd', 'redis.resources', rt.argoCd.redis],
          ['argo-cd', 'applicationSet.resources', rt.argoCd.applicationSet],
          ['argo-cd', 'notifications.resources', rt.argoCd.notifications],
          ['argo-cd', 'redisSecretInit.resources', rt.argoCd.redisSecretInit],
          ['argo-workflows', 'controller.resources', rt.argoWorkflows.controller],
          ['argo-workflows', 'server.resources', rt.argoWorkflows.server],
          ['argo-workflows', 'executor.resources', rt.argoWorkflows.executor],
          ['argo-rollouts', 'controller.resources', rt.argoRollouts.controller],
          ['argo-rollouts', 'controller.replicas', rt.argoRollouts.replicas],
          ['argo-events', 'controller.resources', rt.argoEvents.controller],
        ];
        for (const [chart, path, want] of expected)
          t.same(at(values(chart), path), want, `${chart} values ${path} are plan ${planName}'s`);
        for (const d of r.ofType('kubernetes:apps/v1:Deployment')) {
          const deployment = inputsOf<IDeployment>(d);
          const name = deployment.metadata!.name as keyof typeof rt.agents;
          t.same(
            deployment.spec!.template.spec!.containers[0]!.resources,
            rt.agents[name],
            `agent ${name}'s container has plan ${planName}'s requests and limits`,
          );
        }
      });

      t.test('kubeconfig is awaited with a bound, then read from vc-<release>', async (t) => {
        t.equal(waiter.calls.length, 1);
        t.match(waiter.calls[0], { namespace: ns, name: 'vc-vcluster', key: 'config', timeoutMs: 300_000 });
        const read = r.ofType('kubernetes:core/v1:Secret').find((x) => x.id !== undefined)!;
        t.equal(read.id, `${ns}/vc-vcluster`);
      });

      t.test('the runtime installs the pinned Argo charts, once each', async (t) => {
        const argo = releases(r)
          .map((x) => releaseOf(x))
          .filter((x) => x.chart !== 'vcluster');
        const byChart = new Map(argo.map((x) => [x.chart, x]));
        t.same([...byChart.keys()].sort(), ['argo-cd', 'argo-events', 'argo-rollouts', 'argo-workflows']);
        t.equal(argo.length, 4, 'one release per component');
        t.equal(byChart.get('argo-cd')?.version, pins.argoCd);
        t.equal(byChart.get('argo-workflows')?.version, pins.argoWorkflows);
        t.equal(byChart.get('argo-rollouts')?.version, pins.argoRollouts);
        t.equal(byChart.get('argo-events')?.version, pins.argoEvents);
        for (const rel of argo) t.equal(rel.repositoryOpts?.repo, 'https://argoproj.github.io/argo-helm');
        t.same(byChart.get('argo-cd')?.values.crds, { install: true, keep: true });
        t.equal(byChart.get('argo-rollouts')?.values.installCRDs, true);
        for (const rel of argo)
          t.equal(
            rel.timeout,
            600,
            `${rel.chart} waits 600 s for its workloads when runtimeReleaseTimeoutSeconds is not set`,
          );
        for (const rel of argo) {
          // A failed upgrade must not stay at its failed revision: a tenant rollback that follows
          // re-applies Pulumi's state, which still holds the previous inputs (test/e2e/fleet-upgrade.test.ts).
          t.equal(rel.atomic, true, `${rel.chart}: Helm rolls a failed upgrade back (atomic)`);
          t.equal(rel.cleanupOnFail, true, `${rel.chart}: and deletes what the failed upgrade created`);
          t.equal(
            rel.disableOpenapiValidation,
            true,
            `${rel.chart}: an install fetches no OpenAPI schema for a check the API server makes itself`,
          );
        }
        t.equal(
          releaseOf(releases(r).find((x) => x.inputs.chart === 'vcluster')!).disableOpenapiValidation,
          true,
          'the vcluster release too',
        );
      });

      t.test('the versions ConfigMap records the runtime and every component', async (t) => {
        const cm = r.ofType('kubernetes:core/v1:ConfigMap')[0]!;
        t.same(cm.inputs.data, {
          runtimeVersion: version.version,
          releaseDate: version.releaseDate,
          channel: version.channel,
          ...pins,
          'runtime-info.json': JSON.stringify({ runtimeVersion: version.version, components: pins }),
        });
      });

      t.test('agents run restricted with their own service accounts and pinned image', async (t) => {
        const deployments = r.ofType('kubernetes:apps/v1:Deployment').map((d) => inputsOf<IDeployment>(d));
        t.same(
          deployments.map((d) => d.metadata?.name).sort(),
          agentsAt(version.version)
            .map((a) => a.name)
            .sort(),
          'one Deployment per agent of the version (the Source Server from 1.7.0)',
        );
        for (const d of deployments) {
          const pod = d.spec!.template.spec!;
          const c = pod.containers[0]!;
          t.equal(c.image, `hosted-runtimes/${d.metadata?.name}:${pins.agents}`);
          t.equal(pod.serviceAccountName, d.metadata?.name);
          t.equal(pod.securityContext?.runAsNonRoot, true);
          t.same(c.securityContext?.capabilities?.drop, ['ALL']);
          t.equal(c.securityContext?.allowPrivilegeEscalation, false);
          t.ok(c.resources?.requests?.cpu && c.resources.limits?.memory);
        }
        const tunnel = deployments.find((d) => d.metadata?.name === 'tunnel-client')!;
        t.equal(tunnel.spec!.template.spec!.automountServiceAccountToken, false, 'no API token for the tunnel client');
      });

      t.test('outputs report the status the provisioner records', async (t) => {
        t.same(r.outputs, {
          namespace: ns,
          vclusterEndpoint: `https://vcluster.${ns}.svc:443`,
          argoCdUrl: `https://control.example.test/v1/tenants/${id}/argo-cd/`,
          runtimeVersion: version.version,
          componentVersions: pins,
          suspended: false,
        });
      });
    });
  }
}

t.test('network policies: deny by default, platform ingress, DNS, API, internet without private ranges', async (t) => {
  const r = await runProgram(
    createTenantProgram({ rootAccess: ROOT_ACCESS, waitForSecret: recordingWaiter().waiter }),
    tenantConfig({ egressAllowedCidrs: ['10.20.0.0/16'] }),
  );
  const policies = new Map(
    r
      .ofType('kubernetes:networking.k8s.io/v1:NetworkPolicy')
      .map((p) => [metaOf(p).name, inputsOf<INetworkPolicy>(p).spec!]),
  );
  const policy = (name: string) => policies.get(name)!;
  t.same(policy('default-deny'), { podSelector: {}, policyTypes: ['Ingress', 'Egress'] });
  const from = policy('allow-platform-ingress').ingress![0]!.from![0]!.namespaceSelector!.matchExpressions![0]!;
  t.same(from.values, ['ingress-nginx', 'hosted-platform']);
  t.same(
    policy('allow-dns-egress').egress![0]!.ports!.map((p) => p.port),
    [53, 53],
  );
  const internet = policy('allow-internet-egress').egress![0]!.to!;
  t.same(internet[0]!.ipBlock, { cidr: '0.0.0.0/0', except: [...PRIVATE_RANGES] });
  t.ok(internet[0]!.ipBlock!.except!.includes('169.254.0.0/16'), 'cloud metadata is unreachable');
  t.same(internet[1]!.ipBlock, { cidr: '10.20.0.0/16' }, 'the configured private range is allowed');
  t.equal(policies.size, 6);
});

t.test('chart repositories can point at a mirror or a local directory', async (t) => {
  const r = await runProgram(
    createTenantProgram({ rootAccess: ROOT_ACCESS, waitForSecret: recordingWaiter().waiter }),
    tenantConfig({
      chartRepositories: { argo: 'https://mirror.internal/argo', vcluster: '/opt/charts' },
    }),
  );
  const all = r.ofType('kubernetes:helm.sh/v3:Release').map((x) => releaseOf(x));
  const vc = all.find((x) => x.chart.includes('vcluster'))!;
  t.equal(vc.chart, `/opt/charts/vcluster-${catalog.get(tenantInput().runtimeVersion)!.components.vcluster}.tgz`);
  t.equal(vc.repositoryOpts, undefined);
  t.equal(vc.version, undefined, 'a packaged chart carries its version');
  const cd = all.find((x) => x.chart === 'argo-cd')!;
  t.equal(cd.repositoryOpts?.repo, 'https://mirror.internal/argo');
});

t.test('managed clusters become Argo CD cluster secrets with secret credentials', async (t) => {
  const r = await runProgram(
    createTenantProgram({ rootAccess: ROOT_ACCESS, waitForSecret: recordingWaiter().waiter }),
    tenantConfig({
      managedClusters: [
        {
          name: 'prod-eu',
          server: 'https://prod-eu.example.test',
          namespaces: ['apps'],
          config: { bearerToken: 'tok', tlsClientConfig: { caData: 'Q0E=' } },
        },
      ],
    }),
  );
  const secret = r.ofType('kubernetes:core/v1:Secret').find((x) => metaOf(x).name === 'cluster-prod-eu')!;
  const data = inputsOf<ISecret>(secret).stringData!;
  t.equal(metaOf(secret).namespace, 'argocd');
  t.equal(metaOf(secret).labels?.['argocd.argoproj.io/secret-type'], 'cluster');
  t.same(JSON.parse(data.config!), { bearerToken: 'tok', tlsClientConfig: { caData: 'Q0E=' } });
  t.equal(data.namespaces, 'apps');
  t.equal(providerName(secret.provider), vclusterProvider);
  t.same(validateObjects([secret]), []);
});

t.test("the program binds the tenant ClusterRole to itself in the tenant's namespace, then waits for it", async (t) => {
  const waits: AccessWaitRequest[] = [];
  const asked: string[] = [];
  const access: RootAccess = {
    whoAmI: (kubeconfig) => {
      asked.push(kubeconfig);
      return Promise.resolve({ kind: 'ServiceAccount', name: 'provisioner', namespace: 'hosted-platform' });
    },
    waitForAccess: (request) => {
      waits.push(request);
      return Promise.resolve();
    },
  };
  const r = await runProgram(
    createTenantProgram({ rootAccess: access, waitForSecret: recordingWaiter().waiter }),
    tenantConfig(),
  );
  const bindings = r
    .ofType('kubernetes:rbac.authorization.k8s.io/v1:RoleBinding')
    .filter((x) => providerName(x.provider) === rootName);
  t.equal(bindings.length, 1, 'one RoleBinding on the root cluster');
  const binding = inputsOf<IRoleBinding>(bindings[0]!);
  t.same(
    { name: binding.metadata?.name, namespace: binding.metadata?.namespace },
    { name: TENANT_ROLE_BINDING, namespace: ns },
    "in the tenant's namespace",
  );
  t.same(binding.roleRef, { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: TENANT_CLUSTER_ROLE });
  t.same(
    binding.subjects,
    [{ kind: 'ServiceAccount', name: 'provisioner', namespace: 'hosted-platform' }],
    'to whoever the root kubeconfig is',
  );
  t.equal(asked.length, 1, 'asked the root cluster once who the kubeconfig is');
  t.same(
    waits.map((w) => w.namespace),
    [ns],
    "and waited once for the binding to be in effect in the tenant's namespace",
  );
  t.equal(
    metaOf(r.ofType('kubernetes:core/v1:ResourceQuota')[0]!).namespace,
    ns,
    'the objects in the namespace take its name from the wait (so they are created after it)',
  );
});

t.test('subjectOf: a ServiceAccount username is bound as the ServiceAccount, anything else as a User', async (t) => {
  t.same(subjectOf('system:serviceaccount:hosted-platform:provisioner'), {
    kind: 'ServiceAccount',
    name: 'provisioner',
    namespace: 'hosted-platform',
  });
  t.same(subjectOf('admin'), { kind: 'User', apiGroup: 'rbac.authorization.k8s.io', name: 'admin' });
});
