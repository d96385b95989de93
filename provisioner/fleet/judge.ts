/**
 * Judging the steps under way (a tick's first part): each step of the fleet upgrade whose spec
 * change was made is judged by the health gate (gate.ts) on what the database says now, and its
 * tenant moves on: the next hop of its path, succeeded, one automatic rollback, quarantined, or,
 * while aborting, reverted or left. The checks an operator skipped for a step (gate_skips, written
 * by FleetUpgradeService.skipGate) are read with the step, so whichever replica holds the lease
 * judges it with them.
 */
import { inFlightSteps, type InFlightRow } from '../store/fleet-upgrades.ts';
import { judgeGate, skippedFor } from './gate.ts';
import { decide, finish, setTenant, startStep, type StepKind, type Tick } from './round.ts';

const KIND_OF: Record<string, StepKind> = { upgrading: 'upgrade', rolling_back: 'rollback', reverting: 'revert' };

/** (1) Every step under way: judged by the gate, and its tenant moved on. */
export async function judgeSteps(t: Tick): Promise<void> {
  const rows = await inFlightSteps(t.tx, t.fleet.id);
  for (const r of rows) {
    const kind = KIND_OF[r.state]!;
    const verdict = judgeGate({
      kind,
      generation: Number(r.generation),
      to: r.step_to,
      startedAtMs: r.step_started_at.getTime(),
      nowMs: t.now.getTime(),
      timeoutMs: t.options.gateTimeoutSeconds * 1000,
      checks: t.options.gate,
      skipped: skippedFor(r.gate_skips, r.generation),
      snapshot: r.snapshot,
      tenant: {
        observedGeneration: Number(r.observed_generation),
        actualVersion: r.actual_runtime_version,
        phase: r.phase,
        ready: r.ready,
        stalled: r.stalled,
        deleted: r.deleted,
        tunnelConnectedAt: r.tunnel_connected_at,
        reporterLastSeen: r.reporter_last_seen,
        applicationsGood: r.apps_good,
      },
      operation:
        r.op_state === null
          ? null
          : { state: r.op_state, error: r.op_error, createdAt: r.op_created_at!, finishedAt: r.op_finished_at },
    });
    const gate = JSON.stringify({
      passed: verdict.verdict === 'pass',
      checks: verdict.checks,
      at: t.now.toISOString(),
    });
    if (verdict.verdict === 'wait') {
      if (JSON.stringify(r.gate?.checks ?? null) !== JSON.stringify(verdict.checks))
        await setTenant(t, r.tenant_id, { gate });
      continue;
    }
    if (verdict.verdict === 'gone') {
      await finish(t, r.tenant_id, 'skipped', { gate, reason: `${verdict.reason} during the fleet upgrade` });
      await decide(t, 'tenant_skipped', { reason: verdict.reason }, r.tenant_id);
      t.driver.count('skipped');
      continue;
    }
    if (kind === 'upgrade') await afterUpgrade(t, r, verdict, gate);
    else if (kind === 'rollback') {
      const reason =
        verdict.verdict === 'pass'
          ? `${r.reason ?? 'gate failed'}; rolled back to ${r.step_to}`
          : `${r.reason ?? 'gate failed'}; the rollback to ${r.step_to} failed too: ${verdict.reason}`;
      await finish(t, r.tenant_id, 'quarantined', { gate, reason, rolled_back: verdict.verdict === 'pass' });
      await decide(t, 'tenant_quarantined', { reason, rolledBack: verdict.verdict === 'pass' }, r.tenant_id);
      t.driver.count('quarantined');
    } else if (verdict.verdict === 'pass') {
      await finish(t, r.tenant_id, 'reverted', {
        gate,
        rolled_back: true,
        reason: `rolled back to ${r.step_to} after the abort`,
      });
      await decide(t, 'tenant_reverted', { to: r.step_to }, r.tenant_id);
      t.driver.count('reverted');
    } else {
      const reason = `the rollback to ${r.step_to} after the abort failed: ${verdict.reason}`;
      await finish(t, r.tenant_id, 'left', { gate, reason });
      await decide(t, 'tenant_left', { reason }, r.tenant_id);
      t.driver.count('left');
    }
  }
}

async function afterUpgrade(
  t: Tick,
  r: InFlightRow,
  verdict: { verdict: 'pass' } | { verdict: 'fail'; reason: string },
  gate: string,
): Promise<void> {
  if (verdict.verdict === 'pass') {
    const next = r.path[r.hop + 1];
    if (next !== undefined && t.fleet.state !== 'aborting') {
      // The tenant's upgrade goes on through its path (a pause stops new tenants, not a tenant mid-path).
      await setTenant(t, r.tenant_id, { gate });
      await startStep(t, r.tenant_id, 'upgrade', r.step_to, next, { hop: r.hop + 1 });
      t.driver.count('hop');
      return;
    }
    if (next !== undefined) {
      const reason = `aborted after the hop to ${r.step_to}; its path went on to ${r.path.at(-1)}`;
      await setTenant(t, r.tenant_id, { state: 'interrupted', gate, reason, finished_at: t.now });
      await decide(t, 'tenant_interrupted', { reason }, r.tenant_id);
      return;
    }
    await setTenant(t, r.tenant_id, { state: 'succeeded', gate, finished_at: t.now });
    await decide(t, 'tenant_succeeded', { version: r.step_to }, r.tenant_id);
    t.driver.count('succeeded');
    // Its hybrid runtimes that opted in follow it: their in-cluster upgraders apply the target.
    const asked = await t.driver.askHybridUpgrades?.(
      t.tx,
      r.tenant_id,
      r.step_to,
      { actor: t.driver.actor, requestId: `fleet-upgrade:${t.fleet.id}` },
      t.fleet.id,
    );
    if (asked && asked.length > 0)
      await decide(t, 'hybrid_upgrades_asked', { version: r.step_to, runtimes: asked }, r.tenant_id);
    return;
  }
  // The gate failed: one automatic rollback of this hop when the catalog allows it, then quarantine.
  const back = t.driver.catalog.rollbackAnswer(r.step_to, r.step_from);
  const failure = `gate failed on ${r.step_from} -> ${r.step_to}: ${verdict.reason}`;
  if (back.allowed) {
    await setTenant(t, r.tenant_id, { gate, reason: failure });
    await startStep(t, r.tenant_id, 'rollback', r.step_to, r.step_from, {});
    return;
  }
  const reason = `${failure}; not rolled back: ${back.reason}`;
  await finish(t, r.tenant_id, 'quarantined', { gate, reason });
  await decide(t, 'tenant_quarantined', { reason, rolledBack: false }, r.tenant_id);
  t.driver.count('quarantined');
}
