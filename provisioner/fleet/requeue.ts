/**
 * Maintenance windows in a running wave: the judge of whether a tenant may start now, must wait
 * for a window that fits (deferred), or cannot start before the wave's deadline (skipped); and
 * the requeue of tenants left out for their windows only, once their windows (or the operator's
 * override) let them start after all.
 */
import { growWave, leftOutTenants, requeueTenants, type WaveRow } from '../store/fleet-upgrades.ts';
import type { MaintenanceWindow } from '../store/tenants.ts';
import { DEFAULT_UPGRADE_SECONDS, DEFAULT_WINDOW_WAIT_SECONDS } from './plan.ts';
import { expectedDurations } from './service.ts';
import { explainNoFit, nextFit, OUTSIDE_WINDOW } from './windows.ts';
import { decide, type Tick, type WindowAnswer } from './round.ts';

/**
 * Takes back the tenants of the wave (running or soaking: not completed) that were left out for
 * their windows only — excluded by the plan, or skipped by the driver before any step — when
 * their windows as they are now (or the override) let them start before the wave's deadline:
 * they are pending again and startTenants (waves.ts) judges them like the others. A tenant that ever
 * started (started_at) is never taken back, nor one another fleet upgrade holds now. Answers the
 * number taken back.
 */
export async function requeue(t: Tick, w: WaveRow): Promise<number> {
  const rows = await leftOutTenants(t.tx, t.fleet.id, w.wave, OUTSIDE_WINDOW);
  if (rows.length === 0) return 0;
  const windows = await windowCheck(t, w);
  const back: typeof rows = [];
  for (const r of rows) {
    const fit = await windows(r.windows, r.from_version, r.path);
    if (fit.skip === undefined) back.push(r);
  }
  if (back.length === 0) return 0;
  const ids = back.map((r) => r.tenant_id);
  // Another fleet upgrade may take one of them meanwhile (its start is not serialised with this
  // tick): then nothing is taken back now, and the next tick no longer sees that tenant.
  if (!(await requeueTenants(t.tx, t.fleet.id, ids))) return 0;
  // Tenants the plan excluded were not counted in the wave's size; skipped ones were.
  const added = back.filter((r) => r.state === 'excluded').length;
  if (added > 0) await growWave(t.tx, t.fleet.id, w.wave, added);
  const reason =
    t.fleet.windows_override !== null
      ? 'the maintenance windows were overridden'
      : "its maintenance windows changed: one opens with room before the wave's deadline";
  for (const r of back) {
    await decide(t, 'tenant_requeued', { reason, was: r.state }, r.tenant_id);
    t.driver.count('requeued');
  }
  return back.length;
}

/**
 * This tick's judge of windows for the wave: whether a tenant may start now, must wait until a
 * window that fits opens (within the wave's deadline), or cannot start before the deadline. The
 * override lifts the windows and the duration-fits rule; freezes always hold. Answers are
 * memoised per windows and expected duration within the tick, deferrals across ticks.
 */
export async function windowCheck(
  t: Tick,
  w: WaveRow,
): Promise<(windows: MaintenanceWindow[], from: string, path: string[]) => Promise<WindowAnswer>> {
  const freezes = t.options.freezes ?? [];
  const override = t.fleet.windows_override !== null;
  const nowMs = t.now.getTime();
  const deadline =
    (w.started_at ?? t.now).getTime() + (t.options.windowWaitSeconds ?? DEFAULT_WINDOW_WAIT_SECONDS) * 1000;
  const memo = new Map<string, WindowAnswer>();
  const needs = new Map<string, { seconds: number; what: string }>();
  return async (tenantWindows, from, path) => {
    const windows = override ? [] : tenantWindows;
    if (windows.length === 0 && freezes.length === 0) return {};
    let needMs = 0;
    let what = 'no duration needed: windows overridden';
    if (!override) {
      // One read per distinct path in a tick.
      const pathKey = `${from} ${path.join(' ')}`;
      let e = needs.get(pathKey);
      if (!e) {
        const expected = await expectedDurations(
          t.tx,
          [{ fromVersion: from, path }],
          t.options.defaultUpgradeSeconds ?? DEFAULT_UPGRADE_SECONDS,
        );
        e = expected({ fromVersion: from, path });
        needs.set(pathKey, e);
      }
      needMs = e.seconds * 1000;
      what = `${Math.ceil(e.seconds / 60)} min expected: ${e.what}`;
    }
    const key = `${t.fleet.id}|${deadline}|${needMs}|${what}|${JSON.stringify(windows)}`;
    const known = memo.get(key);
    if (known) return known;
    // A deferral stays true until its instant for the same windows, need and deadline (the
    // first instant that fits after a time is the first after any later time before it); a
    // skip stays true (nothing fits before the deadline from a time, so nothing from a later one).
    const earlier = t.driver.deferrals.get(key);
    if (earlier && (earlier.skip !== undefined || nowMs < earlier.deferUntil!.getTime())) return earlier;
    const fit = nextFit({ windows, freezes }, nowMs, needMs, Math.max(0, deadline - nowMs));
    const answer =
      fit.at === null
        ? { skip: `${explainNoFit(fit, needMs, what)} (the wave's deadline)` }
        : fit.at > nowMs
          ? { deferUntil: new Date(fit.at), what }
          : {};
    memo.set(key, answer);
    if (answer.deferUntil || answer.skip !== undefined) {
      if (t.driver.deferrals.size >= 10_000) t.driver.deferrals.clear();
      t.driver.deferrals.set(key, answer);
    }
    return answer;
  };
}
