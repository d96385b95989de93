/**
 * The bootstrap Job's script and the removal of what a bootstrap created, against a real
 * kube-apiserver from the toolchain (with the service-account issuer and signing-key flags, so
 * TokenRequest works) playing the tenant's cluster, and the provisioner on real HTTP with real
 * Postgres (the API in-process, no engine).
 *
 * The script: the Job manifest the API answers is applied with an admin kubeconfig (as `kubectl
 * apply` would; the Job itself needs a kubelet, so the test plays the pod: a TokenRequest for
 * the registration's own account argocd-manager/argocd-manager-<id> and the API server's CA written to a directory, SA_DIR) and the
 * exact script text of the Job's container is run with `node -e` and the container's environment
 * from the manifest. It registers the cluster (exit 0, the registration printed), which then
 * answers the health probe; run again it exits 1 naming the used token (410); a REDEEM_URL
 * nothing listens at, one that is not the redeem endpoint, and missing ServiceAccount files each
 * exit 1 with what to check.
 *
 * The removal: `provisioner managed-clusters remove --remove-rbac` without a kubeconfig names
 * exactly the RBAC objects the API's DELETE leaves (checked against the cluster) and the commands
 * removing them; with the tenant's kubeconfig it deletes every object labelled for that
 * registration (checked by listing every kind) and none of another registration's; with a
 * kubeconfig that may not delete, it names each object left with its kubectl command and exits 1;
 * after the registration is gone, it still removes what is labelled for it. A cluster-wide
 * registration's ClusterRole and ClusterRoleBinding go too; an older bootstrap's objects without
 * the registration's labels are found by name, and one labelled for another registration is kept.
 * For a tenant's own ServiceAccount, `remove` names the revocation of its bound tokens and no
 * bootstrap leftovers.
 */
import t from 'tap';
import { execFile } from 'node:child_process';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import {
  CoreV1Api,
  KubernetesObjectApi,
  PatchStrategy,
  RbacAuthorizationV1Api,
  type KubernetesObject,
  type V1PolicyRule,
} from '@kubernetes/client-node';
import { parseAllDocuments } from 'yaml';
import { main } from '../../provisioner/cli/main.ts';
import {
  REGISTRATION_KINDS,
  bootstrapAccount,
  registrationSelector,
} from '../../provisioner/managed-clusters/bootstrap.ts';
import { createTestApi, type TestApi } from '../helpers/api.ts';
import { startApiServers } from '../../sandbox/control-plane.ts';
import { freePort, until } from '../../sandbox/processes.ts';

t.setTimeout(10 * 60_000);

const servers = await startApiServers('hrt-e2e-mc-bootstrap-', ['own']);
const own = servers.servers.own;
const dir = servers.dir;
// The manifest's REDEEM_URL is the public URL: the API listens where it says.
const port = await freePort();
const api: TestApi = await createTestApi({
  env: {
    PROVISIONER_MANAGED_CLUSTER_ALLOWED_CIDRS: '127.0.0.0/8',
    PROVISIONER_MANAGED_CLUSTER_PROBE_SECONDS: '1',
    PROVISIONER_PUBLIC_URL: `http://127.0.0.1:${port}`,
  },
});
const url = await api.app.listen({ port, host: '127.0.0.1' });
t.teardown(async () => {
  await api.close();
  await servers.stop();
});

const core = own.kc.makeApiClient(CoreV1Api);
const rbac = own.kc.makeApiClient(RbacAuthorizationV1Api);
const objects = KubernetesObjectApi.makeApiClient(own.kc);
for (const name of ['apps', 'web']) await core.createNamespace({ body: { metadata: { name } } });
const adminKubeconfig = join(dir, 'tenant.kubeconfig');
await writeFile(adminKubeconfig, own.kubeconfig, { mode: 0o600 });

/** The fields of the API's answers the test reads. */
interface Answer {
  bootstrap?: { token: string; job: string };
  namespaces?: string[];
  tokenRotation?: { serviceAccount: string } | null;
  conditions?: Array<{ type: string; status: string; reason: string }>;
}

async function http(method: string, path: string, key: string, body?: unknown) {
  const res = await fetch(url + path, {
    method,
    headers: { authorization: `Bearer ${key}`, ...(body ? { 'content-type': 'application/json' } : {}) },
    ...(body ? { body: JSON.stringify(body) } : {}),
  });
  const text = await res.text();
  return { status: res.status, text, json: () => JSON.parse(text) as Answer };
}

async function cli(args: string[]): Promise<{ code: number; out: string; err: string }> {
  const out: string[] = [];
  const err: string[] = [];
  const code = await main(['--url', url, ...args], {
    out: (s) => out.push(s),
    err: (s) => err.push(s),
    env: {},
  });
  return { code, out: out.join('\n'), err: err.join('\n') };
}

/** `provisioner managed-clusters remove TENANT NAME …flags` with that tenant's API key. */
function removeCli(
  apiKey: string,
  tenantId: string,
  name: string,
  ...flags: string[]
): Promise<{ code: number; out: string; err: string }> {
  return cli(['--token', apiKey, 'managed-clusters', 'remove', tenantId, name, ...flags]);
}

/** Every object of the kinds a bootstrap creates that the selector matches, as `Kind ns/name`. */
async function labelled(selector: string): Promise<string[]> {
  const found: string[] = [];
  for (const { apiVersion, kind } of REGISTRATION_KINDS) {
    const list = await objects.list(apiVersion, kind, undefined, undefined, undefined, undefined, undefined, selector);
    for (const o of list.items)
      found.push(`${kind} ${o.metadata?.namespace ? `${o.metadata.namespace}/` : ''}${o.metadata?.name}`);
  }
  return found.sort();
}

// --- The Job's script ---------------------------------------------------------------------------

type Container = {
  command: string[];
  env: Array<{ name: string; value?: string; valueFrom?: { secretKeyRef: { name: string; key: string } } }>;
};
type ManifestDoc = KubernetesObject & {
  stringData?: Record<string, string>;
  spec?: { template: { spec: { serviceAccountName: string; containers: Container[] } } };
};

/** A bootstrap issued through the API: its manifest's documents, the Job's container and environment. */
async function issueBootstrap(tenant: { tenantId: string; apiKey: string }, name: string, bootstrap: object) {
  const res = await http('POST', `/v1/tenants/${tenant.tenantId}/managed-clusters`, tenant.apiKey, {
    name,
    bootstrap,
  });
  if (res.status !== 201) throw new Error(`bootstrap not issued: ${res.status} ${res.text}`);
  const issued = res.json().bootstrap!;
  const docs = parseAllDocuments(issued.job).map((d) => d.toJS() as ManifestDoc);
  const job = docs.find((d) => d.kind === 'Job')!;
  const container = job.spec!.template.spec.containers[0]!;
  // The container's environment as the kubelet gives it (the secretKeyRef read from the manifest's Secret).
  const env: Record<string, string> = Object.fromEntries(
    container.env.map((e) => {
      if (e.value !== undefined) return [e.name, e.value];
      const ref = e.valueFrom!.secretKeyRef;
      const secret = docs.find((d) => d.kind === 'Secret' && d.metadata?.name === ref.name);
      return [e.name, secret!.stringData![ref.key]!];
    }),
  );
  return { issued, docs, job, container, env };
}

/** `kubectl apply` of a manifest, the Job aside (no kubelet runs it here). */
async function applyManifest(docs: ManifestDoc[]): Promise<void> {
  for (const d of docs) {
    if (d.kind === 'Job') continue;
    try {
      await objects.create(d);
    } catch (err) {
      if ((err as { code?: number }).code !== 409) throw err;
      await objects.patch(d, undefined, undefined, undefined, undefined, PatchStrategy.MergePatch);
    }
  }
}

/** The pod's mounted ServiceAccount files in a directory: a TokenRequest's token and the API server's CA. */
async function podServiceAccount(saDir: string, account: string): Promise<string> {
  const token = (
    await core.createNamespacedServiceAccountToken({
      name: account,
      namespace: 'argocd-manager',
      body: { spec: { audiences: [], expirationSeconds: 3600 } },
    })
  ).status!.token!;
  await mkdir(saDir, { recursive: true });
  await writeFile(join(saDir, 'token'), token);
  await writeFile(join(saDir, 'ca.crt'), own.ca.certPem);
  return token;
}

/** Runs the Job's command (its `node` being this Node.js) with the Job's environment and `extra`. */
function runScript(
  of: { container: Container; env: Record<string, string> },
  extra: Record<string, string>,
): Promise<{ code: number; stdout: string; stderr: string }> {
  const [command, ...args] = of.container.command;
  if (command !== 'node') throw new Error(`the Job runs ${command}, not node`);
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      args,
      { env: { PATH: process.env.PATH ?? '', ...of.env, ...extra }, timeout: 90_000 },
      (err, stdout, stderr) => {
        const code = err ? (typeof err.code === 'number' ? err.code : -1) : 0;
        resolve({ code, stdout, stderr });
      },
    );
  });
}

const tenantA = await api.signup();
const accountA = bootstrapAccount({ tenantId: tenantA.tenantId, name: 'job-a' });
const bootA = await issueBootstrap(tenantA, 'job-a', { namespaces: ['apps'], server: own.server });
const { issued, docs, job, container } = bootA;
const jobEnv = bootA.env;
const saDir = join(dir, 'serviceaccount');
const runJob = (extra: Record<string, string>) => runScript(bootA, extra);

t.test('the Job manifest, applied, and its script run as the pod would: the cluster is registered', async (t) => {
  t.same(container.command.slice(0, 2), ['node', '-e'], 'the Job runs a script with node -e');
  t.match(accountA, /^argocd-manager-[0-9a-f]{10}$/, "the registration's own account name");
  t.equal(job.spec!.template.spec.serviceAccountName, accountA, 'as the bootstrap account');
  t.notOk('SA_DIR' in jobEnv, 'the manifest leaves the ServiceAccount directory at its in-pod default');
  t.equal(jobEnv.REDEEM_URL, `${url}/v1/managed-clusters/redeem`, 'it redeems at the public URL');
  t.equal(jobEnv.SERVER, own.server, 'for the server given');

  await applyManifest(docs);
  const selectorA = registrationSelector({ tenantId: tenantA.tenantId, name: 'job-a' });
  t.same(
    await labelled(selectorA),
    [
      `Role apps/${accountA}`,
      `Role argocd-manager/${accountA}`,
      `RoleBinding apps/${accountA}`,
      `RoleBinding argocd-manager/${accountA}`,
      `Secret argocd-manager/${accountA}-bootstrap`,
      `ServiceAccount argocd-manager/${accountA}`,
    ],
    "every object applied but the Namespace carries the registration's labels",
  );

  const token = await podServiceAccount(saDir, accountA);

  const run = await runJob({ SA_DIR: saDir });
  t.equal(run.code, 0, `the script exits 0 (stderr: ${run.stderr})`);
  t.match(
    run.stdout,
    /^registered managed cluster job-a \(https:\/\/127\.0\.0\.1:\d+, Kubernetes v1\.\d+[^,]*, apps\); operation [0-9a-f-]{36} writes it into the tenant's Argo CD\n$/,
    'it prints the registration',
  );
  for (const secret of [token, issued.token])
    t.notOk(run.stdout.includes(secret) || run.stderr.includes(secret), 'and no token');

  const got = await http('GET', `/v1/tenants/${tenantA.tenantId}/managed-clusters/job-a`, tenantA.apiKey);
  t.equal(got.status, 200, 'the registration exists');
  t.same(got.json().namespaces, ['apps'], 'for the listed namespace');
  t.equal(got.json().tokenRotation?.serviceAccount, `argocd-manager/${accountA}`, 'as the bootstrap account');
  const probed = await until('a probe of job-a', 30_000, async () => {
    const r = await http('GET', `/v1/tenants/${tenantA.tenantId}/managed-clusters/job-a`, tenantA.apiKey);
    const c = r.json().conditions?.find((x) => x.type === 'Reachable');
    return c?.reason === 'Responding' && c;
  });
  t.equal(probed.status, 'True', 'and the health probe reaches the cluster with the stored credentials');
});

t.test('the script run again: exit 1 naming the used bootstrap token (single-use, 410)', async (t) => {
  const again = await runJob({ SA_DIR: saDir });
  t.equal(again.code, 1, 'exit 1');
  t.equal(again.stdout, '', 'nothing on stdout');
  t.match(
    again.stderr,
    /^bootstrap failed: the registration was refused: http:\/\/127\.0\.0\.1:\d+\/v1\/managed-clusters\/redeem answered HTTP 410 BOOTSTRAP_TOKEN_USED: the bootstrap token was already redeemed at .*single-use; ask for a new one\n$/,
    'stderr says the token was used and what to do',
  );
});

t.test('a wrong REDEEM_URL or missing ServiceAccount files: exit 1 saying what to check', async (t) => {
  const nothing = `http://127.0.0.1:${await freePort()}/v1/managed-clusters/redeem`;
  const refused = await runJob({ SA_DIR: saDir, REDEEM_URL: nothing });
  t.equal(refused.code, 1, 'nothing listening: exit 1');
  t.match(
    refused.stderr,
    `bootstrap failed: cannot reach ${nothing}: connect ECONNREFUSED`,
    'stderr names the URL and the network error',
  );
  t.match(refused.stderr, /check REDEEM_URL/, 'and what to check');
  t.notMatch(refused.stderr, /\n\s+at /, 'without a stack trace');

  const wrongPath = await runJob({ SA_DIR: saDir, REDEEM_URL: `${url}/v1/managed-cluster/redeem` });
  t.equal(wrongPath.code, 1, 'a URL that is not the redeem endpoint: exit 1');
  t.match(
    wrongPath.stderr,
    /answered HTTP 404 ROUTE_NOT_FOUND: .*not the service's redeem endpoint \(check REDEEM_URL: it ends in \/v1\/managed-clusters\/redeem\)/,
    'stderr says the URL is not the redeem endpoint',
  );

  const empty = join(dir, 'no-serviceaccount');
  await mkdir(empty, { recursive: true });
  const noFiles = await runJob({ SA_DIR: empty });
  t.equal(noFiles.code, 1, 'no ServiceAccount files: exit 1');
  t.match(
    noFiles.stderr,
    `bootstrap failed: cannot read the pod's ServiceAccount ca.crt at ${empty}/ca.crt (ENOENT): the Job must run as its ServiceAccount (argocd-manager/${accountA}) with its token mounted`,
    'stderr names the file and the account',
  );
});

// --- Removal of what the bootstrap created --------------------------------------------------------

const tenantB = await api.signup();
const selectorA = registrationSelector({ tenantId: tenantA.tenantId, name: 'job-a' });
const selectorB = registrationSelector({ tenantId: tenantB.tenantId, name: 'edge' });
const accountB = bootstrapAccount({ tenantId: tenantB.tenantId, name: 'edge' });

t.test('remove --remove-rbac without a kubeconfig names what the API leaves on the cluster', async (t) => {
  // Another tenant connects the same cluster with the CLI (its own registration, namespace web).
  const connected = await cli([
    '--token',
    tenantB.apiKey,
    'managed-clusters',
    'connect',
    tenantB.tenantId,
    'edge',
    '--kubeconfig',
    adminKubeconfig,
    '--namespaces',
    'web',
  ]);
  t.equal(connected.code, 0, `connected (${connected.err})`);
  t.same(
    await labelled(selectorB),
    [
      `Role argocd-manager/${accountB}`,
      `Role web/${accountB}`,
      `RoleBinding argocd-manager/${accountB}`,
      `RoleBinding web/${accountB}`,
      `ServiceAccount argocd-manager/${accountB}`,
    ],
    'connect creates its own account and RBAC, labelled with the registration',
  );

  const removed = await removeCli(tenantB.apiKey, tenantB.tenantId, 'edge', '--remove-rbac');
  t.equal(removed.code, 0, `removed (${removed.err})`);
  t.match(removed.out, `ServiceAccount argocd-manager/${accountB} deleted`, 'the API revoked the account');
  const left = await labelled(selectorB);
  t.same(
    left,
    [`Role argocd-manager/${accountB}`, `RoleBinding argocd-manager/${accountB}`, `RoleBinding web/${accountB}`],
    "on the cluster: the bindings and the account's own Role (the Role in web is gone)",
  );
  t.match(
    removed.out,
    [
      'left on the cluster (the account cannot delete its RoleBindings once their Roles are gone; they grant nothing without them):',
      `  RoleBinding argocd-manager/${accountB}`,
      `  Role argocd-manager/${accountB}`,
      `  RoleBinding web/${accountB}`,
      'remove them with your own credentials for the cluster:',
      `  provisioner managed-clusters remove ${tenantB.tenantId} edge --remove-rbac --kubeconfig FILE`,
      'or:',
      `  kubectl -n argocd-manager delete rolebinding ${accountB}`,
      `  kubectl -n argocd-manager delete role ${accountB}`,
      `  kubectl -n web delete rolebinding ${accountB}`,
    ].join('\n'),
    'the output names exactly those objects and the commands removing them',
  );
  const asJson = JSON.parse(
    (
      await cli([
        '--token',
        tenantB.apiKey,
        '--json',
        'managed-clusters',
        'remove',
        tenantB.tenantId,
        'edge',
        '--remove-rbac',
      ])
    ).out,
  ) as { removed?: boolean };
  t.equal(asJson.removed, false, 'a second removal: nothing to remove');
});

t.test('remove --remove-rbac --kubeconfig deletes every object of the registration, none of another', async (t) => {
  const beforeB = await labelled(selectorB);
  // A viewer that may list but not delete: each object is named with the command that deletes it.
  await core.createNamespacedServiceAccount({ namespace: 'default', body: { metadata: { name: 'viewer' } } });
  await rbac.createClusterRole({
    body: {
      metadata: { name: 'viewer' },
      rules: [{ apiGroups: ['', 'rbac.authorization.k8s.io', 'batch'], resources: ['*'], verbs: ['get', 'list'] }],
    },
  });
  await rbac.createClusterRoleBinding({
    body: {
      metadata: { name: 'viewer' },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'viewer' },
      subjects: [{ kind: 'ServiceAccount', name: 'viewer', namespace: 'default' }],
    },
  });
  const viewerToken = (
    await core.createNamespacedServiceAccountToken({
      name: 'viewer',
      namespace: 'default',
      body: { spec: { audiences: [], expirationSeconds: 3600 } },
    })
  ).status!.token!;
  const viewerKubeconfig = join(dir, 'viewer.kubeconfig');
  const kc = JSON.parse(own.kubeconfig) as { users: Array<{ user: Record<string, string> }> };
  kc.users[0]!.user = { token: viewerToken };
  await writeFile(viewerKubeconfig, JSON.stringify(kc), { mode: 0o600 });

  const denied = await removeCli(
    tenantA.apiKey,
    tenantA.tenantId,
    'job-a',
    '--remove-rbac',
    '--kubeconfig',
    viewerKubeconfig,
  );
  t.equal(denied.code, 1, 'objects it could not delete: exit 1');
  t.match(denied.out, /removing managed cluster job-a: operation /, 'the registration was removed');
  t.match(denied.out, 'NOT deleted (finish with your own credentials):', 'what is left is named');
  t.match(
    denied.out,
    new RegExp(
      ` {2}RoleBinding apps/${accountA}: .*forbidden.*\n {4}kubectl --kubeconfig \\S+viewer\\.kubeconfig -n apps delete rolebinding ${accountA}\n`,
    ),
    'each with the error and its kubectl command',
  );
  // What the API's DELETE leaves: the bindings, the account's own Role and the Secret (its own
  // account, untouched by the other registration's removal, deleted the Role in apps and itself).
  const leftA = await labelled(selectorA);
  t.same(
    leftA,
    [
      `Role argocd-manager/${accountA}`,
      `RoleBinding apps/${accountA}`,
      `RoleBinding argocd-manager/${accountA}`,
      `Secret argocd-manager/${accountA}-bootstrap`,
    ],
    'the objects the API could not delete are still there',
  );
  t.match(
    denied.out,
    `ServiceAccount argocd-manager/${accountA} deleted`,
    "the API revoked the registration's account",
  );
  for (const o of leftA) t.match(denied.out, `  ${o}: `, `${o} is named as not deleted`);

  // The registration is gone; the tenant's own kubeconfig removes what is labelled for it.
  const removed = await removeCli(
    tenantA.apiKey,
    tenantA.tenantId,
    'job-a',
    '--remove-rbac',
    '--kubeconfig',
    adminKubeconfig,
  );
  t.equal(removed.code, 0, `removed (${removed.err})`);
  t.match(removed.out, /no managed cluster job-a: nothing to remove/, 'the registration was removed before');
  t.match(removed.out, `deleted on the cluster (${selectorA}):`, 'the output lists what it deleted');
  for (const o of leftA) t.match(removed.out, `  ${o}\n`, `including ${o}`);
  t.same(await labelled(selectorA), [], 'nothing labelled for the registration is left on the cluster, of any kind');
  t.same(await labelled(selectorB), beforeB, "another registration's objects are untouched");
  t.match(removed.out, 'namespace argocd-manager kept', 'the shared namespace is kept, and said so');
  await core.readNamespace({ name: 'argocd-manager' });

  const again = await removeCli(
    tenantA.apiKey,
    tenantA.tenantId,
    'job-a',
    '--remove-rbac',
    '--kubeconfig',
    adminKubeconfig,
  );
  t.equal(again.code, 0, 'idempotent');
  t.match(
    again.out,
    `nothing on the cluster belongs to managed cluster job-a (${selectorA})`,
    'nothing left to delete',
  );

  // The other registration's leftovers, with its tenant's kubeconfig.
  const cleanB = await removeCli(
    tenantB.apiKey,
    tenantB.tenantId,
    'edge',
    '--remove-rbac',
    '--kubeconfig',
    adminKubeconfig,
  );
  t.equal(cleanB.code, 0, `removed (${cleanB.err})`);
  t.same(await labelled(selectorB), [], "and the other registration's leftovers are gone too");
});

t.test('a cluster-wide registration: its ClusterRole and ClusterRoleBinding go too', async (t) => {
  const tenantD = await api.signup();
  const bootD = await issueBootstrap(tenantD, 'wide', { clusterWide: true, server: own.server });
  await applyManifest(bootD.docs);
  const selectorD = registrationSelector({ tenantId: tenantD.tenantId, name: 'wide' });
  const accountD = bootstrapAccount({ tenantId: tenantD.tenantId, name: 'wide' });
  t.same(
    (await labelled(selectorD)).filter((o) => o.startsWith('Cluster')),
    [`ClusterRole ${accountD}`, `ClusterRoleBinding ${accountD}`],
    'the manifest created the ClusterRole and its binding, labelled',
  );
  const wideDir = join(dir, 'serviceaccount-wide');
  await podServiceAccount(wideDir, accountD);
  const run = await runScript(bootD, { SA_DIR: wideDir });
  t.equal(run.code, 0, `the script registered it (stderr: ${run.stderr})`);
  t.match(run.stdout, /^registered managed cluster wide \(.*, cluster-wide\); operation /, 'cluster-wide');

  const removed = await removeCli(
    tenantD.apiKey,
    tenantD.tenantId,
    'wide',
    '--remove-rbac',
    '--kubeconfig',
    adminKubeconfig,
  );
  t.equal(removed.code, 0, `removed (${removed.err})`);
  t.match(removed.out, `  ClusterRoleBinding ${accountD}\n`, 'the ClusterRoleBinding is listed as deleted');
  t.same(await labelled(selectorD), [], 'nothing labelled for the registration is left, cluster-scoped kinds included');
  const bindings = await rbac.listClusterRoleBinding();
  t.notOk(
    bindings.items.some((b) => b.metadata?.name === accountD),
    `no ClusterRoleBinding ${accountD} is left`,
  );
});

t.test("an older bootstrap's unlabelled objects: found by name, another registration's left alone", async (t) => {
  // A registration whose objects predate the registration labels (created here as an older
  // bootstrap did: the common labels only), and the account's own Role claimed by another one.
  const tenantC = await api.signup();
  const added = await cli([
    '--token',
    tenantC.apiKey,
    'managed-clusters',
    'add',
    tenantC.tenantId,
    'old',
    '--kubeconfig',
    adminKubeconfig,
    '--namespace',
    'apps',
  ]);
  t.equal(added.code, 0, `registered (${added.err})`);
  const common = { 'app.kubernetes.io/managed-by': 'hosted-runtimes', 'app.kubernetes.io/name': 'argocd-manager' };
  const other = { ...common, 'hosted-runtimes.io/tenant': tenantA.tenantId, 'hosted-runtimes.io/managed-cluster': 'x' };
  const meta = (namespace: string, labels: Record<string, string>) => ({ name: 'argocd-manager', namespace, labels });
  const rule = { apiGroups: [''], resources: ['configmaps'], verbs: ['get'] };
  const roleRef = { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: 'argocd-manager' };
  const subjects = [{ kind: 'ServiceAccount', name: 'argocd-manager', namespace: 'argocd-manager' }];
  await core.createNamespacedServiceAccount({
    namespace: 'argocd-manager',
    body: { metadata: meta('argocd-manager', common) },
  });
  await rbac.createNamespacedRole({ namespace: 'apps', body: { metadata: meta('apps', common), rules: [rule] } });
  await rbac.createNamespacedRoleBinding({
    namespace: 'apps',
    body: { metadata: meta('apps', common), roleRef, subjects },
  });
  await rbac.createNamespacedRole({
    namespace: 'argocd-manager',
    body: { metadata: meta('argocd-manager', other), rules: [rule] },
  });

  const removed = await removeCli(
    tenantC.apiKey,
    tenantC.tenantId,
    'old',
    '--remove-rbac',
    '--kubeconfig',
    adminKubeconfig,
  );
  t.equal(removed.code, 0, `removed (${removed.err})`);
  for (const o of [
    'RoleBinding apps/argocd-manager',
    'Role apps/argocd-manager',
    'ServiceAccount argocd-manager/argocd-manager',
  ])
    t.match(removed.out, `  ${o}\n`, `${o} is listed as deleted`);
  const roles = await rbac.listNamespacedRole({ namespace: 'apps' });
  const bindings = await rbac.listNamespacedRoleBinding({ namespace: 'apps' });
  const accounts = await core.listNamespacedServiceAccount({ namespace: 'argocd-manager' });
  t.notOk(
    [...roles.items, ...bindings.items, ...accounts.items].some((o) => o.metadata?.name === 'argocd-manager'),
    "the older bootstrap's Role, binding and account are gone",
  );
  const kept = await rbac.readNamespacedRole({ namespace: 'argocd-manager', name: 'argocd-manager' });
  t.equal(kept.metadata?.labels?.['hosted-runtimes.io/managed-cluster'], 'x', "another registration's Role is kept");
  t.notMatch(removed.out, 'Role argocd-manager/argocd-manager', 'and not listed');
});

t.test(
  "a tenant's own ServiceAccount: remove names the revocation of its bound tokens, no bootstrap leftovers",
  async (t) => {
    const tenantE = await api.signup();
    await core.createNamespace({ body: { metadata: { name: 'deployer' } } });
    await core.createNamespacedServiceAccount({ namespace: 'deployer', body: { metadata: { name: 'deployer' } } });
    const grant = async (namespace: string, rules: V1PolicyRule[]) => {
      await rbac.createNamespacedRole({ namespace, body: { metadata: { name: 'deployer' }, rules } });
      await rbac.createNamespacedRoleBinding({
        namespace,
        body: {
          metadata: { name: 'deployer' },
          roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: 'deployer' },
          subjects: [{ kind: 'ServiceAccount', name: 'deployer', namespace: 'deployer' }],
        },
      });
    };
    await grant('web', [{ apiGroups: ['*'], resources: ['*'], verbs: ['*'] }]);
    await grant('deployer', [
      { apiGroups: [''], resources: ['serviceaccounts/token'], resourceNames: ['deployer'], verbs: ['create'] },
      { apiGroups: [''], resources: ['secrets'], verbs: ['create', 'get', 'delete'] },
    ]);
    const token = (
      await core.createNamespacedServiceAccountToken({
        name: 'deployer',
        namespace: 'deployer',
        body: { spec: { audiences: [], expirationSeconds: 3600 } },
      })
    ).status!.token!;
    await writeFile(join(dir, 'deployer.token'), token, { mode: 0o600 });
    await writeFile(join(dir, 'ca.pem'), own.ca.certPem);
    const added = await cli([
      '--token',
      tenantE.apiKey,
      'managed-clusters',
      'add',
      tenantE.tenantId,
      'own-sa',
      '--server',
      own.server,
      '--token-file',
      join(dir, 'deployer.token'),
      '--ca-file',
      join(dir, 'ca.pem'),
      '--namespace',
      'web',
    ]);
    t.equal(added.code, 0, `registered (${added.err})`);
    const removed = await removeCli(tenantE.apiKey, tenantE.tenantId, 'own-sa', '--remove-rbac');
    t.equal(removed.code, 0, `removed (${removed.err})`);
    t.match(
      removed.out,
      /the tokens of ServiceAccount deployer\/deployer no longer work \(Secret deployer\/hosted-runtimes-binding-\S+ deleted\)/,
      'the bound tokens are revoked, and said so',
    );
    t.notMatch(
      removed.out,
      /ServiceAccount deployer\/deployer deleted|left on the cluster/,
      'no bootstrap account or leftovers named',
    );
    await core.readNamespacedServiceAccount({ namespace: 'deployer', name: 'deployer' });
  },
);

t.test('--kubeconfig without --remove-rbac is a usage error', async (t) => {
  const r = await removeCli(tenantA.apiKey, tenantA.tenantId, 'x', '--kubeconfig', adminKubeconfig);
  t.equal(r.code, 1, 'exit 1');
  t.match(r.err, /--kubeconfig and --context are for --remove-rbac/, 'saying so');
});
