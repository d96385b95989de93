/**
 * Deleting a suspended vcluster's synced pods (tenants/synced-pods.ts) against a real
 * kube-apiserver (the end-to-end toolchain's, API server only: HRT_TOOLCHAIN_BIN, which
 * scripts/test.sh provides to this tier): in a tenant namespace holding pods with and without the
 * label `vcluster.loft.sh/managed-by=vcluster` (none scheduled: there are no nodes), only the
 * labelled ones go, the others and those of another namespace stay; the provisioner, holding only
 * what infra/ grants it in a tenant namespace (ClusterRole TENANT_CLUSTER_ROLE bound there), may
 * do it; a user without the grant and an unreachable server fail naming the namespace and the
 * selector. Without the toolchain the file is skipped with the reason; with CI=true that is a
 * failure.
 */
import t from 'tap';
import { createServer } from 'node:net';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CoreV1Api, RbacAuthorizationV1Api, type V1PolicyRule } from '@kubernetes/client-node';
import { missingKubeToolchain, startCustomerCluster } from '../../helpers/kubectl.ts';
import { createClientCert, kubeconfigFor } from '../../../sandbox/pki.ts';
import { PROVISIONER_TENANT_RULES } from '../../../infra/provisioner-rbac.ts';
import { TENANT_CLUSTER_ROLE, TENANT_ROLE_BINDING } from '../../../tenants/root-permissions.ts';
import { VCLUSTER_RELEASE } from '../../../tenants/virtual-cluster.ts';
import { deleteSyncedPods, MANAGED_BY_LABEL, syncedPodSelector } from '../../../tenants/synced-pods.ts';

const toolchainBin = process.env.HRT_TOOLCHAIN_BIN;
const missing = missingKubeToolchain(toolchainBin);

/** The API server is on loopback: the policy allows that range (TLS stays verified, no exec). */
const LOOPBACK_POLICY = { execCommands: [], allowInsecureTls: false, allowedCidrs: ['127.0.0.0/8'], allowHttp: false };
const SELECTOR = syncedPodSelector(VCLUSTER_RELEASE);

if (missing && process.env.CI === 'true') {
  t.fail(`a real etcd and kube-apiserver are needed and CI=true: ${missing}`);
} else if (missing) {
  t.plan(0, `skipped: needs a real etcd and kube-apiserver: ${missing}`);
} else {
  t.setTimeout(180_000);
  const dir = await mkdtemp(join(tmpdir(), 'hrt-synced-pods-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const { plane } = await startCustomerCluster(t, toolchainBin!, dir);
  t.comment(`kube-apiserver ${plane.server} ready in ${plane.startSeconds.toFixed(1)} s`);
  const core = plane.kc.makeApiClient(CoreV1Api);
  const rbac = plane.kc.makeApiClient(RbacAuthorizationV1Api);

  /** A namespace with its default ServiceAccount (no controller-manager makes it) and `pods` (name: labels). */
  const namespaceWith = async (namespace: string, pods: Record<string, Record<string, string>>) => {
    await core.createNamespace({ body: { metadata: { name: namespace } } });
    await core.createNamespacedServiceAccount({ namespace, body: { metadata: { name: 'default' } } });
    for (const [name, labels] of Object.entries(pods)) {
      await core.createNamespacedPod({
        namespace,
        body: {
          metadata: { name, labels },
          // No nodeName: never scheduled (there are no nodes), which a pod need not be to exist.
          spec: { automountServiceAccountToken: false, containers: [{ name: 'c', image: 'registry.invalid/app:1' }] },
        },
      });
    }
  };
  /** The pods of `namespace` still there and not terminating, by name. */
  const remaining = async (namespace: string) =>
    (await core.listNamespacedPod({ namespace })).items
      .filter((p) => !p.metadata?.deletionTimestamp)
      .map((p) => p.metadata!.name!)
      .sort();
  const synced = { [MANAGED_BY_LABEL]: VCLUSTER_RELEASE, 'vcluster.loft.sh/namespace': 'default' };

  t.test('only the pods the vcluster synced into the namespace are deleted', async (t) => {
    await namespaceWith('tenant-a', {
      'synced-1': synced,
      'synced-2': synced,
      'synced-3': { ...synced, app: 'argocd-server' },
      own: { app: 'vcluster', release: VCLUSTER_RELEASE },
      'other-vcluster': { [MANAGED_BY_LABEL]: 'other' },
    });
    await namespaceWith('tenant-b', { 'synced-b': synced });

    const deleted = await deleteSyncedPods({
      kubeconfig: plane.kubeconfig,
      namespace: 'tenant-a',
      labelSelector: SELECTOR,
      policy: LOOPBACK_POLICY,
    });
    t.equal(deleted, 3, 'three synced pods deleted');
    t.same(await remaining('tenant-a'), ['other-vcluster', 'own'], "the unlabelled pod and another vcluster's stay");
    t.same(await remaining('tenant-b'), ['synced-b'], "another namespace's synced pod stays");

    const again = await deleteSyncedPods({
      kubeconfig: plane.kubeconfig,
      namespace: 'tenant-a',
      labelSelector: SELECTOR,
      policy: LOOPBACK_POLICY,
    });
    t.equal(again, 0, 'a second run finds none');
  });

  t.test("the provisioner may do it with infra/'s tenant-namespace grant; a user without it may not", async (t) => {
    await namespaceWith('tenant-c', { 'synced-c': synced, own: {} });
    // As infra/ and the tenants program set it up: the tenant ClusterRole, bound in the namespace.
    await rbac.createClusterRole({
      body: { metadata: { name: TENANT_CLUSTER_ROLE }, rules: PROVISIONER_TENANT_RULES as V1PolicyRule[] },
    });
    await rbac.createNamespacedRoleBinding({
      namespace: 'tenant-c',
      body: {
        metadata: { name: TENANT_ROLE_BINDING },
        roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: TENANT_CLUSTER_ROLE },
        subjects: [{ apiGroup: 'rbac.authorization.k8s.io', kind: 'User', name: 'provisioner' }],
      },
    });
    const as = async (user: string) =>
      kubeconfigFor({
        name: 'root',
        server: plane.server,
        ca: plane.ca,
        client: await createClientCert(plane.ca, user, user, 'hrt-test'),
      });

    const nobody = await deleteSyncedPods({
      kubeconfig: await as('nobody'),
      namespace: 'tenant-c',
      labelSelector: SELECTOR,
      policy: LOOPBACK_POLICY,
    }).then(
      () => undefined,
      (e: unknown) => e as Error,
    );
    t.equal(
      nobody?.message,
      "deleting the vcluster's synced pods (vcluster.loft.sh/managed-by=vcluster) in namespace tenant-c on the root cluster: " +
        'listing them: the API server answered HTTP 403',
      'a user without the grant: refused, naming the namespace and the selector',
    );
    t.same(await remaining('tenant-c'), ['own', 'synced-c'], 'and nothing was deleted');

    // Listing granted, deleting not: the pod is named.
    await rbac.createNamespacedRole({
      namespace: 'tenant-c',
      body: { metadata: { name: 'list-pods' }, rules: [{ apiGroups: [''], resources: ['pods'], verbs: ['list'] }] },
    });
    await rbac.createNamespacedRoleBinding({
      namespace: 'tenant-c',
      body: {
        metadata: { name: 'list-pods' },
        roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: 'list-pods' },
        subjects: [{ apiGroup: 'rbac.authorization.k8s.io', kind: 'User', name: 'lister' }],
      },
    });
    const lister = await deleteSyncedPods({
      kubeconfig: await as('lister'),
      namespace: 'tenant-c',
      labelSelector: SELECTOR,
      policy: LOOPBACK_POLICY,
    }).then(
      () => undefined,
      (e: unknown) => e as Error,
    );
    t.match(
      lister?.message,
      /^deleting the vcluster's synced pods \(vcluster\.loft\.sh\/managed-by=vcluster\) in namespace tenant-c on the root cluster: pod synced-c: the API server answered HTTP 403$/,
      'list without delete: refused naming the pod',
    );

    const provisioner = await deleteSyncedPods({
      kubeconfig: await as('provisioner'),
      namespace: 'tenant-c',
      labelSelector: SELECTOR,
      policy: LOOPBACK_POLICY,
    });
    t.equal(provisioner, 1, "infra/'s grant allows listing and deleting them");
    t.same(await remaining('tenant-c'), ['own']);
  });

  t.test('an unreachable API server fails naming the namespace, the selector and the network error', async (t) => {
    const closed = createServer();
    await new Promise<void>((r) => closed.listen(0, '127.0.0.1', r));
    const { port } = closed.address() as { port: number };
    await new Promise((r) => closed.close(r));
    const err = await deleteSyncedPods({
      kubeconfig: plane.kubeconfig.replace(plane.server, `https://127.0.0.1:${port}`),
      namespace: 'tenant-a',
      labelSelector: SELECTOR,
      policy: LOOPBACK_POLICY,
    }).then(
      () => undefined,
      (e: unknown) => e as Error,
    );
    t.equal(
      err?.message,
      "deleting the vcluster's synced pods (vcluster.loft.sh/managed-by=vcluster) in namespace tenant-a on the root cluster: " +
        'listing them: the API server could not be reached (ECONNREFUSED)',
    );
  });
}
