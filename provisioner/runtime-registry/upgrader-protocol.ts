/**
 * The in-cluster upgrader's protocol (runtime/protocol/upgrade.ts), on its runtime key: its polls
 * within its tenant's and its own rates, the assignment it pulls (the version to run and, while an
 * upgrade is pending or applying, its plan), and its reports of each phase, in order.
 */
import { withTx, type Queryable } from '../db/tx.ts';
import { AppError, errors } from '../errors.ts';
import { writeAudit, type Requester } from '../store/audit.ts';
import { getRuntimeById, recordUpgraderReport, type RuntimeRow } from '../store/runtimes.ts';
import { getTenantRow } from '../store/tenants.ts';
import type { Runtime } from '../api/types.ts';
import { upgraderPlan } from '../../runtime/hybrid/upgrader.ts';
import { UPGRADER_NEXT, type UpgraderAssignment, type UpgraderReportBody } from '../../runtime/protocol/upgrade.ts';
import { bundleAt } from './bundles.ts';
import { requirePublicUrl, type Runtimes } from './context.ts';
import { runtimeView } from './views.ts';

/**
 * Takes one poll of a runtime's in-cluster upgrader from its tenant's and its own rates, or 429
 * (before anything is read: a poll that is refused costs nothing more).
 */
export function admitUpgraderPoll(
  rt: Runtimes,
  tenantId: string | null | undefined,
  runtimeId: string | null | undefined,
): void {
  if (tenantId && runtimeId) rt.rates.upgraderPoll(tenantId, runtimeId);
}

/**
 * The in-cluster upgrader's pull (its runtime key): the version the runtime is to run and, while
 * an upgrade by the upgrader is pending or applying, its plan: the objects to apply and the same
 * objects as the version before had them (runtime/hybrid/upgrader.ts).
 */
export async function upgraderAssignment(
  rt: Runtimes,
  runtimeId: string | null | undefined,
): Promise<UpgraderAssignment> {
  const row = await upgraderRuntime(rt.deps.pool, runtimeId);
  const publicUrl = requirePublicUrl(rt);
  const active = row.upgrade_phase === 'pending' || row.upgrade_phase === 'applying';
  if (!active || row.upgrade_from === null || row.upgrade_to === null) return { version: row.version!, upgrade: null };
  const before = bundleAt(rt, row, publicUrl, row.upgrade_from);
  const after = bundleAt(rt, row, publicUrl, row.upgrade_to);
  return {
    version: row.version!,
    upgrade: {
      from: row.upgrade_from,
      to: row.upgrade_to,
      phase: row.upgrade_phase as 'pending' | 'applying',
      ...upgraderPlan(before, after),
    },
  };
}

/**
 * What the in-cluster upgrader reports about the upgrade to `to`: recorded with its audit row
 * (the runtime key as the actor), one row per phase. 409 UPGRADE_SUPERSEDED when that upgrade is
 * no longer the one asked or has ended; 409 UPGRADE_PHASE_OUT_OF_ORDER for a phase its current
 * one may not be followed by (UPGRADER_NEXT: `succeeded` straight from `pending` would say an
 * upgrade rolled out that was never reported started). `rolled-back` makes the version before
 * the runtime's version again.
 */
export async function upgraderReport(
  rt: Runtimes,
  runtimeId: string | null | undefined,
  report: UpgraderReportBody,
  by: Requester,
): Promise<{ runtime: Runtime }> {
  return withTx(rt.deps.pool, async (tx) => {
    const row = await upgraderRuntime(tx, runtimeId, true);
    const tenant = await getTenantRow(tx, row.tenant_id);
    if (!tenant) throw errors.notFound('tenant', row.tenant_id);
    const current = row.upgrade_phase;
    if (
      (current === 'pending' || current === 'applying') &&
      row.upgrade_to === report.to &&
      row.version === report.to
    ) {
      // The row is locked: the phases go in order, whatever the upgrader sends.
      if (current === 'applying' && report.phase === 'applying')
        return { runtime: runtimeView(rt, row, tenant, 'operator') };
      const allowed = UPGRADER_NEXT[current];
      if (!allowed.includes(report.phase))
        throw new AppError(
          'UPGRADE_PHASE_OUT_OF_ORDER',
          `the upgrade to ${report.to} is ${current}: its next report is ${allowed.join(' or ')}, not ${report.phase}`,
          { field: 'phase', details: { phase: current, allowed } },
        );
    }
    const changed = await recordUpgraderReport(tx, row.id, report.to, report.phase, report.message?.trim() || null);
    if (!changed)
      throw new AppError(
        'UPGRADE_SUPERSEDED',
        row.upgrade_to === report.to && row.upgrade_phase !== null
          ? `the upgrade to ${report.to} already ended (${row.upgrade_phase})`
          : `the upgrade to ${report.to} is not the one asked now (${row.upgrade_phase === 'pending' || row.upgrade_phase === 'applying' ? `${row.upgrade_to}, ${row.upgrade_phase}` : `none; the runtime is to run ${row.version}`})`,
        { field: 'to' },
      );
    await writeAudit(tx, by.actor, {
      action: `runtime.upgrade.${report.phase}`,
      targetType: 'runtime',
      targetId: row.id,
      before: { version: row.upgrade_from, target: report.to, phase: current },
      after: { version: changed.version, appliedBy: 'agent', phase: report.phase, message: changed.upgrade_message },
      requestId: by.requestId,
    });
    return { runtime: runtimeView(rt, changed, tenant, 'operator') };
  });
}

async function upgraderRuntime(
  db: Queryable,
  runtimeId: string | null | undefined,
  forUpdate = false,
): Promise<RuntimeRow> {
  const row = runtimeId ? await getRuntimeById(db, runtimeId, forUpdate) : undefined;
  if (!row || row.mode !== 'hybrid' || row.upgrades !== 'agent')
    throw new AppError(
      'UPGRADER_NOT_OPTED_IN',
      row?.mode === 'hybrid'
        ? `runtime '${row.name}' did not opt in to the in-cluster upgrader (upgrades: customer): its customer applies each upgrade`
        : 'only the key of a hybrid runtime that opted in to the in-cluster upgrader (upgrades: agent) may call the upgrader routes',
    );
  return row;
}
