/**
 * A real Argo Rollouts controller for the end-to-end tier: `rollouts-controller` v1.8.3, built
 * from its Go module by scripts/argo-rollouts.sh (test/e2e/prepare.sh exports its bin folder as
 * HRT_ARGO_ROLLOUTS_BIN; without it the script's cache folder for the current pins is used when
 * complete — nothing is built here), against an API server with the CRDs of the real
 * argo-rollouts chart (Rollout, AnalysisTemplate, ClusterAnalysisTemplate, AnalysisRun,
 * Experiment; rendered by the chart tools' helm from the chart mirror).
 *
 * Pods do not run here: the controller-manager makes the Rollout's ReplicaSets' pods and KWOK
 * makes them Running and Ready, in place of a kubelet. The controller runs for every namespace
 * (its cluster mode, as the chart's default `clusterInstall: true`), without leader election; its
 * metrics and /healthz servers listen on loopback (scripts/argo-rollouts.sh changes their address
 * at build time) on ports of their own.
 */
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { VERSIONS } from '../../../runtime/versions.ts';
import { findChartTool } from '../../../runtime/render/chart-tools.ts';
import { serverPort, startProcess, type ManagedProcess } from '../../../sandbox/processes.ts';
import { chartCrds } from './argo-workflows.ts';
import { refuseInEarlyPhase } from './phase.ts';

const REPO = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..', '..');

/** The controller's version (scripts/argo-rollouts.sh builds it). */
export const ARGO_ROLLOUTS_VERSION = 'v1.8.3';

/** The argo-rollouts chart whose appVersion is the controller's (the catalog's newest such pin). */
export function argoRolloutsChartVersion(): string {
  const v = [...VERSIONS].reverse().find((r) => r.appVersions?.argoRollouts === ARGO_ROLLOUTS_VERSION);
  if (!v) throw new Error(`no runtime version in runtime/versions.ts runs Argo Rollouts ${ARGO_ROLLOUTS_VERSION}`);
  return v.components.argoRollouts;
}

function chartFile(): string {
  const mirror = process.env.HRT_CHART_MIRROR ?? join(REPO, '..', 'shared', 'charts');
  return join(mirror, `argo-rollouts-${argoRolloutsChartVersion()}.tgz`);
}

function controllerBin(): string | { unavailable: string } {
  const env = process.env.HRT_ARGO_ROLLOUTS_BIN;
  let bin = env;
  if (!bin) {
    try {
      bin = join(
        execFileSync('bash', [join(REPO, 'scripts', 'argo-rollouts.sh'), '--print-dir'], {
          encoding: 'utf8',
          stdio: ['ignore', 'pipe', 'pipe'],
        }).trim(),
        'bin',
      );
    } catch (err) {
      return { unavailable: `scripts/argo-rollouts.sh --print-dir failed: ${(err as Error).message.slice(0, 300)}` };
    }
  }
  return existsSync(join(bin, 'rollouts-controller'))
    ? bin
    : {
        unavailable: `${env ? `HRT_ARGO_ROLLOUTS_BIN=${env}` : bin} lacks rollouts-controller: run bash scripts/argo-rollouts.sh, or the tier through scripts/test.sh e2e`,
      };
}

/** Why a real Rollouts controller cannot run here (no build, no chart, no helm), or undefined. */
export function argoRolloutsUnavailable(): string | undefined {
  refuseInEarlyPhase('the Argo Rollouts controller');
  const bin = controllerBin();
  if (typeof bin !== 'string') return bin.unavailable;
  const chart = chartFile();
  if (!existsSync(chart)) return `the chart mirror has no ${chart} (HRT_CHART_MIRROR)`;
  try {
    findChartTool('helm');
  } catch (err) {
    return (err as Error).message;
  }
  return undefined;
}

/** The argo-rollouts chart's CRDs, as its `installCRDs` renders them. */
export function argoRolloutsCrds(): Promise<{ yaml: string; names: string[]; chart: string }> {
  return chartCrds('argo-rollouts', chartFile());
}

export interface RolloutsControllerOptions {
  kubeconfigFile: string;
  /** Folder for its log. */
  dir: string;
}

/** Starts the controller as a process (module comment). Stopped in `t.teardown`. */
export async function startRolloutsController(
  t: { teardown(fn: () => unknown): void },
  o: RolloutsControllerOptions,
): Promise<ManagedProcess> {
  refuseInEarlyPhase('startRolloutsController (the Argo Rollouts controller)');
  const bin = controllerBin();
  if (typeof bin !== 'string') throw new Error(bin.unavailable);
  const [metrics, healthz] = [await serverPort(), await serverPort()];
  const proc = startProcess(
    'rollouts-controller',
    join(bin, 'rollouts-controller'),
    [
      '--kubeconfig',
      o.kubeconfigFile,
      '--leader-elect=false',
      '--metricsport',
      String(metrics),
      '--healthzPort',
      String(healthz),
      '--loglevel',
      'info',
    ],
    join(o.dir, 'rollouts-controller.log'),
    { env: { PATH: process.env.PATH ?? '', HOME: o.dir } },
  );
  t.teardown(() => proc.stop());
  return proc;
}
