/**
 * What the end-to-end tier's Argo controllers (harness/argo-rollouts.ts, harness/argo-workflows.ts)
 * share: the controller binary, built from its Go module by a script of scripts/ (test/e2e/prepare.sh
 * exports its bin folder in an environment variable; without it the script's cache folder for the
 * current pins is used when complete — nothing is built here); the chart whose appVersion is the
 * controller's, from the chart mirror, and the CRDs it renders; and the controller started as a
 * process with its log in the test's folder, stopped in `t.teardown`. Each controller's module
 * keeps only what differs: its pins, its arguments and what it needs installed first.
 */
import { execFile, execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { parseAllDocuments } from 'yaml';
import { VERSIONS } from '../../../runtime/versions.ts';
import { findChartTool } from '../../../runtime/render/chart-tools.ts';
import { startProcess, type ManagedProcess } from '../../../sandbox/processes.ts';
import { refuseInEarlyPhase } from './phase.ts';

const run = promisify(execFile);
const REPO = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..', '..');

/**
 * One Argo controller of the tier. Its chart's name (`argo-rollouts`) names the rest: the build
 * script scripts/argo-rollouts.sh, the variable HRT_ARGO_ROLLOUTS_BIN that test/e2e/prepare.sh sets
 * to the build's bin folder, and the chart's key `argoRollouts` in runtime/versions.ts.
 */
export interface ArgoController {
  /** What messages call it ('the Argo Rollouts controller'). */
  title: string;
  /** The controller's version (its build script builds it). */
  version: string;
  /** The chart's name: its file in the chart mirror and the release its CRDs are rendered as. */
  chart: 'argo-rollouts' | 'argo-workflows';
  /** The binary in the build's bin folder. */
  binary: string;
}

const componentOf = (c: ArgoController) => (c.chart === 'argo-rollouts' ? 'argoRollouts' : 'argoWorkflows');
const scriptOf = (c: ArgoController) => `${c.chart}.sh`;
const binEnvOf = (c: ArgoController) => `HRT_${c.chart.toUpperCase().replace('-', '_')}_BIN`;

/** The chart whose appVersion is the controller's (the catalog's newest such pin). */
function argoChartVersion(c: ArgoController): string {
  const component = componentOf(c);
  const v = [...VERSIONS].reverse().find((r) => r.appVersions?.[component] === c.version);
  if (!v) throw new Error(`no runtime version in runtime/versions.ts runs ${c.title} ${c.version}`);
  return v.components[component];
}

function chartFile(c: ArgoController): string {
  const mirror = process.env.HRT_CHART_MIRROR ?? join(REPO, '..', 'shared', 'charts');
  return join(mirror, `${c.chart}-${argoChartVersion(c)}.tgz`);
}

/** The controller's bin folder, or why there is none. */
function controllerBin(c: ArgoController): string | { unavailable: string } {
  const [script, binEnv] = [scriptOf(c), binEnvOf(c)];
  const env = process.env[binEnv];
  let bin = env;
  if (!bin) {
    try {
      bin = join(
        execFileSync('bash', [join(REPO, 'scripts', script), '--print-dir'], {
          encoding: 'utf8',
          stdio: ['ignore', 'pipe', 'pipe'],
        }).trim(),
        'bin',
      );
    } catch (err) {
      return { unavailable: `scripts/${script} --print-dir failed: ${(err as Error).message.slice(0, 300)}` };
    }
  }
  return existsSync(join(bin, c.binary))
    ? bin
    : {
        unavailable: `${env ? `${binEnv}=${env}` : bin} lacks ${c.binary}: run bash scripts/${script}, or the tier through scripts/test.sh e2e`,
      };
}

/** Why the real controller cannot run here (no build, no chart, no helm), or undefined. */
export function argoControllerUnavailable(c: ArgoController): string | undefined {
  refuseInEarlyPhase(c.title);
  const bin = controllerBin(c);
  if (typeof bin !== 'string') return bin.unavailable;
  const chart = chartFile(c);
  if (!existsSync(chart)) return `the chart mirror has no ${chart} (HRT_CHART_MIRROR)`;
  try {
    findChartTool('helm');
  } catch (err) {
    return (err as Error).message;
  }
  return undefined;
}

/**
 * The CRDs the controller's chart renders from its `templates/crds/*.yaml` (helm template of the
 * real chart, by the chart tools' helm): the YAML, the CRDs' names, and the chart file.
 */
export async function argoChartCrds(c: ArgoController): Promise<{ yaml: string; names: string[]; chart: string }> {
  const chart = chartFile(c);
  const { stdout: list } = await run('tar', ['-tzf', chart]);
  const prefix = `${c.chart}/`;
  const templates = list
    .split('\n')
    .filter((f) => f.startsWith(`${prefix}templates/crds/`) && f.endsWith('.yaml'))
    .map((f) => f.slice(prefix.length));
  if (templates.length === 0) throw new Error(`${chart} has no templates/crds/*.yaml`);
  const { stdout: yaml } = await run(
    findChartTool('helm'),
    ['template', c.chart, chart, ...templates.flatMap((f) => ['--show-only', f])],
    { maxBuffer: 64 * 1024 * 1024 },
  );
  const names = parseAllDocuments(yaml)
    .map((d) => d.toJS() as { kind?: string; metadata?: { name?: string } } | null)
    .filter((d) => d?.kind === 'CustomResourceDefinition' && d.metadata?.name)
    .map((d) => d!.metadata!.name!);
  if (names.length !== templates.length)
    throw new Error(`helm template of ${chart} rendered ${names.length} CRDs for ${templates.length} templates`);
  return { yaml, names, chart };
}

/**
 * Starts the controller as a process with `args`, its log `<binary>.log` in `dir`, HOME at `dir`
 * and only PATH (and `env`) of this process's environment. Stopped in `t.teardown`.
 */
export function startArgoController(
  t: { teardown(fn: () => unknown): void },
  c: ArgoController,
  o: { args: string[]; dir: string; env?: Record<string, string> },
): ManagedProcess {
  refuseInEarlyPhase(`the ${c.binary} process (${c.title})`);
  const bin = controllerBin(c);
  if (typeof bin !== 'string') throw new Error(bin.unavailable);
  const proc = startProcess(c.binary, join(bin, c.binary), o.args, join(o.dir, `${c.binary}.log`), {
    env: { PATH: process.env.PATH ?? '', HOME: o.dir, ...o.env },
  });
  t.teardown(() => proc.stop());
  return proc;
}
