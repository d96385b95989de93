/**
 * `provisioner apps history` and `provisioner apps diff`: what changed an application, commit by
 * commit (GET /v1/tenants/:id/applications/:namespace/:name/history), and the manifests of one
 * change or of Git against the cluster, fetched from the runtime's Source Server through the
 * tunnel (…/diff). The diff is printed as a unified diff per resource of the YAML of both sides.
 */
import type { Command } from 'commander';
import { createTwoFilesPatch, FILE_HEADERS_ONLY } from 'diff';
import { stringify } from 'yaml';
import type { ApplicationDiff, ImageChange, ResourceChange, ResourceDiff } from '../../runtime/protocol/sources.ts';
// Type imports: nothing of the server is loaded.
import type { ApplicationHistoryEntry, ApplicationHistoryPage } from '../api/types.ts';
import { UsageError } from './api-commands.ts';
import type { ApiClient } from './client.ts';
import { ApiError } from './client.ts';
import { cellText, table } from './format.ts';

/** `argocd/guestbook` → its namespace and name; anything else is a usage error naming the form. */
export function parseApplication(ref: string): { namespace: string; name: string } {
  const m = /^([^/\s]+)\/([^/\s]+)$/.exec(ref);
  if (!m) throw new UsageError(`the application is named <namespace>/<name>, e.g. argocd/guestbook (got '${ref}')`);
  return { namespace: m[1]!, name: m[2]! };
}

const shortRevision = (r: string | null | undefined): string => (r ? r.slice(0, 7) : '-');

/** `2026-11-28 14:05:33Z`: to the second, in UTC. */
const instant = (iso: string | null | undefined): string =>
  iso
    ? new Date(iso)
        .toISOString()
        .replace('T', ' ')
        .replace(/\.\d+Z$/, 'Z')
    : '-';

/** `850ms`, `45s`, `2m05s`, `1h02m`. */
export function durationText(ms: number | null | undefined): string {
  if (ms === null || ms === undefined) return '-';
  if (ms < 1000) return `${Math.round(ms)}ms`;
  const s = Math.round(ms / 1000);
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, '0')}s`;
  return `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, '0')}m`;
}

/** The first line of a commit message, at most 72 characters. */
export function subject(message: string | null | undefined): string {
  const line = (message ?? '').split('\n', 1)[0]!.trim();
  return line.length > 72 ? `${line.slice(0, 71)}…` : line;
}

/** `web: nginx:1.25 → nginx:1.26`; an added image `+web: …`, a removed one `-web: …`. */
export function imageText(i: ImageChange): string {
  if (i.before === undefined) return `+${i.container}: ${i.after ?? '?'}`;
  if (i.after === undefined) return `-${i.container}: ${i.before}`;
  return `${i.container}: ${i.before} → ${i.after}`;
}

const HISTORY_HEADERS = ['WHEN', 'CHANGE', 'AUTHOR', 'MESSAGE', 'RESULT', 'DURATION', 'IMAGES'];

export function historyTable(entries: ApplicationHistoryEntry[]): string {
  return table(
    HISTORY_HEADERS,
    entries.map((e) => [
      instant(e.startedAt ?? e.date ?? e.recordedAt),
      shortRevision(e.changeRevision),
      e.author,
      subject(e.message),
      e.result,
      durationText(e.durationMs),
      e.images.length > 0 ? e.images.map(imageText).join(', ') : null,
    ]),
  );
}

/** A failed entry's reason under the table, one line each (Argo CD's message). */
function failures(entries: ApplicationHistoryEntry[]): string[] {
  return entries
    .filter((e) => e.result === 'failed' && e.resultMessage)
    .map((e) => `${shortRevision(e.changeRevision)} failed: ${cellText(e.resultMessage!)}`);
}

/** `Deployment.apps default/web` (`Namespace team-a` for one without a namespace). */
export function resourceName(r: Pick<ResourceChange, 'group' | 'kind' | 'namespace' | 'name'>): string {
  const kind = r.group ? `${r.kind}.${r.group}` : r.kind;
  return `${kind} ${r.namespace ? `${r.namespace}/` : ''}${r.name}`;
}

const MARK: Record<ResourceChange['action'], string> = { added: '+', removed: '-', modified: '~' };

/** An object as YAML with its keys sorted, so that two sides in a different key order diff only where they differ. */
const yamlOf = (o: Record<string, unknown> | null): string =>
  o === null ? '' : stringify(o, { sortMapEntries: true, lineWidth: 0 });

/**
 * The diff as text: a header naming both sides, then per resource its action, name and changed
 * fields, and a unified diff of the YAML of both sides (the values escaped for the terminal by the
 * CLI's output, format.ts).
 */
export function diffText(d: ApplicationDiff): string {
  const base = d.base === 'live' ? 'the live objects' : shortRevision(d.base);
  const target = d.base === 'live' ? `Git at ${shortRevision(d.revision)}` : shortRevision(d.revision);
  const out = [
    `application ${d.application.namespace}/${d.application.name}: ${target} against ${base}, ${d.resources.length} resource${d.resources.length === 1 ? '' : 's'} differ`,
  ];
  if (d.truncated) out.push('(truncated: the answer reached its size limit; the last resources are left out)');
  for (const r of d.resources) out.push('', ...resourceDiffText(r, d));
  return out.join('\n');
}

function resourceDiffText(r: ResourceDiff, d: ApplicationDiff): string[] {
  const lines = [`${MARK[r.action]} ${cellText(resourceName(r))} (${r.action})`];
  if (r.fields.length > 0)
    lines.push(`  fields: ${r.fields.map(cellText).join(', ')}${r.fieldsTruncated ? ', …' : ''}`);
  const before = d.base === 'live' ? 'live' : shortRevision(d.base);
  const after = d.base === 'live' ? 'git' : shortRevision(d.revision);
  const name = `${r.namespace ? `${r.namespace}/` : ''}${r.name}`;
  const patch = createTwoFilesPatch(
    r.before === null ? '/dev/null' : `${before}/${name}`,
    r.after === null ? '/dev/null' : `${after}/${name}`,
    yamlOf(r.before),
    yamlOf(r.after),
    undefined,
    undefined,
    { context: 3, headerOptions: FILE_HEADERS_ONLY },
  ).trimEnd();
  // An answer whose objects were dropped to fit (truncated) has both sides null.
  if (r.before === null && r.after === null) lines.push('  (objects left out of a truncated answer)');
  else lines.push(...patch.split('\n'));
  return lines;
}

/** A 503 from the tunnel said plainly, with when to try again. */
function unreachable(err: unknown): unknown {
  if (!(err instanceof ApiError) || err.status !== 503) return err;
  const when = err.retryAfterSeconds !== undefined ? `, retry in ${err.retryAfterSeconds} s` : '';
  return new ApiError({
    status: err.status,
    code: err.code,
    message: `runtime unreachable${when}: ${err.message}`,
    field: err.field,
    retryAfterSeconds: err.retryAfterSeconds,
  });
}

/** Adds `history` and `diff` to `provisioner apps`. */
export function addAppHistoryCommands(
  apps: Command,
  io: { out: (s: string) => void },
  client: () => ApiClient,
  json: () => boolean,
): void {
  apps
    .command('history <tenant> <application>')
    .description(
      'what changed an application (<namespace>/<name>), newest first: the commit that changed it, its author and message, the images that moved, the sync result',
    )
    .option('--runtime <name>', "one runtime of the tenant by name (default: the tenant's hosted runtime)")
    .option('--limit <n>', 'entries to show', '20')
    .action(async (tenant: string, ref: string, o: { runtime?: string; limit: string }) => {
      const app = parseApplication(ref);
      // A --limit that is not a number goes as it is: the API's 400 names it.
      const query = { limit: Number(o.limit) };
      const page: ApplicationHistoryPage =
        o.runtime === undefined
          ? await client().call('GET /v1/tenants/:id/applications/:namespace/:name/history', {
              params: { id: tenant, ...app },
              query,
            })
          : await client().call(
              'GET /v1/tenants/:id/runtimes/:name/objects/applications/:namespace/:objectName/history',
              {
                params: { id: tenant, name: o.runtime, namespace: app.namespace, objectName: app.name },
                query,
              },
            );
      if (json()) return io.out(JSON.stringify(page, null, 2));
      if (page.items.length === 0) return io.out(`no change recorded for ${app.namespace}/${app.name} yet`);
      io.out([historyTable(page.items), ...failures(page.items)].join('\n'));
      if (page.nextCursor) io.out(`(older entries not shown: raise --limit, or --json for the cursor)`);
    });

  apps
    .command('diff <tenant> <application>')
    .description(
      "the manifests of an application (<namespace>/<name>) that a change revision changed (--revision), or Git against the cluster (without), from the runtime's Source Server",
    )
    .option('--revision <revision>', 'a change revision from `apps history` (default: Git against the live objects)')
    .option('--runtime <name>', "one runtime of the tenant by name (default: the tenant's hosted runtime)")
    .action(async (tenant: string, ref: string, o: { revision?: string; runtime?: string }) => {
      const app = parseApplication(ref);
      const query = o.revision !== undefined ? { revision: o.revision } : {};
      let d: ApplicationDiff;
      try {
        d =
          o.runtime === undefined
            ? await client().call('GET /v1/tenants/:id/applications/:namespace/:name/diff', {
                params: { id: tenant, ...app },
                query,
              })
            : await client().call(
                'GET /v1/tenants/:id/runtimes/:name/objects/applications/:namespace/:objectName/diff',
                {
                  params: { id: tenant, name: o.runtime, namespace: app.namespace, objectName: app.name },
                  query,
                },
              );
      } catch (err) {
        throw unreachable(err);
      }
      io.out(json() ? JSON.stringify(d, null, 2) : diffText(d));
    });
}
