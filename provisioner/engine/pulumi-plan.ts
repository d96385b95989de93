/**
 * The decisions of the Pulumi engine, as plain data and without the CLI: the stack name, the
 * work directory, the backend URL, the environment of the CLI, the stack config (with secret
 * flags) and the recovery steps. pulumi.ts carries these plans out through the Automation API;
 * unit tests check the plans (test/unit/engine).
 */
import { join } from 'node:path';
import type { StackInput } from './engine.ts';

export const PROJECT_NAME = 'tenants';
/** Inline programs need 3.181+ for refresh/destroy; the DIY Postgres backend needs 3.176+. */
export const MINIMUM_CLI_VERSION = '3.181.0';
export const STATE_TABLE = 'pulumi_state';

export const INSTALL_HINT =
  `install the Pulumi CLI ${MINIMUM_CLI_VERSION} or newer (scripts/toolchain.sh builds it from source; or download it from the Pulumi website) ` +
  'and put it on PATH, or set PROVISIONER_PULUMI_CLI_DIR to the folder that holds it; then the reconciler retries by itself';

export type ConfigMap = Record<string, { value: string; secret: boolean }>;

export interface PulumiPlanOptions {
  /** Provisioner data dir; work dirs live under `<dataDir>/engine/<tenantId>`. */
  dataDir: string;
  /** PULUMI_BACKEND_URL; already resolved by backendUrlFor(). */
  backendUrl: string;
  /** `passphrase` or a KMS URL. */
  secretsProvider: string;
  passphrase: string | undefined;
  pulumiHome: string;
  /** Builds the program's stack config from the input (tenants/config.ts stackConfig). */
  stackConfig: (input: StackInput) => ConfigMap;
}

export interface StackPlan {
  projectName: string;
  stackName: string;
  workDir: string;
  secretsProvider: string;
  /** Environment of every CLI call (holds the backend URL and passphrase: never log it). */
  envVars: Record<string, string>;
  config: ConfigMap;
}

export type RecoveryStep =
  | { step: 'cancel'; why: string }
  | { step: 'release-helm'; why: string }
  | { step: 'refresh'; clearPendingCreates: true; why: string };

export function stackNameFor(tenantId: string): string {
  return `tenant-${tenantId}`;
}

export function workDirFor(dataDir: string, tenantId: string): string {
  if (!/^[A-Za-z0-9-]+$/.test(tenantId)) throw new Error(`tenant id '${tenantId}' cannot name a work directory`);
  return join(dataDir, 'engine', tenantId);
}

/**
 * The state backend: PULUMI_BACKEND_URL when given (postgresql:// is rewritten to the
 * postgres:// scheme the CLI registers), otherwise the provisioner's own database with the
 * state in its own table (`?table=pulumi_state`).
 */
export function backendUrlFor(configured: string | undefined, databaseUrl: string): string {
  const raw = configured ?? databaseUrl;
  const url = new URL(raw);
  if (url.protocol === 'postgresql:' || url.protocol === 'postgres:') {
    const out = new URL(raw.replace(/^postgresql:/, 'postgres:'));
    if (configured === undefined || !out.searchParams.has('table')) out.searchParams.set('table', STATE_TABLE);
    return out.toString();
  }
  return raw;
}

/** The backend URL with any password replaced, for logs and errors. */
export function redactUrl(raw: string): string {
  try {
    const url = new URL(raw);
    if (url.password) url.password = 'redacted';
    return url.toString();
  } catch {
    return '[unparseable URL]';
  }
}

export function envVarsFor(
  opts: Pick<PulumiPlanOptions, 'backendUrl' | 'secretsProvider' | 'passphrase' | 'pulumiHome'>,
): Record<string, string> {
  const env: Record<string, string> = {
    PULUMI_BACKEND_URL: opts.backendUrl,
    PULUMI_HOME: opts.pulumiHome,
    PULUMI_SKIP_UPDATE_CHECK: 'true',
    PULUMI_DIY_BACKEND_NO_LEGACY_WARNING: 'true',
  };
  if (opts.secretsProvider === 'passphrase') {
    if (opts.passphrase === undefined)
      throw new Error(
        "PULUMI_CONFIG_PASSPHRASE is not set: set it (it encrypts the stacks' secrets; keep it safe) or set PROVISIONER_SECRETS_PROVIDER to a KMS URL",
      );
    env.PULUMI_CONFIG_PASSPHRASE = opts.passphrase;
  }
  return env;
}

export function planStack(input: StackInput, opts: PulumiPlanOptions): StackPlan {
  return {
    projectName: PROJECT_NAME,
    stackName: stackNameFor(input.tenantId),
    workDir: workDirFor(opts.dataDir, input.tenantId),
    secretsProvider: opts.secretsProvider,
    envVars: envVarsFor(opts),
    config: opts.stackConfig(input),
  };
}

/**
 * What to do before running a stack whose last operation did not finish. The caller has already
 * proven the old owner gone (its lease expired or was handed back): only then is the lock stale.
 */
export function recoveryPlan(): RecoveryStep[] {
  return [
    {
      step: 'cancel',
      why: 'the previous operation did not finish and its lease proves the owner gone: clear the stale stack lock',
    },
    {
      step: 'release-helm',
      why: 'a Helm release the interrupted operation was installing or upgrading keeps a record that blocks the next install or upgrade: remove it (the objects already created are adopted by the next run)',
    },
    {
      step: 'refresh',
      clearPendingCreates: true,
      why: 'drop pending creates the interrupted operation left in the state, then read the real state',
    },
  ];
}

/** The config map with secret values hidden: safe to write to logs. */
export function redactConfig(config: ConfigMap): Record<string, string> {
  return Object.fromEntries(Object.entries(config).map(([k, v]) => [k, v.secret ? '[secret]' : v.value]));
}

/** Compares dotted versions (3.181.0 vs 3.99.1); prerelease tags are ignored. */
export function compareCliVersions(a: string, b: string): number {
  const parts = (v: string) =>
    v
      .replace(/^v/, '')
      .split(/[-+]/)[0]!
      .split('.')
      .map((p) => Number(p) || 0);
  const pa = parts(a);
  const pb = parts(b);
  for (let i = 0; i < 3; i++) {
    const d = (pa[i] ?? 0) - (pb[i] ?? 0);
    if (d !== 0) return d;
  }
  return 0;
}

/** Undefined when the CLI version is usable, else a message saying what to do. */
export function cliVersionProblem(version: string | null): string | undefined {
  if (version === null) return `the Pulumi CLI did not report its version: ${INSTALL_HINT}`;
  if (compareCliVersions(version, MINIMUM_CLI_VERSION) < 0) {
    return `the Pulumi CLI ${version} is too old (the engine needs ${MINIMUM_CLI_VERSION}+ for inline refresh/destroy and the Postgres state backend): ${INSTALL_HINT}`;
  }
  return undefined;
}

/** Where PulumiCommand.get() should look: the configured folder (its bin/ when present) or PATH. */
export function cliRootFor(cliDir: string | undefined, exists: (path: string) => boolean): string | undefined {
  if (cliDir === undefined) return undefined;
  // PulumiCommand.get({root}) runs `<root>/bin/pulumi`; accept a folder that holds `pulumi` directly.
  if (exists(join(cliDir, 'bin', 'pulumi'))) return cliDir;
  if (exists(join(cliDir, 'pulumi')) && cliDir.endsWith('/bin')) return cliDir.slice(0, -'/bin'.length);
  return cliDir;
}

/** Plugins the tenants program needs, installed once at start-up (name, version). */
export function requiredPlugins(kubernetesVersion: string): Array<{ name: string; version: string; kind: 'resource' }> {
  return [{ name: 'kubernetes', version: `v${kubernetesVersion.replace(/^v/, '')}`, kind: 'resource' }];
}
