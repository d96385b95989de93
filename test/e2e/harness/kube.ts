/**
 * Reading the clusters in the tests (@kubernetes/client-node): clients from a kubeconfig, "does it
 * exist" for 404s, and what the charts and the runtime recorded in an API server.
 */
import {
  ApiextensionsV1Api,
  AppsV1Api,
  CoreV1Api,
  KubeConfig,
  NetworkingV1Api,
  type RbacAuthorizationV1Api,
  type V1PolicyRule,
} from '@kubernetes/client-node';
import { gunzipSync } from 'node:zlib';
import { ARGO_RELEASES } from '../../../runtime/component/argo-releases.ts';

export interface Kube {
  kc: KubeConfig;
  server: string;
  core: CoreV1Api;
  apps: AppsV1Api;
  net: NetworkingV1Api;
  ext: ApiextensionsV1Api;
}

export function kube(kubeconfig: string | KubeConfig): Kube {
  let kc: KubeConfig;
  if (typeof kubeconfig === 'string') {
    kc = new KubeConfig();
    kc.loadFromString(kubeconfig);
  } else {
    kc = kubeconfig;
  }
  return {
    kc,
    server: kc.getCurrentCluster()?.server ?? '',
    core: kc.makeApiClient(CoreV1Api),
    apps: kc.makeApiClient(AppsV1Api),
    net: kc.makeApiClient(NetworkingV1Api),
    ext: kc.makeApiClient(ApiextensionsV1Api),
  };
}

/** HTTP status of a client-node error (ApiException.code), if any. */
export function statusOf(err: unknown): number | undefined {
  if (typeof err !== 'object' || err === null || !('code' in err)) return undefined;
  return typeof err.code === 'number' ? err.code : undefined;
}

/** True when the read succeeds, false on 404; other errors propagate. */
export async function exists(read: () => Promise<unknown>): Promise<boolean> {
  try {
    await read();
    return true;
  } catch (err) {
    if (statusOf(err) === 404) return false;
    throw err;
  }
}

/**
 * Chart version of each Argo release's workloads, by chart: the version in the `helm.sh/chart`
 * label (`<chart>-<version>`, set by every argo-helm chart) of the Deployments and StatefulSets
 * labelled `app.kubernetes.io/instance=<release>` in the release's namespace. Undefined when there
 * are none; every distinct version, comma-separated, when they disagree.
 */
export async function installedChartVersions(k: Kube): Promise<Record<string, string | undefined>> {
  const out: Record<string, string | undefined> = {};
  for (const r of ARGO_RELEASES) {
    const labelSelector = `app.kubernetes.io/instance=${r.releaseName}`;
    const [deployments, statefulSets] = await Promise.all([
      k.apps.listNamespacedDeployment({ namespace: r.namespace, labelSelector }),
      k.apps.listNamespacedStatefulSet({ namespace: r.namespace, labelSelector }),
    ]);
    const versions = new Set(
      [...deployments.items, ...statefulSets.items].map((o) =>
        (o.metadata?.labels?.['helm.sh/chart'] ?? '').slice(r.chart.length + 1),
      ),
    );
    out[r.chart] = versions.size === 0 ? undefined : [...versions].sort().join(',');
  }
  return out;
}

/** The vcluster chart version of a tenant's control plane: the StatefulSet's `chart` label (`vcluster-<version>`). */
export async function vclusterChartVersion(k: Kube, namespace: string, release = 'vcluster'): Promise<string> {
  const sts = await k.apps.readNamespacedStatefulSet({ name: release, namespace });
  return (sts.metadata?.labels?.chart ?? '').replace(/^vcluster-/, '');
}

/** One line naming the real chart versions a tenant runs (test output). */
export async function describeInstalledCharts(root: Kube, vc: Kube, namespace: string): Promise<string> {
  const argo = await installedChartVersions(vc);
  return `installed real charts: vcluster ${await vclusterChartVersion(root, namespace)}, ${Object.entries(argo)
    .map(([c, v]) => `${c} ${v ?? '(none)'}`)
    .join(', ')}`;
}

/** One revision of a Helm release, as Helm stored it (a `helm.sh/release.v1` Secret). */
export interface HelmRevision {
  revision: number;
  /** deployed, failed, superseded, pending-upgrade, … */
  status: string;
  chartVersion: string;
  description: string;
}

/**
 * A Helm release's history, oldest first, read from the Secrets Helm keeps (`owner=helm`,
 * `name=<release>`; the payload is base64 of the gzipped release JSON), as `helm history` shows it.
 */
export async function helmHistory(k: Kube, release: string, namespace: string): Promise<HelmRevision[]> {
  const list = await k.core.listNamespacedSecret({ namespace, labelSelector: `owner=helm,name=${release}` });
  return list.items
    .map((secret) => {
      const encoded = Buffer.from(secret.data?.release ?? '', 'base64').toString('utf8');
      const rel = JSON.parse(gunzipSync(Buffer.from(encoded, 'base64')).toString('utf8')) as {
        version: number;
        info?: { status?: string; description?: string };
        chart?: { metadata?: { version?: string } };
      };
      return {
        revision: rel.version,
        status: rel.info?.status ?? '',
        chartVersion: rel.chart?.metadata?.version ?? '',
        description: rel.info?.description ?? '',
      };
    })
    .sort((a, b) => a.revision - b.revision);
}

/** Names of the Deployments in a namespace that are Available. */
export async function availableDeployments(k: Kube, namespace: string): Promise<string[]> {
  const list = await k.apps.listNamespacedDeployment({ namespace });
  return list.items
    .filter((d) => d.status?.conditions?.some((c) => c.type === 'Available' && c.status === 'True'))
    .map((d) => d.metadata?.name ?? '');
}

/** A Role `name` with `rules` in `namespace`, bound to the ServiceAccount `account` (namespace/name). */
export async function grantRole(
  rbac: RbacAuthorizationV1Api,
  namespace: string,
  name: string,
  account: { namespace: string; name: string },
  rules: V1PolicyRule[],
): Promise<void> {
  await rbac.createNamespacedRole({ namespace, body: { metadata: { name }, rules } });
  await rbac.createNamespacedRoleBinding({
    namespace,
    body: {
      metadata: { name },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name },
      subjects: [{ kind: 'ServiceAccount', ...account }],
    },
  });
}
