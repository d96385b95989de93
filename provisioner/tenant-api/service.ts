/**
 * Tenant lifecycle rules on the API side: signup, and every spec change (plan, version,
 * suspension, deletion, retry). Each change is validated against the catalog and the plans,
 * then written with its queued operation, its audit row and a NOTIFY in one transaction.
 */
import { randomUUID } from 'node:crypto';
import type pg from 'pg';
import { generateKey, hashKey, keyPrefix } from '../store/key-format.ts';
import type { Role } from '../store/key-format.ts';
import { revokeTenantKeys } from '../store/keys.ts';
import type { SecretBox } from '../crypto.ts';
import { withTx, pgCode, pgConstraint } from '../db/tx.ts';
import { errors } from '../errors.ts';
import { writeAudit, type Requester } from '../store/audit.ts';
import { claimKey, requestHash, storeResponse } from '../store/idempotency.ts';
import {
  changeSpec,
  countTenants,
  getTenantRow,
  insertSignup,
  listTenants,
  readyTenantRows,
  requestRetry,
  retryState,
  setSuspender,
  setTenantSettings,
  settingsOf,
  toTenant,
  type TenantCounts,
  type TenantFilter,
  type TenantPage,
  type Tenant,
  type TenantRow,
  type TenantSettings,
  type SpecChange,
} from '../store/tenants.ts';
import { TENANT_SETTINGS } from '../store/tenant-shapes.ts';
import type { OperationKind } from '../store/states.ts';
import { getOperation, listOperations, readLog, type LogLine, type Operation } from '../store/operations.ts';
import { availabilityOf } from '../store/versions.ts';
import { checkVersionChange, currentDefaultVersion } from '../runtime-versions/service.ts';
import { listRegions } from '../store/clusters.ts';
import type { Catalog } from '../../runtime/catalog.ts';
import { planOf, PLAN_NAMES, DEFAULT_PLAN } from '../../tenants/plans.ts';
import type { Queryable } from '../db/tx.ts';
import { fleetUpgradeOf } from '../store/fleet-upgrades.ts';
import { checkTimeZone, checkWindows } from '../fleet/windows.ts';
import { bindClaimedEntry, claimPoolEntry } from '../store/pool.ts';
import { newRuntimeKey } from '../reconciler/runtime-token.ts';

export interface TenantServiceDeps {
  pool: pg.Pool;
  box: SecretBox;
  catalog: Catalog;
  /** Warm pool entries kept per plan on each root cluster (PROVISIONER_WARM_POOL): a signup of such a plan claims one when it can. */
  warmPool?: Readonly<Record<string, number>>;
}

/** A signup: the tenant's names and spec, and the settings the signup's schema lets it give (a time zone). */
export interface SignupInput extends Partial<TenantSettings> {
  organization: string;
  email: string;
  plan?: string | undefined;
  runtimeVersion?: string | undefined;
  region?: string | undefined;
}

/**
 * Each setting's check beyond its schema (store/tenant-shapes.ts), a 400 naming the field with the
 * value and an example; answers the value as it is stored. A setting without one is stored as the
 * schema let it through.
 */
const SETTING_CHECKS: { [K in keyof TenantSettings]?: (v: TenantSettings[K]) => TenantSettings[K] } = {
  maintenanceWindows: (w) => checkWindows(w),
  timeZone: (z) => (z === null ? null : checkTimeZone(z)),
};

/** The settings among `given` (signup's input, a PATCH body), unchecked; the absent and undefined left out. */
function settingsIn(given: Partial<TenantSettings>): Partial<TenantSettings> {
  const keys = (Object.keys(TENANT_SETTINGS) as Array<keyof TenantSettings>).filter((k) => given[k] !== undefined);
  return Object.fromEntries(keys.map((k) => [k, given[k]]));
}

/** The settings given, checked and normalised (SETTING_CHECKS). */
export function checkSettings(given: Partial<TenantSettings>): Partial<TenantSettings> {
  return Object.fromEntries(
    Object.entries(settingsIn(given)).map(([k, v]) => {
      const check = SETTING_CHECKS[k as keyof TenantSettings] as ((v: unknown) => unknown) | undefined;
      return [k, check ? check(v) : v];
    }),
  );
}

export interface SignupResult {
  tenant: Tenant;
  apiKey: string;
  operationId: string;
  /** Served from the warm pool (store/pool.ts): the runtime was already running. */
  warm?: boolean;
}

/** A change of a tenant's spec, and who asks for it. */
export interface SpecChangeRequest {
  tenantId: string;
  change: SpecChange;
  /** What was asked for; an `update` that only changes the version or suspension is recorded as an upgrade, suspend or resume. */
  kind: OperationKind;
  /** The caller: its role decides which versions it may install, and which suspensions it may lift. */
  by: Requester & { actor: { role: Role } };
  /** Why the tenant is suspended (an operator's suspension; shown to the tenant when it tries to resume). */
  reason?: string | undefined;
  /** Settings of the tenant (its maintenance windows, its time zone), each replacing its value (not a spec change: no operation). */
  settings?: Partial<TenantSettings> | undefined;
}

export interface Accepted {
  tenant: Tenant;
  /** The operation this request queued; when it queued none, the tenant's last or running one. */
  operationId: string;
  /** false: the request changed nothing that needs an operation (repeating it is harmless). */
  queued: boolean;
}

export class TenantService {
  readonly #deps: TenantServiceDeps;

  constructor(deps: TenantServiceDeps) {
    this.#deps = deps;
  }

  /** A page of tenants the filter selects, in the page's order (with each row's sort key, for the cursor). */
  list(page: TenantPage): Promise<Array<TenantRow & { sort_key: string }>> {
    return listTenants(this.#deps.pool, page);
  }

  /** The Ready tenants (not suspended or deleted), oldest first, at most `limit`. */
  ready(limit: number): Promise<TenantRow[]> {
    return readyTenantRows(this.#deps.pool, limit);
  }

  /** The tenants the filter selects, counted by phase, suspension and runtime version. */
  count(filter: TenantFilter): Promise<TenantCounts> {
    return countTenants(this.#deps.pool, filter);
  }

  operation(id: string): Promise<Operation | undefined> {
    return getOperation(this.#deps.pool, id);
  }

  /** A page of the tenant's operations, newest first; a tenant that does not exist is a 404. */
  async operations(
    tenantId: string,
    q: { limit: number; before?: { ts: string; id: string } },
  ): Promise<Array<Operation & { cursorTs: string }>> {
    if (!(await getTenantRow(this.#deps.pool, tenantId))) throw errors.notFound('tenant', tenantId);
    return listOperations(this.#deps.pool, tenantId, q);
  }

  /** The operation's log lines after `afterSeq`, oldest first. */
  operationLog(operationId: string, afterSeq: number, limit: number): Promise<LogLine[]> {
    return readLog(this.#deps.pool, operationId, afterSeq, limit);
  }

  /** Validates that `version` may be installed by `role` (public signups count as tenants). */
  async checkInstallable(db: Queryable, version: string, role: Role | 'public'): Promise<void> {
    if (!this.#deps.catalog.get(version)) throw errors.unknownVersion(version, 'runtimeVersion');
    const availability = await availabilityOf(db, version);
    if (availability === 'withdrawn' || (availability === 'deprecated' && (role === 'tenant' || role === 'public'))) {
      throw errors.versionUnavailable(version, availability, 'runtimeVersion');
    }
  }

  /**
   * Upgrade rules: forward moves follow the catalog's path; a rollback only to the version last run.
   * A tenant with nothing installed anywhere (see everInstalled) may take any installable version.
   */
  checkVersionChange(tenant: TenantRow, to: string): void {
    if (!everInstalled(tenant)) return;
    checkVersionChange(this.#deps.catalog, {
      subject: 'tenant',
      from: tenant.runtime_version,
      to,
      previous: tenant.previous_runtime_version,
      field: 'runtimeVersion',
    });
  }

  async signup(
    input: SignupInput,
    idempotencyKey: string | undefined,
    requestId: string,
  ): Promise<{ status: number; body: SignupResult }> {
    const plan = input.plan ?? DEFAULT_PLAN;
    if (!planOf(plan)) throw errors.unknownPlan(plan, PLAN_NAMES);
    const given = settingsIn(input);
    const settings = checkSettings(given);
    const body = {
      organization: input.organization,
      email: input.email,
      plan: input.plan,
      runtimeVersion: input.runtimeVersion,
      region: input.region,
      ...given,
    };
    return withTx(this.#deps.pool, async (tx) => {
      if (idempotencyKey !== undefined) {
        const claim = await claimKey(tx, this.#deps.box, 'signup', idempotencyKey, requestHash(body));
        if (claim.kind === 'replay') return { status: claim.status, body: claim.body as SignupResult };
        if (claim.kind === 'mismatch') throw errors.idempotencyMismatch();
        if (claim.kind === 'in-progress') throw errors.idempotencyInProgress();
      }
      // No version named: the default, which is always installable (runtime-versions/service.ts).
      const runtimeVersion = input.runtimeVersion ?? (await currentDefaultVersion(tx, this.#deps.catalog));
      await this.checkInstallable(tx, runtimeVersion, 'public');
      if (input.region !== undefined) {
        const regions = await listRegions(tx);
        if (!regions.some((r) => r.name === input.region))
          throw errors.unknownRegion(
            input.region,
            regions.map((r) => r.name),
          );
      }
      const tenantId = randomUUID();
      const operationId = randomUUID();
      const keyId = randomUUID();
      const key = generateKey('tenant');
      const audit = {
        organization: input.organization,
        email: input.email,
        spec: { plan, runtimeVersion, region: input.region ?? null },
        ...(Object.keys(settings).length > 0 ? { settings } : {}),
        operationId,
        apiKeyId: keyId,
      };
      let row;
      try {
        // A warm runtime of the plan and version, when the pool has one Ready: no wait for a cold start.
        const warm =
          (this.#deps.warmPool?.[plan] ?? 0) > 0
            ? await claimPoolEntry(tx, {
                organization: input.organization,
                email: input.email,
                plan,
                runtimeVersion,
                region: input.region ?? null,
                settings,
              })
            : undefined;
        if (warm) {
          // The tenant's runtime key is minted now, in the claim's transaction, in exchange for the
          // entry's pool credential (as a hybrid runtime's bootstrap exchange mints its key): the
          // `bind` run installs it, and its success revokes the credential (docs/operations.md "Warm pool").
          const { newKey: runtimeKey } = newRuntimeKey(this.#deps.box, warm.id);
          await bindClaimedEntry(tx, {
            tenantId: warm.id,
            operationId,
            key: { id: keyId, hash: hashKey(key), prefix: keyPrefix(key) },
            runtimeKey,
            poolCredentialId: warm.poolCredentialId,
            clusterId: warm.clusterId,
            audit: { after: { ...audit, warmPool: true }, requestId },
          });
          const result: SignupResult = {
            tenant: toTenant((await getTenantRow(tx, warm.id))!),
            apiKey: key,
            operationId,
            warm: true,
          };
          if (idempotencyKey !== undefined)
            await storeResponse(tx, this.#deps.box, 'signup', idempotencyKey, 202, result);
          return { status: 202, body: result };
        }
        row = await insertSignup(tx, {
          tenantId,
          operationId,
          organization: input.organization,
          email: input.email,
          plan,
          runtimeVersion,
          region: input.region ?? null,
          settings,
          key: { id: keyId, hash: hashKey(key), prefix: keyPrefix(key) },
          audit: { after: audit, requestId },
        });
      } catch (err) {
        if (pgCode(err) === '23505' && pgConstraint(err) === 'tenants_organization_live')
          throw errors.organizationTaken(input.organization);
        throw err;
      }
      const tenant = toTenant(row);
      const result: SignupResult = { tenant, apiKey: key, operationId };
      if (idempotencyKey !== undefined) await storeResponse(tx, this.#deps.box, 'signup', idempotencyKey, 202, result);
      return { status: 202, body: result };
    });
  }

  /**
   * Applies a spec change. A change that leaves the spec as it is queues nothing and answers with
   * the tenant's last operation, so that repeating a request is harmless. Errors about the version
   * name the spec's field, `runtimeVersion`.
   */
  async change(request: SpecChangeRequest): Promise<Accepted> {
    const {
      tenantId: id,
      change,
      kind,
      by: { actor, requestId },
    } = request;
    const settings = checkSettings(request.settings ?? {});
    return withTx(this.#deps.pool, async (tx) => {
      let row = await getTenantRow(tx, id, true);
      if (!row) throw errors.notFound('tenant', id);
      if (row.deleted) {
        if (kind === 'delete') return { tenant: toTenant(row), operationId: row.last_operation_id!, queued: false };
        throw errors.tenantDeleted(id);
      }
      if (change.plan !== undefined && !planOf(change.plan)) throw errors.unknownPlan(change.plan, PLAN_NAMES);
      // Who suspended decides who may resume: a tenant lifts only its own suspension.
      if (change.suspended === false && row.suspended && row.suspended_by !== 'tenant' && actor.role === 'tenant') {
        throw errors.suspendedByOperator(row.suspension_reason);
      }
      if (change.runtimeVersion !== undefined && change.runtimeVersion !== row.runtime_version) {
        // A tenant a fleet upgrade holds changes version only through it.
        const fleet = await fleetUpgradeOf(tx, id);
        if (fleet !== undefined) throw errors.inFleetUpgrade(id, fleet);
        await this.checkInstallable(tx, change.runtimeVersion, actor.role);
        this.checkVersionChange(row, change.runtimeVersion);
      }
      const effective = Object.fromEntries(
        Object.entries(change).filter(
          ([k, v]) =>
            v !== undefined &&
            v !== (row as unknown as Record<string, unknown>)[k === 'runtimeVersion' ? 'runtime_version' : k],
        ),
      );
      const suspender = actor.role === 'tenant' ? 'tenant' : 'operator';
      if (
        change.suspended === true &&
        row.suspended &&
        (row.suspended_by !== suspender || (request.reason ?? null) !== row.suspension_reason)
      ) {
        // Already suspended: an operator's suspension takes over a tenant's own (and its reason); a tenant cannot take over an operator's.
        if (suspender === 'operator') {
          await setSuspender(tx, id, 'operator', request.reason ?? null);
          row = (await getTenantRow(tx, id, true))!; // the answer shows the suspension as it is now
        }
      }
      // Settings are not part of the spec: stored and audited (one row per setting changed, as
      // `tenant.<column>`), no generation, no engine run. One set to what it is changes nothing.
      const current = settingsOf(row);
      const changed = (Object.keys(settings) as Array<keyof TenantSettings>).filter(
        (k) => JSON.stringify(settings[k]) !== JSON.stringify(current[k]),
      );
      if (changed.length > 0) {
        await setTenantSettings(tx, id, Object.fromEntries(changed.map((k) => [k, settings[k]])));
        for (const k of changed)
          await writeAudit(tx, actor, {
            action: `tenant.${TENANT_SETTINGS[k].column}`,
            targetType: 'tenant',
            targetId: id,
            before: { [k]: current[k] },
            after: { [k]: settings[k] },
            requestId,
          });
        row = (await getTenantRow(tx, id, true))!;
      }
      if (Object.keys(effective).length === 0)
        return { tenant: toTenant(row), operationId: row.last_operation_id!, queued: false };
      const op = await changeSpec(tx, row, effective, kindFor(kind, effective), describe(effective));
      if (effective.suspended === true)
        await setSuspender(tx, id, suspender, suspender === 'operator' ? (request.reason ?? null) : null);
      if (effective.suspended === false) await setSuspender(tx, id, null, null);
      // A deleted tenant's runtime is reached no more: its runtime keys are revoked now (every
      // replica closes the tunnel); the tenant's own keys stay for reads until the destroy is done.
      if (effective.deleted === true) await revokeTenantKeys(tx, id, ['runtime']);
      const after = (await getTenantRow(tx, id))!;
      await writeAudit(tx, actor, {
        action: `tenant.${op.kind}`,
        targetType: 'tenant',
        targetId: id,
        before: toTenant(row).spec,
        after: {
          ...toTenant(after).spec,
          ...(effective.suspended === true
            ? { suspendedBy: suspender, ...(request.reason ? { reason: request.reason } : {}) }
            : {}),
        },
        requestId,
      });
      return { tenant: toTenant(after), operationId: op.id, queued: true };
    });
  }

  /** Queues a new attempt now for a stalled or failing tenant. */
  async retry(id: string, { actor, requestId }: Requester): Promise<Accepted> {
    return withTx(this.#deps.pool, async (tx) => {
      const row = await getTenantRow(tx, id, true);
      if (!row) throw errors.notFound('tenant', id);
      if (row.phase === 'Deleted') throw errors.tenantDeleted(id);
      // A retry is for a tenant that stalled or is failing. Otherwise it queues nothing: a tenant
      // with an operation under way answers that operation, a settled one a 409 naming its state.
      const { failing, open } = (await retryState(tx, id))!;
      if (!failing && open !== null) return { tenant: toTenant(row), operationId: open, queued: false };
      if (!failing) throw errors.nothingToRetry(id, row.phase);
      const op = await requestRetry(tx, row);
      await writeAudit(tx, actor, { action: 'tenant.retry', targetType: 'tenant', targetId: id, requestId });
      return { tenant: toTenant((await getTenantRow(tx, id))!), operationId: op.id, queued: true };
    });
  }
}

/**
 * Whether anything of the tenant may exist on a root cluster, so that the upgrade and rollback
 * rules protect it: a version was installed, or a first install was placed on a cluster (an
 * attempt that failed may have created part of it). A tenant never placed (waiting for a cluster
 * or for the engine) has nothing installed: any installable version is a first install.
 */
export function everInstalled(tenant: Pick<TenantRow, 'actual_runtime_version' | 'cluster_id'>): boolean {
  return tenant.actual_runtime_version !== null || tenant.cluster_id !== null;
}

function kindFor(requested: OperationKind, effective: Record<string, unknown>): OperationKind {
  const keys = Object.keys(effective);
  if (requested !== 'update') return requested;
  if (keys.length === 1 && keys[0] === 'runtimeVersion') return 'upgrade';
  if (keys.length === 1 && keys[0] === 'suspended') return effective.suspended ? 'suspend' : 'resume';
  return 'update';
}

function describe(effective: Record<string, unknown>): string {
  return (
    'spec changed: ' +
    Object.entries(effective)
      .map(([k, v]) => `${k}=${String(v)}`)
      .join(', ')
  );
}
