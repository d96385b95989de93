/**
 * The provisioner as a real child process (`node bin/provisioner.ts serve`) with the Pulumi
 * engine: the toolchain's CLI, a prepared PULUMI_HOME (the kubernetes provider plugin from the
 * toolchain, so nothing is downloaded), the DIY Postgres state backend in its own database
 * (the default: table pulumi_state), short leases and polling.
 */
import { randomBytes } from 'node:crypto';
import { mkdir, symlink } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { join, resolve } from 'node:path';
import { readFileSync } from 'node:fs';
import { serverPort, startProcess, until, type ManagedProcess } from './processes.ts';

export const REPO_ROOT = resolve(import.meta.dirname, '..');

/** The kubernetes provider version the npm SDK asks for (what the engine installs at start). */
export function kubernetesSdkVersion(): string {
  const require = createRequire(import.meta.url);
  const pkg = JSON.parse(readFileSync(require.resolve('@pulumi/kubernetes/package.json'), 'utf8')) as {
    version: string;
  };
  return pkg.version;
}

/**
 * A PULUMI_HOME whose plugin cache already holds the kubernetes provider (a link to the
 * toolchain's binary under the version the SDK requests), as an air-gapped install would
 * pre-seed it: `pulumi plugin install` then finds it and downloads nothing.
 */
export async function preparePulumiHome(home: string, providerBinary: string): Promise<void> {
  const dir = join(home, 'plugins', `resource-kubernetes-v${kubernetesSdkVersion()}`);
  await mkdir(dir, { recursive: true });
  await symlink(providerBinary, join(dir, 'pulumi-resource-kubernetes')).catch((err: unknown) => {
    if ((err as { code?: string }).code !== 'EEXIST') throw err;
  });
}

export interface ProvisionerSettings {
  toolchainBin: string;
  /** Folder holding `pulumi-resource-kubernetes` (a link to the provider binary). */
  pluginBin: string;
  databaseUrl: string;
  dataDir: string;
  pulumiHome: string;
  chartDir: string;
  adminToken: string;
  passphrase: string;
  encryptionKeyHex: string;
  resyncSeconds?: number;
  logFile: string;
  /** Extra environment (overrides). */
  env?: Record<string, string>;
  /** Node.js options before the script (e.g. `--import` of a test's module hooks). */
  nodeArgs?: string[];
  /**
   * A hosts file the provisioner (and the engine and plugins it starts) sees as /etc/hosts, in a
   * mount namespace of its own: how the names of real vclusters' exported kubeconfigs resolve
   * here (sandbox/vcluster-pods.ts writes it), as cluster DNS would resolve them.
   */
  hostsFile?: string;
}

export interface ProvisionerProcess {
  url: string;
  port: number;
  process: ManagedProcess;
  startSeconds: number;
}

export function newSecrets(prefix = 'e2e'): { adminToken: string; passphrase: string; encryptionKeyHex: string } {
  return {
    adminToken: `${prefix}-admin-${randomBytes(16).toString('hex')}`,
    passphrase: randomBytes(16).toString('hex'),
    encryptionKeyHex: randomBytes(32).toString('hex'),
  };
}

/** Environment of the provisioner child (also the environment `pulumi stack export` needs). */
export function provisionerEnv(s: ProvisionerSettings, port: number): Record<string, string> {
  const base: Record<string, string> = {};
  for (const k of ['HOME', 'TMPDIR', 'LANG', 'TZ']) {
    const v = process.env[k];
    if (v !== undefined) base[k] = v;
  }
  return {
    ...base,
    // The toolchain first (pulumi, its language host), the provider plugin, then this Node.
    PATH: `${s.toolchainBin}:${s.pluginBin}:${resolve(process.execPath, '..')}:${process.env.PATH ?? '/usr/bin:/bin'}`,
    PORT: String(port),
    HOST: '127.0.0.1',
    DATABASE_URL: s.databaseUrl,
    PROVISIONER_DATA_DIR: s.dataDir,
    PROVISIONER_ADMIN_TOKEN: s.adminToken,
    PROVISIONER_ENCRYPTION_KEY: s.encryptionKeyHex,
    PROVISIONER_ENGINE: 'pulumi',
    PROVISIONER_PULUMI_CLI_DIR: s.toolchainBin,
    PROVISIONER_PULUMI_HOME: s.pulumiHome,
    PULUMI_CONFIG_PASSPHRASE: s.passphrase,
    PULUMI_SKIP_UPDATE_CHECK: 'true',
    PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION: 'true',
    PROVISIONER_LEASE_TTL_SECONDS: '5',
    PROVISIONER_POLL_MS: '500',
    PROVISIONER_RESYNC_SECONDS: String(s.resyncSeconds ?? 0),
    PROVISIONER_BACKOFF_BASE_SECONDS: '3',
    PROVISIONER_BACKOFF_CAP_SECONDS: '30',
    PROVISIONER_SHUTDOWN_GRACE_SECONDS: '5',
    PROVISIONER_SIGNUP_RATE_LIMIT: '100000',
    // The root and vcluster API servers of this tier listen on loopback (https).
    PROVISIONER_CLUSTER_ALLOWED_CIDRS: '127.0.0.0/8',
    PROVISIONER_CHART_REPOSITORIES: JSON.stringify({ argo: s.chartDir, vcluster: s.chartDir }),
    LOG_LEVEL: 'info',
    ...s.env,
  };
}

/**
 * `command` run in a mount namespace of its own where `hostsFile` is /etc/hosts (root only): how a
 * provisioner here resolves the names real vclusters export (sandbox/vcluster-pods.ts). Without a
 * hosts file, `command` as it is.
 */
export function withHostsFile(hostsFile: string | undefined, command: readonly string[]): string[] {
  if (!hostsFile) return [...command];
  return [
    'unshare',
    '--mount',
    '--propagation',
    'private',
    'sh',
    '-c',
    'mount --bind "$0" /etc/hosts && exec "$@"',
    hostsFile,
    ...command,
  ];
}

/** Starts `provisioner serve` and waits for /readyz. */
export async function startProvisioner(s: ProvisionerSettings, port?: number): Promise<ProvisionerProcess> {
  const started = Date.now();
  const p = port ?? (await serverPort());
  const url = `http://127.0.0.1:${p}`;
  const command = [process.execPath, ...(s.nodeArgs ?? []), join(REPO_ROOT, 'bin', 'provisioner.ts'), 'serve'];
  const wrapped = withHostsFile(s.hostsFile, command);
  const proc = startProcess('provisioner', wrapped[0]!, wrapped.slice(1), s.logFile, {
    env: provisionerEnv(s, p),
    cwd: s.dataDir,
  });
  await until('provisioner /readyz', 90_000, async () => {
    if (!proc.running()) throw new Error(`provisioner exited: ${await proc.tail(20)}`);
    const res = await fetch(`${url}/readyz`, { signal: AbortSignal.timeout(3000) });
    return res.status === 200;
  });
  return { url, port: p, process: proc, startSeconds: (Date.now() - started) / 1000 };
}
