/**
 * A real Argo Rollouts controller for the end-to-end tier: `rollouts-controller` v1.8.3, built
 * from its Go module by scripts/argo-rollouts.sh (its bin folder HRT_ARGO_ROLLOUTS_BIN, found as
 * harness/argo-controller.ts says), against an API server with the CRDs of the real
 * argo-rollouts chart (Rollout, AnalysisTemplate, ClusterAnalysisTemplate, AnalysisRun,
 * Experiment; rendered by the chart tools' helm from the chart mirror).
 *
 * Pods do not run here: the controller-manager makes the Rollout's ReplicaSets' pods and KWOK
 * makes them Running and Ready, in place of a kubelet. The controller runs for every namespace
 * (its cluster mode, as the chart's default `clusterInstall: true`), without leader election; its
 * metrics and /healthz servers listen on loopback (scripts/argo-rollouts.sh changes their address
 * at build time) on ports of their own.
 */
import { serverPort, type ManagedProcess } from '../../../sandbox/processes.ts';
import {
  argoChartCrds,
  argoControllerUnavailable,
  startArgoController,
  type ArgoController,
} from './argo-controller.ts';

/** The controller's version (scripts/argo-rollouts.sh builds it). */
export const ARGO_ROLLOUTS_VERSION = 'v1.8.3';

const ROLLOUTS: ArgoController = {
  title: 'the Argo Rollouts controller',
  version: ARGO_ROLLOUTS_VERSION,
  chart: 'argo-rollouts',
  binary: 'rollouts-controller',
};

/** Why a real Rollouts controller cannot run here (no build, no chart, no helm), or undefined. */
export const argoRolloutsUnavailable = (): string | undefined => argoControllerUnavailable(ROLLOUTS);

/** The argo-rollouts chart's CRDs, as its `installCRDs` renders them. */
export const argoRolloutsCrds = (): ReturnType<typeof argoChartCrds> => argoChartCrds(ROLLOUTS);

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
  const [metrics, healthz] = [await serverPort(), await serverPort()];
  return startArgoController(t, ROLLOUTS, {
    args: [
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
    dir: o.dir,
  });
}
