/**
 * The stack config contract of the per-tenant program. The provisioner's engine builds the
 * config with `stackConfig(input)` and passes it to the Automation API (`stack.setAllConfig`);
 * the program reads it back with `readTenantConfig()`. Keys live in the `tenant` config
 * namespace (`tenant:tenantId`, …), so they do not depend on the engine's project name.
 * Secrets (root kubeconfig, runtime token, managed-cluster credentials) are marked secret and
 * stay Pulumi secrets inside the program.
 *
 * Every setting is described once, in TENANT_FIELDS (how it is written and read back, whether it
 * is secret, its default, what makes it wrong); a new setting is a TenantInput field and a row
 * there. TenantSettings (what the program works from) is derived from both.
 */
import type * as pulumi from '@pulumi/pulumi';
import { catalog as defaultCatalog, type Catalog } from '../runtime/catalog.ts';
import { DEFAULT_AGENT_IMAGE_REPOSITORY } from '../runtime/component/agents.ts';
import { isLocalPath, UPSTREAM_REPOSITORIES, type ChartRepositories } from '../runtime/component/chart-source.ts';
import { managedClustersProblem, type ManagedClusterConfig } from '../runtime/component/cluster-secret.ts';
import { PLANS, planOf } from './plans.ts';
import { pinKubeconfig, STRICT_KUBECONFIG_POLICY, type KubeconfigPolicy } from '../kubeconfig-policy/policy.ts';

export const CONFIG_NAMESPACE = 'tenant';

/** What the engine knows about a tenant and its root cluster: the program's settings, as written. */
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
  /**
   * How long each Helm release of the runtime (the Argo charts) may take to become ready before
   * the run fails (default 600): a version whose runtime never becomes Available fails its
   * operation after this long.
   */
  runtimeReleaseTimeoutSeconds?: number;
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
  /** The kubeconfig policy the operator configured (default: strict, kubeconfig-policy/policy.ts). */
  kubeconfigPolicy?: KubeconfigPolicy;
}

const TENANT_ID = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const CIDR = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})\/(\d|[12]\d|3[0-2])$/;
const DNS_LABEL = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/;
const DEFAULT_SERVER_TEMPLATE = 'https://{release}.{namespace}.svc:443';

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

function httpUrlProblem(value: string): string | undefined {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    return `'${value}' is not a URL`;
  }
  return url.protocol === 'https:' || url.protocol === 'http:' ? undefined : `'${value}' must be an http(s) URL`;
}

/** A problem with a value: a message, or a message about one part of it (`chartRepositories.argo`). */
type Problem = string | { field: string; message: string };

/** `each` applied to every item of a list of strings. */
function listProblem(value: unknown, each: (item: string) => string | undefined): Problem | undefined {
  if (!Array.isArray(value) || !value.every((v) => typeof v === 'string')) return 'must be a list of strings';
  for (const item of value) {
    const problem = each(item);
    if (problem) return problem;
  }
  return undefined;
}

const notEmpty = (value: string): string | undefined => (value.trim() === '' ? 'must not be empty' : undefined);

/**
 * Why a chart repository override cannot be used, or undefined: the repository must be one this
 * product installs from, the location an http(s) or oci:// URL with a host, or a local directory.
 * The provisioner checks PROVISIONER_CHART_REPOSITORIES with it at start-up.
 */
export function chartRepositoryProblem(repository: string, location: unknown): string | undefined {
  const known = Object.keys(UPSTREAM_REPOSITORIES).join(', ');
  if (!Object.hasOwn(UPSTREAM_REPOSITORIES, repository))
    return `'${repository}' is not a chart repository this product uses; known: ${known}`;
  if (typeof location !== 'string' || location === '')
    return `'${repository}' must be a non-empty string (URL or directory)`;
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
export function vclusterServerTemplateProblem(
  template: string,
  opts: { httpsOnly?: boolean } = {},
): string | undefined {
  const sample = template.replaceAll('{release}', 'vcluster').replaceAll('{namespace}', 'tenant-x');
  if (/[{}]/.test(sample)) return `'${template}' has a placeholder other than {release} and {namespace}`;
  let url: URL;
  try {
    url = new URL(sample);
  } catch {
    return `'${template}' is not a URL template such as ${DEFAULT_SERVER_TEMPLATE}`;
  }
  if (opts.httpsOnly && url.protocol !== 'https:')
    return `'${template}' must be an https URL (the vcluster API server only serves TLS)`;
  if (url.protocol !== 'https:' && url.protocol !== 'http:') return `'${template}' must be an http(s) URL`;
  return undefined;
}

/** How a setting is written as a stack config value and read back; decode throws on malformed text. */
interface Codec<T> {
  encode(value: T): string;
  decode(text: string): T;
}

const text: Codec<string> = { encode: (value) => value, decode: (t) => t };
const boolean: Codec<boolean> = {
  encode: (value) => String(value),
  decode: (t) => {
    if (t !== 'true' && t !== 'false') throw new Error(`'${t}' is neither true nor false`);
    return t === 'true';
  },
};
/** JSON; the value's shape is checked by the field's `problem`. */
function json<T>(): Codec<T> {
  return { encode: (value) => JSON.stringify(value), decode: (t) => JSON.parse(t) as T };
}

interface Field<T, Secret extends boolean = boolean> {
  /** Marked secret in the stack config; a pulumi.Output in the program, never read as plaintext there. */
  secret: Secret;
  codec: Codec<T>;
  /** The program's value when the stack config leaves the setting out; without one it is required. */
  fallback?: () => T;
  /** Why a value cannot be used, or undefined. */
  problem?: (value: T, catalog: Catalog) => Problem | undefined;
}

type Rest<T> = Omit<Field<T>, 'secret' | 'codec'>;
const plain = <T>(codec: Codec<T>, rest: Rest<T> = {}): Field<T, false> => ({ secret: false, codec, ...rest });
const secret = <T>(codec: Codec<T>, rest: Rest<T> = {}): Field<T, true> => ({ secret: true, codec, ...rest });

/** Managed clusters: the one setting written in two parts (plain registrations, secret credentials); see stackConfig. */
type FieldName = Exclude<keyof TenantInput, 'managedClusters'>;
type Value<K extends keyof TenantInput> = NonNullable<TenantInput[K]>;

/**
 * Every tenant setting but managed clusters, in the order they are checked: how each is stored,
 * its default in the program, and what makes it wrong. The config key is `tenant:<name>`.
 */
export const TENANT_FIELDS = {
  tenantId: plain(text, {
    problem: (id) =>
      TENANT_ID.test(id) && id.length <= 56
        ? undefined
        : `'${id}' must be lowercase letters, digits and '-', at most 56 characters`,
  }),
  organization: plain(text, { problem: notEmpty }),
  plan: plain(text, {
    problem: (plan) => (planOf(plan) ? undefined : `unknown plan '${plan}' (known: ${Object.keys(PLANS).join(', ')})`),
  }),
  runtimeVersion: plain(text, {
    problem: (version, catalog) =>
      catalog.get(version) ? undefined : `runtime version '${version}' is not in the catalog`,
  }),
  suspended: plain(boolean, { fallback: () => false }),
  rootKubeconfig: secret(text, { problem: notEmpty }),
  runtimeToken: secret(text, { problem: notEmpty }),
  controlPlaneUrl: plain(text, { problem: httpUrlProblem }),
  controlPlanePublicKey: plain(text, {
    problem: (pem) => (pem.includes('PUBLIC KEY') ? undefined : 'must be a PEM public key'),
  }),
  chartRepositories: plain(json<ChartRepositories>(), {
    fallback: () => ({}),
    problem: (repositories) => {
      if (typeof repositories !== 'object' || repositories === null || Array.isArray(repositories))
        return 'must be an object of repository name to location';
      for (const [repository, location] of Object.entries(repositories)) {
        const message = chartRepositoryProblem(repository, location);
        if (message) return { field: `chartRepositories.${repository}`, message };
      }
      return undefined;
    },
  }),
  vclusterServerTemplate: plain(text, {
    fallback: () => DEFAULT_SERVER_TEMPLATE,
    problem: (template) => vclusterServerTemplateProblem(template),
  }),
  egressAllowedCidrs: plain(json<string[]>(), {
    fallback: () => [],
    problem: (cidrs) => listProblem(cidrs, cidrProblem),
  }),
  kubernetesApiCidrs: plain(json<string[]>(), {
    fallback: () => ['0.0.0.0/0'],
    problem: (cidrs) => listProblem(cidrs, cidrProblem),
  }),
  kubeconfigTimeoutSeconds: plain(json<number>(), {
    fallback: () => 300,
    problem: (s) =>
      Number.isInteger(s) && s >= 1 && s <= 3600 ? undefined : 'must be a whole number of seconds between 1 and 3600',
  }),
  runtimeReleaseTimeoutSeconds: plain(json<number>(), {
    fallback: () => 600,
    problem: (s) =>
      Number.isInteger(s) && s >= 1 && s <= 3600 ? undefined : 'must be a whole number of seconds between 1 and 3600',
  }),
  ingressNamespaces: plain(json<string[]>(), {
    fallback: () => ['ingress-nginx', 'hosted-platform'],
    problem: (namespaces) =>
      listProblem(namespaces, (ns) => (DNS_LABEL.test(ns) ? undefined : `'${ns}' is not a namespace name`)),
  }),
  priorityClassName: plain(text, { fallback: () => 'tenant-control-plane' }),
  agentImageRepository: plain(text, { fallback: () => DEFAULT_AGENT_IMAGE_REPOSITORY }),
  argoCdUrlTemplate: plain(text, { fallback: () => '{controlPlaneUrl}/v1/tenants/{tenantId}/argo-cd/' }),
  kubeconfigPolicy: plain(json<KubeconfigPolicy>(), {
    fallback: () => STRICT_KUBECONFIG_POLICY,
    problem: (policy) => {
      const strings = (v: unknown) => Array.isArray(v) && v.every((c) => typeof c === 'string');
      return typeof policy === 'object' &&
        policy !== null &&
        strings(policy.execCommands) &&
        strings(policy.allowedCidrs) &&
        typeof policy.allowInsecureTls === 'boolean' &&
        typeof policy.allowHttp === 'boolean'
        ? undefined
        : 'must be {"execCommands": [strings], "allowInsecureTls": boolean, "allowedCidrs": [strings], "allowHttp": boolean}';
    },
  }),
} satisfies { [K in FieldName]-?: Field<Value<K>> };

function cidrProblem(cidr: string): string | undefined {
  return isCidr(cidr) ? undefined : `'${cidr}' is not an IPv4 CIDR`;
}

const FIELD_NAMES = Object.keys(TENANT_FIELDS) as FieldName[];
type SecretName = { [K in FieldName]: (typeof TENANT_FIELDS)[K]['secret'] extends true ? K : never }[FieldName];

/** A managed cluster as the program sees it: credentials stay a secret Output. */
export interface ManagedClusterSetting {
  name: string;
  server: string;
  namespaces?: string[];
  config: pulumi.Output<ManagedClusterConfig>;
}

/**
 * Settings the provisioner fills in from its own configuration, the same for every tenant
 * (provisioner/engine/create.ts); the engine's StackInput carries the rest.
 */
export type DeploymentSetting =
  | 'controlPlaneUrl'
  | 'controlPlanePublicKey'
  | 'chartRepositories'
  | 'vclusterServerTemplate'
  | 'kubeconfigPolicy'
  | 'runtimeReleaseTimeoutSeconds';

/**
 * The config the program works from: every setting present (defaults filled in), secrets as
 * Outputs; rootKubeconfig is the copy the kubeconfig policy sanitised (the raw value is never used).
 */
export type TenantSettings = { [K in FieldName]: K extends SecretName ? pulumi.Output<Value<K>> : Value<K> } & {
  managedClusters: ManagedClusterSetting[];
};

/** Throws a TenantConfigError naming `name` (or the part of it the problem names) when `value` is wrong. */
function check(name: string, field: Field<unknown>, value: unknown, catalog: Catalog): void {
  const problem = field.problem?.(value, catalog);
  if (problem === undefined) return;
  if (typeof problem === 'string') throw new TenantConfigError(name, problem);
  throw new TenantConfigError(problem.field, problem.message);
}

function managedClustersCheck(clusters: unknown): void {
  if (!Array.isArray(clusters)) throw new TenantConfigError('managedClusters', 'must be a list of clusters');
  const problem = managedClustersProblem(clusters as Array<{ name: string; server: string }>);
  if (problem) throw new TenantConfigError('managedClusters', problem);
}

/** Checks an input and throws a TenantConfigError naming the first bad field. */
export function validateTenantInput(input: TenantInput, catalog: Catalog = defaultCatalog): void {
  for (const name of FIELD_NAMES) {
    const field = TENANT_FIELDS[name] as Field<unknown>;
    const value = input[name];
    if (value === undefined) {
      if (!field.fallback) throw new TenantConfigError(name, 'is required');
      continue;
    }
    check(name, field, value, catalog);
  }
  if (input.managedClusters !== undefined) managedClustersCheck(input.managedClusters);
}

export type StackConfig = Record<string, { value: string; secret: boolean }>;

const key = (name: string): string => `${CONFIG_NAMESPACE}:${name}`;

/** The Automation API config map for a tenant (validated; secrets marked). */
export function stackConfig(input: TenantInput, catalog: Catalog = defaultCatalog): StackConfig {
  validateTenantInput(input, catalog);
  const config: StackConfig = {};
  for (const name of FIELD_NAMES) {
    const field = TENANT_FIELDS[name] as Field<unknown>;
    const value = input[name];
    if (value !== undefined) config[key(name)] = { value: field.codec.encode(value), secret: field.secret };
  }
  // Always written, an empty list included: a stack keeps config keys an earlier run set, so a
  // removed registration left out here would stay in the stack (and its cluster Secret with it).
  const clusters = input.managedClusters ?? [];
  const registrations = clusters.map(({ name, server, namespaces }) => ({ name, server, namespaces }));
  config[key('managedClusters')] = { value: JSON.stringify(registrations), secret: false };
  config[key('managedClusterCredentials')] = {
    value: JSON.stringify(Object.fromEntries(clusters.map((c) => [c.name, c.config]))),
    secret: true,
  };
  return config;
}

function decode(name: string, field: Field<unknown>, raw: string, catalog: Catalog): unknown {
  let value: unknown;
  try {
    value = field.codec.decode(raw);
  } catch (err) {
    throw new TenantConfigError(name, `cannot be read: ${err instanceof Error ? err.message : String(err)}`);
  }
  check(name, field, value, catalog);
  return value;
}

/**
 * Reads and validates the stack config inside the program (`config`: the `tenant` namespace).
 * Throws a TenantConfigError naming the field when something is missing or malformed; secrets
 * are checked as they resolve, and stay Outputs.
 */
export function readTenantConfig(config: pulumi.Config, catalog: Catalog = defaultCatalog): TenantSettings {
  const settings: Record<string, unknown> = {};
  for (const name of FIELD_NAMES) {
    const field = TENANT_FIELDS[name] as Field<unknown>;
    const raw = field.secret ? config.getSecret(name) : config.get(name);
    if (raw === undefined) {
      if (!field.fallback) throw new TenantConfigError(name, 'is missing from the stack config');
      settings[name] = field.fallback();
    } else {
      settings[name] =
        typeof raw === 'string'
          ? decode(name, field, raw, catalog)
          : raw.apply((text) => decode(name, field, text, catalog));
    }
  }
  // The provider and the kubeconfig wait only ever see the policy's sanitised copy of the root kubeconfig.
  const policy = settings.kubeconfigPolicy as KubeconfigPolicy;
  settings.rootKubeconfig = (settings.rootKubeconfig as pulumi.Output<string>).apply(
    async (text) => (await pinKubeconfig(text, policy)).text,
  );
  const clustersText = config.get('managedClusters');
  const clusters =
    clustersText === undefined
      ? []
      : (decode('managedClusters', plain(json<unknown>()), clustersText, catalog) as Array<
          Omit<ManagedClusterSetting, 'config'>
        >);
  managedClustersCheck(clusters);
  const credentials =
    clusters.length > 0
      ? config.requireSecretObject<Record<string, ManagedClusterConfig>>('managedClusterCredentials')
      : undefined;
  settings.managedClusters =
    credentials === undefined
      ? []
      : clusters.map((c): ManagedClusterSetting => ({
          ...c,
          config: credentials.apply((all) => {
            const found = all[c.name];
            if (!found)
              throw new TenantConfigError(
                'managedClusterCredentials',
                `no credentials for managed cluster '${c.name}'`,
              );
            return found;
          }),
        }));
  return settings as TenantSettings;
}
