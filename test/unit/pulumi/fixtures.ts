/**
 * Shared inputs for the Pulumi program tests.
 */
import { stackConfig, type TenantInput } from '../../../tenants/config.ts';
import type { SecretWaitRequest } from '../../../tenants/kubeconfig-wait.ts';
import type { RootAccess } from '../../../tenants/root-access.ts';

export const PUBLIC_KEY = '-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEAexample\n-----END PUBLIC KEY-----\n';

/** A root kubeconfig the kubeconfig policy accepts (inline token). */
export const ROOT_KUBECONFIG =
  'apiVersion: v1\nkind: Config\n# root cluster\nclusters: [{name: c, cluster: {server: "https://203.0.113.10:6443"}}]\n' +
  'users: [{name: u, user: {token: root-token-0123456789}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n';

export function tenantInput(overrides: Partial<TenantInput> = {}): TenantInput {
  return {
    tenantId: '3f2a9c1e-7b4d-4e8a-9c2f-1a2b3c4d5e6f',
    organization: 'acme',
    plan: 'team',
    runtimeVersion: '1.4.0',
    suspended: false,
    rootKubeconfig: ROOT_KUBECONFIG,
    runtimeToken: 'rt_secret_token',
    controlPlaneUrl: 'https://control.example.test',
    controlPlanePublicKey: PUBLIC_KEY,
    ...overrides,
  };
}

export function tenantConfig(overrides: Partial<TenantInput> = {}) {
  return stackConfig(tenantInput(overrides));
}

/** A waiter that records its calls and answers at once. */
export function recordingWaiter(): { calls: SecretWaitRequest[]; waiter: (r: SecretWaitRequest) => Promise<void> } {
  const calls: SecretWaitRequest[] = [];
  return {
    calls,
    waiter: (r) => {
      calls.push(r);
      return Promise.resolve();
    },
  };
}

/**
 * The root cluster's answers to the tenants program, without a cluster: it is the provisioner's
 * ServiceAccount, and its tenant-namespace binding is in effect at once.
 */
export const ROOT_ACCESS: RootAccess = {
  whoAmI: () => Promise.resolve({ kind: 'ServiceAccount', name: 'provisioner', namespace: 'hosted-platform' }),
  waitForAccess: () => Promise.resolve(),
};

/** Name of the provider a resource was registered with (from the `urn::id` reference). */
export function providerName(ref: string | undefined): string | undefined {
  if (!ref) return undefined;
  const urn = ref.split('::').slice(0, -1).join('::');
  return urn.split('::').at(-1);
}
