/**
 * The per-tenant Pulumi program, run by the provisioner's engine as an Automation API inline
 * program (`LocalWorkspace.createOrSelectStack({ stackName, projectName, program: tenantProgram })`
 * after `stack.setAllConfig(stackConfig(input))`). Inputs come from stack config
 * (tenants/config.ts); the returned object becomes the stack outputs:
 *
 *   namespace, vclusterEndpoint, argoCdUrl, runtimeVersion, componentVersions, suspended
 */
import * as k8s from '@pulumi/kubernetes';
import * as pulumi from '@pulumi/pulumi';
import type { Catalog } from '../runtime/catalog.ts';
import { CONFIG_NAMESPACE, readTenantConfig } from './config.ts';
import type { SecretWaiter } from './kubeconfig-wait.ts';
import type { SyncedPodsEvictor } from './synced-pods.ts';
import type { RootAccess } from './root-access.ts';
import { Tenant } from './tenant.ts';
import { ROOT_PROVIDER } from './names.ts';

export interface TenantProgramOptions {
  /** Catalog (built-in by default). */
  catalog?: Catalog;
  /** How to wait for the vcluster's exported kubeconfig (the default polls the root cluster). */
  waitForSecret?: SecretWaiter;
  /** How to delete the vcluster's synced pods when suspended (the default deletes them on the root cluster). */
  evictSyncedPods?: SyncedPodsEvictor;
  /** How to ask the root cluster who the program is and whether its namespace binding is in effect (the default asks it). */
  rootAccess?: RootAccess;
}

/** Builds an inline program with options (tests and the benchmark inject a waiter). */
export function createTenantProgram(options: TenantProgramOptions = {}): () => Promise<Record<string, unknown>> {
  return async () => {
    const settings = readTenantConfig(new pulumi.Config(CONFIG_NAMESPACE), options.catalog);
    const rootProvider = new k8s.Provider(ROOT_PROVIDER, {
      kubeconfig: settings.rootKubeconfig,
      enableServerSideApply: true,
    });
    const tenant = new Tenant(`tenant-${settings.tenantId}`, {
      settings,
      rootProvider,
      catalog: options.catalog,
      waitForSecret: options.waitForSecret,
      evictSyncedPods: options.evictSyncedPods,
      rootAccess: options.rootAccess,
    });
    return Promise.resolve({ ...tenant.outputs });
  };
}

/** The inline program the engine runs. */
export function tenantProgram(): Promise<Record<string, unknown>> {
  return createTenantProgram()();
}
