/**
 * Builds the configured engine: PROVISIONER_ENGINE=pulumi gives the Pulumi engine running the
 * tenants/ program; `none` gives no engine (the server then starts no reconciler).
 * The tenants program and its config contract are loaded lazily so that `none` does not load
 * the Kubernetes provider SDK.
 */
import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import type { EngineConfig } from '../config.ts';
import type { Engine, StackInput } from './engine.ts';
import type { KubeconfigPolicy } from '../../kubeconfig-policy/policy.ts';
import { backendUrlFor, type ConfigMap } from './pulumi-plan.ts';

export interface EngineDeps {
  dataDir: string;
  /** The provisioner's database (the default state backend). */
  databaseUrl: string;
  /** PEM public key runtimes verify forwarded requests with (request-signing key of the tunnel). */
  controlPlanePublicKey: string | undefined;
  /** What a stored root-cluster kubeconfig may hold (config.kubeconfig). */
  kubeconfigPolicy?: KubeconfigPolicy;
  log?: (msg: string, fields?: Record<string, unknown>) => void;
}

/** Program settings that come from the provisioner's configuration rather than the tenant. */
export interface ProgramOverrides {
  /** `tenant:chartRepositories` (PROVISIONER_CHART_REPOSITORIES). */
  chartRepositories?: Record<string, string> | undefined;
  /** `tenant:vclusterServerTemplate` (PROVISIONER_VCLUSTER_SERVER_TEMPLATE). */
  vclusterServerTemplate?: string | undefined;
  /** `tenant:kubeconfigPolicy` (PROVISIONER_KUBECONFIG_*): the program checks the root kubeconfig again with it. */
  kubeconfigPolicy?: KubeconfigPolicy | undefined;
  /** `tenant:runtimeReleaseTimeoutSeconds` (PROVISIONER_RUNTIME_RELEASE_TIMEOUT_SECONDS). */
  runtimeReleaseTimeoutSeconds?: number | undefined;
}

/** Maps the engine's input to the tenants program's stack config (tenants/config.ts). */
export async function tenantsStackConfig(
  publicUrl: string,
  publicKey: string,
  overrides: ProgramOverrides = {},
): Promise<(input: StackInput) => ConfigMap> {
  const { stackConfig } = await import('../../tenants/config.ts');
  // The tenant's settings as they are, the deployment's from the configuration (stackConfig reads only settings).
  return (input) =>
    stackConfig({
      ...input,
      ...(overrides.chartRepositories ? { chartRepositories: overrides.chartRepositories } : {}),
      ...(overrides.vclusterServerTemplate ? { vclusterServerTemplate: overrides.vclusterServerTemplate } : {}),
      ...(overrides.kubeconfigPolicy ? { kubeconfigPolicy: overrides.kubeconfigPolicy } : {}),
      ...(overrides.runtimeReleaseTimeoutSeconds
        ? { runtimeReleaseTimeoutSeconds: overrides.runtimeReleaseTimeoutSeconds }
        : {}),
      controlPlaneUrl: publicUrl,
      controlPlanePublicKey: publicKey,
    });
}

async function kubernetesPluginVersion(): Promise<string> {
  const require = createRequire(import.meta.url);
  const path = require.resolve('@pulumi/kubernetes/package.json');
  const pkg = JSON.parse(await readFile(path, 'utf8')) as { version?: unknown };
  return typeof pkg.version === 'string' ? pkg.version : '4.0.0';
}

export async function createEngine(config: EngineConfig, deps: EngineDeps): Promise<Engine | undefined> {
  if (config.kind === 'none') return undefined;
  const [{ PulumiEngine }, { tenantProgram }] = await Promise.all([
    import('./pulumi.ts'),
    import('../../tenants/program.ts'),
  ]);
  const publicKey = deps.controlPlanePublicKey;
  const stackConfig = publicKey
    ? await tenantsStackConfig(config.publicUrl, publicKey, {
        chartRepositories: config.chartRepositories,
        vclusterServerTemplate: config.vclusterServerTemplate,
        kubeconfigPolicy: deps.kubeconfigPolicy,
        runtimeReleaseTimeoutSeconds: config.runtimeReleaseTimeoutSeconds,
      })
    : () => ({});
  return new PulumiEngine({
    program: tenantProgram,
    dataDir: deps.dataDir,
    backendUrl: backendUrlFor(config.backendUrl, deps.databaseUrl),
    secretsProvider: config.secretsProvider,
    passphrase: config.passphrase,
    pulumiHome: config.pulumiHome,
    cliDir: config.cliDir,
    kubernetesPluginVersion: await kubernetesPluginVersion(),
    stackConfig,
    ...(publicKey
      ? {}
      : {
          configProblem:
            'the control plane request-signing public key is not configured, so runtimes could not verify forwarded requests; configure the tunnel request-signing key',
        }),
    ...(deps.log ? { log: deps.log } : {}),
  });
}
