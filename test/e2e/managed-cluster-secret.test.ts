/**
 * End-to-end: a provisioned tenant connects a cluster of its own with the CLI (`provisioner
 * managed-clusters add`, its own API key), the provisioner's real engine runs the tenant's program
 * for the new generation, and the Argo CD cluster Secret appears in the tenant's virtual cluster
 * in the format Argo CD reads (declarative setup: label `argocd.argoproj.io/secret-type: cluster`,
 * keys `name`, `server`, `namespaces`, and `config` holding a ClusterConfig: `bearerToken` /
 * `tlsClientConfig` with `insecure`, `caData`, `certData`, `keyData`); `managed-clusters remove`
 * deletes it. The managed cluster is one more kube-apiserver from the toolchain.
 */
import t from 'tap';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { cli } from './harness/api-client.ts';
import { startKubeControlPlane } from '../../sandbox/control-plane.ts';
import { exists, kube } from './harness/kube.ts';
import { until } from '../../sandbox/processes.ts';
import { PROVISION_TIMEOUT, provisioningSuite } from './harness/suite.ts';

const VERSION = '1.4.1';
/** The fields of Argo CD's ClusterConfig (pkg/apis/application/v1alpha1, `config` of a cluster Secret) and of its TLSClientConfig. */
const CLUSTER_CONFIG_FIELDS = [
  'username',
  'password',
  'bearerToken',
  'tlsClientConfig',
  'awsAuthConfig',
  'execProviderConfig',
  'disableCompression',
  'proxyUrl',
];
const TLS_CLIENT_CONFIG_FIELDS = ['insecure', 'serverName', 'certData', 'keyData', 'caData'];

await provisioningSuite(
  t,
  async (e2e) => {
    const managed = await startKubeControlPlane(e2e.toolchain, {
      name: 'managed',
      dir: join(e2e.dir, 'managed'),
      etcd: e2e.etcd,
      etcdPrefix: '/managed',
      nodes: 0,
      apiServerOnly: true,
    });
    t.teardown(() => managed.stop());
    const kubeconfigFile = join(e2e.dir, 'managed-admin.kubeconfig');
    await writeFile(kubeconfigFile, managed.kubeconfig, { mode: 0o600 });

    t.test('a managed cluster becomes an Argo CD cluster Secret in the vcluster, and goes away with it', async (t) => {
      const s = await e2e.signup('connects-a-cluster', VERSION);
      const id = s.tenant.id;
      await e2e.api.waitForPhase(id, 'Ready', PROVISION_TIMEOUT);
      const vcluster = kube(await e2e.tenantKubeconfig(id));
      const secretExists = () =>
        exists(() => vcluster.core.readNamespacedSecret({ name: 'cluster-edge', namespace: 'argocd' }));

      const add = await cli(e2e.provisioner.url, s.apiKey, [
        'managed-clusters',
        'add',
        id,
        'edge',
        '--kubeconfig',
        kubeconfigFile,
        '--namespace',
        'apps',
        '--namespace',
        'web',
      ]);
      t.equal(add.code, 0, `managed-clusters add succeeds with the tenant's key (${add.stderr})`);
      t.match(add.stdout, /registered managed cluster edge/, 'and says so');
      await e2e.api.waitForPhase(id, 'Ready', PROVISION_TIMEOUT);

      const secret = await vcluster.core.readNamespacedSecret({ name: 'cluster-edge', namespace: 'argocd' });
      t.equal(
        secret.metadata?.labels?.['argocd.argoproj.io/secret-type'],
        'cluster',
        'labelled argocd.argoproj.io/secret-type: cluster',
      );
      const data = Object.fromEntries(
        Object.entries(secret.data ?? {}).map(([k, v]) => [k, Buffer.from(v, 'base64').toString('utf8')]),
      );
      t.equal(data.name, 'edge', 'name: the registration name');
      t.equal(data.server, managed.server, "server: the cluster's API server URL");
      t.equal(data.namespaces, 'apps,web', 'namespaces: comma-separated, as Argo CD reads them');
      const config = JSON.parse(data.config ?? '{}') as Record<string, unknown>;
      t.same(
        Object.keys(config).filter((k) => !CLUSTER_CONFIG_FIELDS.includes(k)),
        [],
        "config holds only fields of Argo CD's ClusterConfig",
      );
      const tls = config.tlsClientConfig as Record<string, unknown>;
      t.same(
        Object.keys(tls).filter((k) => !TLS_CLIENT_CONFIG_FIELDS.includes(k)),
        [],
        "tlsClientConfig holds only fields of Argo CD's TLSClientConfig",
      );
      t.equal(tls.insecure, false, 'TLS is verified');
      const pem = (field: string) => Buffer.from(String(tls[field]), 'base64').toString('utf8');
      t.equal(pem('caData'), managed.ca.certPem, "caData: base64 of the cluster's CA (PEM)");
      t.equal(pem('certData'), managed.admin.certPem, 'certData: base64 of the client certificate (PEM)');
      t.equal(pem('keyData'), managed.admin.keyPem, 'keyData: base64 of the client key (PEM)');

      const list = await cli(e2e.provisioner.url, s.apiKey, ['managed-clusters', 'list', id]);
      t.match(
        list.stdout,
        /edge\s+https:\/\/127\.0\.0\.1:\d+\s+apps,web\s+True/,
        'managed-clusters list shows it, reachable',
      );

      const remove = await cli(e2e.provisioner.url, s.apiKey, ['managed-clusters', 'remove', id, 'edge']);
      t.equal(remove.code, 0, `managed-clusters remove succeeds (${remove.stderr})`);
      await e2e.api.waitForPhase(id, 'Ready', PROVISION_TIMEOUT);
      await until('the cluster Secret to be deleted', 60_000, async () => !(await secretExists()));
      t.notOk(await secretExists(), 'the cluster Secret is gone from the vcluster');
      const again = await cli(e2e.provisioner.url, s.apiKey, ['managed-clusters', 'remove', id, 'edge']);
      t.equal(again.code, 0, 'a second remove succeeds');
      t.match(again.stdout, /nothing to remove/, 'and says there was nothing to remove');
    });
  },
  { extraEnv: { PROVISIONER_MANAGED_CLUSTER_ALLOWED_CIDRS: '127.0.0.0/8' } },
);
