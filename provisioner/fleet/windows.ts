/**
 * Maintenance windows and freezes (docs/fleet-upgrades.md "Maintenance windows and freezes"), as
 * data: no database. A tenant's window is an RFC 5545 recurrence rule with a time zone and a
 * duration; a freeze (declared on a fleet upgrade) is an absolute interval or such a rule too.
 * A tenant may be upgraded while one of its windows is open (no window: always) and no freeze is;
 * a freeze always wins.
 *
 * Wall-clock semantics: the rule is expanded in local time (rrule-temporal, on floating local
 * date-times), and each occurrence's start and end — start + durationMinutes on the wall clock —
 * are then placed in the time zone (Temporal, `compatible`: a local time the clocks skip is read
 * with the offset before the gap, as RFC 5545 says; a local time that happens twice is its first
 * instant). So "02:00 for 120 minutes" is 02:00–04:00 on the wall clock every night: on the
 * night the clocks jump from 02:00 to 03:00 it is 03:00–04:00 (one hour), on the night they go
 * back from 03:00 to 02:00 it runs from the first 02:00 to 04:00 (three hours).
 */
import { Temporal } from 'temporal-polyfill';
import { RRuleTemporal } from 'rrule-temporal';
import { errors } from '../errors.ts';
import type { MaintenanceWindow } from '../store/tenants.ts';
import { MAX_DURATION_MINUTES, MAX_FREEZES, MAX_WINDOWS, MIN_DURATION_MINUTES } from '../store/states.ts';

/** A deny period: an absolute interval, or a recurring one like a window. */
export type Freeze =
  { from: string; until: string; reason?: string | undefined } | (MaintenanceWindow & { reason?: string | undefined });

/** Half-open interval [start, end) of epoch milliseconds. */
export interface Interval {
  start: number;
  end: number;
}

export { MAX_FREEZES, MAX_WINDOWS };
export const DEFAULT_DTSTART = '2020-01-01T00:00:00';

const FREQS = new Set(['DAILY', 'WEEKLY', 'MONTHLY', 'YEARLY']);
const PARTS = new Set([
  'FREQ',
  'INTERVAL',
  'COUNT',
  'UNTIL',
  'BYDAY',
  'BYMONTHDAY',
  'BYMONTH',
  'BYHOUR',
  'BYMINUTE',
  'BYSETPOS',
  'BYWEEKNO',
  'BYYEARDAY',
  'WKST',
]);
/** The numeric parts' ranges (RFC 5545 3.3.10): [least magnitude, greatest, whether negative values count from the end]. */
const RANGES: Record<string, [number, number, boolean]> = {
  INTERVAL: [1, 1000, false],
  COUNT: [1, 100_000, false],
  BYHOUR: [0, 23, false],
  BYMINUTE: [0, 59, false],
  BYMONTH: [1, 12, false],
  BYMONTHDAY: [1, 31, true],
  BYYEARDAY: [1, 366, true],
  BYWEEKNO: [1, 53, true],
  BYSETPOS: [1, 366, true],
};
const LOCAL_DATE_TIME = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2})?$/;
/** UNTIL as RFC 5545 wants it when DTSTART has a time zone: a UTC date-time, 20261231T230000Z. */
const UTC_UNTIL = /^\d{8}T\d{6}Z$/;
const DAY_MS = 86_400_000;

function isFreezeInterval(f: Freeze): f is { from: string; until: string; reason?: string | undefined } {
  return 'from' in f;
}

/** The rule's parts, checked: known names, each once, FREQ one of the four. Throws a 400 naming `field`. */
function ruleParts(rrule: string, field: string): Map<string, string> {
  const text = rrule.trim().replace(/^RRULE:/i, '');
  const parts = new Map<string, string>();
  for (const part of text.split(';')) {
    const m = /^([A-Za-z]+)=([A-Za-z0-9,+\-:]+)$/.exec(part);
    if (!m)
      throw errors.validation(
        `'${part}' is not a part of an RFC 5545 recurrence rule (NAME=VALUE, separated by ;)`,
        field,
      );
    const name = m[1]!.toUpperCase();
    if (!PARTS.has(name))
      throw errors.validation(
        `${name} is not supported in a window's rule; use ${[...PARTS].join(', ')} (the time of day with BYHOUR and BYMINUTE, or dtstart)`,
        field,
      );
    if (parts.has(name)) throw errors.validation(`${name} is given twice`, field);
    parts.set(name, m[2]!.toUpperCase());
  }
  for (const [name, [lo, hi, signed]] of Object.entries(RANGES)) {
    const value = parts.get(name);
    if (value === undefined) continue;
    for (const v of value.split(',')) {
      const n = /^[+-]?\d{1,9}$/.test(v) ? Number(v) : NaN;
      const ok = Number.isInteger(n) && (n >= 0 || signed) && Math.abs(n) >= lo && Math.abs(n) <= hi;
      if (!ok)
        throw errors.validation(
          `${name}=${value}: each value must be a whole number from ${signed ? `-${hi} to -${lo} or ` : ''}${lo} to ${hi}`,
          field,
        );
    }
  }
  const until = parts.get('UNTIL');
  if (until !== undefined && !UTC_UNTIL.test(until))
    throw errors.validation(
      `UNTIL=${until}: give UNTIL in UTC with a Z, e.g. UNTIL=20261231T230000Z (RFC 5545: with a time zone, UNTIL is an instant; a window whose local start is at or before it occurs)`,
      field,
    );
  if (until !== undefined && parts.has('COUNT'))
    throw errors.validation('give COUNT or UNTIL, not both (RFC 5545)', field);
  const freq = parts.get('FREQ');
  if (freq === undefined) throw errors.validation('the rule has no FREQ (e.g. FREQ=WEEKLY;BYDAY=SA;BYHOUR=2)', field);
  if (!FREQS.has(freq))
    throw errors.validation(`FREQ=${freq} is not allowed for a window: use DAILY, WEEKLY, MONTHLY or YEARLY`, field);
  return parts;
}

/**
 * The zone's IANA name as the time zone database spells it (`europe/berlin` → `Europe/Berlin`), or
 * a 400 naming `field` and the value, with examples: a window's zone, and a tenant's own
 * (`timeZone`, PATCH /v1/tenants/:id and signup).
 */
export function checkTimeZone(timeZone: string, field = 'timeZone'): string {
  // Offsets (+01:00) are not IANA zones: they know no daylight saving time.
  if (!/^[A-Za-z]/.test(timeZone))
    throw errors.validation(
      `'${timeZone}' is not an IANA time zone (e.g. Europe/Berlin, America/New_York, UTC)`,
      field,
    );
  try {
    return Temporal.Now.zonedDateTimeISO(timeZone).timeZoneId;
  } catch {
    throw errors.validation(
      `'${timeZone}' is not a known IANA time zone (e.g. Europe/Berlin, America/New_York, UTC)`,
      field,
    );
  }
}

function localOf(dtstart: string, field: string): Temporal.PlainDateTime {
  if (!LOCAL_DATE_TIME.test(dtstart))
    throw errors.validation(
      `'${dtstart}' is not a local date-time such as 2026-01-03T02:00 (no offset: the window's time zone applies)`,
      field,
    );
  try {
    return Temporal.PlainDateTime.from(dtstart, { overflow: 'reject' });
  } catch {
    throw errors.validation(`'${dtstart}' is not a valid date-time`, field);
  }
}

/** A rule compiled for floating local time, and its UNTIL as an instant (epoch ms) when given in UTC. */
interface CompiledRule {
  rule: RRuleTemporal;
  untilMs: number | null;
}

/** Compiled rules, by dtstart and rule (parsing is the expensive part); bounded. */
const compiled = new Map<string, CompiledRule>();

/** 20261231T230000Z as epoch milliseconds. */
function utcUntilMs(until: string): number {
  const m = /^(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})Z$/.exec(until)!;
  return Date.UTC(+m[1]!, +m[2]! - 1, +m[3]!, +m[4]!, +m[5]!, +m[6]!);
}

function ruleOf(w: MaintenanceWindow): CompiledRule {
  const start = (w.dtstart ?? DEFAULT_DTSTART).replaceAll('-', '').replaceAll(':', '');
  const basic = start.length === 13 ? `${start}00` : start;
  const key = `${basic}|${w.rrule}`;
  let entry = compiled.get(key);
  if (!entry) {
    // A UTC UNTIL is an instant (RFC 5545 3.3.10): it cannot be compared with floating local
    // times, so it is taken out of the rule and applied to each occurrence once it is placed in
    // the zone. An UNTIL without Z (refused since; a window stored before keeps it) stays in the
    // rule and is read as local time.
    const parts = w.rrule.split(';');
    const until = parts.find((p) => /^UNTIL=/i.test(p))?.slice(6);
    const untilMs = until !== undefined && UTC_UNTIL.test(until) ? utcUntilMs(until) : null;
    const rrule = untilMs === null ? w.rrule : parts.filter((p) => !/^UNTIL=/i.test(p)).join(';');
    // Floating local time: expanded in UTC, which skips no hour; the zone is applied afterwards.
    const rule = new RRuleTemporal({ rruleString: `DTSTART;TZID=UTC:${basic}\nRRULE:${rrule}` });
    entry = { rule, untilMs };
    if (compiled.size >= 1000) compiled.clear();
    compiled.set(key, entry);
  }
  return entry;
}

/**
 * Checks a window (or a recurring freeze) and answers it normalised: the rule upper-case without
 * `RRULE:`, the zone's canonical name. Every refusal is a 400 naming the field (`<field>.rrule`, …).
 */
export function checkWindow(w: MaintenanceWindow, field: string): MaintenanceWindow {
  const parts = ruleParts(w.rrule, `${field}.rrule`);
  const rrule = [...parts].map(([k, v]) => `${k}=${v}`).join(';');
  const timeZone = checkTimeZone(w.timeZone, `${field}.timeZone`);
  if (
    !Number.isInteger(w.durationMinutes) ||
    w.durationMinutes < MIN_DURATION_MINUTES ||
    w.durationMinutes > MAX_DURATION_MINUTES
  )
    throw errors.validation(
      `durationMinutes must be a whole number from ${MIN_DURATION_MINUTES} to ${MAX_DURATION_MINUTES} (7 days)`,
      `${field}.durationMinutes`,
    );
  if (w.dtstart !== undefined) localOf(w.dtstart, `${field}.dtstart`);
  const out: MaintenanceWindow = {
    rrule,
    timeZone,
    durationMinutes: w.durationMinutes,
    ...(w.dtstart !== undefined ? { dtstart: w.dtstart } : {}),
  };
  try {
    // The library's own parse, and one expansion: a rule it cannot expand is refused here, not in a fleet upgrade.
    const now = Date.now();
    occurrences(out, now, now + 7 * DAY_MS);
  } catch (err) {
    throw errors.validation(
      `the rule cannot be expanded: ${err instanceof Error ? err.message : String(err)}`,
      `${field}.rrule`,
    );
  }
  return out;
}

/** Checks a tenant's windows (at most MAX_WINDOWS); answers them normalised. */
export function checkWindows(windows: readonly MaintenanceWindow[], field = 'maintenanceWindows'): MaintenanceWindow[] {
  if (windows.length > MAX_WINDOWS) throw errors.validation(`at most ${MAX_WINDOWS} windows`, field);
  return windows.map((w, i) => checkWindow(w, `${field}.${i}`));
}

/** Checks a fleet upgrade's freezes: an interval (`from` before `until`, instants with an offset) or a recurring rule. */
export function checkFreezes(freezes: readonly Freeze[], field = 'freezes'): Freeze[] {
  if (freezes.length > MAX_FREEZES) throw errors.validation(`at most ${MAX_FREEZES} freezes`, field);
  return freezes.map((f, i) => {
    const at = `${field}.${i}`;
    const reason = f.reason !== undefined ? { reason: f.reason } : {};
    if (isFreezeInterval(f)) {
      const from = instantOf(f.from, `${at}.from`);
      const until = instantOf(f.until, `${at}.until`);
      if (until <= from) throw errors.validation('until must be after from', `${at}.until`);
      return { from: new Date(from).toISOString(), until: new Date(until).toISOString(), ...reason };
    }
    return { ...checkWindow(f, at), ...reason };
  });
}

function instantOf(s: string, field: string): number {
  const ms = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:\d{2})$/.test(s) ? Date.parse(s) : NaN;
  if (Number.isNaN(ms))
    throw errors.validation(`'${s}' is not a date-time with an offset (e.g. 2026-12-24T00:00:00Z)`, field);
  return ms;
}

/** The window's occurrences overlapping [fromMs, toMs), as instants, in order. */
export function occurrences(w: MaintenanceWindow, fromMs: number, toMs: number): Interval[] {
  const { rule, untilMs } = ruleOf(w);
  // Local wall-clock bounds, widened by the duration (an occurrence that started before `from`
  // may still be open) and a day each side (offsets).
  const local = (ms: number) =>
    Temporal.Instant.fromEpochMilliseconds(ms).toZonedDateTimeISO(w.timeZone).toPlainDateTime();
  const floating = (p: Temporal.PlainDateTime) => new Date(p.toZonedDateTime('UTC').epochMilliseconds);
  const lo = floating(local(fromMs - w.durationMinutes * 60_000 - DAY_MS));
  const hi = floating(local(toMs + DAY_MS));
  const out: Interval[] = [];
  for (const z of rule.between(lo, hi, true)) {
    // The occurrence in floating time: its instant in UTC is its local wall-clock time.
    const start = placed(z.epochMilliseconds, w.timeZone);
    if (untilMs !== null && start > untilMs) continue;
    const end = placed(z.epochMilliseconds + w.durationMinutes * 60_000, w.timeZone);
    if (end > start && end > fromMs && start < toMs) out.push({ start, end });
  }
  return out;
}

/** The instant of a wall-clock time (given as floating milliseconds: its UTC fields) in `timeZone`. */
function placed(floatingMs: number, timeZone: string): number {
  const d = new Date(floatingMs);
  return new Temporal.PlainDateTime(
    d.getUTCFullYear(),
    d.getUTCMonth() + 1,
    d.getUTCDate(),
    d.getUTCHours(),
    d.getUTCMinutes(),
    d.getUTCSeconds(),
  ).toZonedDateTime(timeZone, { disambiguation: 'compatible' }).epochMilliseconds;
}

/** Sorted, overlapping and touching intervals joined. */
export function merge(intervals: readonly Interval[]): Interval[] {
  const sorted = [...intervals].sort((a, b) => a.start - b.start);
  const out: Interval[] = [];
  for (const i of sorted) {
    const last = out.at(-1);
    if (last && i.start <= last.end) last.end = Math.max(last.end, i.end);
    else out.push({ ...i });
  }
  return out;
}

/** `a` less every interval of `b` (both merged). */
export function subtract(a: readonly Interval[], b: readonly Interval[]): Interval[] {
  const out: Interval[] = [];
  for (const i of a) {
    let start = i.start;
    for (const d of b) {
      if (d.end <= start || d.start >= i.end) continue;
      if (d.start > start) out.push({ start, end: d.start });
      start = Math.max(start, d.end);
      if (start >= i.end) break;
    }
    if (start < i.end) out.push({ start, end: i.end });
  }
  return out;
}

function freezeIntervals(f: Freeze, fromMs: number, toMs: number): Interval[] {
  if (isFreezeInterval(f)) {
    const start = Date.parse(f.from);
    const end = Date.parse(f.until);
    return end > fromMs && start < toMs ? [{ start, end }] : [];
  }
  return occurrences(f, fromMs, toMs);
}

/** What decides when a tenant may be upgraded: its windows (none: always) and the fleet upgrade's freezes. */
export interface Schedule {
  windows: readonly MaintenanceWindow[];
  freezes: readonly Freeze[];
}

/** The times within [fromMs, toMs) a window is open and no freeze is, merged, clipped to the range. */
export function allowedIntervals(s: Schedule, fromMs: number, toMs: number): Interval[] {
  const clip = (i: Interval): Interval => ({ start: Math.max(i.start, fromMs), end: Math.min(i.end, toMs) });
  const open =
    s.windows.length === 0
      ? [{ start: fromMs, end: toMs }]
      : merge(s.windows.flatMap((w) => occurrences(w, fromMs, toMs))).map(clip);
  const denied = merge(s.freezes.flatMap((f) => freezeIntervals(f, fromMs, toMs)));
  return subtract(open, denied).filter((i) => i.end > i.start);
}

/** When a step of `needMs` may start: `at` now or later within the horizon, allowed at least until `until`; or why not. */
export type Fit =
  { at: number; until: number } | { at: null; why: 'no-window' | 'frozen' | 'too-short'; horizonEnd: number };

/**
 * The first instant in [nowMs, nowMs + horizonMs] at which the allowed time left is at least
 * `needMs` (so the step fits before its window closes or a freeze begins); null `at` with the
 * reason when there is none: no window opens in the horizon, every one falls in a freeze, or
 * none has `needMs` left.
 */
export function nextFit(s: Schedule, nowMs: number, needMs: number, horizonMs: number): Fit {
  const horizonEnd = nowMs + horizonMs;
  // Most windows open within two days: look there first (exact for starts within it: an interval
  // cut at the end of the look still has `needMs` from any start before it), then the whole horizon.
  const ends = horizonMs > 2 * DAY_MS ? [nowMs + 2 * DAY_MS, horizonEnd] : [horizonEnd];
  let intervals: Interval[] = [];
  for (const end of ends) {
    intervals = allowedIntervals(s, nowMs, end + needMs);
    for (const i of intervals) {
      const at = Math.max(i.start, nowMs);
      if (at > end) break;
      if (i.end - at >= needMs) return { at, until: i.end };
    }
  }
  if (intervals.some((i) => i.start <= horizonEnd)) return { at: null, why: 'too-short', horizonEnd };
  const anyWindow =
    s.windows.length === 0 || s.windows.some((w) => occurrences(w, nowMs, horizonEnd + needMs).length > 0);
  return { at: null, why: anyWindow ? 'frozen' : 'no-window', horizonEnd };
}

/** A reason a person reads, for a tenant that cannot start within the horizon. */
export function explainNoFit(f: Extract<Fit, { at: null }>, needMs: number, needWhat: string): string {
  const end = new Date(f.horizonEnd).toISOString();
  const minutes = Math.ceil(needMs / 60_000);
  if (f.why === 'no-window') return `${OUTSIDE_WINDOW}: none of its windows opens before ${end}`;
  if (f.why === 'frozen') return `${OUTSIDE_WINDOW}: every window before ${end} falls in a freeze`;
  return `${OUTSIDE_WINDOW}: no window before ${end} has ${minutes} min left (${needWhat}) outside a freeze`;
}

/**
 * How every reason for a tenant left out for its windows begins (the plan's exclusion, the
 * driver's skip): the driver judges such tenants again while their wave runs.
 */
export const OUTSIDE_WINDOW = 'outside every maintenance window';
