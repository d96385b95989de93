import type { ComponentChildren } from 'preact';
import type { ApiError } from './api.ts';

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

export function PhaseBadge({ phase }: { phase: string }) {
  return <span class={`phase phase-${phase.toLowerCase()}`}>{phase}</span>;
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
