import { useEffect, useRef, useState } from 'preact/hooks';
import {
  client,
  ApiError,
  PHASES,
  query,
  type Identity,
  type Phase,
  type Tenant,
  type TenantPage,
  type TenantSummary,
} from './api.ts';
import { BlockingBanner, useDoctor } from './doctor.tsx';
import { openStream, type StreamStatus } from './sse.ts';
import { Banner, ErrorBox, notConnectedOf, PhaseBadge, sleepStateOf, Time, when } from './util.tsx';

interface Filters {
  q: string;
  phase: Phase | '';
  runtimeVersion: string;
  plan: string;
  region: string;
  cluster: string;
}
const EMPTY: Filters = { q: '', phase: '', runtimeVersion: '', plan: '', region: '', cluster: '' };
/** The filters as the list's query (`GET /v1/tenants`): one left empty is not sent. */
const filterQueryOf = (f: Filters) => ({
  q: f.q || undefined,
  phase: f.phase || undefined,
  runtimeVersion: f.runtimeVersion || undefined,
  plan: f.plan || undefined,
  region: f.region || undefined,
  cluster: f.cluster || undefined,
});
type Sort = 'createdAt' | 'updatedAt' | 'organization' | 'phase';

/**
 * Why a tenant that is not Ready (or suspended, or gone) is where it is: its Stalled condition
 * while stalled, otherwise its Ready condition while False, as the API gives them to the caller.
 * A Ready tenant has a why too while its runtime is not connected (RuntimeConnected=False) or it
 * needs the customer's action (ActionRequired=True): Ready says provisioned, not running.
 * A tenant asleep or waking has none unless stalled: sleep is settled, not a problem (SleepNote
 * says where it is).
 */
export function whyOf(t: Tenant): { reason: string; message: string } | null {
  if (t.status.phase === 'Ready' && !t.spec.suspended) {
    const c =
      notConnectedOf(t.status.conditions) ??
      t.status.conditions.find((k) => k.type === 'ActionRequired' && k.status === 'True');
    return c ? { reason: c.reason, message: c.message } : null;
  }
  if (['Ready', 'Suspended', 'Deleted'].includes(t.status.phase)) return null;
  const stalled = t.status.conditions.find((c) => c.type === 'Stalled' && c.status === 'True');
  if (!stalled && (t.status.phase === 'Sleeping' || t.status.phase === 'Waking')) return null;
  const ready = t.status.conditions.find((c) => c.type === 'Ready' && c.status === 'False');
  const c = stalled ?? ready;
  return c ? { reason: c.reason, message: c.message } : null;
}

/**
 * The Why of a tenant asleep, going to sleep or waking up (util.tsx's sleepStateOf), in calm words:
 * no reason in bold, since nothing is wrong; the next request to its runtime wakes it.
 */
export function SleepNote({ tenant: t, now }: { tenant: Tenant; now?: number }) {
  const state = sleepStateOf(t);
  if (state === 'awake') return null;
  const since = t.status.sleep?.since;
  return (
    <span class="sleep-note" data-sleep={state}>
      {state === 'waking' ? (
        'waking up: its runtime and virtual cluster start again'
      ) : (
        <>
          {state === 'asleep' ? 'asleep' : 'going to sleep'}
          {since && (
            <>
              {state === 'asleep' ? ' since ' : ', asked '}
              <Time iso={since} ago now={now} />
            </>
          )}
          ; the next request to its runtime wakes it
        </>
      )}
    </span>
  );
}

const PAGE_SIZE = 50;

export function TenantsPage({ me }: { me: Identity }) {
  const [filters, setFilters] = useState<Filters>(EMPTY);
  const [sort, setSort] = useState<Sort>('createdAt');
  const [order, setOrder] = useState<'asc' | 'desc'>('desc');
  /** Cursors of the pages before this one, and this one's ('' = first page). */
  const [cursors, setCursors] = useState<string[]>(['']);
  const [page, setPage] = useState<TenantPage | null>(null);
  const [summary, setSummary] = useState<TenantSummary | null>(null);
  const [error, setError] = useState<ApiError | null>(null);
  const [shownQuery, setShownQuery] = useState('');
  const [stream, setStream] = useState<StreamStatus>('connecting');
  const [versions, setVersions] = useState<string[]>([]);
  const [regions, setRegions] = useState<string[]>([]);
  const [plans, setPlans] = useState<string[]>([]);
  const [clusters, setClusters] = useState<string[]>([]);
  const operator = me.role === 'operator' || me.role === 'admin';
  const doctor = useDoctor(operator);

  // The counts are of every phase: the summary's query is the filters but the phase.
  const { phase: _everyPhase, ...summaryParams } = filterQueryOf(filters);
  const filterQuery = query(summaryParams).replace(/^\?/, '');
  const listParams = { ...filterQueryOf(filters), sort, order, limit: PAGE_SIZE, cursor: cursors.at(-1) || undefined };
  const listQuery = query(listParams);

  useEffect(() => {
    void client.call('GET /v1/runtime-versions').then((r) => setVersions(r.items.map((v) => v.version)));
    void client.call('GET /v1/regions').then((r) => setRegions(r.items.map((v) => v.name)));
    void client.call('GET /v1/plans').then((r) => setPlans(r.items.map((v) => v.name)));
    if (operator) void client.call('GET /v1/clusters').then((r) => setClusters(r.items.map((v) => v.name)));
  }, [operator]);

  // The page: every change of filters, order or page aborts the request before it.
  useEffect(() => {
    const abort = new AbortController();
    client.call('GET /v1/tenants', { query: listParams, signal: abort.signal }).then(
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
  }, [listQuery]);

  const refreshSummary = useRef<() => void>(() => {});
  useEffect(() => {
    const abort = new AbortController();
    const load = () => {
      client.call('GET /v1/tenants/summary', { query: summaryParams, signal: abort.signal }).then(setSummary, () => {});
    };
    refreshSummary.current = load;
    load();
    return () => abort.abort();
  }, [filterQuery]);

  // Live: tenants as they change; rows on this page are replaced in place, the counts reloaded
  // (at most once a second).
  useEffect(() => {
    let timer: number | undefined;
    const s = openStream('GET /v1/tenants/events', {
      onStatus: (st) => setStream(st),
      onEvents: (events) => {
        const changed = new Map<string, Tenant>();
        for (const e of events) if (e.event === 'tenant') changed.set(e.data.id, e.data);
        if (changed.size === 0) return;
        setPage((p) => (p ? { ...p, items: p.items.map((t) => changed.get(t.id) ?? t) } : p));
        timer ??= window.setTimeout(() => {
          timer = undefined;
          refreshSummary.current();
        }, 1000);
      },
    });
    return () => {
      s.close();
      if (timer) clearTimeout(timer);
    };
  }, []);

  const set = (k: keyof Filters) => (e: Event) => {
    setFilters({ ...filters, [k]: (e.currentTarget as HTMLInputElement).value });
    setCursors(['']);
  };
  const sortBy = (s: Sort) => {
    if (s === sort) setOrder(order === 'asc' ? 'desc' : 'asc');
    else {
      setSort(s);
      setOrder(s === 'organization' || s === 'phase' ? 'asc' : 'desc');
    }
    setCursors(['']);
  };
  const header = (s: Sort, label: string) => (
    <th scope="col" aria-sort={sort === s ? (order === 'asc' ? 'ascending' : 'descending') : 'none'}>
      <button type="button" class="sort" onClick={() => sortBy(s)}>
        {label}
        {sort === s ? (order === 'asc' ? ' ▲' : ' ▼') : ''}
      </button>
    </th>
  );
  const select = (k: keyof Filters, label: string, options: readonly string[]) => (
    <label>
      {label}
      <select value={filters[k]} onChange={set(k)}>
        <option value="">any</option>
        {options.map((o) => (
          <option value={o} key={o}>
            {o}
          </option>
        ))}
      </select>
    </label>
  );
  const loading = shownQuery !== listQuery;
  const now = Date.now();

  return (
    <section aria-labelledby="tenants-title">
      <h1 id="tenants-title">Tenants</h1>
      <Banner status={stream} />
      <BlockingBanner report={doctor.report} />
      <div class="counts" role="group" aria-label="Tenants by phase">
        <button
          type="button"
          class={filters.phase === '' ? 'count active' : 'count'}
          aria-pressed={filters.phase === ''}
          onClick={() => (setFilters({ ...filters, phase: '' }), setCursors(['']))}
        >
          All{' '}
          <span class="n" data-phase-count="total">
            {summary?.total ?? '…'}
          </span>
        </button>
        {PHASES.map((p) => (
          <button
            type="button"
            key={p}
            class={filters.phase === p ? 'count active' : 'count'}
            aria-pressed={filters.phase === p}
            onClick={() => (setFilters({ ...filters, phase: p }), setCursors(['']))}
          >
            {p}{' '}
            <span class="n" data-phase-count={p}>
              {summary?.phases[p] ?? '…'}
            </span>
            {p === 'Suspended' && summary?.suspended !== undefined && summary.suspended > summary.phases[p] && (
              <span
                class="n-extra"
                data-suspending-count={summary.suspended - summary.phases[p]}
                title={`${summary.suspended} tenants are suspended; the suspension of ${summary.suspended - summary.phases[p]} is not applied yet`}
              >
                {' '}
                +{summary.suspended - summary.phases[p]} suspending
              </span>
            )}
          </button>
        ))}
      </div>
      {summary?.runtimeVersions && summary.runtimeVersions.length > 0 && (
        <div class="counts versions" role="group" aria-label="Tenants by runtime version">
          <span class="counts-label" aria-hidden="true">
            By runtime version:
          </span>
          {summary.runtimeVersions.map((v) => (
            <button
              type="button"
              key={v.version}
              class={filters.runtimeVersion === v.version ? 'count active' : 'count'}
              aria-pressed={filters.runtimeVersion === v.version}
              title={`${v.tenants} tenants on or going to ${v.version}; ${v.running} have it installed`}
              onClick={() => (
                setFilters({ ...filters, runtimeVersion: filters.runtimeVersion === v.version ? '' : v.version }),
                setCursors([''])
              )}
            >
              {v.version}{' '}
              <span class="n" data-version-count={v.version}>
                {v.tenants}
              </span>
              <span class="n-extra"> ({v.running} running)</span>
            </button>
          ))}
        </div>
      )}
      <form class="filters" role="search" onSubmit={(e) => e.preventDefault()}>
        <label>
          Search
          <input
            type="search"
            name="q"
            placeholder="organization or tenant id"
            value={filters.q}
            onInput={set('q')}
            maxLength={100}
          />
        </label>
        {select('phase', 'Phase', PHASES)}
        {select('runtimeVersion', 'Version', versions)}
        {select('plan', 'Plan', plans)}
        {select('region', 'Region', regions)}
        {operator && select('cluster', 'Cluster', clusters)}
      </form>
      <ErrorBox error={error} />
      <table class="tenants" data-loading={loading ? 'true' : 'false'} data-query={shownQuery}>
        <caption class="sr-only">
          Tenants, {sort} {order === 'asc' ? 'ascending' : 'descending'}
        </caption>
        <thead>
          <tr>
            {header('organization', 'Organization')}
            {header('phase', 'Phase')}
            <th scope="col">Why</th>
            <th scope="col">Version</th>
            <th scope="col">Plan</th>
            <th scope="col">Region</th>
            <th scope="col">Cluster</th>
            {header('createdAt', 'Age')}
            {header('updatedAt', 'Status updated')}
          </tr>
        </thead>
        <tbody>
          {page?.items.map((t) => (
            <tr key={t.id} class={t.status.stale ? 'stale' : ''} data-tenant={t.id}>
              <td>
                <a href={`#/tenants/${t.id}`}>{t.organization}</a>
                <div class="id">{t.id}</div>
              </td>
              <td class="status" data-phase={t.status.phase}>
                <PhaseBadge phase={t.status.phase} notConnected={notConnectedOf(t.status.conditions)} />
                {t.spec.suspended && t.status.phase !== 'Suspended' && (
                  <span
                    class="suspended-tag"
                    data-suspended="true"
                    title={`suspended${t.status.suspension ? ` by ${t.status.suspension.by}` : ''}${
                      t.status.suspension?.reason ? `: ${t.status.suspension.reason}` : ''
                    }; the phase shows what runs until the suspension is applied`}
                  >
                    suspended
                  </span>
                )}
                {t.status.stale && (
                  <span
                    class="stale-tag"
                    title={`status last observed ${when(t.status.observedAt ?? t.updatedAt)}: older than two resync periods`}
                  >
                    stale
                  </span>
                )}
              </td>
              <td class="why">
                {(() => {
                  const why = whyOf(t);
                  return why ? (
                    <>
                      <span class="reason">{why.reason}</span>: {why.message}
                    </>
                  ) : (
                    <SleepNote tenant={t} now={now} />
                  );
                })()}
              </td>
              <td class="status">
                {t.status.runtimeVersion ?? '—'}
                {t.spec.runtimeVersion !== t.status.runtimeVersion && (
                  <span class="wanted"> → {t.spec.runtimeVersion}</span>
                )}
              </td>
              <td>{t.spec.plan}</td>
              <td>{t.spec.region ?? 'any'}</td>
              <td class="status">{t.status.cluster ?? '—'}</td>
              <td>
                <Time iso={t.createdAt} age now={now} />
              </td>
              <td class="status">
                <Time iso={t.updatedAt} ago now={now} />
              </td>
            </tr>
          ))}
          {page && page.items.length === 0 && (
            <tr>
              <td colSpan={9}>No tenant matches.</td>
            </tr>
          )}
        </tbody>
      </table>
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
