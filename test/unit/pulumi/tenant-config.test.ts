/**
 * The stack config contract between the provisioner's engine and the tenant program.
 */
import t from 'tap';
import { checkKubeconfig } from '../../../kubeconfig-policy/policy.ts';
import { stackConfig, TenantConfigError, validateTenantInput } from '../../../tenants/config.ts';
import { createTenantProgram } from '../../../tenants/program.ts';
import type { ISecret } from 'kubernetes-models/v1';
import type { VclusterValues } from '../../../tenants/vcluster-values.ts';
import { inputsOf, metaOf, releaseOf, runProgram } from './harness.ts';
import { recordingWaiter, tenantInput, ROOT_ACCESS } from './fixtures.ts';

t.test('secrets are marked secret, everything under the tenant namespace', async (t) => {
  const config = stackConfig(
    tenantInput({
      managedClusters: [{ name: 'prod', server: 'https://prod.example.test', config: { bearerToken: 'x' } }],
    }),
  );
  const secret = Object.entries(config)
    .filter(([, v]) => v.secret)
    .map(([k]) => k)
    .sort();
  t.same(secret, ['tenant:managedClusterCredentials', 'tenant:rootKubeconfig', 'tenant:runtimeToken']);
  t.ok(Object.keys(config).every((k) => k.startsWith('tenant:')));
  t.equal(config['tenant:suspended']!.value, 'false');
  t.notMatch(config['tenant:managedClusters']!.value, /bearerToken/, 'credentials never in plain config');
});

t.test(
  'a tenant without managed clusters writes empty ones, so that a removed registration leaves the stack',
  async (t) => {
    // A stack keeps config keys an earlier run set: leaving the keys out would keep the old list.
    const config = stackConfig(tenantInput({}));
    t.equal(config['tenant:managedClusters']?.value, '[]', 'the registrations are written as an empty list');
    t.equal(config['tenant:managedClusterCredentials']?.value, '{}', 'the credentials as an empty object');
    t.equal(config['tenant:managedClusterCredentials']?.secret, true, 'still marked secret');
  },
);

t.test('bad input is refused with the field named', async (t) => {
  const cases: [Parameters<typeof tenantInput>[0], string][] = [
    [{ tenantId: 'Tenant_1' }, 'tenantId'],
    [{ plan: 'platinum' }, 'plan'],
    [{ runtimeVersion: '0.0.1' }, 'runtimeVersion'],
    [{ controlPlaneUrl: 'ftp://x' }, 'controlPlaneUrl'],
    [{ egressAllowedCidrs: ['10.0.0.0/33'] }, 'egressAllowedCidrs'],
    [{ vclusterServerTemplate: 'https://{cluster}.svc' }, 'vclusterServerTemplate'],
    [{ kubeconfigTimeoutSeconds: 0 }, 'kubeconfigTimeoutSeconds'],
    [{ runtimeReleaseTimeoutSeconds: 0 }, 'runtimeReleaseTimeoutSeconds'],
    [{ runtimeReleaseTimeoutSeconds: 2.5 }, 'runtimeReleaseTimeoutSeconds'],
    [{ chartRepositories: { vcluster: 'charts' } }, 'chartRepositories.vcluster'],
    [{ managedClusters: [{ name: 'a', server: 'http://insecure', config: {} }] }, 'managedClusters'],
    [
      {
        managedClusters: [
          { name: 'a', server: 'https://a.example.test', config: {} },
          { name: 'a', server: 'https://b.example.test', config: {} },
        ],
      },
      'managedClusters',
    ],
    [{ chartRepositories: { argo: 'https://' } }, 'chartRepositories.argo'],
  ];
  for (const [override, field] of cases) {
    const err = t.throws(() => validateTenantInput(tenantInput(override))) as unknown as TenantConfigError;
    t.equal(err.field, field, `${JSON.stringify(override)} names ${field}`);
  }
});

t.test('the program reads back what stackConfig wrote, secrets stay secret in outputs', async (t) => {
  const waiter = recordingWaiter();
  const r = await runProgram(
    createTenantProgram({ rootAccess: ROOT_ACCESS, waitForSecret: waiter.waiter }),
    stackConfig(
      tenantInput({
        vclusterServerTemplate: 'https://{release}-{namespace}.vc.example.test',
        kubeconfigTimeoutSeconds: 45,
        priorityClassName: '',
      }),
    ),
  );
  t.equal(waiter.calls[0]!.timeoutMs, 45_000);
  t.equal(
    waiter.calls[0]!.kubeconfig,
    checkKubeconfig(tenantInput().rootKubeconfig).text,
    'the root kubeconfig reaches the waiter as the policy sanitised it',
  );
  t.match(r.outputs.vclusterEndpoint, /^https:\/\/vcluster-tenant-[0-9a-f-]+\.vc\.example\.test$/);
  const vc = r.resources.find((x) => x.name.endsWith('-vcluster-release'))!;
  t.equal(releaseOf<VclusterValues>(vc).values.controlPlane.statefulSet.scheduling.priorityClassName, '');
  const creds = inputsOf<ISecret>(r.resources.find((x) => metaOf(x).name === 'runtime-credentials')!).stringData!;
  t.equal(creds['runtime-token'], 'rt_secret_token');
  t.equal(creds['tunnel-url'], 'wss://control.example.test/v1/tunnel');
});

t.test(
  'reading back: every setting as written, the defaults for those left out, a missing or malformed one named',
  async (t) => {
    const pulumi = await import('@pulumi/pulumi');
    const { readTenantConfig } = await import('../../../tenants/config.ts');
    const use = (config: Record<string, { value: string; secret: boolean }>) => {
      pulumi.runtime.setAllConfig(
        Object.fromEntries(Object.entries(config).map(([k, v]) => [k, v.value])),
        Object.entries(config)
          .filter(([, v]) => v.secret)
          .map(([k]) => k),
      );
      return () => readTenantConfig(new pulumi.Config('tenant'));
    };
    const written = stackConfig(
      tenantInput({
        egressAllowedCidrs: ['10.1.0.0/16'],
        kubeconfigTimeoutSeconds: 45,
        runtimeReleaseTimeoutSeconds: 20,
        suspended: true,
      }),
    );
    const settings = use(written)();
    t.match(
      settings,
      {
        tenantId: tenantInput().tenantId,
        organization: 'acme',
        plan: 'team',
        runtimeVersion: '1.4.0',
        suspended: true,
        controlPlaneUrl: 'https://control.example.test',
        egressAllowedCidrs: ['10.1.0.0/16'],
        kubeconfigTimeoutSeconds: 45,
        runtimeReleaseTimeoutSeconds: 20,
      },
      'the written settings are read back as they were',
    );
    t.same(
      {
        chartRepositories: settings.chartRepositories,
        vclusterServerTemplate: settings.vclusterServerTemplate,
        kubernetesApiCidrs: settings.kubernetesApiCidrs,
        ingressNamespaces: settings.ingressNamespaces,
        priorityClassName: settings.priorityClassName,
        agentImageRepository: settings.agentImageRepository,
        argoCdUrlTemplate: settings.argoCdUrlTemplate,
        managedClusters: settings.managedClusters,
      },
      {
        chartRepositories: {},
        vclusterServerTemplate: 'https://{release}.{namespace}.svc:443',
        kubernetesApiCidrs: ['0.0.0.0/0'],
        ingressNamespaces: ['ingress-nginx', 'hosted-platform'],
        priorityClassName: 'tenant-control-plane',
        agentImageRepository: 'hosted-runtimes',
        argoCdUrlTemplate: '{controlPlaneUrl}/v1/tenants/{tenantId}/argo-cd/',
        managedClusters: [],
      },
      'the settings left out get their defaults',
    );
    t.ok(
      pulumi.Output.isInstance(settings.rootKubeconfig) && pulumi.Output.isInstance(settings.runtimeToken),
      'secrets are Outputs, not plaintext',
    );
    const token = await new Promise((resolve) => settings.runtimeToken.apply(resolve));
    t.equal(token, 'rt_secret_token', 'the runtime token resolves to what was written');

    const { 'tenant:plan': _plan, ...withoutPlan } = written;
    t.throws(
      use(withoutPlan),
      { name: 'TenantConfigError', field: 'plan', message: /missing from the stack config/ },
      'a required setting left out is named',
    );
    t.throws(
      use({ ...written, 'tenant:kubeconfigTimeoutSeconds': { value: 'soon', secret: false } }),
      { field: 'kubeconfigTimeoutSeconds', message: /cannot be read/ },
      'malformed JSON is named',
    );
    t.throws(
      use({ ...written, 'tenant:suspended': { value: 'yes', secret: false } }),
      { field: 'suspended', message: /'yes' is neither true nor false/ },
      'a malformed boolean is named',
    );
    t.throws(
      use({ ...written, 'tenant:ingressNamespaces': { value: '"ingress-nginx"', secret: false } }),
      { field: 'ingressNamespaces', message: /must be a list of strings/ },
      'a value of the wrong shape is named',
    );
  },
);
