/**
 * What a tenant gets at a runtime version on a plan, offline: each Helm release rendered with
 * `helm template` from a chart mirror (a local folder of `<chart>-<version>.tgz`) with exactly the
 * values the tenants program passes (the same builders: tenants/vcluster-values.ts,
 * runtime/component/argo-releases.ts), the root-cluster objects the program creates in the tenant
 * namespace (tenants/tenant-namespace.ts, quota.ts, network-policies.ts) and the agents' objects
 * (runtime/component/agent-objects.ts, runtime-objects.ts). Used by `provisioner runtime render`
 * and `runtime diff` and by the conformance check.
 *
 * The vcluster release goes into the tenant namespace on the root cluster; the Argo releases and
 * the agents into the vcluster. Nothing here reaches a cluster or a chart repository.
 */
import { promotionCrds } from '../component/promotion-crds.ts';
import {
  ChartMissingError,
  helmTemplate,
  mirroredChart,
  parseObjects,
  RenderError,
  run,
  type KubeObject,
  type Values,
} from './helm.ts';
import { PROVISIONER_SERVICE_ACCOUNT } from '../../infra/provisioner-rbac.ts';
import { TENANT_FIELDS } from '../../tenants/config.ts';
import { tenantNetworkPolicies } from '../../tenants/network-policies.ts';
import { PLANS, planOf, type Plan } from '../../tenants/plans.ts';
import { limitRangeSpec, quotaSpec } from '../../tenants/quota.ts';
import { TENANT_CLUSTER_ROLE, TENANT_ROLE_BINDING } from '../../tenants/root-permissions.ts';
import {
  LIMIT_RANGE_NAME,
  ownershipLabels,
  QUOTA_NAME,
  tenantNamespaceLabels,
  tenantNamespaceName,
} from '../../tenants/tenant-namespace.ts';
import { vclusterValues } from '../../tenants/vcluster-values.ts';
import { exportServer, VCLUSTER_RELEASE } from '../../tenants/virtual-cluster.ts';
import { catalog as defaultCatalog, type Catalog } from '../catalog.ts';
import type { RuntimeVersion } from '../versions.ts';
import { agentObjects } from '../component/agent-objects.ts';
import {
  agentsAt,
  CREDENTIAL_KEYS,
  CREDENTIALS_SECRET,
  DEFAULT_AGENT_IMAGE_REPOSITORY,
  RUNTIME_NAMESPACE,
  SOURCE_SERVER_ARGOCD_SECRET,
} from '../component/agents.ts';
import { ARGO_RELEASES, argoReleaseValues, mergeValues } from '../component/argo-releases.ts';
import { sourceServerArgoCdValues } from '../component/source-server-account.ts';
import type { RepositoryName } from '../component/chart-source.ts';
import { runtimeNamespace, versionsConfigMap } from '../component/runtime-objects.ts';

export { ChartMissingError, helmTemplate, mirroredChart, parseObjects, RenderError, run, type KubeObject, type Values };

export interface RenderedRelease {
  /** Helm release name. */
  release: string;
  chart: string;
  chartVersion: string;
  namespace: string;
  /** Where it is installed: the root cluster (tenant namespace) or the tenant's vcluster. */
  cluster: 'root' | 'vcluster';
  values: Values;
  objects: KubeObject[];
}

export interface RenderedRuntime {
  version: string;
  plan: string;
  /** The tenant namespace on the root cluster. */
  namespace: string;
  releases: RenderedRelease[];
  /** What the program creates in the tenant namespace besides the vcluster release. */
  root: KubeObject[];
  /** The agents and the runtime's own objects inside the vcluster (Secret values left out). */
  agents: KubeObject[];
}

export interface RenderOptions {
  version: string;
  plan: string;
  /** The chart mirror: a folder of `<chart>-<version>.tgz`. */
  chartsDir: string;
  /** The helm binary (runtime/render/chart-tools.ts finds one). */
  helm: string;
  catalog?: Catalog;
  /** Tenant id the objects are named for (a placeholder by default). */
  tenantId?: string;
  /** Changes the values of a release before it is rendered (the conformance check's own tests use it). */
  transformValues?: (chart: string, values: Values) => Values;
  /**
   * The root cluster's Kubernetes version the root releases (the vcluster chart) are rendered for;
   * helm's default when absent. The conformance check gives the newest the provisioner supports.
   */
  rootKubeVersion?: string;
}

/** What the render shows for a value derived from the tenant's runtime token. */
const PER_TENANT = '<set per tenant>';

/** A tenant id for renders that are not of a tenant. */
export const EXAMPLE_TENANT_ID = '00000000-0000-4000-8000-000000000000';

export function planNamed(name: string): Plan {
  const plan = planOf(name);
  if (!plan) throw new RenderError(`unknown plan '${name}' (plans: ${Object.keys(PLANS).join(', ')})`);
  return plan;
}

export function versionEntry(version: string, catalog: Catalog = defaultCatalog): RuntimeVersion {
  const entry = catalog.get(version);
  if (!entry) {
    throw new RenderError(
      `runtime version '${version}' is not in the catalog (known: ${catalog.versions.map((v) => v.version).join(', ')})`,
    );
  }
  return entry;
}

/** The values of every release of a tenant at `version` on `plan`, as the tenants program passes them. */
export function releaseValues(
  entry: RuntimeVersion,
  plan: Plan,
  namespace: string,
): {
  chart: string;
  release: string;
  namespace: string;
  cluster: 'root' | 'vcluster';
  repository: RepositoryName;
  chartVersion: string;
  values: Values;
}[] {
  const pins = entry.components;
  const server = exportServer(TENANT_FIELDS.vclusterServerTemplate.fallback!(), VCLUSTER_RELEASE, namespace);
  return [
    {
      chart: 'vcluster',
      release: VCLUSTER_RELEASE,
      namespace,
      cluster: 'root',
      repository: 'vcluster',
      chartVersion: pins.vcluster,
      values: vclusterValues({
        chartVersion: pins.vcluster,
        kubernetes: pins.kubernetes,
        plan,
        suspended: false,
        exportServer: server,
        context: namespace,
        priorityClassName: TENANT_FIELDS.priorityClassName.fallback!(),
      }) as unknown as Values,
    },
    ...ARGO_RELEASES.map((spec) => ({
      chart: spec.chart,
      release: spec.releaseName,
      namespace: spec.namespace,
      cluster: 'vcluster' as const,
      repository: 'argo' as const,
      chartVersion: pins[spec.component],
      values:
        spec.component === 'argoCd' && agentsAt(entry.version).some((a) => a.name === 'source-server')
          ? mergeValues(argoReleaseValues(spec, plan.runtime), sourceServerArgoCdValues(PER_TENANT))
          : argoReleaseValues(spec, plan.runtime),
    })),
  ];
}

/** The objects the program creates in the tenant namespace on the root cluster (besides the vcluster release). */
export function rootObjects(tenantId: string, plan: Plan): KubeObject[] {
  const namespace = tenantNamespaceName(tenantId);
  const labels = ownershipLabels(tenantId, plan.name);
  const meta = (name: string) => ({ name, namespace, labels });
  const defaults = {
    ingressNamespaces: TENANT_FIELDS.ingressNamespaces.fallback!(),
    egressAllowedCidrs: TENANT_FIELDS.egressAllowedCidrs.fallback!(),
    kubernetesApiCidrs: TENANT_FIELDS.kubernetesApiCidrs.fallback!(),
  };
  const objects: unknown[] = [
    {
      apiVersion: 'v1',
      kind: 'Namespace',
      metadata: { name: namespace, labels: tenantNamespaceLabels(tenantId, plan.name) },
    },
    {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'RoleBinding',
      metadata: meta(TENANT_ROLE_BINDING),
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: TENANT_CLUSTER_ROLE },
      // Whoever the root kubeconfig authenticates as: infra/'s provisioner ServiceAccount in production.
      subjects: [{ kind: 'ServiceAccount', ...PROVISIONER_SERVICE_ACCOUNT }],
    },
    { apiVersion: 'v1', kind: 'ResourceQuota', metadata: meta(QUOTA_NAME), spec: quotaSpec(plan) },
    { apiVersion: 'v1', kind: 'LimitRange', metadata: meta(LIMIT_RANGE_NAME), spec: limitRangeSpec(plan) },
    ...tenantNetworkPolicies(defaults).map((p) => ({
      apiVersion: 'networking.k8s.io/v1',
      kind: 'NetworkPolicy',
      metadata: meta(p.name),
      spec: p.spec,
    })),
  ];
  return objects as KubeObject[];
}

/** The runtime's own objects in the vcluster: its namespace, versions ConfigMap, credentials Secret (no values), agents. */
export function agentsObjects(entry: RuntimeVersion, plan: Plan, tenantId: string): KubeObject[] {
  const objects: unknown[] = [
    runtimeNamespace(),
    versionsConfigMap(entry),
    {
      apiVersion: 'v1',
      kind: 'Secret',
      metadata: {
        name: CREDENTIALS_SECRET,
        namespace: RUNTIME_NAMESPACE,
        labels: { 'app.kubernetes.io/part-of': 'hosted-runtime' },
      },
      type: 'Opaque',
      // The keys only: the values are the tenant's runtime token and the control plane's addresses.
      stringData: Object.fromEntries(Object.values(CREDENTIAL_KEYS).map((k) => [k, PER_TENANT])),
    },
  ];
  const agents = agentsAt(entry.version);
  const sourceServer = agents.some((a) => a.name === 'source-server');
  if (sourceServer)
    objects.push({
      apiVersion: 'v1',
      kind: 'Secret',
      metadata: {
        name: SOURCE_SERVER_ARGOCD_SECRET,
        namespace: RUNTIME_NAMESPACE,
        labels: { 'app.kubernetes.io/part-of': 'hosted-runtime' },
      },
      type: 'Opaque',
      stringData: { password: PER_TENANT },
    });
  if (agents.some((a) => a.name === 'gitops-operator')) objects.push(...promotionCrds());
  for (const agent of agents) {
    const image = `${DEFAULT_AGENT_IMAGE_REPOSITORY}/${agent.name}:${entry.components.agents}`;
    // The GitOps Operator's PRODUCTS_URL is the control plane's public URL's console page (per tenant).
    const o = agentObjects(agent, image, tenantId, plan.runtime.agents[agent.name], undefined, {
      sourceServer,
      productsUrl: PER_TENANT,
    });
    objects.push(
      ...[
        o.serviceAccount,
        o.role,
        o.roleBinding,
        ...(o.otherRoles ?? []).flatMap((r) => [r.role, r.roleBinding]),
        o.clusterRole,
        o.clusterRoleBinding,
        o.service,
        o.deployment,
      ].filter((x) => x !== undefined),
    );
  }
  return objects as KubeObject[];
}

/** Renders everything a tenant gets at `version` on `plan` from the mirror. */
export async function renderRuntime(opts: RenderOptions): Promise<RenderedRuntime> {
  const entry = versionEntry(opts.version, opts.catalog);
  const plan = planNamed(opts.plan);
  const tenantId = opts.tenantId ?? EXAMPLE_TENANT_ID;
  const namespace = tenantNamespaceName(tenantId);
  const specs = releaseValues(entry, plan, namespace).map((r) => ({
    ...r,
    path: mirroredChart(opts.chartsDir, r.repository, r.chart, r.chartVersion, entry.version),
    values: opts.transformValues ? opts.transformValues(r.chart, r.values) : r.values,
  }));
  const releases = await Promise.all(
    specs.map(async (r): Promise<RenderedRelease> => ({
      release: r.release,
      chart: r.chart,
      chartVersion: r.chartVersion,
      namespace: r.namespace,
      cluster: r.cluster,
      values: r.values,
      objects: await helmTemplate(opts.helm, {
        release: r.release,
        chart: r.path,
        namespace: r.namespace,
        values: r.values,
        // The Argo charts are rendered for the vcluster's Kubernetes version; the vcluster chart
        // for the root version asked for, else helm's default (a root's version is not known offline).
        ...(r.cluster === 'vcluster'
          ? { kubeVersion: entry.components.kubernetes }
          : opts.rootKubeVersion
            ? { kubeVersion: opts.rootKubeVersion }
            : {}),
      }),
    })),
  );
  return {
    version: entry.version,
    plan: plan.name,
    namespace,
    releases,
    root: rootObjects(tenantId, plan),
    agents: agentsObjects(entry, plan, tenantId),
  };
}
