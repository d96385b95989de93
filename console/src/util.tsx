import type { ComponentChildren } from 'preact';
import type { ApiError, Tenant } from './api.ts';

/** "3d", "5h", "12m", "40s" since `iso`. */
export function age(iso: string | null | undefined, now = Date.now()): string {
  if (!iso) return '—';
  const s = Math.max(0, Math.round((now - Date.parse(iso)) / 1000));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m`;
  if (s < 86_400) return `${Math.floor(s / 3600)}h`;
  return `${Math.floor(s / 86_400)}d`;
}

export function when(iso: string | null | undefined): string {
  return iso
    ? new Date(iso)
        .toISOString()
        .replace('T', ' ')
        .replace(/\.\d+Z$/, ' UTC')
    : '—';
}

/** `2026-11-28 14:05 UTC`: compact, to the minute; `when` gives the full timestamp. */
export function short(iso: string | null | undefined): string {
  return iso
    ? new Date(iso)
        .toISOString()
        .replace('T', ' ')
        .replace(/:\d\d\.\d+Z$/, ' UTC')
    : '—';
}

/**
 * An instant in a table or a sentence: compact and never wrapped, the full timestamp in its
 * tooltip and its `datetime` (`ago`: "12m ago"; `age`: "12m").
 */
export function Time({
  iso,
  ago,
  age: asAge,
  now,
}: {
  iso: string | null | undefined;
  ago?: boolean;
  age?: boolean;
  now?: number;
}) {
  if (!iso) return <span>—</span>;
  return (
    <time class="nowrap" dateTime={iso} title={when(iso)}>
      {ago ? `${age(iso, now)} ago` : asAge ? age(iso, now) : short(iso)}
    </time>
  );
}

/** `45 s`, `28 min`, `2 h 5 min`. */
export function duration(seconds: number): string {
  if (seconds < 60) return `${Math.max(0, Math.round(seconds))} s`;
  const min = Math.ceil(seconds / 60);
  if (min < 60) return `${min} min`;
  return `${Math.floor(min / 60)} h${min % 60 ? ` ${min % 60} min` : ''}`;
}

/** Words that are written as such, whatever the key's spelling. */
const SPELLED: Record<string, string> = { url: 'URL', api: 'API', id: 'ID', cd: 'CD', argo: 'Argo', ui: 'UI' };

/**
 * An API field name as people read it: `vclusterEndpoint` → "vcluster endpoint", `argoCdUrl` →
 * "Argo CD URL", `rolling_back` → "rolling back", `TunnelConnected` → "tunnel connected".
 */
export function words(key: string): string {
  return key
    .replace(/([a-z0-9])([A-Z])/g, '$1 $2')
    .replace(/([A-Z]+)([A-Z][a-z])/g, '$1 $2')
    .replace(/[_-]+/g, ' ')
    .split(' ')
    .filter(Boolean)
    .map((w) => SPELLED[w.toLowerCase()] ?? w.toLowerCase())
    .join(' ')
    .replace(/\bArgo ([a-z])/g, (_, c: string) => `Argo ${c.toUpperCase()}`);
}

/**
 * A phase as a badge. `notConnected` (a Ready tenant's RuntimeConnected=False: provisioned, but its
 * runtime does not answer or report) turns it amber with that reason: Ready alone is not green.
 */
export function PhaseBadge({
  phase,
  notConnected,
}: {
  phase: string;
  notConnected?: { reason: string; message: string } | undefined;
}) {
  if (notConnected)
    return (
      <span
        class={notConnected.reason === 'Waking' ? 'phase phase-waking' : 'phase phase-degraded'}
        data-degraded={notConnected.reason}
        title={`${notConnected.reason}: ${notConnected.message}`}
      >
        {phase}, {NOT_CONNECTED_WORDS[notConnected.reason] ?? words(notConnected.reason)}
      </span>
    );
  return <span class={`phase phase-${phase.toLowerCase()}`}>{phase}</span>;
}

/**
 * Where a tenant is in idle sleep (provisioner/sleep/, docs/operations.md "Sleep"), from its phase,
 * its Ready condition and `status.sleep`:
 * - `asleep`: phase Sleeping with Ready=False reason Sleeping (the sleep is applied);
 * - `falling-asleep`: a sleep asked (status.sleep.asleep) and not applied yet;
 * - `waking`: phase Waking, or still Sleeping with a wake asked;
 * - `awake`: anything else.
 * Sleep is a settled state, not a problem: the next request to its runtime wakes it.
 */
export type SleepState = 'awake' | 'falling-asleep' | 'asleep' | 'waking';
export function sleepStateOf(t: Tenant): SleepState {
  if (t.spec.deleted) return 'awake';
  const asked = t.status.sleep?.asleep;
  if (t.status.phase === 'Waking') return 'waking';
  if (t.status.phase === 'Sleeping') {
    if (asked === false) return 'waking';
    const applied = t.status.conditions.some(
      (c) => c.type === 'Ready' && c.status === 'False' && c.reason === 'Sleeping',
    );
    return applied ? 'asleep' : 'falling-asleep';
  }
  return asked ? 'falling-asleep' : 'awake';
}

/** RuntimeConnected=False reasons (provisioner/http/tenant-view.ts) in a few words. */
const NOT_CONNECTED_WORDS: Record<string, string> = {
  TunnelNotConnected: 'not connected',
  NeverReported: 'never reported',
  ReportingStale: 'not reporting',
  // Just woken from sleep: its pods are starting (not an alarm).
  Waking: 'waking up',
};

/** A Ready tenant's (or hosted runtime's) RuntimeConnected=False condition, if it has one. */
export function notConnectedOf(
  conditions: readonly { type: string; status: string; reason: string; message: string }[],
) {
  return conditions.find((c) => c.type === 'RuntimeConnected' && c.status === 'False');
}

/** An API error as the API gave it: its message, code, and the path to follow when it has one. */
export function ErrorBox({ error, children }: { error: ApiError | string | null; children?: ComponentChildren }) {
  if (!error) return null;
  if (typeof error === 'string')
    return (
      <div class="error" role="alert">
        {error}
        {children}
      </div>
    );
  const path = Array.isArray(error.details?.path) ? (error.details.path as string[]) : undefined;
  return (
    <div class="error" role="alert">
      <strong>{error.message}</strong> <code>{error.code}</code>
      {path && path.length > 0 && (
        <p class="path-to-follow">
          Path to follow: <span class="path">{path.join(' → ')}</span>
        </p>
      )}
      {children}
    </div>
  );
}

export function Banner({ status }: { status: string }) {
  if (status !== 'reconnecting') return null;
  return (
    <div class="banner" role="status">
      Connection to the provisioner lost — reconnecting…
    </div>
  );
}

/** `1 direct rollback`, `3 direct rollbacks`, `0 direct rollbacks`. */
export function plural(n: number, noun: string): string {
  return `${n} ${noun}${n === 1 ? '' : 's'}`;
}
