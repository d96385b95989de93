import { useEffect, useRef, useState } from 'preact/hooks';
import { ApiError, client, query, type Runtime, type RuntimePage, type RuntimeRemoved } from './api.ts';
import type { QueryOf } from '../../provisioner/http/api-client.ts';
import { ErrorBox, notConnectedOf, PhaseBadge, Time, when } from './util.tsx';

const PAGE_SIZE = 50;
const MODES = ['hosted', 'hybrid'] as const;

/**
 * A runtime's state in words, with the condition that says why: a hosted runtime's phase (and,
 * while not Ready, its Stalled or Ready condition; while Ready, RuntimeConnected=False if so); a hybrid runtime's install state from its
 * `Installed` condition ("awaiting install", "bootstrap expired", "installed", "removed").
 */
export function stateOf(r: Runtime): { text: string; reason: string | null; message: string | null } {
  if (r.mode === 'hosted') {
    const stalled = r.conditions.find((c) => c.type === 'Stalled' && c.status === 'True');
    const ready = r.conditions.find((c) => c.type === 'Ready' && c.status === 'False');
    const c = r.state === 'Ready' ? notConnectedOf(r.conditions) : (stalled ?? ready);
    return { text: r.state, reason: c?.reason ?? null, message: c?.message ?? null };
  }
  const installed = r.conditions.find((c) => c.type === 'Installed');
  const text =
    r.state === 'awaiting-install' && installed?.reason === 'BootstrapExpired'
      ? 'bootstrap expired'
      : r.state.replace(/-/g, ' ');
  return { text, reason: installed?.reason ?? null, message: installed?.message ?? null };
}

/** How requests reach the runtime: a hosted runtime's tunnel, a hybrid one's tunnel or ingress. */
function tunnelOf(r: Runtime): { text: string; title: string } {
  if (r.access === 'ingress')
    return { text: 'none (ingress)', title: `the customer's ingress: ${r.ingressUrl ?? '—'}` };
  const c = r.conditions.find((k) => k.type === 'TunnelConnected');
  if (r.tunnel.connected) return { text: 'connected', title: `connected since ${when(r.tunnel.since)}` };
  return { text: 'not connected', title: c ? `${c.reason}: ${c.message}` : 'no tunnel is open' };
}

function argoOf(r: Runtime): string {
  if (r.argo === 'existing') return `existing (${r.argoNamespace ?? '—'})`;
  if (r.argo === 'new') return 'new';
  return 'hosted';
}

/** What a removal answered: the command that deletes what the install created, to copy. */
function RemovedNotice({ removed, onClose }: { removed: RuntimeRemoved; onClose: () => void }) {
  const [copied, setCopied] = useState<'no' | 'yes' | 'failed'>('no');
  const copy = () =>
    navigator.clipboard.writeText(removed.removeCommand).then(
      () => setCopied('yes'),
      () => setCopied('failed'),
    );
  return (
    <div class="removed card" role="status" data-removed={removed.runtime.name}>
      <p class="done">
        Runtime <strong>{removed.runtime.name}</strong> removed: its key is revoked. Run this in the customer's cluster
        to delete what the install created (the control plane holds no credentials to it):
      </p>
      <pre class="command" aria-label={`Remove command of ${removed.runtime.name}`}>
        {removed.removeCommand}
      </pre>
      <div class="confirm">
        <button type="button" onClick={() => void copy()}>
          Copy the command
        </button>
        <button type="button" onClick={onClose}>
          Dismiss
        </button>
        {copied === 'yes' && <span class="done">copied</span>}
        {copied === 'failed' && (
          <span class="hint">the browser refused the clipboard: select the command and copy it</span>
        )}
      </div>
    </div>
  );
}

/**
 * Runtimes in one table, hosted and hybrid alike. A hybrid runtime can be removed (after typing its
 * name); `onRemoved` gets the API's answer.
 */
function RuntimeTable({
  runtimes,
  showTenant,
  onRemoved,
  onStale,
  caption,
  empty,
}: {
  runtimes: Runtime[] | null;
  showTenant: boolean;
  onRemoved: (removed: RuntimeRemoved) => void;
  /** The list is out of date (a runtime shown is gone): load it again. */
  onStale: () => void;
  caption: string;
  empty: string;
}) {
  const [pending, setPending] = useState<string | null>(null);
  const [typed, setTyped] = useState('');
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<ApiError | null>(null);
  const now = Date.now();
  const remove = async (r: Runtime) => {
    setBusy(true);
    setError(null);
    try {
      const removed = await client.call('DELETE /v1/tenants/:id/runtimes/:name', {
        params: { id: r.tenantId, name: r.name },
      });
      setPending(null);
      setTyped('');
      onRemoved(removed);
    } catch (err) {
      setError(err as ApiError);
      // Removed meanwhile (by the CLI, another tab): the list is reloaded without it.
      if (err instanceof ApiError && err.status === 404) {
        setPending(null);
        setTyped('');
        onStale();
      }
    } finally {
      setBusy(false);
    }
  };
  const cols = showTenant ? 12 : 11;
  return (
    <>
      <ErrorBox error={error} />
      <table class="runtimes">
        <caption class="sr-only">{caption}</caption>
        <thead>
          <tr>
            {showTenant && <th scope="col">Tenant</th>}
            <th scope="col">Name</th>
            <th scope="col">Mode</th>
            <th scope="col">Access</th>
            <th scope="col">Argo CD</th>
            <th scope="col">State</th>
            <th scope="col">Version</th>
            <th scope="col">Tunnel</th>
            <th scope="col">Key</th>
            <th scope="col">Last heartbeat</th>
            <th scope="col">Created</th>
            <th scope="col">Action</th>
          </tr>
        </thead>
        <tbody>
          {runtimes?.map((r) => {
            const s = stateOf(r);
            const tunnel = tunnelOf(r);
            const key = `${r.tenantId}/${r.name}`;
            return (
              <tr key={r.id} data-runtime={r.name} data-tenant={r.tenantId} data-mode={r.mode}>
                {showTenant && (
                  <td>
                    <a href={`#/tenants/${r.tenantId}`} title={`tenant ${r.tenantId}`} data-tenant-link>
                      {r.organization}
                    </a>
                  </td>
                )}
                <td>{r.name}</td>
                <td data-cell="mode">{r.mode}</td>
                <td data-cell="access" title={r.ingressUrl ?? undefined}>
                  {r.mode === 'hosted' ? 'tunnel (hosted)' : r.access}
                  {r.ingressUrl && <div class="id">{r.ingressUrl}</div>}
                </td>
                <td data-cell="argo">{argoOf(r)}</td>
                <td data-cell="state" data-state={r.state} title={s.message ?? undefined}>
                  {r.mode === 'hosted' ? (
                    <PhaseBadge phase={s.text} notConnected={notConnectedOf(r.conditions)} />
                  ) : (
                    <span class="runtime-state">{s.text}</span>
                  )}
                  {s.reason && (
                    <div class="why">
                      <span class="reason">{s.reason}</span>
                      {s.message ? `: ${s.message}` : ''}
                    </div>
                  )}
                </td>
                <td data-cell="version">
                  {r.version ?? '—'}
                  <div class="id">
                    reported {r.lastHeartbeatAt !== null ? (r.reportedVersion ?? 'none') : 'none yet'}
                  </div>
                  {r.versionSkew && (
                    <span class="skew-tag" title={`reported ${r.reportedVersion ?? '—'}, expected ${r.version ?? '—'}`}>
                      skew
                    </span>
                  )}
                  {r.upgrade && (
                    <div class="id" data-upgrade={r.upgrade.phase} title={r.upgrade.message ?? undefined}>
                      upgrader: {r.upgrade.from} → {r.upgrade.to} {r.upgrade.phase}
                    </div>
                  )}
                </td>
                <td data-cell="tunnel" title={tunnel.title}>
                  {tunnel.text}
                </td>
                <td data-cell="key">{r.keyIssued ? 'issued' : 'none'}</td>
                <td>
                  <Time iso={r.lastHeartbeatAt} ago now={now} />
                </td>
                <td>
                  <Time iso={r.createdAt} age now={now} />
                </td>
                <td>
                  {r.mode === 'hybrid' && r.state !== 'removed' ? (
                    pending === key ? (
                      <div class="actions">
                        <label>
                          Type <strong>{r.name}</strong> to remove it
                          <input
                            value={typed}
                            name="confirm-runtime"
                            autoComplete="off"
                            onInput={(e) => setTyped(e.currentTarget.value)}
                          />
                        </label>
                        <div class="confirm" role="group" aria-label={`Confirm removal of ${r.name}`}>
                          <button
                            type="button"
                            class="danger"
                            disabled={typed !== r.name || busy}
                            onClick={() => void remove(r)}
                          >
                            Remove {r.name}
                          </button>
                          <button type="button" onClick={() => (setPending(null), setTyped(''), setError(null))}>
                            Cancel
                          </button>
                        </div>
                      </div>
                    ) : (
                      <button
                        type="button"
                        class="danger"
                        aria-label={`Remove ${r.name}…`}
                        onClick={() => (setPending(key), setTyped(''), setError(null))}
                      >
                        Remove…
                      </button>
                    )
                  ) : (
                    '—'
                  )}
                </td>
              </tr>
            );
          })}
          {runtimes && runtimes.length === 0 && (
            <tr>
              <td colSpan={cols}>{empty}</td>
            </tr>
          )}
        </tbody>
      </table>
    </>
  );
}

/** Every tenant's runtimes, hosted and hybrid, not removed, in creation order (operators). */
export function RuntimesPage() {
  const [mode, setMode] = useState('');
  /** Cursors of the pages before this one, and this one's ('' = first page). */
  const [cursors, setCursors] = useState<string[]>(['']);
  const [page, setPage] = useState<RuntimePage | null>(null);
  const [shownQuery, setShownQuery] = useState('');
  const [error, setError] = useState<ApiError | null>(null);
  const [removed, setRemoved] = useState<RuntimeRemoved | null>(null);
  const [reloads, setReloads] = useState(0);
  const listParams: QueryOf<'GET /v1/runtimes'> = {
    mode: mode === 'hosted' || mode === 'hybrid' ? mode : undefined,
    limit: PAGE_SIZE,
    cursor: cursors.at(-1) || undefined,
  };
  const listQuery = query(listParams);

  useEffect(() => {
    const abort = new AbortController();
    client.call('GET /v1/runtimes', { query: listParams, signal: abort.signal }).then(
      (p) => {
        setPage(p);
        setShownQuery(listQuery);
        setError(null);
      },
      (err: unknown) => {
        if (!abort.signal.aborted) setError(err as ApiError);
      },
    );
    return () => abort.abort();
  }, [listQuery, reloads]);

  return (
    <section aria-labelledby="runtimes-title">
      <h1 id="runtimes-title">Runtimes</h1>
      <p class="hint">
        Hosted runtimes (one per tenant, in its vcluster) and hybrid runtimes (in a customer's own cluster), not
        removed.
      </p>
      <form class="filters" role="search" onSubmit={(e) => e.preventDefault()}>
        <label>
          Mode
          <select name="mode" value={mode} onChange={(e) => (setMode(e.currentTarget.value), setCursors(['']))}>
            <option value="">any</option>
            {MODES.map((m) => (
              <option value={m} key={m}>
                {m}
              </option>
            ))}
          </select>
        </label>
        <button type="button" onClick={() => setReloads(reloads + 1)}>
          Reload
        </button>
      </form>
      {removed && <RemovedNotice removed={removed} onClose={() => setRemoved(null)} />}
      <ErrorBox error={error} />
      <div data-loading={shownQuery !== listQuery ? 'true' : 'false'} data-query={shownQuery}>
        <RuntimeTable
          runtimes={page?.items ?? null}
          showTenant
          caption={`Runtimes${mode ? `, mode ${mode}` : ''}, in creation order`}
          empty={mode ? `No ${mode} runtime.` : 'No runtime yet.'}
          onRemoved={(r) => (setRemoved(r), setReloads(reloads + 1))}
          onStale={() => setReloads(reloads + 1)}
        />
      </div>
      <nav class="pager" aria-label="Pages">
        <button type="button" disabled={cursors.length <= 1} onClick={() => setCursors(cursors.slice(0, -1))}>
          ← Previous
        </button>
        <span>Page {cursors.length}</span>
        <button
          type="button"
          disabled={!page?.nextCursor}
          onClick={() => page?.nextCursor && setCursors([...cursors, page.nextCursor])}
        >
          Next →
        </button>
      </nav>
    </section>
  );
}

/** A tenant's runtimes on its page: the hosted one first, then its hybrid ones not removed. */
export function TenantRuntimes({ tenantId, deleted }: { tenantId: string; deleted: boolean }) {
  const [items, setItems] = useState<Runtime[] | null>(null);
  const [error, setError] = useState<ApiError | null>(null);
  const [removed, setRemoved] = useState<RuntimeRemoved | null>(null);
  const load = useRef(() => {});
  load.current = () => {
    client.call('GET /v1/tenants/:id/runtimes', { params: { id: tenantId } }).then(
      (r) => (setItems(r.items), setError(null)),
      (e: unknown) => setError(e as ApiError),
    );
  };
  useEffect(() => {
    setItems(null);
    setRemoved(null);
    load.current();
  }, [tenantId]);
  return (
    <div class="card" aria-labelledby="tenant-runtimes-title" role="region">
      <h2 id="tenant-runtimes-title">Runtimes</h2>
      {removed && <RemovedNotice removed={removed} onClose={() => setRemoved(null)} />}
      <ErrorBox error={error} />
      <RuntimeTable
        runtimes={items}
        showTenant={false}
        caption="This tenant's runtimes, hosted first"
        empty={deleted ? 'This tenant is deleted: it has no runtime.' : 'No runtime.'}
        onRemoved={(r) => (setRemoved(r), load.current())}
        onStale={() => load.current()}
      />
      <p class="hint">
        Register a hybrid runtime with <code>provisioner runtimes register</code> (docs/hybrid.md): its install bundle
        holds a single-use token, so it is not shown here.
      </p>
    </div>
  );
}
