/**
 * The preamble every provisioning suite (crash, delete, drift, lifecycle) shares: its time budget,
 * the skip when provisioning cannot run here, the environment and a client of its root cluster.
 */
import type { Test } from 'tap';
import { provisioningUnavailable, startE2E, type E2E, type E2EOptions } from './environment.ts';
import { kube, type Kube } from './kube.ts';

/** How long a tenant may take to reach a phase (signup, upgrade, delete, recovery). */
export const PROVISION_TIMEOUT = 5 * 60_000;

/**
 * Gives the file 20 minutes; when provisioning is unavailable (no Kubernetes provider plugin)
 * the file reports itself skipped with the reason; else starts the environment and runs `body`
 * with it and a client of the root cluster.
 */
export async function provisioningSuite(
  t: Test,
  body: (e2e: E2E, root: Kube) => Promise<void>,
  opts?: E2EOptions,
): Promise<void> {
  t.setTimeout(20 * 60_000);
  const skip = provisioningUnavailable();
  if (skip) {
    t.plan(0, skip);
    return;
  }
  const e2e = await startE2E(t, opts);
  await body(e2e, kube(e2e.root.kc));
}
