/**
 * One application of a tenant's runtime: its state as the event reporter reported it, the history
 * of what changed it (each change revision with its commit, the images that moved and the sync
 * result; live through the application's change stream), and a side-by-side diff of the manifests
 * of a change or of Git against the cluster, fetched on demand from the runtime's Source Server
 * through the tunnel (GET …/diff).
 */
import { useEffect, useState } from 'preact/hooks';
import type { QueryOf } from '../../provisioner/http/api-client.ts';
import {
  ApiError,
  client,
  type ApplicationDiff,
  type ApplicationHistoryEntry,
  type ApplicationHistoryEvents,
  type ImageChange,
  type ResourceChange,
  type ResourceDiff,
  type RuntimeObject,
} from './api.ts';
import { sideBySide, yamlLines } from './manifest-diff.ts';
import { openStream, type StreamOptions, type StreamStatus } from './sse.ts';
import { Banner, ErrorBox, Time } from './util.tsx';

const HISTORY_PAGE = 50;

/** A segment of the page's hash decoded; a malformed escape (typed by hand) stays as written. */
export function segment(s: string): string {
  try {
    return decodeURIComponent(s);
  } catch {
    return s;
  }
}

const shortRev = (r: string | null | undefined) => (r ? r.slice(0, 7) : '—');
const subject = (m: string | null) => (m ?? '').split('\n', 1)[0]!.trim() || '(no message)';
/** Newest first: by when the entry was recorded, the id breaking ties so the order is stable. */
const newestFirst = (a: ApplicationHistoryEntry, b: ApplicationHistoryEntry) =>
  b.recordedAt.localeCompare(a.recordedAt) || b.id.localeCompare(a.id);

/** `850 ms`, `45 s`, `2 min 5 s`. */
function took(ms: number | null): string | null {
  if (ms === null) return null;
  if (ms < 1000) return `${Math.round(ms)} ms`;
  const s = Math.round(ms / 1000);
  return s < 60 ? `${s} s` : `${Math.floor(s / 60)} min${s % 60 ? ` ${s % 60} s` : ''}`;
}

/** `Deployment.apps default/web`. */
const resourceName = (r: Pick<ResourceChange, 'group' | 'kind' | 'namespace' | 'name'>) =>
  `${r.group ? `${r.kind}.${r.group}` : r.kind} ${r.namespace ? `${r.namespace}/` : ''}${r.name}`;

type HistoryQuery = QueryOf<'GET /v1/tenants/:id/applications/:namespace/:name/history'>;
type DiffQuery = QueryOf<'GET /v1/tenants/:id/applications/:namespace/:name/diff'>;

/**
 * An application's routes: the tenant's (its one runtime: /v1/tenants/:id/applications/…) or a
 * named runtime's (/v1/tenants/:id/runtimes/:name/objects/applications/…), the same answers.
 */
function applicationRoutes(tenantId: string, namespace: string, name: string, runtime: string | undefined) {
  if (runtime === undefined) {
    const params = { id: tenantId, namespace, name };
    return {
      get: () => client.call('GET /v1/tenants/:id/applications/:namespace/:name', { params }),
      history: (query: HistoryQuery) =>
        client.call('GET /v1/tenants/:id/applications/:namespace/:name/history', { params, query }),
      diff: (query: DiffQuery, signal: AbortSignal) =>
        client.call('GET /v1/tenants/:id/applications/:namespace/:name/diff', { params, query, signal }),
      stream: (opts: StreamOptions<ApplicationHistoryEvents>) =>
        openStream('GET /v1/tenants/:id/applications/:namespace/:name/history/stream', { ...opts, params }),
    };
  }
  const params = { id: tenantId, name: runtime, namespace, objectName: name };
  return {
    get: () =>
      client.call('GET /v1/tenants/:id/runtimes/:name/objects/applications/:namespace/:objectName', { params }),
    history: (query: HistoryQuery) =>
      client.call('GET /v1/tenants/:id/runtimes/:name/objects/applications/:namespace/:objectName/history', {
        params,
        query,
      }),
    diff: (query: DiffQuery, signal: AbortSignal) =>
      client.call('GET /v1/tenants/:id/runtimes/:name/objects/applications/:namespace/:objectName/diff', {
        params,
        query,
        signal,
      }),
    stream: (opts: StreamOptions<ApplicationHistoryEvents>) =>
      openStream('GET /v1/tenants/:id/runtimes/:name/objects/applications/:namespace/:objectName/history/stream', {
        ...opts,
        params,
      }),
  };
}
type ApplicationRoutes = ReturnType<typeof applicationRoutes>;

export function ApplicationPage({
  tenantId,
  namespace,
  name,
  runtime,
}: {
  tenantId: string;
  namespace: string;
  name: string;
  runtime?: string | undefined;
}) {
  const base =
    `/v1/tenants/${encodeURIComponent(tenantId)}/` +
    (runtime === undefined ? '' : `runtimes/${encodeURIComponent(runtime)}/objects/`) +
    `applications/${encodeURIComponent(namespace)}/${encodeURIComponent(name)}`;
  const routes = applicationRoutes(tenantId, namespace, name, runtime);
  const [app, setApp] = useState<RuntimeObject | null>(null);
  const [appError, setAppError] = useState<ApiError | null>(null);
  const [entries, setEntries] = useState<Map<string, ApplicationHistoryEntry>>(new Map());
  const [loaded, setLoaded] = useState(false);
  const [nextCursor, setNextCursor] = useState<string | null>(null);
  const [historyError, setHistoryError] = useState<ApiError | null>(null);
  const [stream, setStream] = useState<StreamStatus>('connecting');
  const [streamError, setStreamError] = useState<ApiError | null>(null);
  /** The entry whose diff is shown, or `live` for Git against the cluster. */
  const [selected, setSelected] = useState<string | null>(null);

  /** Entries added or updated; of two copies of one entry (a page read and a stream event), the later update wins. */
  const merge = (items: ApplicationHistoryEntry[]) =>
    setEntries((current) => {
      const next = new Map(current);
      for (const e of items) {
        const held = next.get(e.id);
        if (!held || held.updatedAt <= e.updatedAt) next.set(e.id, e);
      }
      return next;
    });
  const loadApp = () =>
    routes.get().then(
      (a) => (setApp(a), setAppError(null)),
      (e: unknown) => setAppError(e as ApiError),
    );
  /** A page of the history: the newest (`cursor` null) or the one older than what is shown. */
  const loadHistory = (cursor: string | null, first: boolean) =>
    routes.history({ limit: HISTORY_PAGE, cursor: cursor ?? undefined }).then(
      (page) => {
        merge(page.items);
        // Reading the newest page again (the stream reopened) keeps the cursor of the older pages shown.
        if (cursor !== null || first) setNextCursor(page.nextCursor);
        setLoaded(true);
        setHistoryError(null);
      },
      (e: unknown) => setHistoryError(e as ApiError),
    );

  useEffect(() => {
    setApp(null);
    setEntries(new Map());
    setLoaded(false);
    setSelected(null);
    void loadApp();
    // The stream sends what is written once it is open: the newest page is read each time it
    // opens (first, and after a lost connection), so nothing written in between is missed.
    let opened = false;
    const s = routes.stream({
      onStatus: (st, err) => {
        setStream(st);
        setStreamError(err ?? null);
        if (st === 'open') {
          void loadHistory(null, !opened);
          if (opened) void loadApp();
          opened = true;
        } else if (st === 'failed' && !opened) void loadHistory(null, true); // no live updates, the history still
      },
      onEvents: (events) => {
        const items = events.flatMap((e) => (e.event === 'entry' ? [e.data.item] : []));
        if (items.length === 0) return;
        merge(items);
        // A new change or result moved the application too: its sync, health and revisions.
        void loadApp();
      },
    });
    return () => s.close();
  }, [base]);

  const list = [...entries.values()].sort(newestFirst);
  const shown = selected === 'live' ? 'live' : list.find((e) => e.id === selected);
  const s: Record<string, unknown> = app?.summary ?? {};
  const str = (v: unknown) => (typeof v === 'string' && v !== '' ? v : undefined);

  return (
    <section aria-labelledby="application-title" class="application-page">
      <p>
        <a href={`#/tenants/${tenantId}`}>Back to the tenant</a>
      </p>
      <h1 id="application-title">
        Application {namespace}/{name}
        {runtime !== undefined && <span class="runtime-tag">runtime {runtime}</span>}
      </h1>
      <Banner status={stream} />
      <ErrorBox error={appError} />
      <div class="card">
        <h2>State</h2>
        <dl class="facts app-facts">
          <dt>Sync</dt>
          <dd data-fact="sync">{app?.sync ?? '—'}</dd>
          <dt>Health</dt>
          <dd data-fact="health">{app?.health ?? '—'}</dd>
          <dt>Operation</dt>
          <dd data-fact="operation">{app?.phase ?? '—'}</dd>
          <dt>Revision</dt>
          <dd data-fact="revision">
            <code title={str(s.revision)}>{shortRev(str(s.revision))}</code>
          </dd>
          <dt>Change revision</dt>
          <dd data-fact="change-revision">
            <code title={str(s.changeRevision)}>{shortRev(str(s.changeRevision))}</code>
            {str(s.changeRevision) === undefined && (
              <span class="hint">
                {' '}
                not reported (the runtime has no Source Server, or none of the application’s sources is a Git repository
                over HTTP)
              </span>
            )}
          </dd>
          <dt>Updated</dt>
          <dd>
            <Time iso={app?.updatedAt} ago />
          </dd>
        </dl>
      </div>
      <div class="app-columns">
        <div class="card history">
          <h2>History</h2>
          <ErrorBox error={historyError} />
          <ErrorBox error={streamError} />
          {!loaded && !historyError && <p aria-busy="true">Loading the history…</p>}
          {loaded && list.length === 0 && (
            <p class="hint">No change recorded yet: an entry appears when the runtime reports a new change revision.</p>
          )}
          <button
            type="button"
            class="live-diff"
            aria-pressed={selected === 'live'}
            onClick={() => setSelected('live')}
          >
            Git vs cluster
          </button>
          <ol class="timeline" aria-label="Changes, newest first">
            {list.map((e) => (
              <HistoryItem key={e.id} entry={e} selected={selected === e.id} onSelect={() => setSelected(e.id)} />
            ))}
          </ol>
          {nextCursor && (
            <button type="button" onClick={() => void loadHistory(nextCursor, false)}>
              Older changes
            </button>
          )}
        </div>
        <div class="card diff-card">
          {shown === undefined ? (
            <p class="hint">
              Select a change to see what it changed, or Git vs cluster to see what a sync would change.
            </p>
          ) : shown === 'live' ? (
            <DiffView base={base} routes={routes} title="Git vs cluster" />
          ) : (
            <DiffView base={base} routes={routes} entry={shown} title={`Change ${shortRev(shown.changeRevision)}`} />
          )}
        </div>
      </div>
    </section>
  );
}

function HistoryItem({
  entry: e,
  selected,
  onSelect,
}: {
  entry: ApplicationHistoryEntry;
  selected: boolean;
  onSelect: () => void;
}) {
  return (
    <li class={`entry${selected ? ' selected' : ''}`} data-change-revision={e.changeRevision} data-result={e.result}>
      <button type="button" class="entry-select" aria-pressed={selected} onClick={onSelect}>
        <span class={`result result-${e.result}`}>{e.result}</span> <code>{shortRev(e.changeRevision)}</code>{' '}
        <span class="subject">{subject(e.message)}</span>
      </button>
      <p class="meta">
        {e.author ?? 'unknown author'} · <Time iso={e.startedAt ?? e.date ?? e.recordedAt} ago />
        {took(e.durationMs) && <> · took {took(e.durationMs)}</>}
        {e.tags.length > 0 && <> · {e.tags.join(', ')}</>}
      </p>
      {e.images.length > 0 && (
        <ul class="images" aria-label="Images">
          {e.images.map((i) => (
            <li key={`${i.resource}/${i.container}`}>
              <ImageText image={i} />
            </li>
          ))}
        </ul>
      )}
      {e.result === 'failed' && e.resultMessage && <p class="result-message">{e.resultMessage}</p>}
    </li>
  );
}

function ImageText({ image: i }: { image: ImageChange }) {
  return (
    <>
      <span class="container">{i.container}</span>:{' '}
      {i.before === undefined ? (
        <>
          added <code>{i.after}</code>
        </>
      ) : i.after === undefined ? (
        <>
          removed <code>{i.before}</code>
        </>
      ) : (
        <>
          <code>{i.before}</code> → <code>{i.after}</code>
        </>
      )}
    </>
  );
}

/** The diff of a change (`entry`) or of Git against the cluster, fetched when shown. */
/** A diff of the application (`base`: its path, what the diff is read again for when it changes). */
function DiffView({
  base,
  routes,
  entry,
  title,
}: {
  base: string;
  routes: ApplicationRoutes;
  entry?: ApplicationHistoryEntry;
  title: string;
}) {
  const [diff, setDiff] = useState<ApplicationDiff | null>(null);
  const [error, setError] = useState<ApiError | null>(null);
  const revision = entry?.changeRevision;
  useEffect(() => {
    const abort = new AbortController();
    setDiff(null);
    setError(null);
    routes.diff({ revision }, abort.signal).then(setDiff, (e) => {
      if (!abort.signal.aborted)
        setError(e instanceof ApiError ? e : new ApiError({ status: 0, code: 'UNREACHABLE', message: String(e) }));
    });
    return () => abort.abort();
  }, [base, revision]);

  return (
    <section aria-labelledby="diff-title">
      <h2 id="diff-title">{title}</h2>
      {entry && (
        <>
          <p class="meta">
            {entry.author ?? 'unknown author'}, <Time iso={entry.date ?? entry.recordedAt} />
            {entry.previousChangeRevision && (
              <>
                {' '}
                · after <code>{shortRev(entry.previousChangeRevision)}</code>
              </>
            )}
          </p>
          {entry.message && <pre class="commit-message">{entry.message}</pre>}
          <h3>Resources changed</h3>
          {entry.resources.length === 0 ? (
            <p class="hint">No resource of the application changed.</p>
          ) : (
            <ul class="resources" aria-label="Resources changed">
              {entry.resources.map((r) => (
                <li key={resourceName(r)} data-action={r.action}>
                  <span class={`action action-${r.action}`}>{r.action}</span> {resourceName(r)}
                  {r.fields.length > 0 && (
                    <span class="fields">
                      : {r.fields.join(', ')}
                      {r.fieldsTruncated ? ', …' : ''}
                    </span>
                  )}
                </li>
              ))}
              {entry.truncated && <li class="hint">More changed than a report holds: the diff below has it all.</li>}
            </ul>
          )}
        </>
      )}
      {error ? (
        <DiffError error={error} />
      ) : !diff ? (
        <p aria-busy="true">Asking the runtime's Source Server…</p>
      ) : (
        <Diff diff={diff} />
      )}
    </section>
  );
}

/** A diff that could not be fetched: a runtime out of reach says so, and when to try again. */
function DiffError({ error }: { error: ApiError }) {
  if (error.status === 503)
    return (
      <ErrorBox error={error}>
        <p class="unreachable">
          The runtime is unreachable, so its Source Server cannot be asked for the diff
          {error.retryAfterSeconds !== undefined ? `: retry in ${error.retryAfterSeconds} s` : ''}. The history and the
          resources listed above are what the runtime reported.
        </p>
      </ErrorBox>
    );
  return <ErrorBox error={error} />;
}

function Diff({ diff }: { diff: ApplicationDiff }) {
  const live = diff.base === 'live';
  const left = live ? 'Cluster (live)' : `Before (${shortRev(diff.base)})`;
  const right = live ? `Git (${shortRev(diff.revision)})` : `After (${shortRev(diff.revision)})`;
  return (
    <div class="diff">
      {diff.truncated && (
        <p class="hint">The diff reached its size limit: the objects of the last resources are left out.</p>
      )}
      {diff.resources.length === 0 && <p>No difference: {live ? 'the cluster matches Git' : 'nothing changed'}.</p>}
      {diff.resources.map((r) => (
        <ResourceDiffView key={resourceName(r)} resource={r} left={left} right={right} />
      ))}
    </div>
  );
}

function ResourceDiffView({ resource: r, left, right }: { resource: ResourceDiff; left: string; right: string }) {
  const rows = sideBySide(yamlLines(r.before), yamlLines(r.after));
  return (
    <section class="resource-diff" data-resource={resourceName(r)} aria-label={resourceName(r)}>
      <h3>
        <span class={`action action-${r.action}`}>{r.action}</span> {resourceName(r)}
      </h3>
      {r.fields.length > 0 && (
        <p class="fields">
          Fields: {r.fields.join(', ')}
          {r.fieldsTruncated ? ', …' : ''}
        </p>
      )}
      {r.before === null && r.after === null ? (
        <p class="hint">Objects left out of a truncated answer.</p>
      ) : (
        <table class="side-by-side">
          <colgroup>
            <col class="ln-col" />
            <col />
            <col class="ln-col" />
            <col />
          </colgroup>
          <thead>
            <tr>
              <th scope="col" colSpan={2}>
                {left}
              </th>
              <th scope="col" colSpan={2}>
                {right}
              </th>
            </tr>
          </thead>
          <tbody>
            {rows.map((row, i) =>
              'fold' in row ? (
                <tr key={i} class="fold">
                  <td colSpan={4}>… {row.fold} unchanged lines</td>
                </tr>
              ) : (
                <tr key={i}>
                  <td class="ln">{row.left?.n ?? ''}</td>
                  <td class={row.left ? (row.left.changed ? 'code removed' : 'code') : 'code empty'}>
                    {row.left?.text ?? ''}
                  </td>
                  <td class="ln">{row.right?.n ?? ''}</td>
                  <td class={row.right ? (row.right.changed ? 'code added' : 'code') : 'code empty'}>
                    {row.right?.text ?? ''}
                  </td>
                </tr>
              ),
            )}
          </tbody>
        </table>
      )}
    </section>
  );
}
