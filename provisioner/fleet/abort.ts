/**
 * The abort (a tick's part while the fleet upgrade is aborting): once no upgrade or automatic
 * rollback is under way, with `rollback` the moved tenants go back to their versions, a wave at a
 * time from the last, each within maxConcurrency, where the catalog allows; then the fleet
 * upgrade ends as aborted.
 */
import { countForwardSteps, finishAbortIfIdle, tenantsToRevert } from '../store/fleet-upgrades.ts';
import { getTenantRow } from '../store/tenants.ts';
import { decide, finish, startStep, type Tick } from './round.ts';

/** While aborting: once no upgrade is under way, roll moved tenants back (reverse wave order), then end. */
export async function abortStep(t: Tick): Promise<void> {
  if ((await countForwardSteps(t.tx, t.fleet.id)) > 0) return;
  if (t.fleet.abort_rollback) {
    // The highest wave with tenants still to roll back (or being rolled back) goes first.
    const rows = await tenantsToRevert(t.tx, t.fleet.id);
    if (rows.length > 0) {
      let free = t.options.maxConcurrency - rows.filter((r) => r.state === 'reverting').length;
      for (const r of rows) {
        if (free <= 0) break;
        if (r.state === 'reverting') continue;
        const tenant = await getTenantRow(t.tx, r.tenant_id, true);
        const at = r.path[r.hop]!;
        let refusal: string | undefined;
        if (!tenant || tenant.deleted) refusal = 'the tenant was deleted';
        else if (r.hop > 0)
          refusal = `it moved ${r.hop + 1} hops (${[r.from_version, ...r.path.slice(0, r.hop + 1)].join(' -> ')}): a rollback returns only to the version last run`;
        else if (tenant.runtime_version !== at || tenant.actual_runtime_version !== at)
          refusal = `its version changed since (spec ${tenant.runtime_version}, running ${tenant.actual_runtime_version ?? 'nothing'})`;
        else {
          const back = t.driver.catalog.rollbackAnswer(at, r.from_version);
          if (!back.allowed) refusal = back.reason;
        }
        if (refusal !== undefined) {
          const reason = `left on ${at}: ${refusal}`;
          await finish(t, r.tenant_id, 'left', { reason });
          await decide(t, 'tenant_left', { reason }, r.tenant_id);
          t.driver.count('left');
          continue;
        }
        await startStep(t, r.tenant_id, 'revert', at, r.from_version, {});
        free -= 1;
      }
      return;
    }
  }
  if (await finishAbortIfIdle(t.tx, t.fleet.id, t.fleet.abort_rollback)) {
    await decide(t, 'aborted', {});
    t.driver.log.info({ fleetUpgrade: t.fleet.id }, 'fleet upgrade aborted');
    t.driver.count('aborted');
  }
}
