/**
 * Runtimes, hosted and hybrid, as one model (docs/api.md "Runtimes"): the service the routes, the
 * fleet driver and the process call. A tenant's hosted runtime is its tenant row seen as a
 * runtime; a hybrid runtime is registered, installed by the customer from the bundle the
 * registration answers with, and becomes `installed` when the bundle's bootstrap Job exchanges its
 * single-use token for the runtime key. Each concern is a module of its own, as fleet/'s are:
 *
 * | module | what |
 * | --- | --- |
 * | `context.ts` | the dependencies and state the parts share (cache of generated bundles, rates, Argo charts) |
 * | `views.ts`, `conditions.ts` | runtimes as the API shows them; a hybrid runtime's conditions |
 * | `registration.ts` | registration and removal of a hybrid runtime |
 * | `bootstrap.ts` | the bootstrap token, the install URL's document, the token's exchange for the runtime key |
 * | `bundles.ts` | what is generated for a hybrid runtime: bundles, upgrade bundles, the rendered Argo charts |
 * | `upgrades.ts` | upgrade bundles on request, version changes, a fleet wave's asks of opted-in runtimes |
 * | `upgrader-protocol.ts` | the in-cluster upgrader's polls, assignment and reports |
 *
 * This class only holds the shared state and hands each call to its module.
 */
import type { Queryable } from '../db/tx.ts';
import type { Requester } from '../store/audit.ts';
import type { RuntimeMode } from '../store/runtimes.ts';
import type {
  Runtime,
  RuntimeBootstrapAnswer,
  RuntimeRegistered,
  RuntimeRemoved,
  RuntimeUpgradeBundle,
  RuntimeUpgraded,
} from '../api/types.ts';
import type { UpgraderAssignment, UpgraderReportBody } from '../../runtime/protocol/upgrade.ts';
import type { BundleCacheStats } from './bundle-cache.ts';
import { runtimesOf, type Reader, type Runtimes, type RuntimeServiceDeps } from './context.ts';
import type { ProxiedRuntime } from '../tunnel/route.ts';
import { proxiedRuntime, runtimeNamed, runtimesPage, tenantRuntimes } from './views.ts';
import { registerRuntime, removeRuntime, type RegisterRuntime } from './registration.ts';
import { installText, redeemBootstrap } from './bootstrap.ts';
import { askUpgradesByAgent, runtimeBundle, upgradeRuntime } from './upgrades.ts';
import { admitUpgraderPoll, upgraderAssignment, upgraderReport } from './upgrader-protocol.ts';

export type { Reader, RuntimeServiceDeps } from './context.ts';
export type { RegisterRuntime } from './registration.ts';

export class RuntimeService {
  readonly #rt: Runtimes;

  constructor(deps: RuntimeServiceDeps) {
    this.#rt = runtimesOf(deps);
  }

  /** What the cache of generated bundles did (builds are misses): metrics and tests. */
  bundleCacheStats(): BundleCacheStats {
    return this.#rt.generated.stats();
  }

  /** Takes one poll of a runtime's in-cluster upgrader from its tenant's and its own rates, or 429 (upgrader-protocol.ts). */
  admitUpgraderPoll(tenantId: string | null | undefined, runtimeId: string | null | undefined): void {
    admitUpgraderPoll(this.#rt, tenantId, runtimeId);
  }

  list(tenantId: string, reader: Reader): Promise<Runtime[]> {
    return tenantRuntimes(this.#rt, tenantId, reader);
  }

  get(tenantId: string, name: string, reader: Reader): Promise<Runtime> {
    return runtimeNamed(this.#rt, tenantId, name, reader);
  }

  /** A tenant's runtime of that name, not removed, as the runtime proxy needs it (undefined: none). */
  proxied(tenantId: string, name: string): Promise<ProxiedRuntime | undefined> {
    return proxiedRuntime(this.#rt, tenantId, name);
  }

  /** Every tenant's runtimes in creation order, a page after `after`. */
  listAll(q: {
    after?: { ts: string; id: string } | undefined;
    limit: number;
    mode?: RuntimeMode | undefined;
  }): Promise<{ items: Runtime[]; last: { ts: string; id: string } | undefined; more: boolean }> {
    return runtimesPage(this.#rt, q);
  }

  /** Registers a hybrid runtime (registration.ts). */
  register(
    tenantId: string,
    input: RegisterRuntime,
    idempotencyKey: string | undefined,
    by: Requester,
    reader: Reader,
  ): Promise<{ status: number; body: RuntimeRegistered }> {
    return registerRuntime(this.#rt, tenantId, input, idempotencyKey, by, reader);
  }

  /** The bootstrap exchange (bootstrap.ts). */
  redeem(bootstrapToken: string, requestId: string): Promise<RuntimeBootstrapAnswer> {
    return redeemBootstrap(this.#rt, bootstrapToken, requestId);
  }

  /** What a runtime's install URL serves (bootstrap.ts). */
  installText(bootstrapToken: string): Promise<string> {
    return installText(this.#rt, bootstrapToken);
  }

  /** Removes a hybrid runtime (registration.ts). */
  remove(tenantId: string, name: string, by: Requester, reader: Reader): Promise<RuntimeRemoved> {
    return removeRuntime(this.#rt, tenantId, name, by, reader);
  }

  /** A hybrid runtime's upgrade bundle and diff (upgrades.ts). */
  bundle(
    tenantId: string,
    name: string,
    q: { version?: string | undefined; from?: string | undefined },
    reader: Reader = 'operator',
  ): Promise<RuntimeUpgradeBundle> {
    return runtimeBundle(this.#rt, tenantId, name, q, reader);
  }

  /** Asks a hybrid runtime to run another catalog version (upgrades.ts). */
  upgrade(tenantId: string, name: string, version: string, by: Requester, reader: Reader): Promise<RuntimeUpgraded> {
    return upgradeRuntime(this.#rt, tenantId, name, version, by, reader);
  }

  /** A fleet upgrade's wave asks a tenant's opted-in hybrid runtimes for `target` (upgrades.ts). */
  askUpgradesByAgent(
    tx: Queryable,
    tenantId: string,
    target: string,
    by: Requester,
    fleetUpgradeId: string,
  ): Promise<string[]> {
    return askUpgradesByAgent(this.#rt, tx, tenantId, target, by, fleetUpgradeId);
  }

  /** The in-cluster upgrader's pull (upgrader-protocol.ts). */
  upgraderAssignment(runtimeId: string | null | undefined): Promise<UpgraderAssignment> {
    return upgraderAssignment(this.#rt, runtimeId);
  }

  /** What the in-cluster upgrader reports (upgrader-protocol.ts). */
  upgraderReport(
    runtimeId: string | null | undefined,
    report: UpgraderReportBody,
    by: Requester,
  ): Promise<{ runtime: Runtime }> {
    return upgraderReport(this.#rt, runtimeId, report, by);
  }
}
