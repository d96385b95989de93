/**
 * The Pulumi CLI runs of one `up`, as the engine makes them (provisioner/engine/pulumi.ts) against
 * the Automation API's own way (baseline, in the same run): `LocalWorkspace.createOrSelectStack`,
 * `setAllConfig` before every operation, `stack.up()` reading the outputs twice (masked, then with
 * `--show-secrets`) and the summary with `--show-secrets`. Each run that decrypts derives the
 * stack's key from the passphrase (PBKDF2, a million rounds); the engine reads outputs and summary
 * masked and sets the config only when it changed.
 *
 * The program is the smallest that has what the tenants program has here: a plain and a secret
 * config value and a secret output. The CPU is that of the CLI processes (this process's reaped
 * children, from /proc/self/stat), the wall time that of the whole `up`. File state backend,
 * passphrase secrets; the toolchain's CLI (HRT_TOOLCHAIN_BIN, scripts/toolchain.sh).
 *
 *   HRT_TOOLCHAIN_BIN=$(bash scripts/toolchain.sh --only pulumi | tail -1) npm run bench -- engine-cli
 *
 * BENCH_ENGINE_CLI_ROUNDS (default 5): ups of each kind, alternating.
 */
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as pulumi from '@pulumi/pulumi';
import { LocalWorkspace, PulumiCommand, type PulumiFn } from '@pulumi/pulumi/automation/index.js';
import { PulumiEngine } from '../provisioner/engine/pulumi.ts';
import { planStack } from '../provisioner/engine/pulumi-plan.ts';

const ROUNDS = Number(process.env.BENCH_ENGINE_CLI_ROUNDS ?? 5);
const bin = process.env.HRT_TOOLCHAIN_BIN;
if (!bin) {
  console.log('engine-cli bench skipped: HRT_TOOLCHAIN_BIN is not set (scripts/toolchain.sh --only pulumi)');
  process.exit(0);
}
const KUBERNETES_PLUGIN = '4.25.0';

/** CPU-seconds of this process's reaped children (utime + stime of the waited-for CLI runs). */
async function childrenCpu(): Promise<number> {
  const stat = await readFile('/proc/self/stat', 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  // After the command's name: the state (field 3) first, so cutime and cstime (16, 17) are at 13, 14.
  return (Number(fields[13]) + Number(fields[14])) / 100;
}

const dir = await mkdtemp(join(tmpdir(), 'hrt-bench-engine-cli-'));
const backendUrl = `file://${join(dir, 'state')}`;
await mkdir(join(dir, 'state'), { recursive: true });
const pulumiHome = join(dir, 'pulumi-home');
// The engine installs the kubernetes provider at start; this program never starts it.
const placeholder = join(pulumiHome, 'plugins', `resource-kubernetes-v${KUBERNETES_PLUGIN}`);
await mkdir(placeholder, { recursive: true });
await writeFile(join(placeholder, 'pulumi-resource-kubernetes'), '#!/bin/sh\nexit 1\n', { mode: 0o755 });

const program: PulumiFn = async () => {
  const config = new pulumi.Config('tenant');
  return { organization: config.require('organization'), token: config.requireSecret('runtimeToken') };
};
const options = {
  backendUrl,
  secretsProvider: 'passphrase',
  passphrase: 'bench-passphrase',
  pulumiHome,
  stackConfig: (input: { organization: string; runtimeToken: string }) => ({
    'tenant:organization': { value: input.organization, secret: false },
    'tenant:runtimeToken': { value: input.runtimeToken, secret: true },
  }),
};
const input = (tenantId: string) => ({
  tenantId,
  organization: 'bench',
  plan: 'free',
  runtimeVersion: '1.0.0',
  suspended: false,
  clusterName: 'bench',
  rootKubeconfig: '',
  runtimeToken: 'bench-token',
});

const engine = new PulumiEngine({
  ...options,
  dataDir: join(dir, 'engine'),
  cliDir: bin,
  kubernetesPluginVersion: KUBERNETES_PLUGIN,
  program,
});
await engine.start();
if (!engine.availability().available) throw new Error(JSON.stringify(engine.availability()));
const pulumiCommand = await PulumiCommand.get({ root: join(bin, '..'), skipVersionCheck: true });

/** The Automation API's own way: what the engine did before. */
async function sdkUp(tenantId: string): Promise<void> {
  const plan = planStack(input(tenantId), { ...options, dataDir: join(dir, 'sdk') });
  await mkdir(plan.workDir, { recursive: true });
  const stack = await LocalWorkspace.createOrSelectStack(
    { stackName: plan.stackName, projectName: plan.projectName, program },
    {
      workDir: plan.workDir,
      pulumiHome,
      pulumiCommand,
      envVars: plan.envVars,
      secretsProvider: plan.secretsProvider,
      projectSettings: { name: plan.projectName, runtime: 'nodejs', backend: { url: backendUrl } },
    },
  );
  await stack.setAllConfig(plan.config);
  await stack.up();
}

const kinds = {
  'Automation API as is': (id: string) => sdkUp(id),
  engine: (id: string) => engine.up(input(id)).then(() => undefined),
} as const;
type Kind = keyof typeof kinds;
const ids: Record<Kind, string> = { 'Automation API as is': 'sdk-stack', engine: 'engine-stack' };
// One up each first: the stacks exist, the CLI's files are in the page cache.
for (const k of Object.keys(kinds) as Kind[]) await kinds[k](ids[k]);

const results: Record<Kind, { cpu: number[]; wall: number[] }> = {
  'Automation API as is': { cpu: [], wall: [] },
  engine: { cpu: [], wall: [] },
};
for (let round = 0; round < ROUNDS; round++) {
  for (const k of Object.keys(kinds) as Kind[]) {
    const cpu0 = await childrenCpu();
    const t0 = performance.now();
    await kinds[k](ids[k]);
    results[k].wall.push((performance.now() - t0) / 1000);
    results[k].cpu.push((await childrenCpu()) - cpu0);
  }
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const base = results['Automation API as is'];
console.log(`# ${ROUNDS} ups of an unchanged stack each, alternating; medians`);
console.log('KIND                   CLI CPU-s  WALL s  CPU vs baseline  WALL vs baseline');
for (const k of Object.keys(kinds) as Kind[]) {
  const r = results[k];
  console.log(
    `${k.padEnd(22)} ${median(r.cpu).toFixed(2).padStart(9)}  ${median(r.wall).toFixed(2).padStart(6)}  ${(median(r.cpu) / median(base.cpu)).toFixed(2).padStart(15)}  ${(median(r.wall) / median(base.wall)).toFixed(2).padStart(16)}`,
  );
}
await rm(dir, { recursive: true, force: true });
