/**
 * The root-infra program under mocks with two root clusters: one reached through a kubeconfig
 * from secret config, one through a context; operator-managed and external Postgres.
 */
import t from 'tap';
import { infraProgram } from '../../../infra/program.ts';
import { validateClusters } from '../../../infra/config.ts';
import {
  PROVISIONER_CLUSTER_RULES,
  PROVISIONER_GUARD_EXPRESSION,
  PROVISIONER_TENANT_RULES,
  TENANT_CLUSTER_ROLE,
} from '../../../infra/provisioner-rbac.ts';
import { grantedByRules, ROOT_CLUSTER_PERMISSIONS, type PolicyRule } from '../../../tenants/root-permissions.ts';
import type { IDeployment } from 'kubernetes-models/apps/v1';
import type { ISecret } from 'kubernetes-models/v1';
import type { IIngress } from 'kubernetes-models/networking.k8s.io/v1';
import type { IPriorityClass } from 'kubernetes-models/scheduling.k8s.io/v1';
import { inputsOf, releaseOf, runProgram } from './harness.ts';
import { providerName } from './fixtures.ts';
import { validateObjects } from './validate-manifests.ts';

const P = 'hosted-runtimes-infra';
const clusters = [
  {
    name: 'eu-1',
    region: 'eu-west',
    labels: { tier: 'standard' },
    capacity: 200,
    apiServer: 'https://eu-1.k8s.example.test:6443',
    ingressHost: 'gitops-eu.example.test',
  },
  {
    name: 'us-1',
    region: 'us-east',
    capacity: 100,
    context: 'us-1-admin',
    apiServer: 'https://us-1.k8s.example.test:6443',
    ingressHost: 'gitops-us.example.test',
  },
];
/** Token waits recorded by the program (the mocks' token Secret is filled at once). */
const tokenWaits: Array<{ namespace: string; name: string; kubeconfig?: string; context?: string }> = [];
const program = () =>
  infraProgram({
    waitForToken: (request) => {
      tokenWaits.push(request);
      return Promise.resolve();
    },
  });

const config = (extra: Record<string, { value: string; secret: boolean }> = {}) => ({
  [`${P}:clusters`]: { value: JSON.stringify(clusters), secret: false },
  [`${P}:kubeconfigs`]: { value: JSON.stringify({ 'eu-1': 'apiVersion: v1\nkind: Config\n' }), secret: true },
  [`${P}:provisionerImage`]: { value: 'hosted-runtimes/provisioner:0.1.0', secret: false },
  [`${P}:encryptionKey`]: { value: 'k'.repeat(44), secret: true },
  [`${P}:requestSigningKey`]: {
    value:
      '-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIEXAMPLEEXAMPLEEXAMPLEEXAMPLEEXAMPLEEXAM\n-----END PRIVATE KEY-----\n',
    secret: true,
  },
  [`${P}:pulumiPassphrase`]: { value: 'passphrase-of-the-engine', secret: true },
  ...extra,
});

t.test('two clusters: each gets the whole platform through its own provider', async (t) => {
  const r = await runProgram(program, config(), { project: P, stack: 'dev' });
  const providers = r.ofType('pulumi:providers:kubernetes');
  t.same(providers.map((p) => p.name).sort(), ['cluster-eu-1', 'cluster-us-1']);
  t.equal(providers.find((p) => p.name === 'cluster-us-1')!.inputs.context, 'us-1-admin');
  t.match(providers.find((p) => p.name === 'cluster-eu-1')!.inputs.kubeconfig, /kind: Config/);

  for (const name of ['eu-1', 'us-1']) {
    const mine = r.resources.filter((x) => x.custom && providerName(x.provider) === `cluster-${name}`);
    const kinds = mine
      .map((x) => x.type.split(':').pop() + (x.type.endsWith('Release') ? `/${releaseOf(x).chart}` : ''))
      .sort();
    t.same(
      kinds,
      [
        'Cluster',
        'ClusterRole',
        'ClusterRole',
        'ClusterRoleBinding',
        'Deployment',
        'Ingress',
        'Namespace',
        'Namespace',
        'Namespace',
        'Namespace',
        'NetworkPolicy',
        'NetworkPolicy',
        'NetworkPolicy',
        'NetworkPolicy',
        'PriorityClass',
        'Release/cert-manager',
        'Release/cloudnative-pg',
        'Release/ingress-nginx',
        'Secret',
        'Secret',
        'Secret',
        'Service',
        'ServiceAccount',
        'ValidatingAdmissionPolicy',
        'ValidatingAdmissionPolicyBinding',
      ],
      `cluster ${name}`,
    );
  }
  t.same(validateObjects(r.resources), [], 'every plain object is valid');
  const namespaces = r.ofType('kubernetes:core/v1:Namespace').map((n) => inputsOf<{ metadata: { name: string } }>(n));
  t.same(
    [...new Set(namespaces.map((n) => n.metadata.name))].sort(),
    ['cert-manager', 'cnpg-system', 'hosted-platform', 'ingress-nginx'],
    "every chart's namespace is the program's (Helm would leave its own behind on destroy)",
  );
  t.notOk(
    r.ofType('kubernetes:helm.sh/v3:Release').some((x) => x.inputs.createNamespace === true),
    'no release creates its namespace',
  );
});

t.test(
  'the cluster registry exports what the provisioner registers, kubeconfig from its own ServiceAccount',
  async (t) => {
    tokenWaits.length = 0;
    const r = await runProgram(program, config(), { project: P, stack: 'dev' });
    const registry = r.outputs.clusters as {
      name: string;
      region: string;
      labels: Record<string, string>;
      capacity: number;
      kubeconfig: string;
    }[];
    t.same(
      registry.map(({ name, region, labels, capacity }) => ({ name, region, labels, capacity })),
      [
        { name: 'eu-1', region: 'eu-west', labels: { tier: 'standard' }, capacity: 200 },
        { name: 'us-1', region: 'us-east', labels: {}, capacity: 100 },
      ],
    );
    const kc = JSON.parse(registry[0]!.kubeconfig);
    t.equal(kc.clusters[0].cluster.server, 'https://eu-1.k8s.example.test:6443');
    t.equal(
      kc.users[0].user.token,
      'sa-token',
      'the token of the provisioner ServiceAccount, not the admin kubeconfig',
    );
    const read = r.resources.filter((x) => x.id === 'hosted-platform/provisioner-token');
    t.equal(read.length, 2, 'per cluster, the token Secret is read back once its token is filled in');
    t.match(
      [...tokenWaits].sort((a, b) => (a.context ?? '').localeCompare(b.context ?? '')),
      [
        { namespace: 'hosted-platform', kubeconfig: /kind: Config/ },
        { namespace: 'hosted-platform', context: 'us-1-admin' },
      ],
      'the wait uses the credentials of pulumi up: the kubeconfig from config, or the context',
    );
  },
);

t.test(
  'provisioner: DSN from the CNPG app secret, restricted pod, WebSocket-friendly ingress, PriorityClass',
  async (t) => {
    const r = await runProgram(program, config(), { project: P, stack: 'dev' });
    const pod = inputsOf<IDeployment>(r.byName('eu-1-provisioner-deployment')).spec!.template.spec!;
    const env = new Map(pod.containers[0]!.env!.map((e) => [e.name, e]));
    t.same(env.get('DATABASE_URL')?.valueFrom?.secretKeyRef, { name: 'provisioner-db-app', key: 'uri' });
    t.equal(env.get('PROVISIONER_PUBLIC_URL')?.value, 'https://gitops-eu.example.test');
    t.same(
      env.get('PROVISIONER_REQUEST_SIGNING_KEY')?.valueFrom?.secretKeyRef,
      { name: 'provisioner-secrets', key: 'request-signing-key' },
      'every replica signs with the same key',
    );
    t.same(env.get('POD_IP')?.valueFrom?.fieldRef, { fieldPath: 'status.podIP' });
    t.same(
      env.get('PULUMI_CONFIG_PASSPHRASE')?.valueFrom?.secretKeyRef,
      { name: 'provisioner-secrets', key: 'pulumi-passphrase' },
      'every replica decrypts the tenant stacks with the same passphrase',
    );
    t.equal(
      env.get('PROVISIONER_DATA_DIR')?.value,
      '/var/lib/provisioner',
      'the data dir is the mounted volume (the root filesystem is read-only)',
    );
    t.equal(
      env.get('PROVISIONER_ADVERTISE_URL')?.value,
      'http://$(POD_IP):8080',
      'replicas reach each other pod to pod',
    );
    t.ok(
      pod.containers[0]!.env!.findIndex((e) => e.name === 'POD_IP') <
        pod.containers[0]!.env!.findIndex((e) => e.name === 'PROVISIONER_ADVERTISE_URL'),
      'POD_IP is defined before it is referenced',
    );
    t.equal(pod.securityContext?.runAsNonRoot, true);
    t.ok((pod.terminationGracePeriodSeconds ?? 30) >= 20 + 10, 'room for the reconciler grace and the tunnel drain');
    const ing = inputsOf<IIngress>(r.byName('eu-1-provisioner-ingress'));
    t.equal(ing.spec!.rules![0]!.host, 'gitops-eu.example.test');
    t.equal(ing.metadata!.annotations!['nginx.ingress.kubernetes.io/proxy-read-timeout'], '3600');
    const pc = inputsOf<IPriorityClass>(r.byName('eu-1-tenant-priority'));
    t.equal(pc.metadata!.name, 'tenant-control-plane');
    t.equal(pc.globalDefault, false);
    const cnpg = r.byName('eu-1-database-cluster').inputs;
    t.match(cnpg, { apiVersion: 'postgresql.cnpg.io/v1', kind: 'Cluster', spec: { instances: 2 } });
    t.same(releaseOf(r.byName('eu-1-cert-manager')).values.crds, { enabled: true, keep: true });
  },
);

t.test('provisioner RBAC: cluster-wide only namespaces, the watched kinds read and the tenant binding', async (t) => {
  const rules = PROVISIONER_CLUSTER_RULES as PolicyRule[];
  const granted = rules.flatMap((rule) =>
    rule.resources!.flatMap((res) =>
      rule.verbs!.map(
        (v) => `${v} ${rule.apiGroups![0]}/${res}${rule.resourceNames ? `/${rule.resourceNames.join(',')}` : ''}`,
      ),
    ),
  );
  for (const secretive of ['secrets', 'configmaps', 'pods', 'pods/exec', 'serviceaccounts']) {
    t.notOk(
      granted.some((g) => g.endsWith(` /${secretive}`)),
      `nothing on ${secretive} cluster-wide (only in tenant namespaces)`,
    );
  }
  for (const forbidden of [
    '/nodes',
    'rbac.authorization.k8s.io/clusterrolebindings',
    'rbac.authorization.k8s.io/roles',
    'apiextensions.k8s.io/customresourcedefinitions',
  ]) {
    t.notOk(
      granted.some((g) => g.endsWith(` ${forbidden}`)),
      `no ${forbidden}`,
    );
  }
  t.same(
    granted.filter((g) => / rbac\.authorization\.k8s\.io\/clusterroles/.test(g)),
    [
      `bind rbac.authorization.k8s.io/clusterroles/${TENANT_CLUSTER_ROLE}`,
      `get rbac.authorization.k8s.io/clusterroles/${TENANT_CLUSTER_ROLE}`,
    ],
    'on ClusterRoles: bind and read the tenant one, by name',
  );
  t.notOk(
    [...rules, ...(PROVISIONER_TENANT_RULES as PolicyRule[])].some((rule) =>
      rule.verbs!.some((v) => v === '*' || v === 'escalate'),
    ),
    'no wildcard, no escalate',
  );
  t.notOk(
    (PROVISIONER_TENANT_RULES as PolicyRule[]).some((rule) => rule.verbs!.includes('bind')),
    'no bind in tenant namespaces',
  );
});

t.test('the grants cover every permission the registration probe checks, each where it is checked', async (t) => {
  const cluster = PROVISIONER_CLUSTER_RULES as PolicyRule[];
  const tenant = PROVISIONER_TENANT_RULES as PolicyRule[];
  for (const p of ROOT_CLUSTER_PERMISSIONS) {
    const ok = p.scope === 'bound' ? grantedByRules(tenant, p) : grantedByRules(cluster, p);
    t.ok(ok, `${p.verb} ${p.resource}${p.name ? `/${p.name}` : ''} (${p.scope}) is granted by infra/`);
  }
});

t.test("a ValidatingAdmissionPolicy keeps the provisioner's writes inside tenant namespaces", async (t) => {
  const r = await runProgram(program, config(), { project: P, stack: 'dev' });
  const guard = r.byName('eu-1-provisioner-guard').inputs as {
    spec: { matchConditions: Array<{ expression: string }>; validations: Array<{ expression: string }> };
  };
  t.match(
    guard.spec.matchConditions[0]!.expression,
    "'system:serviceaccount:hosted-platform:provisioner'",
    "it applies to the provisioner's ServiceAccount only",
  );
  t.equal(
    guard.spec.validations[0]!.expression,
    PROVISIONER_GUARD_EXPRESSION,
    'a namespace named tenant-…, or an object in one',
  );
  t.same(
    (r.byName('eu-1-provisioner-guard-binding').inputs as { spec: unknown }).spec,
    { policyName: 'hosted-platform-provisioner-guard', validationActions: ['Deny'] },
    'bound to deny',
  );
});

t.test('an external database keeps the DSN in a Secret and installs no operator', async (t) => {
  const r = await runProgram(
    program,
    config({
      [`${P}:database`]: { value: JSON.stringify({ mode: 'external' }), secret: false },
      [`${P}:databaseUrl`]: { value: 'postgres://u:p@db.example.test/provisioner', secret: true },
    }),
    { project: P, stack: 'dev' },
  );
  t.equal(r.resources.filter((x) => x.inputs.chart === 'cloudnative-pg').length, 0);
  t.equal(
    inputsOf<ISecret>(r.byName('eu-1-database-dsn')).stringData!.uri,
    'postgres://u:p@db.example.test/provisioner',
  );
  const env = inputsOf<IDeployment>(r.byName('us-1-provisioner-deployment')).spec!.template.spec!.containers[0]!.env!;
  t.same(env.find((e) => e.name === 'DATABASE_URL')?.valueFrom?.secretKeyRef, {
    name: 'provisioner-database',
    key: 'uri',
  });
});

t.test('config validation names the bad field', async (t) => {
  t.throws(() => validateClusters([], { mode: 'cnpg' }, false), /at least one root cluster/);
  t.throws(
    () => validateClusters([clusters[0]!, clusters[0]!], { mode: 'cnpg' }, false),
    /clusters\[1\]'\.name: 'eu-1' is listed twice/,
  );
  t.throws(
    () => validateClusters([{ ...clusters[0]!, apiServer: 'http://x' }], { mode: 'cnpg' }, false),
    /apiServer must be an https URL/,
  );
  t.throws(() => validateClusters([clusters[0]!], { mode: 'external' }, false), /databaseUrl/);
});
