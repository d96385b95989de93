/**
 * Whether a tenant's runtime is reporting, computed when the tenant is read from its reporters'
 * heartbeat rows (runtime_reporters, read with the tenant in one statement): nothing is written
 * when a runtime goes quiet, so there is no sweep to run and no replica that must notice
 * (docs/decisions.md "Reporting freshness at read time").
 */
import type { Condition } from './states.ts';
import { STALE_AFTER_SECONDS } from '../../runtime/protocol/events.ts';

/** A reporter replica's row as the tenant read returns it (ages computed by the database's clock). */
export interface ReporterRow {
  replica: string;
  lastSeen: string;
  ageSeconds: number;
  since: string;
  owned: number;
}

export interface ReportingStatus {
  /** The newest heartbeat of any replica. */
  lastHeartbeatAt: string;
  /** Replicas heard from within STALE_AFTER_SECONDS. */
  replicas: number;
  /** Objects the reporting replicas own (their last heartbeats); when stale, the last known figure. */
  objects: number;
  /** No replica was heard from within STALE_AFTER_SECONDS. */
  stale: boolean;
}

function condition(status: Condition['status'], reason: string, message: string, at: Date): Condition {
  return { type: 'Reporting', status, reason, message, lastTransitionTime: at.toISOString() };
}

/** The `Reporting` condition and `status.reporting`, or nothing for a runtime that never reported. */
export function reportingOf(
  rows: readonly ReporterRow[] | null | undefined,
): { status: ReportingStatus; condition: Condition } | undefined {
  if (!rows || rows.length === 0) return undefined;
  const newest = rows.reduce((a, b) => (a.ageSeconds <= b.ageSeconds ? a : b));
  const live = rows.filter((r) => r.ageSeconds < STALE_AFTER_SECONDS);
  const stale = live.length === 0;
  // When stale: the objects of the replicas of the last run (heard from within the window before the newest).
  const counted = stale ? rows.filter((r) => r.ageSeconds - newest.ageSeconds < STALE_AFTER_SECONDS) : live;
  const lastHeartbeatAt = new Date(newest.lastSeen).toISOString();
  const status: ReportingStatus = {
    lastHeartbeatAt,
    replicas: live.length,
    objects: counted.reduce((n, r) => n + r.owned, 0),
    stale,
  };
  const since = live.reduce((a, r) => (Date.parse(r.since) < Date.parse(a) ? r.since : a), newest.since);
  const cond = stale
    ? condition(
        'False',
        'Stale',
        `no heartbeat from the event reporter for ${Math.round(newest.ageSeconds)} s (last at ${lastHeartbeatAt}); stored application state may be out of date`,
        new Date(Date.parse(newest.lastSeen) + STALE_AFTER_SECONDS * 1000),
      )
    : condition(
        'True',
        'Heartbeat',
        `${live.length} event reporter replica${live.length === 1 ? '' : 's'} reporting`,
        new Date(since),
      );
  return { status, condition: cond };
}
