/**
 * What one tenant, and one of its hybrid runtimes, may ask of the control plane's generated
 * content per unit of time (docs/security.md "Tenant against tenant through shared resources"):
 * upgrade bundles (the bundle and upgrade routes), the in-cluster upgrader's polls, and hybrid
 * registrations. A generated bundle is cached (bundle-cache.ts), but a tenant that varies what it
 * asks for (versions, runtimes) builds a new one each time: these rates bound how much of the
 * event loop it can take. Counted per replica with WindowBudget, like the event batch rates;
 * over a rate: 429 RATE_LIMITED with Retry-After, naming the setting.
 */
import type { TenantBudgets } from '../config.ts';
import { errors } from '../errors.ts';
import { WindowBudget } from '../runtime-objects/budgets.ts';

export type RuntimeRateBudgets = Pick<
  TenantBudgets,
  | 'hybridRegistrationsPerHour'
  | 'hybridBundlesPerMinute'
  | 'hybridBundlesPerRuntimePerMinute'
  | 'upgraderPollsPerMinute'
  | 'upgraderPollsPerRuntimePerMinute'
>;

const MINUTE = 60_000;

export class RuntimeRates {
  readonly #budgets: RuntimeRateBudgets;
  readonly #registrations: WindowBudget;
  readonly #bundlesByTenant: WindowBudget;
  readonly #bundlesByRuntime: WindowBudget;
  readonly #pollsByTenant: WindowBudget;
  readonly #pollsByRuntime: WindowBudget;

  constructor(budgets: RuntimeRateBudgets, now?: () => number) {
    this.#budgets = budgets;
    this.#registrations = new WindowBudget(budgets.hybridRegistrationsPerHour, 60 * MINUTE, now);
    this.#bundlesByTenant = new WindowBudget(budgets.hybridBundlesPerMinute, MINUTE, now);
    this.#bundlesByRuntime = new WindowBudget(budgets.hybridBundlesPerRuntimePerMinute, MINUTE, now);
    this.#pollsByTenant = new WindowBudget(budgets.upgraderPollsPerMinute, MINUTE, now);
    this.#pollsByRuntime = new WindowBudget(budgets.upgraderPollsPerRuntimePerMinute, MINUTE, now);
  }

  /** One hybrid registration of the tenant, or 429. */
  registration(tenantId: string): void {
    const wait = this.#registrations.take(tenantId);
    if (wait !== undefined)
      throw errors.rateLimited(
        wait,
        `this tenant already asked for ${this.#budgets.hybridRegistrationsPerHour} hybrid runtime registrations this hour (PROVISIONER_HYBRID_REGISTRATIONS_PER_HOUR)`,
      );
  }

  /**
   * One upgrade bundle of the tenant's runtime (by name: taken before the runtime is read, so a
   * refused request costs nothing more), or 429: the tenant's rate first, then the runtime's.
   */
  bundle(tenantId: string, runtimeName: string): void {
    const tenantWait = this.#bundlesByTenant.take(tenantId);
    if (tenantWait !== undefined)
      throw errors.rateLimited(
        tenantWait,
        `this tenant already asked for ${this.#budgets.hybridBundlesPerMinute} runtime bundles this minute (PROVISIONER_HYBRID_BUNDLES_PER_MINUTE)`,
      );
    const runtimeWait = this.#bundlesByRuntime.take(`${tenantId}/${runtimeName}`);
    if (runtimeWait !== undefined)
      throw errors.rateLimited(
        runtimeWait,
        `this runtime's bundle was already asked for ${this.#budgets.hybridBundlesPerRuntimePerMinute} times this minute (PROVISIONER_HYBRID_BUNDLES_PER_RUNTIME_PER_MINUTE)`,
      );
  }

  /** One poll of the runtime's in-cluster upgrader, or 429: the tenant's rate first, then the runtime's. */
  upgraderPoll(tenantId: string, runtimeId: string): void {
    const tenantWait = this.#pollsByTenant.take(tenantId);
    if (tenantWait !== undefined)
      throw errors.rateLimited(
        tenantWait,
        `this tenant's upgraders already asked ${this.#budgets.upgraderPollsPerMinute} times this minute (PROVISIONER_HYBRID_UPGRADER_POLLS_PER_MINUTE)`,
      );
    const runtimeWait = this.#pollsByRuntime.take(runtimeId);
    if (runtimeWait !== undefined)
      throw errors.rateLimited(
        runtimeWait,
        `this runtime's upgrader already asked ${this.#budgets.upgraderPollsPerRuntimePerMinute} times this minute (PROVISIONER_HYBRID_UPGRADER_POLLS_PER_RUNTIME_PER_MINUTE)`,
      );
  }
}
