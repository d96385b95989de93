/**
 * Charts from a chart mirror and `helm template`: the part of the renderer (render.ts) that needs
 * neither the Pulumi components nor the tenants program, so that the control plane's chart checks
 * (provisioner/runtime-registry/argo-charts.ts) do not load them (docs/benchmarks.md, "Start-up").
 */
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { parseAllDocuments } from 'yaml';
import { chartSource, UPSTREAM_REPOSITORIES, type RepositoryName } from '../component/chart-source.ts';
import { CHART_MIRROR_SCRIPT } from './chart-tools.ts';

/** A Kubernetes object as rendered (plain JSON). */
export interface KubeObject {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; labels?: Record<string, string>; annotations?: Record<string, string> };
  [field: string]: unknown;
}

export type Values = Record<string, unknown>;

export class RenderError extends Error {
  override name = 'RenderError';
}

/** A pinned chart that is not in the mirror. */
export class ChartMissingError extends RenderError {
  override name = 'ChartMissingError';
}

/** The mirror's file for a chart version; throws ChartMissingError naming the fix. */
export function mirroredChart(
  chartsDir: string,
  repository: RepositoryName,
  chart: string,
  chartVersion: string,
  runtimeVersion: string,
): string {
  const path = chartSource(repository, chart, chartVersion, { [repository]: chartsDir }).chart;
  if (!existsSync(path)) {
    throw new ChartMissingError(
      `runtime version ${runtimeVersion} pins ${chart} ${chartVersion}, which is not in the chart mirror ${chartsDir}: ` +
        `add ${chart}-${chartVersion}.tgz there (\`helm pull ${chart} --repo ${UPSTREAM_REPOSITORIES[repository]} ` +
        `--version ${chartVersion} -d <mirror>\` where the repository is reachable` +
        (chart === 'vcluster' ? `, or \`bash ${CHART_MIRROR_SCRIPT}\` to package it from its Go module` : '') +
        `; docs/operations.md, "Air-gapped chart mirror")`,
    );
  }
  return path;
}

/** `helm template` of one chart with values on stdin; the objects it prints. */
export async function helmTemplate(
  helm: string,
  args: { release: string; chart: string; namespace: string; values: Values; kubeVersion?: string },
): Promise<KubeObject[]> {
  const argv = ['template', args.release, args.chart, '--namespace', args.namespace, '--include-crds', '--values', '-'];
  if (args.kubeVersion) argv.push('--kube-version', args.kubeVersion);
  const { code, stdout, stderr } = await run(helm, argv, JSON.stringify(args.values));
  if (code !== 0) {
    throw new RenderError(
      `helm template ${args.release} (${args.chart}) failed: ${stderr.trim() || `exit code ${code}`}`,
    );
  }
  return parseObjects(stdout, `helm template ${args.release}`);
}

/** Kubernetes objects from a YAML stream (empty documents skipped). */
export function parseObjects(text: string, source: string): KubeObject[] {
  const out: KubeObject[] = [];
  // Duplicate keys are taken as Helm's install takes them (the last wins): the vcluster chart's
  // StatefulSet template writes `priorityClassName` twice (the same value) when one is set.
  for (const doc of parseAllDocuments(text, { uniqueKeys: false })) {
    if (doc.errors.length > 0) throw new RenderError(`${source}: ${doc.errors[0]!.message}`);
    const value: unknown = doc.toJSON();
    if (value === null || value === undefined) continue;
    out.push(value as KubeObject);
  }
  return out;
}

export function run(
  command: string,
  argv: string[],
  input: string,
): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, argv, { stdio: ['pipe', 'pipe', 'pipe'] });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    child.stdout.on('data', (b: Buffer) => out.push(b));
    child.stderr.on('data', (b: Buffer) => err.push(b));
    child.on('error', reject);
    child.on('close', (code) =>
      resolve({
        code: code ?? 1,
        stdout: Buffer.concat(out).toString('utf8'),
        stderr: Buffer.concat(err).toString('utf8'),
      }),
    );
    child.stdin.on('error', () => undefined);
    child.stdin.end(input);
  });
}
