/**
 * A hybrid runtime's upgrades: its upgrade bundle between two catalog versions (changes nothing),
 * the ask to run another version (checked as a tenant's own version change, audited, answered
 * with the bundle; applied by the customer or, opted in, by the in-cluster upgrader), and the
 * asks a fleet upgrade's wave makes of the runtimes that opted in to the upgrader.
 */
import { withTx, type Queryable } from '../db/tx.ts';
import { AppError, errors } from '../errors.ts';
import { writeAudit, type Requester } from '../store/audit.ts';
import { getRuntimeByName, listTenantRuntimes, setHybridRuntimeVersion, type RuntimeRow } from '../store/runtimes.ts';
import { getTenantRow } from '../store/tenants.ts';
import { availabilityOf } from '../store/versions.ts';
import type { RuntimeUpgradeBundle, RuntimeUpgraded } from '../api/types.ts';
import { agentRefusal } from '../../runtime/hybrid/upgrader.ts';
import { checkVersionChange } from '../runtime-versions/service.ts';
import { patchable, upgradeBundleOf } from './bundles.ts';
import { requirePublicUrl, tenantOf, type Reader, type Runtimes } from './context.ts';
import { runtimeView } from './views.ts';

/**
 * How long an upgrade the in-cluster upgrader reported `applying` holds off another version change:
 * past it the upgrader is taken for gone (its rollout timeout is at most two hours) and a new
 * version may replace the upgrade.
 */
export const UPGRADER_BUSY_SECONDS = 2 * 3600;

/**
 * A hybrid runtime's upgrade bundle at catalog version `to` (default: the version it is asked to
 * run) and its diff against `from` (default: the version before the last change when `to` is the
 * current one, else the current one). Changes nothing. Refused like an upgrade to `to` would be
 * for its availability: a withdrawn version never, a deprecated one not for a tenant key unless
 * the runtime runs it. Within the tenant's and the runtime's bundle rates (429).
 */
export async function runtimeBundle(
  rt: Runtimes,
  tenantId: string,
  name: string,
  q: { version?: string | undefined; from?: string | undefined },
  reader: Reader = 'operator',
): Promise<RuntimeUpgradeBundle> {
  // Before anything is read: a refused request costs no database round trip.
  rt.rates.bundle(tenantId, name);
  const publicUrl = requirePublicUrl(rt);
  await tenantOf(rt, tenantId);
  const row = await getRuntimeByName(rt.deps.pool, tenantId, name);
  if (!row) throw errors.notFound('runtime', name);
  hybridOnly(row, tenantId);
  const to = q.version ?? row.version!;
  const from = q.from ?? (to === row.version ? (row.previous_version ?? to) : row.version!);
  if (!rt.deps.catalog.get(to)) throw errors.unknownVersion(to, 'version');
  const availability = await availabilityOf(rt.deps.pool, to);
  if (availability === 'withdrawn' || (availability === 'deprecated' && reader === 'tenant' && to !== row.version))
    throw errors.versionUnavailable(to, availability, 'version');
  return upgradeBundleOf(rt, row, publicUrl, from, to, { to: 'version', from: 'from' });
}

/**
 * Asks a hybrid runtime's customer to run another catalog version: checked like a tenant's own
 * version change (an allowed upgrade path; a rollback only to the version before, if the catalog
 * allows it; not withdrawn, not deprecated for a tenant), recorded with its audit row, and
 * answered with the upgrade bundle and its diff. The control plane changes nothing in the
 * customer's cluster: the customer applies the bundle (the runtime's agents then report the new
 * version). Asking for the version it already has changes nothing and answers the same bundle.
 */
export async function upgradeRuntime(
  rt: Runtimes,
  tenantId: string,
  name: string,
  version: string,
  by: Requester,
  reader: Reader,
): Promise<RuntimeUpgraded> {
  // The answer is a bundle: within the bundle rates, taken before anything is read.
  rt.rates.bundle(tenantId, name);
  const publicUrl = requirePublicUrl(rt);
  return withTx(rt.deps.pool, async (tx) => {
    const tenant = await getTenantRow(tx, tenantId);
    if (!tenant) throw errors.notFound('tenant', tenantId);
    const row = await getRuntimeByName(tx, tenantId, name, true);
    if (!row) throw errors.notFound('runtime', name);
    hybridOnly(row, tenantId);
    const from = row.version!;
    if (!rt.deps.catalog.get(version)) throw errors.unknownVersion(version, 'version');
    if (version === from) {
      const upgrade = await upgradeBundleOf(rt, row, publicUrl, row.previous_version ?? from, from, {
        to: 'version',
      });
      const byAgent = row.upgrade_phase !== null && row.upgrade_to === from;
      return {
        runtime: runtimeView(rt, row, tenant, reader),
        changed: false,
        appliedBy: byAgent ? 'agent' : 'customer',
        customerActionReason: null,
        upgrade,
      };
    }
    if (row.state !== 'installed')
      throw new AppError(
        'RUNTIME_NOT_INSTALLED',
        `runtime '${name}' is not installed yet: apply its install bundle first (or remove it and register it again at version ${version})`,
        { field: 'name' },
      );
    if (row.upgrade_phase === 'applying' && (row.upgrade_age_seconds ?? 0) < UPGRADER_BUSY_SECONDS)
      throw new AppError(
        'RUNTIME_UPGRADE_IN_PROGRESS',
        `runtime '${name}' is being upgraded from ${row.upgrade_from} to ${row.upgrade_to} by its in-cluster upgrader: ask again once it reports the end (GET the runtime: upgrade.phase)`,
        { field: 'version' },
      );
    const availability = await availabilityOf(tx, version);
    if (availability === 'withdrawn' || (availability === 'deprecated' && by.actor.role === 'tenant'))
      throw errors.versionUnavailable(version, availability, 'version');
    checkVersionChange(rt.deps.catalog, {
      subject: 'runtime',
      from,
      to: version,
      previous: row.previous_version,
      field: 'version',
    });
    const upgrade = await upgradeBundleOf(rt, row, publicUrl, from, version, { to: 'version' });
    // Opted in, the upgrader applies it when every change is one it may make; else the customer does.
    const customerActionReason =
      row.upgrades === 'agent' ? (agentRefusal(upgrade, patchable(rt, row, publicUrl, version)) ?? null) : null;
    const byAgent = row.upgrades === 'agent' && customerActionReason === null;
    const changed = await setHybridRuntimeVersion(tx, row.id, version, byAgent);
    if (!changed) throw errors.notFound('runtime', name);
    const appliedBy = byAgent ? 'agent' : 'customer';
    await writeAudit(tx, by.actor, {
      action: 'runtime.upgrade',
      targetType: 'runtime',
      targetId: row.id,
      before: { version: from },
      after: { version, appliedBy, ...(customerActionReason ? { customerActionReason } : {}) },
      requestId: by.requestId,
    });
    return {
      runtime: runtimeView(rt, changed, tenant, reader),
      changed: true,
      appliedBy,
      customerActionReason,
      upgrade,
    };
  });
}

/**
 * A fleet upgrade's wave moved a tenant's hosted runtime to `target`: its hybrid runtimes that
 * opted in to the in-cluster upgrader (installed, not at `target`, not applying another upgrade)
 * are asked for `target` too, in the caller's transaction and with its audit actor, where the
 * version change is allowed (the catalog's paths, availability) and every change of it is one the
 * upgrader may make. Answers the runtimes asked; the others stay the customer's (the fleet
 * upgrade lists them as customer action needed, with the reason).
 */
export async function askUpgradesByAgent(
  rt: Runtimes,
  tx: Queryable,
  tenantId: string,
  target: string,
  by: Requester,
  fleetUpgradeId: string,
): Promise<string[]> {
  const publicUrl = rt.deps.publicUrl;
  if (publicUrl === undefined || !rt.deps.catalog.get(target)) return [];
  const asked: string[] = [];
  for (const row of await listTenantRuntimes(tx, tenantId)) {
    if (row.mode !== 'hybrid' || row.upgrades !== 'agent' || row.state !== 'installed' || row.version === target)
      continue;
    if (row.upgrade_phase === 'applying' && (row.upgrade_age_seconds ?? 0) < UPGRADER_BUSY_SECONDS) continue;
    const availability = await availabilityOf(tx, target);
    if (availability === 'withdrawn') continue;
    try {
      checkVersionChange(rt.deps.catalog, {
        subject: 'runtime',
        from: row.version!,
        to: target,
        previous: row.previous_version,
        field: 'version',
      });
    } catch {
      continue;
    }
    const upgrade = await upgradeBundleOf(rt, row, publicUrl, row.version!, target, { to: 'version' });
    const refusal = agentRefusal(upgrade, patchable(rt, row, publicUrl, target));
    if (refusal !== undefined) continue;
    const changed = await setHybridRuntimeVersion(tx, row.id, target, true);
    if (!changed) continue;
    await writeAudit(tx, by.actor, {
      action: 'runtime.upgrade',
      targetType: 'runtime',
      targetId: row.id,
      before: { version: row.version },
      after: { version: target, appliedBy: 'agent', fleetUpgradeId },
      requestId: by.requestId,
    });
    asked.push(row.name);
  }
  return asked;
}

/** Bundles and upgrades are a hybrid runtime's: the hosted one is upgraded by the control plane. */
function hybridOnly(row: RuntimeRow, tenantId: string): void {
  if (row.mode === 'hosted')
    throw new AppError(
      'HOSTED_RUNTIME_NO_BUNDLE',
      `the hosted runtime is installed and upgraded by the control plane: upgrade it with POST /v1/tenants/${tenantId}/upgrade`,
      { field: 'name' },
    );
}
