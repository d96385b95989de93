/**
 * `provisioner runtime render` and `runtime diff`: what a tenant gets at a runtime version on a
 * plan, and what an upgrade changes, rendered offline from a chart mirror with the values the
 * tenants program passes (runtime/render). No API, cluster or chart repository is reached; helm
 * comes from --helm, HELM, the chart-tools cache (scripts/chart-tools.sh) or PATH.
 */
import { mkdir, rename, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Command } from 'commander';
import { stringify } from 'yaml';
import { UsageError, type Io } from './api-commands.ts';
import { DEFAULT_PLAN } from '../../tenants/plans.ts';

interface RenderFlags {
  plan: string;
  charts?: string;
  helm?: string;
}

async function renderFor(version: string, flags: RenderFlags, io: Io) {
  // Loaded here: the other commands need none of the rendering code.
  const { defaultChartsDir, findChartTool } = await import('../../runtime/render/chart-tools.ts');
  const { renderRuntime } = await import('../../runtime/render/render.ts');
  const helm = findChartTool('helm', { ...(flags.helm !== undefined ? { explicit: flags.helm } : {}), env: io.env });
  return renderRuntime({ version, plan: flags.plan, chartsDir: flags.charts ?? defaultChartsDir(io.env), helm });
}

function documents(header: string[], objects: readonly unknown[]): string {
  const head = header.map((l) => `# ${l}`).join('\n');
  return `${head}\n${objects.map((o) => `---\n${stringify(o, { lineWidth: 0 })}`).join('')}`;
}

/** Writes a file whole (a temporary name, then renamed): a reader never sees half of it. */
async function writeWhole(path: string, text: string): Promise<void> {
  const tmp = `${path}.tmp-${process.pid}`;
  await writeFile(tmp, text);
  await rename(tmp, path);
}

export function addRuntimeRenderCommands(program: Command, io: Io): void {
  const runtime = program
    .command('runtime')
    .description('render a runtime version offline from a chart mirror, and diff two versions');

  const common = (c: Command) =>
    c
      .option('--plan <plan>', 'plan (free, team, enterprise)', DEFAULT_PLAN)
      .option(
        '--charts <dir>',
        'chart mirror: a folder of <chart>-<version>.tgz (env PROVISIONER_CHARTS_DIR, default ../shared/charts)',
      )
      .option('--helm <path>', 'helm binary (env HELM; default: the chart-tools cache, then PATH)');

  common(
    runtime
      .command('render <version>')
      .usage('<version> --out <dir> [options]')
      .description(
        'write what a tenant gets at <version> into the folder --out names (required): one YAML file per release, the root-cluster objects and the agents',
      )
      // Checked in the action, not by commander: the error then says what --out is for.
      .option('--out <dir>', 'required: the folder to write into (created when missing)'),
  ).action(async (version: string, flags: RenderFlags & { out?: string }) => {
    if (flags.out === undefined || flags.out === '')
      throw new UsageError(
        `runtime render: --out <dir> is required: the folder to write the release files into (e.g. provisioner runtime render ${version} --out ./runtime-${version})`,
      );
    const out = flags.out;
    const r = await renderFor(version, flags, io);
    await mkdir(out, { recursive: true });
    const written: string[] = [];
    const about = `runtime ${r.version}, plan ${r.plan}, rendered offline by provisioner runtime render`;
    for (const rel of r.releases) {
      const where =
        rel.cluster === 'root'
          ? `namespace ${rel.namespace} on the root cluster`
          : `namespace ${rel.namespace} inside the tenant's vcluster`;
      const file = join(out, `${rel.release}.yaml`);
      await writeWhole(
        file,
        documents(
          [`Helm release ${rel.release}: chart ${rel.chart} ${rel.chartVersion}, ${where}`, about],
          rel.objects,
        ),
      );
      const valuesFile = join(out, `${rel.release}.values.yaml`);
      await writeWhole(
        valuesFile,
        `# the values the tenants program passes to ${rel.release} (${about})\n${stringify(rel.values, { lineWidth: 0 })}`,
      );
      written.push(file, valuesFile);
    }
    const root = join(out, 'root-cluster.yaml');
    await writeWhole(
      root,
      documents([`the tenants program's objects in namespace ${r.namespace} on the root cluster`, about], r.root),
    );
    const agents = join(out, 'agents.yaml');
    await writeWhole(
      agents,
      documents(
        [`the agents and the runtime's own objects inside the vcluster (Secret values are per tenant)`, about],
        r.agents,
      ),
    );
    written.push(root, agents);
    io.out(`rendered runtime ${r.version} on plan ${r.plan} (tenant namespace ${r.namespace}):`);
    for (const f of written) io.out(`  ${f}`);
  });

  common(
    runtime
      .command('diff <from> <to>')
      .description(
        'what upgrading from <from> to <to> changes, per release and object (added, removed, changed fields)',
      ),
  ).action(async (from: string, to: string, flags: RenderFlags) => {
    const { diffRuntimes, formatDiff } = await import('../../runtime/render/diff.ts');
    const [a, b] = await Promise.all([renderFor(from, flags, io), renderFor(to, flags, io)]);
    const diffs = diffRuntimes(a, b);
    if (program.opts<{ json?: boolean }>().json) {
      io.out(JSON.stringify({ from: a.version, to: b.version, plan: a.plan, releases: diffs }, null, 2));
      return;
    }
    io.out(`runtime ${a.version} -> ${b.version}, plan ${a.plan}:`);
    for (const line of formatDiff(diffs)) io.out(line);
  });
}
