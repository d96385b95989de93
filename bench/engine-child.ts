/**
 * The engine child of bench/engine.bench.ts: runs the tenants program on one existing tenant
 * stack through the Automation API, one command sequence per line read from stdin, so that the
 * bench can measure each candidate for a cheaper resync with nothing to change as a process tree
 * of its own (this process: the inline program's evaluation; its children: the CLI and plugins).
 *
 * argv[2]: JSON { workDir, stackName, cliDir, pulumiHome, envVars } — the work directory the
 * provisioner's engine created for the tenant (it holds Pulumi.yaml and the stack's config).
 * Prints `ready`, then for each line (a mode below) one JSON line with the result.
 */
import { createInterface } from 'node:readline';
import { LocalWorkspace, PulumiCommand, type OpMap } from '@pulumi/pulumi/automation/index.js';
import { tenantProgram } from '../tenants/program.ts';

/** The modes (bench/engine.bench.ts describes them). */
const MODES = ['refresh + up', 'up --refresh', 'up', 'preview --refresh', 'preview', 'refresh'] as const;
type ResyncMode = (typeof MODES)[number];

interface Args {
  workDir: string;
  stackName: string;
  cliDir: string;
  pulumiHome: string;
  envVars: Record<string, string>;
}

const args = JSON.parse(process.argv[2] ?? '{}') as Args;
const pulumiCommand = await PulumiCommand.get({ root: args.cliDir.replace(/\/bin$/, ''), skipVersionCheck: true });
const stack = await LocalWorkspace.selectStack(
  { stackName: args.stackName, projectName: 'tenants', program: tenantProgram },
  { workDir: args.workDir, pulumiHome: args.pulumiHome, pulumiCommand, envVars: args.envVars },
);

const counted = (m: OpMap | Record<string, number> | undefined): Record<string, number> =>
  Object.fromEntries(Object.entries(m ?? {}).filter(([k, n]) => k !== 'same' && typeof n === 'number' && n > 0));

async function run(mode: ResyncMode): Promise<Record<string, number>> {
  switch (mode) {
    case 'refresh + up': {
      const r = await stack.refresh();
      const u = await stack.up({ parallel: 16 });
      return { ...prefixed('refresh ', counted(r.summary.resourceChanges)), ...counted(u.summary.resourceChanges) };
    }
    case 'up --refresh':
      return counted((await stack.up({ parallel: 16, refresh: true })).summary.resourceChanges);
    case 'up':
      return counted((await stack.up({ parallel: 16 })).summary.resourceChanges);
    case 'preview --refresh':
      return counted((await stack.preview({ parallel: 16, refresh: true })).changeSummary);
    case 'preview':
      return counted((await stack.preview({ parallel: 16 })).changeSummary);
    case 'refresh':
      return prefixed('refresh ', counted((await stack.refresh()).summary.resourceChanges));
  }
}

function prefixed(p: string, m: Record<string, number>): Record<string, number> {
  return Object.fromEntries(Object.entries(m).map(([k, v]) => [p + k, v]));
}

console.log('ready');
for await (const line of createInterface({ input: process.stdin })) {
  const mode = line.trim() as ResyncMode;
  if (!(MODES as readonly string[]).includes(mode)) {
    console.log(JSON.stringify({ mode, error: 'unknown mode' }));
    continue;
  }
  const cpu = process.cpuUsage();
  try {
    const changes = await run(mode);
    const used = process.cpuUsage(cpu);
    console.log(JSON.stringify({ mode, changes, selfCpuMs: (used.user + used.system) / 1000 }));
  } catch (err) {
    console.log(JSON.stringify({ mode, error: (err instanceof Error ? err.message : String(err)).slice(-800) }));
  }
}
