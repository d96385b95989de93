/**
 * Registering a root cluster probes it first, against a real kube-apiserver (the end-to-end
 * toolchain's, API server only: HRT_TOOLCHAIN_BIN, which scripts/test.sh provides to this tier):
 * an unreachable server, refused credentials and missing permissions are each a 422 naming what
 * is wrong, nothing is stored, `force: true` stores anyway; a kubeconfig with every permission
 * registers, and `provisioner doctor` reports each cluster as the probe found it.
 * Without the toolchain the file is skipped with the reason (counted as a skip by scripts/test.sh);
 * with CI=true that is a failure.
 */
import t from 'tap';
import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { RbacAuthorizationV1Api, type V1PolicyRule } from '@kubernetes/client-node';
import { createTestApi } from '../../helpers/api.ts';
import type { ApiResult } from '../../../provisioner/http/api-client.ts';
import { startEtcd, startKubeControlPlane, toolchainFrom } from '../../../sandbox/control-plane.ts';
import { createClientCert, kubeconfigFor } from '../../../sandbox/pki.ts';
import { freePort } from '../../helpers/ports.ts';
import {
  ROOT_CLUSTER_PERMISSIONS,
  TENANT_CLUSTER_ROLE,
  describePermission,
} from '../../../tenants/root-permissions.ts';
import { PROVISIONER_CLUSTER_RULES, PROVISIONER_TENANT_RULES } from '../../../infra/provisioner-rbac.ts';

const bin = fileURLToPath(new URL('../../../bin/provisioner.ts', import.meta.url));
const toolchainBin = process.env.HRT_TOOLCHAIN_BIN;
const missing = !toolchainBin
  ? 'HRT_TOOLCHAIN_BIN is not set (scripts/test.sh sets it when Go can build or reuse the toolchain)'
  : !existsSync(join(toolchainBin, 'kube-apiserver')) || !existsSync(join(toolchainBin, 'etcd'))
    ? `${toolchainBin} lacks kube-apiserver or etcd`
    : undefined;

if (missing && process.env.CI === 'true') {
  t.fail(`a real kube-apiserver is needed and CI=true: ${missing}`);
} else if (missing) {
  t.plan(0, `skipped: needs a real kube-apiserver: ${missing}`);
} else {
  t.setTimeout(300_000);
  const dir = await mkdtemp(join(tmpdir(), 'hrt-clusters-add-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const tc = toolchainFrom(toolchainBin!);
  const etcd = await startEtcd(tc, join(dir, 'etcd'));
  t.teardown(() => etcd.stop());
  const plane = await startKubeControlPlane(tc, {
    name: 'root',
    dir: join(dir, 'root'),
    etcd,
    etcdPrefix: '/root',
    nodes: 0,
    apiServerOnly: true,
  });
  t.teardown(() => plane.stop());
  t.comment(`kube-apiserver ${plane.server} ready in ${plane.startSeconds.toFixed(1)} s`);

  // A user who may only manage namespaces, and one with no role at all.
  const namespacesOnly = await createClientCert(plane.ca, 'ns-only', 'ns-only', 'hrt-test');
  const nobody = await createClientCert(plane.ca, 'nobody', 'nobody', 'hrt-test');
  const rbac = plane.kc.makeApiClient(RbacAuthorizationV1Api);
  await rbac.createClusterRole({
    body: {
      metadata: { name: 'namespaces-only' },
      rules: [{ apiGroups: [''], resources: ['namespaces'], verbs: ['create', 'get', 'patch', 'delete'] }],
    },
  });
  await rbac.createClusterRoleBinding({
    body: {
      metadata: { name: 'namespaces-only' },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'namespaces-only' },
      subjects: [{ apiGroup: 'rbac.authorization.k8s.io', kind: 'User', name: 'ns-only' }],
    },
  });
  const as = (client: typeof nobody) => kubeconfigFor({ name: 'root', server: plane.server, ca: plane.ca, client });
  const withToken = (token: string) => {
    const doc = JSON.parse(plane.kubeconfig) as { users: Array<{ user: Record<string, string> }> };
    doc.users[0]!.user = { token };
    return JSON.stringify(doc);
  };
  const closedPort = await freePort();
  const unreachable = plane.kubeconfig.replace(plane.server, `https://127.0.0.1:${closedPort}`);

  const api = await createTestApi({ env: { PROVISIONER_CLUSTER_ALLOWED_CIDRS: '127.0.0.0/8' } });
  t.teardown(() => api.close());
  const register = (name: string, kubeconfig: string, force?: boolean) =>
    api.as(api.operatorKey).request('POST /v1/clusters', {
      body: { name, region: 'local', capacity: 5, kubeconfig, ...(force ? { force } : {}) },
    });
  /** The refusal's error body (a registration that was not refused fails the test here). */
  const errorOf = (res: ApiResult<'POST /v1/clusters'>) => {
    if (res.ok) throw new Error(`the registration was not refused: ${res.status}`);
    return res.body.error;
  };

  t.test('an unreachable API server: 422 CLUSTER_UNREACHABLE with the network error', async (t) => {
    const res = await register('unreachable', unreachable);
    t.equal(res.status, 422, 'answered 422');
    const error = errorOf(res);
    t.equal(error.code, 'CLUSTER_UNREACHABLE', 'code CLUSTER_UNREACHABLE');
    t.equal(error.field, 'kubeconfig', 'the kubeconfig is the field at fault');
    t.match(error.message, `cannot reach https://127.0.0.1:${closedPort}`, 'the message names the server');
    t.match(error.message, /ECONNREFUSED.*nothing listens there/, 'and the network error');
    t.match(error.message, /force: true/, 'and how to store it anyway');
  });

  t.test('credentials the API server refuses: 422 CLUSTER_UNAUTHORIZED', async (t) => {
    const res = await register('bad-token', withToken('not-a-valid-token'));
    t.equal(res.status, 422, 'answered 422');
    t.equal(errorOf(res).code, 'CLUSTER_UNAUTHORIZED', 'code CLUSTER_UNAUTHORIZED');
    t.match(errorOf(res).message, /refused the kubeconfig's credentials \(HTTP 401\)/, 'the message says why');
  });

  t.test('credentials without the permissions: 422 CLUSTER_PERMISSIONS_MISSING listing each', async (t) => {
    const res = await register('ns-only', as(namespacesOnly));
    t.equal(res.status, 422, 'answered 422');
    const error = errorOf(res);
    t.equal(error.code, 'CLUSTER_PERMISSIONS_MISSING', 'code CLUSTER_PERMISSIONS_MISSING');
    const held = ['create', 'get', 'patch', 'delete'];
    const expected = ROOT_CLUSTER_PERMISSIONS.filter(
      (p) => !(p.resource === 'namespaces' && held.includes(p.verb)),
    ).map(describePermission);
    t.same(
      (error.details?.missing as Array<{ permission: string }>).map((m) => m.permission),
      expected,
      'details.missing lists every permission but the namespace ones the user has',
    );
    t.match(
      (error.details?.missing as Array<{ permission: string }>).find((m) => m.permission === 'list namespaces'),
      { where: 'cluster-wide', why: /root-cluster watch/ },
      'each with where it is needed and why',
    );
    t.match(error.message, /create resourcequotas, get resourcequotas/, 'the message lists them too');
    t.match(
      error.message,
      `ClusterRole ${TENANT_CLUSTER_ROLE} could not be read: HTTP 403`,
      'and why the tenant ClusterRole did not grant the tenant-namespace ones',
    );
    t.notMatch(error.message, /create namespaces/, 'a granted permission is not listed');

    const none = await register('nobody', as(nobody));
    t.equal(errorOf(none).code, 'CLUSTER_PERMISSIONS_MISSING', 'a user without any role: the same code');
    t.equal(
      (errorOf(none).details?.missing as unknown[]).length,
      ROOT_CLUSTER_PERMISSIONS.length,
      'with every permission missing',
    );
  });

  t.test('nothing refused was stored; force stores anyway; full permissions register', async (t) => {
    const before = (await api.client.call('GET /v1/clusters')).items;
    t.equal(before.length, 0, 'no refused registration was stored');
    const forced = await register('forced', unreachable, true);
    t.equal(forced.status, 201, 'force: true registers the unreachable cluster');
    const ok = await register('root', plane.kubeconfig);
    t.equal(ok.status, 201, 'a reachable cluster with every permission registers');
  });

  t.test('provisioner doctor reports each registered cluster as the probe finds it', async (t) => {
    const report = await api.client.call('GET /v1/doctor');
    const root = report.checks.find((c) => c.name === 'cluster/root');
    t.equal(root?.status, 'ok', 'the registered cluster is ok');
    t.match(root?.message, /answers \(Kubernetes v1\.\d+/, 'with its Kubernetes version');
    const forced = report.checks.find((c) => c.name === 'cluster/forced');
    t.equal(forced?.status, 'problem', 'the forced, unreachable cluster is a problem');
    t.match(forced?.message, /ECONNREFUSED/, 'naming the network error');
  });

  t.test('the CLI: clusters add prints the refusal and exits 1; --force registers', async (t) => {
    const url = await api.app.listen({ port: 0, host: '127.0.0.1' });
    const file = join(dir, 'ns-only.kubeconfig');
    await writeFile(file, as(namespacesOnly), { mode: 0o600 });
    const cli = (args: string[]) =>
      new Promise<{ code: number; stdout: string; stderr: string }>((resolve) =>
        execFile(
          process.execPath,
          [bin, '--url', url, '--token', api.operatorKey, 'clusters', 'add', ...args],
          { env: { PATH: process.env.PATH ?? '' } },
          (err, stdout, stderr) => resolve({ code: err ? Number((err as { code?: number }).code) : 0, stdout, stderr }),
        ),
      );
    const refused = await cli(['cli-ns-only', '--region', 'local', '--capacity', '3', '--kubeconfig', file]);
    t.equal(refused.code, 1, 'exit 1');
    t.match(refused.stderr, /CLUSTER_PERMISSIONS_MISSING: .*lack \d+ of the \d+ permissions/, 'the refusal is printed');
    const forced = await cli(['cli-ns-only', '--region', 'local', '--capacity', '3', '--kubeconfig', file, '--force']);
    t.equal(forced.code, 0, `--force registers (stderr: ${forced.stderr})`);
    t.match(forced.stdout, /registered cluster cli-ns-only/, 'and says so');
  });

  t.test(
    "infra/'s least-privilege grants register without force; a tenant ClusterRole lacking a grant is refused naming it",
    async (t) => {
      // What infra/ creates for the provisioner (here a user of its own): the cluster ClusterRole
      // bound cluster-wide, the tenant one not bound.
      const provisioner = await createClientCert(plane.ca, 'infra-grants', 'infra-grants', 'hrt-test');
      await rbac.createClusterRole({
        body: { metadata: { name: 'hosted-platform:provisioner' }, rules: PROVISIONER_CLUSTER_RULES as V1PolicyRule[] },
      });
      await rbac.createClusterRoleBinding({
        body: {
          metadata: { name: 'hosted-platform:provisioner' },
          roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'hosted-platform:provisioner' },
          subjects: [{ apiGroup: 'rbac.authorization.k8s.io', kind: 'User', name: 'infra-grants' }],
        },
      });
      const lacking = await register('infra-grants', as(provisioner));
      t.equal(lacking.status, 422, 'without the tenant ClusterRole: 422');
      t.match(
        errorOf(lacking).message,
        `ClusterRole ${TENANT_CLUSTER_ROLE} does not exist`,
        'naming the ClusterRole that is missing',
      );
      t.ok(
        (errorOf(lacking).details?.missing as Array<{ permission: string; where: string }>).every((m) =>
          m.where.startsWith('in each tenant namespace'),
        ),
        'and only tenant-namespace permissions are missing: the cluster-wide grants are enough for the rest',
      );

      // The tenant ClusterRole without Secrets: exactly the Secret permissions are missing.
      const rules = PROVISIONER_TENANT_RULES as V1PolicyRule[];
      const withoutSecrets = rules.map((r) => ({ ...r, resources: r.resources?.filter((x) => x !== 'secrets') }));
      await rbac.createClusterRole({ body: { metadata: { name: TENANT_CLUSTER_ROLE }, rules: withoutSecrets } });
      const noSecrets = await register('infra-grants', as(provisioner));
      t.equal(noSecrets.status, 422, 'a tenant ClusterRole without Secrets: 422');
      t.same(
        (errorOf(noSecrets).details?.missing as Array<{ permission: string }>).map((m) => m.permission),
        ROOT_CLUSTER_PERMISSIONS.filter((p) => p.resource === 'secrets').map(describePermission),
        'listing exactly the Secret permissions of tenant namespaces',
      );

      await rbac.replaceClusterRole({
        name: TENANT_CLUSTER_ROLE,
        body: { metadata: { name: TENANT_CLUSTER_ROLE }, rules },
      });
      const ok = await register('infra-grants', as(provisioner));
      t.equal(ok.status, 201, `with infra/'s two ClusterRoles it registers without force (${JSON.stringify(ok.body)})`);
    },
  );
}
