/**
 * kubectl from the toolchain (HRT_TOOLCHAIN_BIN), for tests that stand up their own API server:
 * what is missing to run them, and a runner that never throws (exit code and output instead).
 */
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';

import { startEtcd, startKubeControlPlane, toolchainFrom, type KubeControlPlane } from '../../sandbox/control-plane.ts';

export interface KubectlRun {
  code: number | null;
  /** stdout and stderr together. */
  output: string;
  stdout: string;
}

/** Why a real kube-apiserver cannot be started from `bin`, or undefined when it can. */
export function missingKubeToolchain(bin: string | undefined): string | undefined {
  if (!bin) return 'HRT_TOOLCHAIN_BIN is not set (scripts/test.sh sets it when Go can build or reuse the toolchain)';
  return ['kube-apiserver', 'etcd', 'kubectl'].every((b) => existsSync(join(bin, b)))
    ? undefined
    : `${bin} lacks kube-apiserver, etcd or kubectl`;
}

/** `kubectl(args, kubeconfig?)`: the toolchain's kubectl with KUBECONFIG set (default `kubeconfig`), 60 s at most. */
export function kubectlRunner(bin: string, kubeconfig: string) {
  return (args: string[], config = kubeconfig): Promise<KubectlRun> =>
    new Promise((resolve) => {
      execFile(
        join(bin, 'kubectl'),
        args,
        { env: { ...process.env, KUBECONFIG: config }, timeout: 60_000 },
        (err, stdout, stderr) =>
          resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, output: stdout + stderr, stdout }),
      );
    });
}

/** The Application CRD of a customer's Argo CD, with an open schema. */
export const APPLICATION_CRD = {
  apiVersion: 'apiextensions.k8s.io/v1',
  kind: 'CustomResourceDefinition',
  metadata: { name: 'applications.argoproj.io' },
  spec: {
    group: 'argoproj.io',
    scope: 'Namespaced',
    names: { kind: 'Application', listKind: 'ApplicationList', plural: 'applications', singular: 'application' },
    versions: [
      {
        name: 'v1alpha1',
        served: true,
        storage: true,
        schema: { openAPIV3Schema: { type: 'object', 'x-kubernetes-preserve-unknown-fields': true } },
      },
    ],
  },
};

/**
 * A customer's cluster for the hybrid-runtime tests: etcd and a kube-apiserver alone (no nodes, no
 * controllers; with `controllers`, also the controller-manager, scheduler and KWOK) under `dir`,
 * stopped at the test's teardown, and the toolchain's kubectl for it.
 */
export async function startCustomerCluster(
  t: { teardown(fn: () => unknown): void },
  bin: string,
  dir: string,
  o: {
    podSecurityDefault?: 'privileged' | 'baseline' | 'restricted';
    /** The controller-manager, scheduler and KWOK with one fake node: Deployments roll out (e2e toolchain). */
    controllers?: boolean;
  } = {},
): Promise<{ plane: KubeControlPlane; kubectl: ReturnType<typeof kubectlRunner> }> {
  const tc = toolchainFrom(bin);
  const etcd = await startEtcd(tc, join(dir, 'etcd'));
  t.teardown(() => etcd.stop());
  const plane = await startKubeControlPlane(tc, {
    name: 'customer',
    dir: join(dir, 'customer'),
    etcd,
    etcdPrefix: '/customer',
    nodes: o.controllers ? 1 : 0,
    apiServerOnly: !o.controllers,
    ...(o.podSecurityDefault ? { podSecurityDefault: o.podSecurityDefault } : {}),
  });
  t.teardown(() => plane.stop());
  return { plane, kubectl: kubectlRunner(bin, plane.kubeconfigFile) };
}
