/**
 * The end-to-end tier's phases (scripts/test.sh, docs/e2e.md). On a cold machine the Go builds the
 * files need finish one after another, and each phase starts as soon as its builds are ready:
 *
 *  - `early`: files that name none of the functions below need only the toolchain and the Argo
 *    CRDs, and run while vcluster, the Kubernetes provider plugin and Argo CD may still be compiling;
 *  - `provisioning`: files that name provisioningSuite, startE2E or provisioningUnavailable (and
 *    neither Argo CD function) need vcluster and the provider plugin too, and run while Argo CD may
 *    still be compiling;
 *  - the Argo CD phase (HRT_E2E_PHASE unset): files that name startArgoCd or argoCdUnavailable,
 *    with every build ready.
 *
 * A file that reaches a function its phase has no build for was put in the wrong phase: it fails
 * with these errors instead of skipping for want of a build that a later phase would have had.
 */

const EARLY_NAMES = 'provisioningSuite, startE2E, provisioningUnavailable, startArgoCd and argoCdUnavailable';

/** Refuses a provisioning environment (vcluster and the provider plugin) in the early phase. */
export function refuseInEarlyPhase(what: string): void {
  if (process.env.HRT_E2E_PHASE !== 'early') return;
  throw new Error(
    `${what} was asked for in the end-to-end tier's early phase (HRT_E2E_PHASE=early), which has only the ` +
      `toolchain and the Argo CRDs: scripts/test.sh puts a file in the early phase when it names none of ` +
      `${EARLY_NAMES}; call one of those directly in this file so that it runs in a later phase`,
  );
}

/** Refuses Argo CD in the early and the provisioning phase (it may not be built yet). */
export function refuseBeforeArgoCdPhase(what: string): void {
  refuseInEarlyPhase(what);
  if (process.env.HRT_E2E_PHASE !== 'provisioning') return;
  throw new Error(
    `${what} was asked for in the end-to-end tier's provisioning phase (HRT_E2E_PHASE=provisioning), which ` +
      'runs while Argo CD may still be compiling: scripts/test.sh puts a file in the Argo CD phase when it ' +
      'names startArgoCd or argoCdUnavailable; call one of those directly in this file',
  );
}
