/**
 * Where the chart tools are: `helm` (the Helm the Kubernetes provider embeds) and `pod-security`
 * (the upstream Pod Security evaluator), both built by scripts/chart-tools.sh into
 * `${XDG_CACHE_HOME:-~/.cache}/hosted-runtimes/chart-tools/current/bin`.
 */
import { accessSync, constants, existsSync } from 'node:fs';
import { homedir } from 'node:os';
import { delimiter, dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

export type ChartTool = 'helm' | 'pod-security';

/** The build script that makes them (named in every "not found" message). */
export const CHART_TOOLS_SCRIPT = 'scripts/chart-tools.sh';

export class ChartToolMissingError extends Error {
  override name = 'ChartToolMissingError';
}

function executable(path: string): boolean {
  try {
    accessSync(path, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/** The chart tools' bin folder in the cache (whether or not it holds anything). */
export function chartToolsCacheBin(env: NodeJS.ProcessEnv = process.env): string {
  const root =
    env.CHART_TOOLS_CACHE ?? join(env.XDG_CACHE_HOME ?? join(homedir(), '.cache'), 'hosted-runtimes', 'chart-tools');
  return join(root, 'current', 'bin');
}

export interface FindOptions {
  /** An explicit path (`--helm`); used as given, never searched. */
  explicit?: string;
  env?: NodeJS.ProcessEnv;
}

/**
 * A chart tool's path: the explicit one; else the environment (`HELM` for helm,
 * `HRT_CHART_TOOLS_BIN/<tool>`); else the chart-tools cache; else PATH. Throws
 * ChartToolMissingError naming every place looked and the fix.
 */
export function findChartTool(tool: ChartTool, opts: FindOptions = {}): string {
  const env = opts.env ?? process.env;
  const looked: string[] = [];
  const candidates: [string, string][] = [];
  if (opts.explicit !== undefined) {
    if (executable(opts.explicit)) return opts.explicit;
    throw new ChartToolMissingError(`${tool} '${opts.explicit}' is not an executable file`);
  }
  if (tool === 'helm' && env.HELM) candidates.push([env.HELM, 'HELM']);
  if (env.HRT_CHART_TOOLS_BIN) candidates.push([join(env.HRT_CHART_TOOLS_BIN, tool), 'HRT_CHART_TOOLS_BIN']);
  candidates.push([join(chartToolsCacheBin(env), tool), 'the chart-tools cache']);
  for (const dir of (env.PATH ?? '').split(delimiter).filter(Boolean)) candidates.push([join(dir, tool), 'PATH']);
  for (const [path, where] of candidates) {
    if (executable(path)) return path;
    if (where !== 'PATH') looked.push(`${path} (${where})`);
  }
  looked.push('PATH');
  throw new ChartToolMissingError(
    `no ${tool} found (looked in ${looked.join(', ')}): build it with \`bash ${CHART_TOOLS_SCRIPT}\`` +
      (tool === 'helm' ? ' or pass --helm /path/to/helm (or set HELM)' : ''),
  );
}

/** The repository's root (this file is runtime/render/chart-tools.ts). */
const REPOSITORY_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');

/** The script that assembles the chart mirror (the shared one and the vcluster charts it lacks). */
export const CHART_MIRROR_SCRIPT = 'scripts/chart-mirror.sh';

/** The mirror scripts/chart-mirror.sh assembled last (`<cache>/chart-mirror/current`; it may not exist). */
export function assembledChartMirror(env: NodeJS.ProcessEnv = process.env): string {
  const root =
    env.CHART_MIRROR_CACHE ?? join(env.XDG_CACHE_HOME ?? join(homedir(), '.cache'), 'hosted-runtimes', 'chart-mirror');
  return join(root, 'current');
}

/**
 * The chart mirror to render from when none is given: PROVISIONER_CHARTS_DIR; else the mirror
 * scripts/chart-mirror.sh assembled (the shared one with the vcluster charts packaged from their
 * Go modules), when there is one; else `<repository root>/../shared/charts` (where CI and the
 * development machines keep the real charts).
 */
export function defaultChartsDir(env: NodeJS.ProcessEnv = process.env): string {
  if (env.PROVISIONER_CHARTS_DIR !== undefined) return env.PROVISIONER_CHARTS_DIR;
  const assembled = assembledChartMirror(env);
  if (existsSync(join(assembled, '.assembled'))) return assembled;
  return join(REPOSITORY_ROOT, '..', 'shared', 'charts');
}
