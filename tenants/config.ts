/**
 * The stack config contract of the per-tenant program. The provisioner's engine builds the
 * config with `stackConfig(input)` and passes it to the Automation API (`stack.setAllConfig`);
 * the program reads it back with `readTenantConfig()`. Keys live in the `tenant` config
 * namespace (`tenant:tenantId`, …), so they do not depend on the engine's project name.
 * Secrets (root kubeconfig, runtime token, managed-cluster credentials) are marked secret and
 * stay Pulumi secrets inside the program.
 */
import type * as pulumi from '@pulumi/pulumi';
import { catalog as defaultCatalog, type Catalog } from '../runtime/catalog.ts';
import { DEFAULT_AGENT_IMAGE_REPOSITORY } from '../runtime/component/agents.ts';
import { isLocalPath, UPSTREAM_REPOSITORIES, type ChartRepositories } from '../runtime/component/chart-source.ts';
import { managedClustersProblem, type ManagedClusterConfig } from '../runtime/component/cluster-secret.ts';
import { PLANS } from './plans.ts';
import { pinKubeconfig, STRICT_KUBECONFIG_POLICY, type KubeconfigPolicy } from '../provisioner/kubeconfig/policy.ts';

export const CONFIG_NAMESPACE = 'tenant';

/** What the engine knows about a tenant and its root cluster. */
export interface TenantInput {
  /** Tenant id (the provisioner's uuid); the namespace is `tenant-<id>`. */
  tenantId: string;
  /** Organization name (an ownership label/annotation). */
  organization: string;
  /** Plan name (tenants/plans.ts). */
  plan: string;
  /** Runtime version from the catalog. */
  runtimeVersion: string;
  /** Scale the vcluster control plane to zero; the runtime's desired state is unchanged. */
  suspended: boolean;
  /** Kubeconfig (contents) of the tenant's root cluster. Secret. */
  rootKubeconfig: string;
  /** Token the runtime's agents present to the control plane. Secret. */
  runtimeToken: string;
  /** Base https URL of the control plane. */
  controlPlaneUrl: string;
  /** PEM public key of the control plane (the app-proxy verifies forwarded requests). */
  controlPlanePublicKey: string;
  /** Chart repository overrides per repository (mirror URL, oci:// URL or local directory). */
  chartRepositories?: ChartRepositories;
  /**
   * Server URL written into the exported vcluster kubeconfig; `{release}` and `{namespace}`
   * are replaced. Default `https://{release}.{namespace}.svc:443` (reachable from a provisioner
   * running in the root cluster).
   */
  vclusterServerTemplate?: string;
  /** Private CIDRs tenant egress may reach (none by default). */
  egressAllowedCidrs?: string[];
  /** CIDRs of the root cluster's API server for the vcluster syncer (default 0.0.0.0/0 on 443/6443 only). */
  kubernetesApiCidrs?: string[];
  /** How long to wait for the exported kubeconfig Secret after the release is ready (default 300). */
  kubeconfigTimeoutSeconds?: number;
  /** Namespaces allowed to reach the tenant (default: ingress-nginx and hosted-platform). */
  ingressNamespaces?: string[];
  /** PriorityClass for the vcluster control plane ('' for none; default tenant-control-plane). */
  priorityClassName?: string;
  /** Image repository prefix of the runtime agents. */
  agentImageRepository?: string;
  /** Argo CD URL template reported to the tenant; `{tenantId}`, `{namespace}`, `{controlPlaneUrl}` replaced. */
  argoCdUrlTemplate?: string;
  /** Managed clusters registered in the tenant's Argo CD; `config` holds credentials (secret). */
  managedClusters?: { name: string; server: string; namespaces?: string[]; config: ManagedClusterConfig }[];
  /** The kubeconfig policy the operator configured (default: strict, provisioner/kubeconfig/policy.ts). */
  kubeconfigPolicy?: KubeconfigPolicy;
}

/** The config the program works from (secrets as Outputs). */
export interface TenantSettings {
  tenantId: string;
  organization: string;
  plan: string;
  runtimeVersion: string;
  suspended: boolean;
  /** The root cluster's kubeconfig as the policy sanitised it (the raw config value is never used). */
  rootKubeconfig: pulumi.Output<string>;
  runtimeToken: pulumi.Output<string>;
  kubeconfigPolicy: KubeconfigPolicy;
  controlPlaneUrl: string;
  controlPlanePublicKey: string;
  chartRepositories: ChartRepositories;
  vclusterServerTemplate: string;
  egressAllowedCidrs: string[];
  kubernetesApiCidrs: string[];
  kubeconfigTimeoutSeconds: number;
  ingressNamespaces: string[];
  priorityClassName: string;
  agentImageRepository: string;
  argoCdUrlTemplate: string;
  managedClusters: { name: string; server: string; namespaces?: string[]; config: pulumi.Output<ManagedClusterConfig> }[];
}

export const DEFAULTS = {
  vclusterServerTemplate: 'https://{release}.{namespace}.svc:443',
  kubeconfigTimeoutSeconds: 300,
  ingressNamespaces: ['ingress-nginx', 'hosted-platform'],
  kubernetesApiCidrs: ['0.0.0.0/0'],
  priorityClassName: 'tenant-control-plane',
  agentImageRepository: DEFAULT_AGENT_IMAGE_REPOSITORY,
  argoCdUrlTemplate: '{controlPlaneUrl}/v1/tenants/{tenantId}/argo-cd/',
} as const;

const TENANT_ID = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const CIDR = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})\/(\d|[12]\d|3[0-2])$/;
const DNS_LABEL = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/;

export class TenantConfigError extends Error {
  override name = 'TenantConfigError';
  readonly field: string;
  constructor(field: string, message: string) {
    super(`tenant config '${field}': ${message}`);
    this.field = field;
  }
}

function isCidr(value: string): boolean {
  const m = CIDR.exec(value);
  return m !== null && m.slice(1, 5).every((o) => Number(o) <= 255);
}

function httpsUrl(field: string, value: string): void {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new TenantConfigError(field, `'${value}' is not a URL`);
  }
  if (url.protocol !== 'https:' && url.protocol !== 'http:') throw new TenantConfigError(field, `'${value}' must be an http(s) URL`);
}

/**
 * Why a chart repository override cannot be used, or undefined: the repository must be one this
 * product installs from, the location an http(s) or oci:// URL with a host, or a local directory.
 * The provisioner checks PROVISIONER_CHART_REPOSITORIES with it at start-up.
 */
export function chartRepositoryProblem(repository: string, location: unknown): string | undefined {
  const known = Object.keys(UPSTREAM_REPOSITORIES).join(', ');
  if (!Object.hasOwn(UPSTREAM_REPOSITORIES, repository)) return `'${repository}' is not a chart repository this product uses; known: ${known}`;
  if (typeof location !== 'string' || location === '') return `'${repository}' must be a non-empty string (URL or directory)`;
  if (!isLocalPath(location) && !/^(https?|oci):\/\/[^/\s]+/.test(location)) {
    return `'${repository}': '${location}' is neither an http(s) URL, an oci:// URL nor a local path (absolute, ./…, ../… or file://…)`;
  }
  return undefined;
}

/**
 * Why a vcluster server template cannot be used, or undefined: a URL once `{release}` and
 * `{namespace}` are filled in, with no other placeholder. http is allowed unless `httpsOnly`
 * (the provisioner's setting, since the vcluster API server only serves TLS).
 */
export function vclusterServerTemplateProblem(template: string, opts: { httpsOnly?: boolean } = {}): string | undefined {
  const sample = template.replaceAll('{release}', 'vcluster').replaceAll('{namespace}', 'tenant-x');
  if (/[{}]/.test(sample)) return `'${template}' has a placeholder other than {release} and {namespace}`;
  let url: URL;
  try {
    url = new URL(sample);
  } catch {
    return `'${template}' is not a URL template such as ${DEFAULTS.vclusterServerTemplate}`;
  }
  if (opts.httpsOnly && url.protocol !== 'https:') return `'${template}' must be an https URL (the vcluster API server only serves TLS)`;
  if (url.protocol !== 'https:' && url.protocol !== 'http:') return `'${template}' must be an http(s) URL`;
  return undefined;
}

/** Checks an input and throws a TenantConfigError naming the first bad field. */
export function validateTenantInput(input: TenantInput, catalog: Catalog = defaultCatalog): void {
  if (!TENANT_ID.test(input.tenantId) || input.tenantId.length > 56) {
    throw new TenantConfigError('tenantId', `'${input.tenantId}' must be lowercase letters, digits and '-', at most 56 characters`);
  }
  if (input.organization.trim() === '') throw new TenantConfigError('organization', 'must not be empty');
  if (!PLANS[input.plan]) throw new TenantConfigError('plan', `unknown plan '${input.plan}' (known: ${Object.keys(PLANS).join(', ')})`);
  if (!catalog.get(input.runtimeVersion)) throw new TenantConfigError('runtimeVersion', `runtime version '${input.runtimeVersion}' is not in the catalog`);
  if (input.rootKubeconfig.trim() === '') throw new TenantConfigError('rootKubeconfig', 'must not be empty');
  if (input.runtimeToken.trim() === '') throw new TenantConfigError('runtimeToken', 'must not be empty');
  httpsUrl('controlPlaneUrl', input.controlPlaneUrl);
  if (!input.controlPlanePublicKey.includes('PUBLIC KEY')) throw new TenantConfigError('controlPlanePublicKey', 'must be a PEM public key');
  for (const [repo, location] of Object.entries(input.chartRepositories ?? {})) {
    const problem = chartRepositoryProblem(repo, location);
    if (problem) throw new TenantConfigError(`chartRepositories.${repo}`, problem);
  }
  const templateProblem = input.vclusterServerTemplate === undefined ? undefined : vclusterServerTemplateProblem(input.vclusterServerTemplate);
  if (templateProblem) throw new TenantConfigError('vclusterServerTemplate', templateProblem);
  for (const [field, list] of [['egressAllowedCidrs', input.egressAllowedCidrs], ['kubernetesApiCidrs', input.kubernetesApiCidrs]] as const) {
    for (const cidr of list ?? []) if (!isCidr(cidr)) throw new TenantConfigError(field, `'${cidr}' is not an IPv4 CIDR`);
  }
  const timeout = input.kubeconfigTimeoutSeconds;
  if (timeout !== undefined && (!Number.isInteger(timeout) || timeout < 1 || timeout > 3600)) {
    throw new TenantConfigError('kubeconfigTimeoutSeconds', 'must be a whole number of seconds between 1 and 3600');
  }
  for (const ns of input.ingressNamespaces ?? []) if (!DNS_LABEL.test(ns)) throw new TenantConfigError('ingressNamespaces', `'${ns}' is not a namespace name`);
  const clustersProblem = managedClustersProblem(input.managedClusters ?? []);
  if (clustersProblem) throw new TenantConfigError('managedClusters', clustersProblem);
  const policy = input.kubeconfigPolicy;
  if (policy !== undefined) {
    const strings = (v: unknown) => Array.isArray(v) && v.every((c) => typeof c === 'string');
    if (typeof policy !== 'object' || policy === null || !strings(policy.execCommands) || !strings(policy.allowedCidrs) || typeof policy.allowInsecureTls !== 'boolean' || typeof policy.allowHttp !== 'boolean') {
      throw new TenantConfigError('kubeconfigPolicy', 'must be {"execCommands": [strings], "allowInsecureTls": boolean, "allowedCidrs": [strings], "allowHttp": boolean}');
    }
  }
}

export type StackConfig = Record<string, { value: string; secret: boolean }>;

const key = (name: string): string => `${CONFIG_NAMESPACE}:${name}`;

/** The Automation API config map for a tenant (validated; secrets marked). */
export function stackConfig(input: TenantInput, catalog: Catalog = defaultCatalog): StackConfig {
  validateTenantInput(input, catalog);
  const plain = (value: string) => ({ value, secret: false });
  const secret = (value: string) => ({ value, secret: true });
  const config: StackConfig = {
    [key('tenantId')]: plain(input.tenantId),
    [key('organization')]: plain(input.organization),
    [key('plan')]: plain(input.plan),
    [key('runtimeVersion')]: plain(input.runtimeVersion),
    [key('suspended')]: plain(String(input.suspended)),
    [key('rootKubeconfig')]: secret(input.rootKubeconfig),
    [key('runtimeToken')]: secret(input.runtimeToken),
    [key('controlPlaneUrl')]: plain(input.controlPlaneUrl),
    [key('controlPlanePublicKey')]: plain(input.controlPlanePublicKey),
  };
  const optional: [string, unknown][] = [
    ['chartRepositories', input.chartRepositories],
    ['vclusterServerTemplate', input.vclusterServerTemplate],
    ['egressAllowedCidrs', input.egressAllowedCidrs],
    ['kubernetesApiCidrs', input.kubernetesApiCidrs],
    ['kubeconfigTimeoutSeconds', input.kubeconfigTimeoutSeconds],
    ['ingressNamespaces', input.ingressNamespaces],
    ['priorityClassName', input.priorityClassName],
    ['agentImageRepository', input.agentImageRepository],
    ['argoCdUrlTemplate', input.argoCdUrlTemplate],
    ['kubeconfigPolicy', input.kubeconfigPolicy],
  ];
  for (const [name, value] of optional) {
    if (value === undefined) continue;
    config[key(name)] = plain(typeof value === 'string' ? value : JSON.stringify(value));
  }
  if (input.managedClusters?.length) {
    config[key('managedClusters')] = plain(JSON.stringify(input.managedClusters.map(({ name, server, namespaces }) => ({ name, server, namespaces }))));
    config[key('managedClusterCredentials')] = secret(JSON.stringify(Object.fromEntries(input.managedClusters.map((c) => [c.name, c.config]))));
  }
  return config;
}

/**
 * Reads and validates the stack config inside the program. Throws a TenantConfigError naming the
 * field when something is missing or malformed.
 */
export function readTenantConfig(config: pulumi.Config, catalog: Catalog = defaultCatalog): TenantSettings {
  const list = <T>(name: string): T | undefined => config.getObject<T>(name);
  // Secrets stay Outputs (never read as plaintext here).
  const rawKubeconfig = config.requireSecret('rootKubeconfig');
  const runtimeToken = config.requireSecret('runtimeToken');
  const clusters = list<{ name: string; server: string; namespaces?: string[] }[]>('managedClusters') ?? [];
  const credentials = clusters.length > 0 ? config.requireSecretObject<Record<string, ManagedClusterConfig>>('managedClusterCredentials') : undefined;
  const timeout = config.getNumber('kubeconfigTimeoutSeconds');
  const input: TenantInput = {
    tenantId: config.require('tenantId'),
    organization: config.require('organization'),
    plan: config.require('plan'),
    runtimeVersion: config.require('runtimeVersion'),
    suspended: config.getBoolean('suspended') ?? false,
    rootKubeconfig: 'validated-as-output',
    runtimeToken: 'validated-as-output',
    controlPlaneUrl: config.require('controlPlaneUrl'),
    controlPlanePublicKey: config.require('controlPlanePublicKey'),
    chartRepositories: list<ChartRepositories>('chartRepositories'),
    vclusterServerTemplate: config.get('vclusterServerTemplate'),
    egressAllowedCidrs: list<string[]>('egressAllowedCidrs'),
    kubernetesApiCidrs: list<string[]>('kubernetesApiCidrs'),
    kubeconfigTimeoutSeconds: timeout,
    ingressNamespaces: list<string[]>('ingressNamespaces'),
    priorityClassName: config.get('priorityClassName'),
    agentImageRepository: config.get('agentImageRepository'),
    argoCdUrlTemplate: config.get('argoCdUrlTemplate'),
    managedClusters: clusters.map((c) => ({ ...c, config: {} })),
    kubeconfigPolicy: list<KubeconfigPolicy>('kubeconfigPolicy'),
  };
  validateTenantInput(input, catalog);
  const kubeconfigPolicy = input.kubeconfigPolicy ?? STRICT_KUBECONFIG_POLICY;
  // The provider and the kubeconfig wait only ever see the policy's sanitised copy.
  const rootKubeconfig = rawKubeconfig.apply(async (text) => (await pinKubeconfig(text, kubeconfigPolicy)).text);
  return {
    tenantId: input.tenantId,
    organization: input.organization,
    plan: input.plan,
    runtimeVersion: input.runtimeVersion,
    suspended: input.suspended,
    rootKubeconfig,
    runtimeToken,
    kubeconfigPolicy,
    controlPlaneUrl: input.controlPlaneUrl,
    controlPlanePublicKey: input.controlPlanePublicKey,
    chartRepositories: input.chartRepositories ?? {},
    vclusterServerTemplate: input.vclusterServerTemplate ?? DEFAULTS.vclusterServerTemplate,
    egressAllowedCidrs: input.egressAllowedCidrs ?? [],
    kubernetesApiCidrs: input.kubernetesApiCidrs ?? [...DEFAULTS.kubernetesApiCidrs],
    kubeconfigTimeoutSeconds: input.kubeconfigTimeoutSeconds ?? DEFAULTS.kubeconfigTimeoutSeconds,
    ingressNamespaces: input.ingressNamespaces ?? [...DEFAULTS.ingressNamespaces],
    priorityClassName: input.priorityClassName ?? DEFAULTS.priorityClassName,
    agentImageRepository: input.agentImageRepository ?? DEFAULTS.agentImageRepository,
    argoCdUrlTemplate: input.argoCdUrlTemplate ?? DEFAULTS.argoCdUrlTemplate,
    managedClusters: credentials === undefined ? [] : clusters.map((c) => ({
      ...c,
      config: credentials.apply((all) => {
        const found = all[c.name];
        if (!found) throw new TenantConfigError('managedClusterCredentials', `no credentials for managed cluster '${c.name}'`);
        return found;
      }),
    })),
  };
}
