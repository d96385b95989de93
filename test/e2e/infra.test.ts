/**
 * The root infrastructure for real (issue 20): `pulumi up` of the root project (Pulumi.yaml,
 * infra/) against the e2e root cluster — a real kube-apiserver with controllers and KWOK nodes —
 * with a stack configured like Pulumi.example.yaml (operator-managed Postgres, the cluster's
 * kubeconfig in the secret `kubeconfigs` map) and local stand-ins for the platform charts; the
 * tenant lifecycle then installs the real vcluster and Argo charts from the chart mirror.
 *
 *  1. `pulumi up` completes and every object in the stack's state exists on the API server; the
 *     three Helm releases are deployed.
 *  2. A second preview shows no change.
 *  3. The `clusters` output's kubeconfig authenticates as the provisioner's own ServiceAccount;
 *     SubjectAccessReviews show what that account may not do: read Secrets or ConfigMaps outside
 *     tenant namespaces (nor across all), change nodes, RBAC beyond the tenant binding, or
 *     anything in kube-system; and that it holds what the tenants program needs before a tenant
 *     namespace has its RoleBinding.
 *  4. The provisioner Deployment's environment as it is on the API server (values, Secrets,
 *     the downward API) starts the real provisioner process, which serves, with no secret left to
 *     a development default.
 *  5. `pulumi destroy` leaves nothing of the platform behind but the CRDs kept on purpose.
 */
import { randomBytes, randomUUID, generateKeyPairSync } from 'node:crypto';
import { copyFile, mkdir, mkdtemp, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import {
  AdmissionregistrationV1Api,
  ApiextensionsV1Api,
  AppsV1Api,
  AuthenticationV1Api,
  AuthorizationV1Api,
  CoreV1Api,
  KubeConfig,
  KubernetesObjectApi,
  NetworkingV1Api,
  RbacAuthorizationV1Api,
  SchedulingV1Api,
  type V1EnvVar,
} from '@kubernetes/client-node';
import t from 'tap';
import { PLATFORM_CHARTS, PLATFORM_NAMESPACE } from '../../infra/charts.ts';
import { PROVISIONER_DATA_DIR } from '../../infra/provisioner.ts';
import { TENANT_CLUSTER_ROLE, TENANT_ROLE_BINDING } from '../../tenants/root-permissions.ts';
import { createTestDatabase } from '../helpers/postgres.ts';
import { catalog } from '../../runtime/catalog.ts';
import { ApiClient, cli } from './harness/api-client.ts';
import { prepareTenantCharts, writePlatformCharts } from '../../sandbox/charts.ts';
import {
  createPodNetwork,
  SYNCED_JOB_POD_STAGE,
  VCLUSTER_POD_LABEL,
  VclusterPods,
} from '../../sandbox/vcluster-pods.ts';
import { VCLUSTER_SERVER_TEMPLATE } from '../../sandbox/stack.ts';
import {
  kwokLabelQuery,
  startEtcd,
  startKubeControlPlane,
  toolchainFrom,
  type KubeControlPlane,
} from '../../sandbox/control-plane.ts';
import {
  acquireRunLock,
  describeKubernetesProvider,
  describeVcluster,
  vclusterBuild,
  provisioningUnavailable,
  recordTiming,
} from './harness/environment.ts';
import { createVolumePool, kubernetesProvider, toolchainBin } from '../../sandbox/stack.ts';
import { exists } from './harness/kube.ts';
import { PROVISION_TIMEOUT } from './harness/suite.ts';
import { freePort, run, startProcess, StopWaiting, until } from '../../sandbox/processes.ts';
import { preparePulumiHome, REPO_ROOT, withHostsFile } from '../../sandbox/provisioner-process.ts';

const STACK = 'e2e';
const PROJECT = 'hosted-runtimes-infra';
const CLUSTER = 'e2e-root';
const PROVISIONER_SA = `system:serviceaccount:${PLATFORM_NAMESPACE}:provisioner`;
const RBAC = 'rbac.authorization.k8s.io';

t.setTimeout(20 * 60_000);

const skip = provisioningUnavailable();
if (skip) {
  t.plan(0, skip);
} else {
  await main();
}

interface Pulumi {
  (args: string[], opts?: { timeoutMs?: number; input?: string }): Promise<{ stdout: string; stderr: string }>;
}

async function main(): Promise<void> {
  const bin = toolchainBin();
  const provider = kubernetesProvider()!;
  const vcluster = vclusterBuild()!;
  t.comment(describeKubernetesProvider(provider));
  t.comment(describeVcluster(vcluster));
  t.comment(
    'stand-ins: the ingress-nginx, cert-manager and cloudnative-pg charts are local stand-in charts ' +
      '(sandbox/charts.ts, writePlatformCharts); the Secret the CloudNativePG operator writes ' +
      "(provisioner-db-app) is written by the test; pods run on KWOK's fake nodes (the vcluster pods by the " +
      "harness's runner, sandbox/vcluster-pods.ts); persistent volumes come from a pre-created pool",
  );
  const release = await acquireRunLock(20 * 60_000);
  const dir = await mkdtemp(join(tmpdir(), 'hrt-e2e-infra-'));
  const cleanups: Array<() => Promise<void>> = [release];
  t.teardown(async () => {
    for (const c of [...cleanups].reverse()) {
      try {
        await c();
      } catch (err) {
        console.error(`e2e teardown: ${err instanceof Error ? err.message : String(err)}`);
      }
    }
  });
  if (process.env.E2E_KEEP !== '1') cleanups.unshift(() => rm(dir, { recursive: true, force: true }));
  else t.comment(`E2E_KEEP=1: keeping ${dir}`);

  const toolchain = toolchainFrom(bin);
  const network = await createPodNetwork();
  cleanups.push(() => network.remove());
  const etcd = await startEtcd(toolchain, join(dir, 'etcd'));
  cleanups.push(() => etcd.stop());
  const root = await startKubeControlPlane(toolchain, {
    name: 'root',
    dir: join(dir, 'root'),
    etcd,
    etcdPrefix: '/root',
    nodes: 3,
    servingIps: [network.hostIp],
    extraKwokStages: SYNCED_JOB_POD_STAGE,
    kwokLeavesPods: [kwokLabelQuery(VCLUSTER_POD_LABEL.label, VCLUSTER_POD_LABEL.value)],
  });
  cleanups.push(() => root.stop());
  await recordTiming(t, 'root control plane start (etcd excluded)', root.startSeconds);
  await createVolumePool(root.kc);

  const charts = join(dir, 'charts');
  const files = await writePlatformCharts(charts, PLATFORM_CHARTS);
  t.comment(`stand-in charts (platform): ${files.join(', ')}`);

  const db = await createTestDatabase();
  cleanups.push(() => db.drop());
  const databaseUrl = new URL(db.url);
  databaseUrl.searchParams.set('sslmode', 'disable');

  const pulumi = await preparePulumiProject(dir, provider, bin, root, charts);

  // 1. pulumi up
  const started = Date.now();
  // Stand-in for ingress-nginx's controller, which writes an Ingress's address into its status
  // (the provider plugin waits for it).
  const stopIngressStandIn = ingressStatusStandIn(root.kc, PLATFORM_NAMESPACE);
  await pulumi(['up', '--yes', '--skip-preview'], { timeoutMs: 10 * 60_000 }).finally(stopIngressStandIn);
  await recordTiming(t, 'infra: pulumi up (first install)', (Date.now() - started) / 1000);
  const admin = root.kc;

  await t.test('every object of the stack is on the API server, the releases are deployed', async (t) => {
    const state = JSON.parse((await pulumi(['stack', 'export'])).stdout) as {
      deployment: { resources?: StateResource[] };
    };
    const objects = (state.deployment.resources ?? []).filter(
      (r) => r.type.startsWith('kubernetes:') && r.type !== 'kubernetes:helm.sh/v3:Release' && !r.external,
    );
    t.same(
      objects.map((r) => r.outputs.kind).sort(),
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
        'Secret',
        'Secret',
        'Service',
        'ServiceAccount',
        'ValidatingAdmissionPolicy',
        'ValidatingAdmissionPolicyBinding',
      ],
      "the stack holds the platform's objects",
    );
    const api = KubernetesObjectApi.makeApiClient(admin);
    const missing: string[] = [];
    for (const r of objects) {
      const { apiVersion, kind, metadata } = r.outputs;
      const spec = { apiVersion, kind, metadata: { name: metadata.name, namespace: metadata.namespace } };
      if (!(await exists(() => api.read(spec)))) missing.push(`${kind} ${metadata.namespace ?? ''}/${metadata.name}`);
    }
    t.same(missing, [], 'every Kubernetes object in the stack state exists on the API server');
    const core = admin.makeApiClient(CoreV1Api);
    for (const [release, namespace] of [
      ['ingress-nginx', PLATFORM_CHARTS.ingressNginx.namespace],
      ['cert-manager', PLATFORM_CHARTS.certManager.namespace],
      ['cnpg', PLATFORM_CHARTS.cnpg.namespace],
    ] as const) {
      const records = await core.listNamespacedSecret({ namespace, labelSelector: `owner=helm,name=${release}` });
      t.same(
        records.items.map((s) => s.metadata?.labels?.status),
        ['deployed'],
        `Helm release ${namespace}/${release} is deployed, once`,
      );
    }
    const deployment = await admin
      .makeApiClient(AppsV1Api)
      .readNamespacedDeployment({ name: 'provisioner', namespace: PLATFORM_NAMESPACE });
    t.equal(deployment.status?.availableReplicas, 2, 'the provisioner Deployment has 2 available replicas');
    const cluster = await api.read({
      apiVersion: 'postgresql.cnpg.io/v1',
      kind: 'Cluster',
      metadata: { name: 'provisioner-db', namespace: PLATFORM_NAMESPACE },
    });
    t.match(cluster, { spec: { instances: 2 } }, 'the CloudNativePG Cluster is accepted (stand-in CRD)');
  });

  await t.test('a second pulumi up has nothing to change', async (t) => {
    const started = Date.now();
    const preview = await pulumi(['preview', '--expect-no-changes', '--diff']).catch((err: unknown) => err);
    await recordTiming(t, 'infra: pulumi preview (no changes)', (Date.now() - started) / 1000);
    t.notOk(
      preview instanceof Error,
      `preview with --expect-no-changes succeeds${preview instanceof Error ? `: ${preview.message}` : ''}`,
    );
  });

  await t.test('the clusters output is a kubeconfig of the provisioner ServiceAccount', async (t) => {
    const clusters = JSON.parse(
      (await pulumi(['stack', 'output', 'clusters', '--show-secrets', '--json'])).stdout,
    ) as Array<{ name: string; region: string; capacity: number; apiServer: string; kubeconfig: string }>;
    t.same(
      clusters.map(({ name, region, capacity, apiServer }) => ({ name, region, capacity, apiServer })),
      [{ name: CLUSTER, region: 'local', capacity: 50, apiServer: root.server }],
      'one registry entry per configured cluster',
    );
    const kc = new KubeConfig();
    kc.loadFromString(clusters[0]!.kubeconfig);
    const review = await kc
      .makeApiClient(AuthenticationV1Api)
      .createSelfSubjectReview({ body: { apiVersion: 'authentication.k8s.io/v1', kind: 'SelfSubjectReview' } });
    t.equal(review.status?.userInfo?.username, PROVISIONER_SA, 'the kubeconfig authenticates as the provisioner');
    const namespaces = await kc.makeApiClient(CoreV1Api).listNamespace();
    t.ok(namespaces.items.length > 0, 'and it may list namespaces (it creates tenant namespaces)');

    const authz = admin.makeApiClient(AuthorizationV1Api);
    const can = (attrs: Access) => allowed(authz, attrs);
    const refused: Access[] = [
      // Nodes.
      { verb: 'update', resource: 'nodes' },
      { verb: 'patch', resource: 'nodes' },
      { verb: 'delete', resource: 'nodes' },
      // RBAC beyond the tenant binding.
      { verb: 'create', resource: 'clusterroles', group: RBAC },
      { verb: 'update', resource: 'clusterroles', group: RBAC, name: TENANT_CLUSTER_ROLE },
      { verb: 'create', resource: 'clusterrolebindings', group: RBAC },
      { verb: 'escalate', resource: 'roles', group: RBAC, namespace: 'tenant-x' },
      { verb: 'escalate', resource: 'clusterroles', group: RBAC },
      { verb: 'bind', resource: 'clusterroles', group: RBAC },
      { verb: 'bind', resource: 'clusterroles', group: RBAC, name: 'cluster-admin' },
      { verb: 'bind', resource: 'clusterroles', group: RBAC, name: 'hosted-platform:provisioner' },
      { verb: 'create', resource: 'roles', group: RBAC, namespace: 'kube-system' },
      {
        verb: 'update',
        resource: 'rolebindings',
        group: RBAC,
        namespace: 'kube-system',
        name: 'system:controller:bootstrap-signer',
      },
      {
        verb: 'delete',
        resource: 'rolebindings',
        group: RBAC,
        namespace: 'kube-system',
        name: 'system:controller:bootstrap-signer',
      },
      { verb: 'list', resource: 'rolebindings', group: RBAC },
      // Extending the API or admission.
      { verb: 'create', resource: 'customresourcedefinitions', group: 'apiextensions.k8s.io' },
      { verb: 'create', resource: 'validatingwebhookconfigurations', group: 'admissionregistration.k8s.io' },
      { verb: 'delete', resource: 'validatingadmissionpolicies', group: 'admissionregistration.k8s.io' },
      { verb: 'create', resource: 'priorityclasses', group: 'scheduling.k8s.io' },
      // Secrets and ConfigMaps outside tenant namespaces: no read anywhere else, nor across all.
      ...['kube-system', 'default', 'kube-public', PLATFORM_NAMESPACE, 'bystander', undefined].flatMap((namespace) =>
        ['get', 'list', 'watch'].flatMap((verb) =>
          ['secrets', 'configmaps'].map((resource) => ({ verb, resource, ...(namespace ? { namespace } : {}) })),
        ),
      ),
      // Not even a tenant namespace's Secrets before its RoleBinding is there.
      { verb: 'get', resource: 'secrets', namespace: 'tenant-x' },
      // kube-system's workloads.
      { verb: 'get', resource: 'pods', namespace: 'kube-system' },
      { verb: 'create', resource: 'pods/exec', namespace: 'kube-system' },
      { verb: 'delete', resource: 'pods', namespace: 'kube-system' },
      { verb: 'update', resource: 'deployments', group: 'apps', namespace: 'kube-system' },
      { verb: 'get', resource: 'serviceaccounts', namespace: 'kube-system' },
      { verb: 'create', resource: 'serviceaccounts/token', namespace: 'kube-system' },
    ];
    const granted: string[] = [];
    for (const a of refused) if (await can(a)) granted.push(describe(a));
    t.same(
      granted,
      [],
      `SubjectAccessReviews: the provisioner may do none of ${refused.length} things outside its grants`,
    );
    const needed: Access[] = [
      { verb: 'create', resource: 'namespaces' },
      { verb: 'delete', resource: 'namespaces' },
      { verb: 'list', resource: 'resourcequotas' },
      { verb: 'watch', resource: 'statefulsets', group: 'apps' },
      { verb: 'create', resource: 'rolebindings', group: RBAC, namespace: 'tenant-x' },
      { verb: 'patch', resource: 'rolebindings', group: RBAC, namespace: 'tenant-x', name: TENANT_ROLE_BINDING },
      { verb: 'bind', resource: 'clusterroles', group: RBAC, name: TENANT_CLUSTER_ROLE },
    ];
    const refusedNeeded: string[] = [];
    for (const a of needed) if (!(await can(a))) refusedNeeded.push(describe(a));
    t.same(refusedNeeded, [], 'and may do what the tenants program does before a tenant namespace has its RoleBinding');
    const role = await admin.makeApiClient(RbacAuthorizationV1Api).readClusterRole({ name: TENANT_CLUSTER_ROLE });
    t.ok(
      role.rules?.some((r) => r.resources?.includes('secrets')),
      `the tenant-namespace ClusterRole ${TENANT_CLUSTER_ROLE} exists with the namespaced grants (Secrets among them)`,
    );
    const wide = (await admin.makeApiClient(RbacAuthorizationV1Api).listClusterRoleBinding()).items.filter((b) =>
      b.subjects?.some(
        (s) => s.kind === 'ServiceAccount' && s.name === 'provisioner' && s.namespace === PLATFORM_NAMESPACE,
      ),
    );
    t.same(
      wide.map((b) => b.roleRef.name),
      ['hosted-platform:provisioner'],
      'the only cluster-wide binding of the provisioner is its cluster ClusterRole (not the tenant one)',
    );
  });

  let adminKey = '';
  let renderedEnv: Record<string, string> = {};
  const volume = join(dir, 'pod-volume');
  await t.test("the provisioner Deployment's environment starts the real provisioner", async (t) => {
    // What the CloudNativePG operator would write (stand-in): the DSN Secret, here the test database.
    const core = admin.makeApiClient(CoreV1Api);
    await core.createNamespacedSecret({
      namespace: PLATFORM_NAMESPACE,
      body: {
        metadata: { name: 'provisioner-db-app', namespace: PLATFORM_NAMESPACE },
        type: 'kubernetes.io/basic-auth',
        stringData: { uri: databaseUrl.toString(), username: 'provisioner', password: 'stand-in' },
      },
    });
    const deployment = await admin
      .makeApiClient(AppsV1Api)
      .readNamespacedDeployment({ name: 'provisioner', namespace: PLATFORM_NAMESPACE });
    const container = deployment.spec!.template.spec!.containers[0]!;
    t.notOk(container.envFrom?.length, 'no envFrom (every variable is listed)');
    const env = await resolveEnv(admin, PLATFORM_NAMESPACE, container.env ?? []);
    renderedEnv = env;
    t.equal(env.DATABASE_URL, databaseUrl.toString(), 'DATABASE_URL comes from the CNPG app Secret');
    const mounts = new Map((container.volumeMounts ?? []).map((m) => [m.mountPath, m.name]));
    t.ok(mounts.has(env.PROVISIONER_DATA_DIR ?? ''), 'PROVISIONER_DATA_DIR is a mounted volume');

    // The pod's volume is a folder here; the image's PATH holds the Pulumi CLI and Node.js.
    await mkdir(volume, { recursive: true });
    const port = await freePort();
    const processEnv: Record<string, string> = {
      ...env,
      // Loopback only here (the pod listens on every address of its network namespace).
      HOST: '127.0.0.1',
      PORT: String(port),
      PROVISIONER_DATA_DIR: volume,
      PATH: `${bin}:${dirname(process.execPath)}:/usr/bin:/bin`,
      HOME: volume,
    };
    // The image carries the Kubernetes provider plugin (nothing is downloaded at start-up).
    await preparePulumiHome(join(volume, 'engine', '.pulumi'), provider);
    t.comment(
      `environment: ${Object.keys(env).sort().join(', ')}; changed for the test: HOST, PORT, PROVISIONER_DATA_DIR (the volume ${PROVISIONER_DATA_DIR} is ${volume})`,
    );
    const logFile = join(dir, 'provisioner.log');
    const started = Date.now();
    const proc = startProcess(
      'provisioner',
      process.execPath,
      [join(REPO_ROOT, 'bin', 'provisioner.ts'), 'serve'],
      logFile,
      {
        env: processEnv,
        cwd: volume,
      },
    );
    cleanups.push(() => proc.stop(10_000));
    const url = `http://127.0.0.1:${port}`;
    await until('provisioner /readyz', 90_000, async () => {
      if (!proc.running()) throw new StopWaiting(`provisioner exited: ${await proc.tail(20)}`);
      const res = await fetch(`${url}/readyz`, { signal: AbortSignal.timeout(3000) }).catch(() => undefined);
      return res?.status === 200;
    });
    await until('the reconciler to start', 90_000, async () => {
      const text = await readFile(logFile, 'utf8');
      if (text.includes('engine unavailable')) throw new StopWaiting(`engine unavailable: ${await proc.tail(10)}`);
      return text.includes('reconciler started');
    });
    await recordTiming(t, 'infra: provisioner start with the rendered environment', (Date.now() - started) / 1000);
    const log = await readFile(logFile, 'utf8');
    const development = log.split('\n').filter((l) => /"level":40/.test(l) && /is not set/.test(l));
    t.same(development, [], 'no secret is left to a development default (encryption key, passphrase, signing key)');
    const key = /A bootstrap admin API key was generated[^\n]*\n\s*(\S+)/.exec(log)?.[1];
    t.ok(key, 'the first start prints the bootstrap admin key once');
    adminKey = key ?? '';
    const versions = await fetch(`${url}/v1/runtime-versions`);
    t.equal(versions.status, 200, 'it serves the public API');
    const clusters = await fetch(`${url}/v1/clusters`, { headers: { authorization: `Bearer ${key}` } });
    t.equal(clusters.status, 200, 'the printed admin key is accepted');
    await proc.stop(10_000);
  });

  await t.test(
    "the tenant lifecycle runs with the provisioner's own ServiceAccount, registered by clusters import",
    async (t) => {
      t.ok(adminKey, 'precondition: the admin key of the first start');
      // The real vcluster and Argo charts (the mirror's, linked) next to the platform ones, and
      // the runner of the real vclusters' pods.
      const tenantCharts = await prepareTenantCharts(charts, catalog);
      t.comment(`real charts from the chart mirror ${tenantCharts.mirror}: ${tenantCharts.real.join(', ')}`);
      const hostsFile = join(dir, 'hosts');
      await mkdir(join(dir, 'vclusters'), { recursive: true });
      const vclusters = new VclusterPods({
        root: admin,
        rootServer: root.server,
        rootCaPem: root.ca.certPem,
        network,
        vclusterBin: vcluster.bin,
        vclusterVersions: vcluster.versions,
        kubernetesBin: bin,
        dir: join(dir, 'vclusters'),
        hostsFile,
        log: (m) => t.comment(m),
      });
      await vclusters.start();
      cleanups.push(() => vclusters.stop());
      const pluginBin = join(dir, 'plugin-bin');
      const port = await freePort();
      const url = `http://127.0.0.1:${port}`;
      const logFile = join(dir, 'provisioner-lifecycle.log');
      // The rendered environment, and what this test environment needs on top (named):
      const testEnv = {
        PROVISIONER_CHART_REPOSITORIES: JSON.stringify({ argo: charts, vcluster: charts }),
        // The root API server listens on loopback, the vclusters on the pods' network; their
        // exported names resolve through the hosts file the provisioner sees as /etc/hosts.
        PROVISIONER_CLUSTER_ALLOWED_CIDRS: `127.0.0.0/8,${network.cidr}`,
        PROVISIONER_VCLUSTER_SERVER_TEMPLATE: VCLUSTER_SERVER_TEMPLATE,
        PROVISIONER_LEASE_TTL_SECONDS: '5',
        PROVISIONER_POLL_MS: '500',
        PROVISIONER_BACKOFF_BASE_SECONDS: '3',
        PROVISIONER_BACKOFF_CAP_SECONDS: '30',
        PROVISIONER_SHUTDOWN_GRACE_SECONDS: '5',
        PULUMI_SKIP_UPDATE_CHECK: 'true',
        PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION: 'true',
      };
      t.comment(`added for the test environment: ${Object.keys(testEnv).join(', ')}`);
      const [command, ...args] = withHostsFile(hostsFile, [
        process.execPath,
        join(REPO_ROOT, 'bin', 'provisioner.ts'),
        'serve',
      ]);
      const proc = startProcess('provisioner', command!, args, logFile, {
        env: {
          ...renderedEnv,
          ...testEnv,
          HOST: '127.0.0.1',
          PORT: String(port),
          PROVISIONER_DATA_DIR: volume,
          PATH: `${bin}:${pluginBin}:${dirname(process.execPath)}:/usr/bin:/bin`,
          HOME: volume,
        },
        cwd: volume,
      });
      cleanups.push(() => proc.stop(10_000));
      await until('provisioner /readyz', 90_000, async () => {
        if (!proc.running()) throw new StopWaiting(`provisioner exited: ${await proc.tail(20)}`);
        const res = await fetch(`${url}/readyz`, { signal: AbortSignal.timeout(3000) }).catch(() => undefined);
        return res?.status === 200;
      });

      const output = (await pulumi(['stack', 'output', 'clusters', '--show-secrets', '--json'])).stdout;
      let started = Date.now();
      const imported = await cli(url, adminKey, ['clusters', 'import', '-'], output);
      t.equal(imported.code, 0, `clusters import: ${imported.stderr}`);
      t.equal(
        imported.stdout.trim(),
        `registered ${CLUSTER} (local, capacity 50)`,
        'the import says what it registered',
      );
      const again = await cli(url, adminKey, ['clusters', 'import', '-'], output);
      t.equal(again.stdout.trim(), `unchanged ${CLUSTER}`, 'importing the same output again changes nothing');
      await recordTiming(t, 'infra: clusters import (twice)', (Date.now() - started) / 1000);

      const api = new ApiClient(url, adminKey);
      const seconds = (since: number) => (Date.now() - since) / 1000;
      started = Date.now();
      const signup = await new ApiClient(url, '').request('POST /v1/signup', {
        body: {
          organization: 'least-privilege',
          email: 'ops@least-privilege.example',
          plan: 'team',
          runtimeVersion: '1.4.1',
        },
        headers: { 'idempotency-key': `e2e-infra-${randomBytes(16).toString('hex')}` },
      });
      t.equal(signup.status, 202, 'signup accepted');
      if (!signup.ok) throw new Error(`signup: ${signup.status} ${JSON.stringify(signup.body)}`);
      const id = signup.body.tenant.id;
      const namespace = `tenant-${id}`;
      await api.waitForPhase(id, 'Ready', 5 * 60_000);
      await recordTiming(t, 'infra: signup → Ready as the provisioner ServiceAccount', seconds(started));
      t.equal((await api.tenant(id)).status.phase, 'Ready', 'signup → Ready');

      // What the ServiceAccount may and may not do, now that a tenant namespace exists.
      const authz = admin.makeApiClient(AuthorizationV1Api);
      const can = (verb: string, resource: string, ns?: string) => allowed(authz, { verb, resource, namespace: ns });
      const binding = await admin
        .makeApiClient(RbacAuthorizationV1Api)
        .readNamespacedRoleBinding({ name: TENANT_ROLE_BINDING, namespace });
      t.same(
        { role: binding.roleRef.name, subjects: binding.subjects?.map((s) => `${s.kind} ${s.namespace}/${s.name}`) },
        { role: TENANT_CLUSTER_ROLE, subjects: [`ServiceAccount ${PLATFORM_NAMESPACE}/provisioner`] },
        "the tenants program bound the tenant ClusterRole to the provisioner's ServiceAccount in the tenant's namespace",
      );
      t.ok(await can('get', 'secrets', namespace), "through it, it reads Secrets in the tenant's namespace");
      t.ok(
        await allowed(authz, { verb: 'create', resource: 'statefulsets', group: 'apps', namespace }),
        'and manages what the vcluster chart installs there',
      );
      for (const ns of ['kube-system', 'default', 'bystander', `tenant-${randomUUID()}`]) {
        t.notOk(await can('get', 'secrets', ns), `and still reads no Secret in ${ns}`);
      }
      const sa = new KubeConfig();
      sa.loadFromString((JSON.parse(output) as Array<{ kubeconfig: string }>)[0]!.kubeconfig);
      const rbacAsSa = sa.makeApiClient(RbacAuthorizationV1Api);
      const bindElsewhere = await rbacAsSa
        .createNamespacedRoleBinding({
          namespace: 'kube-system',
          body: {
            metadata: { name: TENANT_ROLE_BINDING },
            roleRef: { apiGroup: RBAC, kind: 'ClusterRole', name: TENANT_CLUSTER_ROLE },
            subjects: [{ kind: 'ServiceAccount', name: 'provisioner', namespace: PLATFORM_NAMESPACE }],
          },
          dryRun: 'All',
        })
        .then(
          () => 'created',
          (err: unknown) => String((err as { body?: unknown }).body ?? err),
        );
      t.match(
        bindElsewhere,
        /hosted-platform-provisioner-guard/,
        'binding the tenant ClusterRole in kube-system (dry run) is refused by the admission policy, though RBAC lets it create RoleBindings',
      );
      const bindAdmin = await rbacAsSa
        .createNamespacedRoleBinding({
          namespace,
          body: {
            metadata: { name: 'escalation' },
            roleRef: { apiGroup: RBAC, kind: 'ClusterRole', name: 'cluster-admin' },
            subjects: [{ kind: 'ServiceAccount', name: 'provisioner', namespace: PLATFORM_NAMESPACE }],
          },
          dryRun: 'All',
        })
        .then(
          () => 'created',
          (err: unknown) => String((err as { body?: unknown }).body ?? err),
        );
      t.match(
        bindAdmin,
        /forbidden/i,
        "binding cluster-admin even in the tenant's own namespace (dry run) is refused by RBAC (bind only on the tenant ClusterRole)",
      );
      // A namespace of someone else's (kube-system and default cannot be deleted by anyone).
      await admin.makeApiClient(CoreV1Api).createNamespace({ body: { metadata: { name: 'bystander' } } });
      const refusal = await sa
        .makeApiClient(CoreV1Api)
        .deleteNamespace({ name: 'bystander', dryRun: 'All' })
        .then(
          () => 'deleted',
          (err: unknown) => String((err as { body?: unknown }).body ?? err),
        );
      t.match(
        refusal,
        /hosted-platform-provisioner-guard/,
        "deleting a namespace that is not a tenant's (dry run) is refused by the admission policy, though RBAC lets it delete namespaces",
      );
      const relabel = await sa
        .makeApiClient(CoreV1Api)
        .patchNamespace({
          name: 'default',
          body: [{ op: 'add', path: '/metadata/labels/x', value: 'y' }],
          dryRun: 'All',
        })
        .then(
          () => 'patched',
          (err: unknown) => String((err as { body?: unknown }).body ?? err),
        );
      t.match(relabel, /hosted-platform-provisioner-guard/, 'and so is relabelling another namespace');
      const write = await sa
        .makeApiClient(CoreV1Api)
        .createNamespacedConfigMap({ namespace: 'kube-system', body: { metadata: { name: 'x' } }, dryRun: 'All' })
        .then(
          () => 'created',
          (err: unknown) => String((err as { body?: unknown }).body ?? err),
        );
      t.match(
        write,
        /cannot create resource .{1,2}configmaps.{1,2} in API group .* in the namespace .{1,2}kube-system/,
        'creating a ConfigMap in kube-system (dry run) is refused by RBAC already: no grant on ConfigMaps outside tenant namespaces',
      );

      for (const [verb, phase, args] of [
        ['upgrade', 'Ready', ['tenants', 'upgrade', id, '1.5.0']],
        ['suspend', 'Suspended', ['tenants', 'suspend', id]],
        ['resume', 'Ready', ['tenants', 'resume', id]],
      ] as const) {
        started = Date.now();
        const r = await cli(url, adminKey, [...args]);
        t.equal(r.code, 0, `${verb} accepted: ${r.stderr.trim()}`);
        // Done, not only taken up: an upgrade or a resume installs a real vcluster's pods again, so
        // the bound is the tier's per-operation one, as in lifecycle.test.ts.
        await until(`${verb} to be done`, PROVISION_TIMEOUT, async () => {
          const x = await api.tenant(id);
          return x.generation === x.status.observedGeneration && x.status.phase === phase;
        });
        await recordTiming(t, `infra: ${verb} as the provisioner ServiceAccount`, seconds(started));
        t.equal((await api.tenant(id)).status.phase, phase, `${verb} → ${phase}`);
      }
      t.equal((await api.tenant(id)).status.runtimeVersion, '1.5.0', 'the tenant runs 1.5.0 after the upgrade');
      started = Date.now();
      const d = await cli(url, adminKey, ['tenants', 'delete', id]);
      t.equal(d.code, 0, 'delete accepted');
      await api.waitForPhase(id, 'Deleted', 5 * 60_000);
      await recordTiming(t, 'infra: delete as the provisioner ServiceAccount', seconds(started));
      t.notOk(
        await exists(() => admin.makeApiClient(CoreV1Api).readNamespace({ name: namespace })),
        "the tenant's namespace is gone",
      );
      const lifecycleLog = await readFile(logFile, 'utf8');
      t.same(
        lifecycleLog.split('\n').filter((l) => /not allowed to list|"statusCode":403|HTTP 403/.test(l)),
        [],
        'nothing the provisioner did (engine, root-cluster watch, probe) was refused by the API server',
      );
      await proc.stop(10_000);
    },
  );

  await t.test('pulumi destroy leaves nothing of the platform behind', async (t) => {
    const started = Date.now();
    await pulumi(['destroy', '--yes', '--skip-preview'], { timeoutMs: 10 * 60_000 });
    await recordTiming(t, 'infra: pulumi destroy', (Date.now() - started) / 1000);
    const core = admin.makeApiClient(CoreV1Api);
    const rbac = admin.makeApiClient(RbacAuthorizationV1Api);
    const names = new Set((await core.listNamespace()).items.map((n) => n.metadata!.name!));
    for (const ns of [
      PLATFORM_NAMESPACE,
      PLATFORM_CHARTS.ingressNginx.namespace,
      PLATFORM_CHARTS.certManager.namespace,
      PLATFORM_CHARTS.cnpg.namespace,
    ]) {
      t.notOk(names.has(ns), `namespace ${ns} is gone`);
    }
    const clusterRoles = (await rbac.listClusterRole()).items.map((r) => r.metadata!.name!);
    const bindings = (await rbac.listClusterRoleBinding()).items.map((r) => r.metadata!.name!);
    for (const name of ['hosted-platform:provisioner', 'ingress-nginx']) {
      t.notOk(clusterRoles.includes(name), `ClusterRole ${name} is gone`);
      t.notOk(bindings.includes(name), `ClusterRoleBinding ${name} is gone`);
    }
    t.notOk(clusterRoles.includes(TENANT_CLUSTER_ROLE), `ClusterRole ${TENANT_CLUSTER_ROLE} is gone`);
    const admission = admin.makeApiClient(AdmissionregistrationV1Api);
    t.same(
      (await admission.listValidatingAdmissionPolicy()).items.map((p) => p.metadata!.name),
      [],
      'no ValidatingAdmissionPolicy is left',
    );
    t.same(
      (await admission.listValidatingAdmissionPolicyBinding()).items.map((p) => p.metadata!.name),
      [],
      'no ValidatingAdmissionPolicyBinding is left',
    );
    t.notOk(
      await exists(() => admin.makeApiClient(SchedulingV1Api).readPriorityClass({ name: 'tenant-control-plane' })),
      'PriorityClass tenant-control-plane is gone',
    );
    t.notOk(
      await exists(() => admin.makeApiClient(NetworkingV1Api).readIngressClass({ name: 'nginx' })),
      'IngressClass nginx is gone',
    );
    const crds = (await admin.makeApiClient(ApiextensionsV1Api).listCustomResourceDefinition()).items.map(
      (c) => c.metadata!.name!,
    );
    t.same(
      crds.sort(),
      ['certificates.cert-manager.io', 'clusterissuers.cert-manager.io', 'issuers.cert-manager.io'],
      "only cert-manager's CRDs stay, kept on purpose (crds.keep: deleting them would delete every Certificate)",
    );
    const state = JSON.parse((await pulumi(['stack', 'export'])).stdout) as {
      deployment: { resources?: StateResource[] };
    };
    t.same(state.deployment.resources ?? [], [], 'the stack holds no resource');
  });
}

/**
 * Writes `status.loadBalancer.ingress` (127.0.0.1) into every Ingress of `namespace` that has none,
 * every 500 ms until stopped, as an ingress controller would.
 */
function ingressStatusStandIn(kc: KubeConfig, namespace: string): () => void {
  const api = kc.makeApiClient(NetworkingV1Api);
  let stopped = false;
  void (async () => {
    while (!stopped) {
      try {
        for (const ing of (await api.listNamespacedIngress({ namespace })).items) {
          if (ing.status?.loadBalancer?.ingress?.length) continue;
          ing.status = { loadBalancer: { ingress: [{ ip: '127.0.0.1' }] } };
          await api.replaceNamespacedIngressStatus({ name: ing.metadata!.name!, namespace, body: ing });
        }
      } catch {
        // The namespace does not exist yet, or the object changed meanwhile: next round.
      }
      await new Promise((resolve) => setTimeout(resolve, 500));
    }
  })();
  return () => {
    stopped = true;
  };
}

/** What a SubjectAccessReview asks about. */
interface Access {
  verb: string;
  resource: string;
  group?: string;
  namespace?: string | undefined;
  name?: string;
}

/** `get secrets in kube-system`, `bind clusterroles.rbac.authorization.k8s.io/cluster-admin`. */
function describe(a: Access): string {
  return `${a.verb} ${a.group ? `${a.resource}.${a.group}` : a.resource}${a.name ? `/${a.name}` : ''}${a.namespace ? ` in ${a.namespace}` : ' (cluster-wide)'}`;
}

/** A SubjectAccessReview for the provisioner's ServiceAccount. */
async function allowed(authz: AuthorizationV1Api, attrs: Access): Promise<boolean> {
  const r = await authz.createSubjectAccessReview({
    body: {
      apiVersion: 'authorization.k8s.io/v1',
      kind: 'SubjectAccessReview',
      spec: {
        user: PROVISIONER_SA,
        groups: ['system:serviceaccounts', `system:serviceaccounts:${PLATFORM_NAMESPACE}`, 'system:authenticated'],
        resourceAttributes: {
          verb: attrs.verb,
          resource: attrs.resource,
          group: attrs.group ?? '',
          ...(attrs.namespace ? { namespace: attrs.namespace } : {}),
          ...(attrs.name ? { name: attrs.name } : {}),
        },
      },
    },
  });
  return r.status?.allowed === true;
}

interface StateResource {
  type: string;
  external?: boolean;
  outputs: { apiVersion: string; kind: string; metadata: { name: string; namespace?: string } };
}

/**
 * A folder holding the root project exactly as at the repository root (Pulumi.yaml copied, the
 * program's folder and package linked), so the stack's config file and state stay out of the
 * clone; the stack configured like Pulumi.example.yaml for the e2e root cluster.
 */
async function preparePulumiProject(
  dir: string,
  provider: string,
  bin: string,
  root: KubeControlPlane,
  charts: string,
): Promise<Pulumi> {
  const project = join(dir, 'project');
  await mkdir(project, { recursive: true });
  await copyFile(join(REPO_ROOT, 'Pulumi.yaml'), join(project, 'Pulumi.yaml'));
  for (const entry of ['infra', 'package.json', 'node_modules']) {
    await symlink(join(REPO_ROOT, entry), join(project, entry));
  }
  const home = join(dir, 'pulumi-home');
  await preparePulumiHome(home, provider);
  const pluginBin = join(dir, 'plugin-bin');
  await mkdir(pluginBin, { recursive: true });
  await symlink(provider, join(pluginBin, 'pulumi-resource-kubernetes'));
  await mkdir(join(dir, 'state'), { recursive: true });
  const env: Record<string, string> = {
    HOME: process.env.HOME ?? dir,
    PATH: `${bin}:${pluginBin}:${dirname(process.execPath)}:${process.env.PATH ?? '/usr/bin:/bin'}`,
    PULUMI_HOME: home,
    PULUMI_BACKEND_URL: `file://${join(dir, 'state')}`,
    PULUMI_CONFIG_PASSPHRASE: randomBytes(16).toString('hex'),
    PULUMI_SKIP_UPDATE_CHECK: 'true',
    PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION: 'true',
    // The ambient kubeconfig is not used: the cluster's kubeconfig is in stack config.
    KUBECONFIG: join(dir, 'no-ambient-kubeconfig'),
  };
  const pulumi: Pulumi = (args, opts = {}) =>
    run(join(bin, 'pulumi'), [...args, '--stack', STACK, '--non-interactive'], {
      env,
      cwd: project,
      timeoutMs: opts.timeoutMs ?? 180_000,
      ...(opts.input !== undefined ? { input: opts.input } : {}),
    });
  const c = (key: string) => `${PROJECT}:${key}`;
  await writeFile(
    join(project, `Pulumi.${STACK}.yaml`),
    [
      'config:',
      `  ${c('provisionerImage')}: hosted-runtimes/provisioner:e2e`,
      `  ${c('clusterIssuer')}: letsencrypt`,
      `  ${c('database')}:`,
      '    mode: cnpg',
      '    instances: 2',
      '    storage: 1Gi',
      `  ${c('clusters')}:`,
      `    - name: ${CLUSTER}`,
      '      region: local',
      '      labels: { tier: e2e }',
      '      capacity: 50',
      `      apiServer: ${root.server}`,
      '      ingressHost: gitops.e2e.example.test',
      `  ${c('chartRepositories')}:`,
      `    ingressNginx: ${charts}`,
      `    jetstack: ${charts}`,
      `    cnpg: ${charts}`,
      '',
    ].join('\n'),
  );
  await run(join(bin, 'pulumi'), ['stack', 'init', STACK, '--secrets-provider', 'passphrase', '--non-interactive'], {
    env,
    cwd: project,
  });
  const signing = generateKeyPairSync('ed25519').privateKey.export({ format: 'pem', type: 'pkcs8' }).toString();
  const secrets: Array<[string, string]> = [
    ['encryptionKey', randomBytes(32).toString('base64')],
    ['requestSigningKey', signing],
    ['pulumiPassphrase', randomBytes(24).toString('hex')],
  ];
  // Values on stdin, as `pulumi config set` reads them when none is given.
  for (const [key, value] of secrets) await pulumi(['config', 'set', '--secret', key], { input: value });
  await pulumi(['config', 'set', '--secret', '--path', `kubeconfigs.${CLUSTER}`], { input: root.kubeconfig });
  return pulumi;
}

/** A container's environment as the kubelet would give it: values with $(VAR) references, Secrets, ConfigMaps, the downward API. */
async function resolveEnv(kc: KubeConfig, namespace: string, vars: V1EnvVar[]): Promise<Record<string, string>> {
  const core = kc.makeApiClient(CoreV1Api);
  const out: Record<string, string> = {};
  for (const v of vars) {
    if (v.value !== undefined) {
      out[v.name] = v.value.replace(/\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g, (m, name: string) => out[name] ?? m);
    } else if (v.valueFrom?.secretKeyRef) {
      const ref = v.valueFrom.secretKeyRef;
      const secret = await core.readNamespacedSecret({ name: ref.name!, namespace });
      const data = secret.data?.[ref.key];
      if (data === undefined) throw new Error(`${v.name}: Secret ${ref.name} has no key ${ref.key}`);
      out[v.name] = Buffer.from(data, 'base64').toString('utf8');
    } else if (v.valueFrom?.configMapKeyRef) {
      const ref = v.valueFrom.configMapKeyRef;
      const map = await core.readNamespacedConfigMap({ name: ref.name!, namespace });
      const data = map.data?.[ref.key];
      if (data === undefined) throw new Error(`${v.name}: ConfigMap ${ref.name} has no key ${ref.key}`);
      out[v.name] = data;
    } else if (v.valueFrom?.fieldRef?.fieldPath === 'status.podIP') {
      out[v.name] = '127.0.0.1'; // the pod's address: loopback here
    } else {
      throw new Error(`${v.name}: a source the test does not resolve: ${JSON.stringify(v.valueFrom)}`);
    }
  }
  return out;
}
