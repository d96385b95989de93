/**
 * The end-to-end tier's early phase (scripts/test.sh): files that need only the toolchain and the
 * Argo CRDs run while Argo CD, Argo Workflows, vcluster, the Kubernetes provider plugin and Gitea may still be compiling.
 * scripts/test.sh puts a file there when it names none of the functions that need those builds;
 * one that reaches such a function anyway was put in the wrong phase, and fails with this error
 * instead of skipping for want of a build that the late phase would have had.
 */
export function refuseInEarlyPhase(what: string): void {
  if (process.env.HRT_E2E_PHASE !== 'early') return;
  throw new Error(
    `${what} was asked for in the end-to-end tier's early phase (HRT_E2E_PHASE=early), which has only the ` +
      'toolchain and the Argo CRDs: scripts/test.sh puts a file in the early phase when it names none of ' +
      'provisioningSuite, startE2E, provisioningUnavailable, startArgoCd, argoCdUnavailable, ' +
      'argoWorkflowsUnavailable, argoRolloutsUnavailable and giteaUnavailable; call one of ' +
      'those directly in this file so that it runs in the late phase',
  );
}
