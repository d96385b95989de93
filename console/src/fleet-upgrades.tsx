/**
 * Fleet upgrades (operators): the list, and one fleet upgrade with its waves, every tenant's state
 * and last gate result, pause/resume/abort. Live through the tenant change stream: a fleet
 * upgrade moves tenants, so the page reloads it (at most once a second) when a tenant changes.
 */
import { useEffect, useRef, useState } from 'preact/hooks';
import { api, ApiError, type FleetUpgrade, type TenantStreamEvents } from './api.ts';
import { openStream, type StreamStatus } from './sse.ts';
import { age, Banner, ErrorBox, when } from './util.tsx';

/** Reloads `load` when a tenant changes (at most once a second); returns the stream's status. */
function useLiveReload(load: () => void): StreamStatus {
  const [status, setStatus] = useState<StreamStatus>('connecting');
  const latest = useRef(load);
  latest.current = load;
  useEffect(() => {
    let timer: number | undefined;
    const s = openStream<TenantStreamEvents>('/v1/tenants/events', {
      onStatus: setStatus,
      onEvents: (events) => {
        if (!events.some((e) => e.event === 'tenant')) return;
        timer ??= window.setTimeout(() => {
          timer = undefined;
          latest.current();
        }, 1000);
      },
    });
    return () => {
      s.close();
      clearTimeout(timer);
    };
  }, []);
  return status;
}

const countsText = (c: Record<string, number>) =>
  Object.entries(c)
    .filter(([, n]) => n > 0)
    .map(([k, n]) => `${n} ${k}`)
    .join(', ') || '—';

export function FleetUpgradesPage() {
  const [items, setItems] = useState<FleetUpgrade[] | null>(null);
  const [error, setError] = useState<ApiError | null>(null);
  const load = () => {
    api<{ items: FleetUpgrade[] }>('GET', '/v1/fleet-upgrades?limit=50').then(
      (r) => setItems(r.items),
      (e: unknown) => setError(e as ApiError),
    );
  };
  useEffect(load, []);
  const stream = useLiveReload(load);
  return (
    <section aria-labelledby="fleet-title">
      <h1 id="fleet-title">Fleet upgrades</h1>
      <Banner status={stream} />
      <ErrorBox error={error} />
      <p class="hint">
        Planned with <code>provisioner fleet plan VERSION --from-version …</code>, started with{' '}
        <code>provisioner fleet start VERSION …</code> or <code>POST /v1/fleet-upgrades</code> (docs/fleet-upgrades.md).
      </p>
      <table class="fleet-upgrades">
        <thead>
          <tr>
            <th scope="col">Target</th>
            <th scope="col">State</th>
            <th scope="col">Wave</th>
            <th scope="col">Tenants</th>
            <th scope="col">Started</th>
            <th scope="col">ETA</th>
          </tr>
        </thead>
        <tbody>
          {items?.map((f) => (
            <tr key={f.id} data-fleet-upgrade={f.id}>
              <td>
                <a href={`#/fleet-upgrades/${f.id}`}>{f.targetVersion}</a>
              </td>
              <td>
                {f.state}
                {f.stateReason ? `: ${f.stateReason}` : ''}
              </td>
              <td>{f.waves[f.currentWave]?.name ?? f.currentWave}</td>
              <td>{countsText(f.counts)}</td>
              <td title={when(f.createdAt)}>{age(f.createdAt)} ago</td>
              <td>{f.etaSeconds != null ? `${Math.ceil(f.etaSeconds / 60)} min` : '—'}</td>
            </tr>
          ))}
          {items?.length === 0 && (
            <tr>
              <td colSpan={6}>No fleet upgrade yet.</td>
            </tr>
          )}
        </tbody>
      </table>
    </section>
  );
}

export function FleetUpgradePage({ id }: { id: string }) {
  const [f, setF] = useState<FleetUpgrade | null>(null);
  const [error, setError] = useState<ApiError | null>(null);
  const [pending, setPending] = useState<'pause' | 'resume' | 'abort' | null>(null);
  const [rollback, setRollback] = useState(false);
  const [filter, setFilter] = useState('');
  const load = () => {
    api<FleetUpgrade>('GET', `/v1/fleet-upgrades/${id}`).then(setF, (e: unknown) => setError(e as ApiError));
  };
  useEffect(load, [id]);
  const stream = useLiveReload(load);
  if (!f)
    return error ? (
      <section>
        <h1>Fleet upgrade</h1>
        <ErrorBox error={error} />
      </section>
    ) : (
      <p aria-busy="true">Loading…</p>
    );
  const act = async (action: 'pause' | 'resume' | 'abort') => {
    setError(null);
    try {
      setF(
        await api<FleetUpgrade>(
          'POST',
          `/v1/fleet-upgrades/${id}/${action}`,
          action === 'abort' ? { body: { rollback } } : {},
        ),
      );
      setPending(null);
    } catch (e) {
      setError(e as ApiError);
    }
  };
  const active = ['running', 'paused', 'halted', 'aborting'].includes(f.state);
  const tenants = (f.tenants ?? []).filter((t) => !filter || t.state === filter);
  const states = [...new Set((f.tenants ?? []).map((t) => t.state))];
  const customers = f.customerActionNeeded ?? [];
  const upgraders = f.upgradedByAgent ?? [];
  const organizations = new Map((f.tenants ?? []).map((t) => [t.tenantId, t.organization]));
  const button = (action: 'pause' | 'resume' | 'abort', label: string) =>
    pending === action ? (
      <span class="confirm" role="group" aria-label={`Confirm ${action}`}>
        {action === 'abort' && (
          <label>
            <input type="checkbox" checked={rollback} onChange={(e) => setRollback(e.currentTarget.checked)} /> roll the
            moved tenants back
          </label>
        )}
        <button type="button" class="danger" onClick={() => void act(action)}>
          Confirm {action}
        </button>
        <button type="button" onClick={() => setPending(null)}>
          Cancel
        </button>
      </span>
    ) : (
      <button type="button" onClick={() => setPending(action)}>
        {label}
      </button>
    );
  return (
    <section aria-labelledby="fleet-upgrade-title">
      <h1 id="fleet-upgrade-title">
        Fleet upgrade to {f.targetVersion}: <span data-fleet-state={f.state}>{f.state}</span>
      </h1>
      <Banner status={stream} />
      <p>
        {f.stateReason ? `${f.stateReason}. ` : ''}Started {when(f.createdAt)} by {f.createdBy}; {countsText(f.counts)}
        {f.etaSeconds != null ? `; about ${Math.ceil(f.etaSeconds / 60)} min left` : ''}.
      </p>
      {f.windowsOverride && (
        <p data-windows-override>
          Maintenance windows overridden by {f.windowsOverride.by} {when(f.windowsOverride.at)}:{' '}
          {f.windowsOverride.reason}
        </p>
      )}
      {active && (
        <div class="actions-row">
          {f.state === 'running' && button('pause', 'Pause…')}
          {(f.state === 'paused' || f.state === 'halted') && button('resume', 'Resume…')}
          {f.state !== 'aborting' && button('abort', 'Abort…')}
        </div>
      )}
      <ErrorBox error={error} />
      <h2>Waves</h2>
      <table class="waves">
        <thead>
          <tr>
            <th scope="col">Wave</th>
            <th scope="col">State</th>
            <th scope="col">Size</th>
            <th scope="col">Concurrency</th>
            <th scope="col">Soak</th>
            <th scope="col">Tenants</th>
            <th scope="col">Started</th>
          </tr>
        </thead>
        <tbody>
          {f.waves.map((w) => (
            <tr key={w.wave} class={w.wave === f.currentWave && active ? 'selected' : ''}>
              <td>{w.name}</td>
              <td>{w.state}</td>
              <td>{w.size}</td>
              <td>{w.maxConcurrency}</td>
              <td>{w.soakSeconds} s</td>
              <td>{countsText(w.counts)}</td>
              <td>{when(w.startedAt)}</td>
            </tr>
          ))}
        </tbody>
      </table>
      <h2>Tenants</h2>
      <label>
        State
        <select value={filter} onChange={(e) => setFilter(e.currentTarget.value)}>
          <option value="">any</option>
          {states.map((s) => (
            <option key={s} value={s}>
              {s}
            </option>
          ))}
        </select>
      </label>
      <table class="fleet-tenants">
        <thead>
          <tr>
            <th scope="col">Tenant</th>
            <th scope="col">Wave</th>
            <th scope="col">State</th>
            <th scope="col">Path</th>
            <th scope="col">Gate</th>
          </tr>
        </thead>
        <tbody>
          {tenants.slice(0, 500).map((t) => (
            <tr key={t.tenantId} data-fleet-tenant={t.tenantId}>
              <td>
                <a href={`#/tenants/${t.tenantId}`}>{t.organization}</a>
              </td>
              <td>{t.wave ?? '—'}</td>
              <td>
                {t.state}
                {t.rolledBack ? ' (rolled back)' : ''}
                {t.reason ? `: ${t.reason}` : ''}
              </td>
              <td>{[t.fromVersion, ...t.path].join(' → ')}</td>
              <td>
                {t.gate
                  ? `${t.gate.passed ? 'passed' : 'failed'}: ${t.gate.checks
                      .map((c) => `${c.name} ${c.ok ? 'ok' : 'failed'}${c.detail ? ` (${c.detail})` : ''}`)
                      .join('; ')}`
                  : '—'}
              </td>
            </tr>
          ))}
        </tbody>
      </table>
      {tenants.length > 500 && <p class="hint">The first 500 of {tenants.length} shown; filter by state.</p>}
      {upgraders.length > 0 && (
        <>
          <h2>Moved by their in-cluster upgraders</h2>
          <p class="hint">
            Hybrid runtimes that opted in to the in-cluster upgrader: each is asked for the target once its tenant's
            hosted runtime reached it in its wave, and its upgrader applies it in the customer's cluster.
          </p>
          <table class="fleet-upgraders">
            <thead>
              <tr>
                <th scope="col">Tenant</th>
                <th scope="col">Runtime</th>
                <th scope="col">Version</th>
                <th scope="col">Phase</th>
                <th scope="col">Detail</th>
              </tr>
            </thead>
            <tbody>
              {upgraders.slice(0, 500).map((u) => (
                <tr key={`${u.tenantId}/${u.runtime}`} data-fleet-upgrader={`${u.tenantId}/${u.runtime}`}>
                  <td>
                    <a href={`#/tenants/${u.tenantId}`}>{organizations.get(u.tenantId) ?? u.tenantId}</a>
                  </td>
                  <td>{u.runtime}</td>
                  <td>{u.version}</td>
                  <td data-phase={u.phase}>{u.phase}</td>
                  <td>{u.message}</td>
                </tr>
              ))}
            </tbody>
          </table>
          {upgraders.length > 500 && <p class="hint">The first 500 of {upgraders.length} shown.</p>}
        </>
      )}
      {customers.length > 0 && (
        <>
          <h2>Customer action needed</h2>
          <p class="hint">
            Hybrid runtimes of these tenants run in their customers' clusters: a fleet upgrade moves hosted runtimes,
            and hybrid ones only through the in-cluster upgrader they opted in to. Each of these is upgraded with{' '}
            <code>provisioner runtimes upgrade</code> and its customer applies the bundle.
          </p>
          <table class="fleet-hybrid">
            <thead>
              <tr>
                <th scope="col">Tenant</th>
                <th scope="col">Runtime</th>
                <th scope="col">Version</th>
                <th scope="col">Reported</th>
                <th scope="col">What is left</th>
              </tr>
            </thead>
            <tbody>
              {customers.slice(0, 500).map((c) => (
                <tr key={`${c.tenantId}/${c.runtime}`} data-fleet-hybrid={`${c.tenantId}/${c.runtime}`}>
                  <td>
                    <a href={`#/tenants/${c.tenantId}`}>{organizations.get(c.tenantId) ?? c.tenantId}</a>
                  </td>
                  <td>{c.runtime}</td>
                  <td>{c.version}</td>
                  <td>{c.reportedVersion ?? '—'}</td>
                  <td>{c.message}</td>
                </tr>
              ))}
            </tbody>
          </table>
          {customers.length > 500 && <p class="hint">The first 500 of {customers.length} shown.</p>}
        </>
      )}
    </section>
  );
}
