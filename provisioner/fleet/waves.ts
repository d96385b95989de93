/**
 * Wave scheduling (a tick's second and third parts, while the fleet upgrade runs): the current
 * wave's failure budget (halt), tenants taken back for their windows (requeue.ts), starts within
 * maxConcurrency, maxUnavailable, the per-cluster cap and the tenants' maintenance windows; then
 * the wave settles, soaks and the next one starts, until the fleet upgrade completes.
 */
import {
  completeFleetUpgrade,
  completeWave,
  haltFleetUpgrade,
  pendingTenantsPage,
  reopenWave,
  setCurrentWave,
  soakWave,
  startWave,
  stepsPerCluster,
  waveCounts,
  waveRows,
  type WaveRow,
} from '../store/fleet-upgrades.ts';
import { getTenantRow, tenantStalled } from '../store/tenants.ts';
import { pathFor } from './plan.ts';
import { requeue, windowCheck } from './requeue.ts';
import { decide, finish, setTenant, startStep, type Tick } from './round.ts';

/** (2) and (3) while running: budget, starts, wave settling, soak, next wave, completion. */
export async function advance(t: Tick): Promise<void> {
  const waves = await waveRows(t.tx, t.fleet.id);
  // A bound: each round either starts the next wave or stops.
  for (let round = 0; round <= waves.length; round++) {
    const w = waves[t.fleet.current_wave];
    if (!w) return complete(t);
    if (w.state === 'pending') {
      await startWave(t.tx, t.fleet.id, w.wave, t.now);
      w.state = 'running';
      await decide(t, 'wave_start', { wave: w.wave, size: w.size });
    }
    let c = await waveCounts(t.tx, t.fleet.id, w.wave);
    const failed = c.failed - w.forgiven;
    const overCount = w.max_failures !== null && failed > w.max_failures;
    const overPercent = w.max_failure_percent !== null && (failed * 100) / w.size > w.max_failure_percent;
    if (failed > 0 && (overCount || overPercent)) {
      const reason = `${w.wave === 0 ? 'the canary' : `wave ${w.wave}`}: ${failed} of ${w.size} tenants failed, over the failure budget (${[
        w.max_failures !== null ? `at most ${w.max_failures}` : '',
        w.max_failure_percent !== null ? `at most ${w.max_failure_percent} %` : '',
      ]
        .filter(Boolean)
        .join(', ')})`;
      await haltFleetUpgrade(t.tx, t.fleet.id, reason);
      await decide(t, 'halt', { wave: w.wave, failed, reason });
      t.driver.log.warn({ fleetUpgrade: t.fleet.id, reason }, 'fleet upgrade halted');
      t.driver.count('halted');
      return;
    }
    // Tenants of this wave left out for their windows are judged again with the windows they have now.
    if (await requeue(t, w)) {
      if (w.state === 'soaking') {
        await reopenWave(t.tx, t.fleet.id, w.wave);
        w.state = 'running';
        w.settled_at = null;
      }
      c = await waveCounts(t.tx, t.fleet.id, w.wave);
    }
    if (c.pending > 0 && w.state === 'running') {
      const free = Math.min(w.max_concurrency - c.inFlight, w.max_unavailable - c.inFlight - c.unhealthy);
      if (free > 0) {
        await startTenants(t, w, free);
        c = await waveCounts(t.tx, t.fleet.id, w.wave);
      }
    }
    if (c.pending > 0 || c.inFlight > 0) return;
    // The wave settled: soak (not after the last wave), then the next wave.
    const last = w.wave === waves.length - 1;
    if (w.state === 'running') {
      await soakWave(t.tx, t.fleet.id, w.wave, t.now);
      w.state = 'soaking';
      w.settled_at = t.now;
    }
    if (!last && t.now.getTime() < w.settled_at!.getTime() + w.soak_seconds * 1000) return;
    await completeWave(t.tx, t.fleet.id, w.wave, t.now);
    w.state = 'completed';
    await decide(t, 'wave_complete', { wave: w.wave });
    t.driver.count('wave_completed');
    t.fleet.current_wave += 1;
    await setCurrentWave(t.tx, t.fleet.id, t.fleet.current_wave);
  }
}

async function complete(t: Tick): Promise<void> {
  const counts = await completeFleetUpgrade(t.tx, t.fleet.id);
  await decide(t, 'complete', { counts });
  t.driver.log.info({ fleetUpgrade: t.fleet.id }, 'fleet upgrade completed');
  t.driver.count('completed');
}

/**
 * Starts up to `free` pending tenants of the wave, in plan order, within the per-cluster cap and
 * their maintenance windows: a tenant whose window is closed now (or has less than its expected
 * duration left, or a freeze holds) is deferred until the next window that fits, and the others
 * go first; one whose windows will not open with room before the wave's deadline is skipped
 * (outside-window). The pending tenants are read page by page, so deferred ones never hide the rest.
 */
async function startTenants(t: Tick, w: WaveRow, free: number): Promise<void> {
  const load = await stepsPerCluster(t.tx);
  const windows = await windowCheck(t, w);
  const page = Math.max(free * 20, 100);
  let started = 0;
  let after = -1;
  for (;;) {
    const rows = await pendingTenantsPage(t.tx, t.fleet.id, w.wave, after, page);
    for (const p of rows) {
      if (started >= free) return;
      after = p.position;
      const skip = async (reason: string, extra: Record<string, unknown> = {}): Promise<void> => {
        await finish(t, p.tenant_id, 'skipped', { reason, deferred_until: null });
        await decide(t, 'tenant_skipped', { reason, ...extra }, p.tenant_id);
        t.driver.count('skipped');
      };
      const fit = await windows(p.windows, p.from_version, p.path);
      if (fit.skip !== undefined) {
        await skip(fit.skip, { outsideWindow: true });
        continue;
      }
      if (fit.deferUntil !== undefined) {
        if (p.deferred_until?.getTime() !== fit.deferUntil.getTime()) {
          const reason = `waiting for its maintenance window: the next that fits (${fit.what}) opens at ${fit.deferUntil.toISOString()}`;
          await setTenant(t, p.tenant_id, { deferred_until: fit.deferUntil, reason });
          await decide(t, 'tenant_deferred', { until: fit.deferUntil.toISOString(), reason }, p.tenant_id);
          t.driver.count('deferred');
        }
        continue;
      }
      const cluster = p.cluster_id ?? '';
      if ((load.get(cluster) ?? 0) >= t.driver.clusterParallelism) continue;
      const row = await getTenantRow(t.tx, p.tenant_id, true);
      if (!row || row.deleted) {
        await skip('the tenant was deleted before its turn');
        continue;
      }
      // The tenant may have changed since the plan: its path is worked out again from where it is.
      const found = pathFor(t.driver.catalog, t.fleet.target_version, {
        id: row.id,
        organization: row.organization,
        version: row.runtime_version,
        actualVersion: row.actual_runtime_version,
        phase: row.phase,
        suspended: row.suspended,
        stalled: (await tenantStalled(t.tx, row.id)) ?? false,
        cluster: null,
        inFleetUpgrade: null,
      });
      if ('reason' in found) {
        await skip(`${found.reason} when its turn came`);
        continue;
      }
      const from = row.runtime_version;
      await startStep(
        t,
        p.tenant_id,
        'upgrade',
        from,
        found.path[0]!,
        {
          path: found.path,
          hop: 0,
          started_at: t.now,
          deferred_until: null,
          reason: null,
          ...(from !== p.from_version ? { from_version: from } : {}),
        },
        row,
      );
      load.set(cluster, (load.get(cluster) ?? 0) + 1);
      started += 1;
    }
    if (rows.length < page || started >= free) return;
  }
}
