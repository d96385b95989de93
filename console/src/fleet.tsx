import { useEffect, useRef, useState } from 'preact/hooks';
import {
  client,
  ApiError,
  type Cluster,
  type DoctorCheck,
  type PathInfo,
  type RuntimeVersionInfo,
  type TenantSummary,
  type Availability,
} from './api.ts';
import { BlockingBanner, useDoctor } from './doctor.tsx';
import { openStream, type StreamStatus } from './sse.ts';
import { Banner, ErrorBox, plural, when, words } from './util.tsx';

/** Components pinned by their Helm chart's version (not the application's): said so. */
const CHART_PINNED = new Set(['argoCd', 'argoWorkflows', 'argoRollouts', 'argoEvents']);

/** A cluster's health as the doctor's probe of it found it (`cluster/<name>`). */
function healthOf(check: DoctorCheck | undefined): { reachable: boolean | null; version: string; message: string } {
  if (!check) return { reachable: null, version: '—', message: 'not checked yet' };
  const ok = check.status === 'ok' || check.status === 'warning';
  return { reachable: ok, version: check.detail.kubernetes ?? '—', message: check.message };
}

/**
 * Root clusters: capacity, tenants placed, health (the doctor's probe: reachable, Kubernetes
 * version, when checked), cordon/uncordon; regions. Live through the tenant stream.
 */
export function ClustersPage() {
  const doctor = useDoctor(true);
  const [clusters, setClusters] = useState<Cluster[] | null>(null);
  const [regions, setRegions] = useState<{ name: string; accepting: boolean }[]>([]);
  const [error, setError] = useState<ApiError | null>(null);
  const [pending, setPending] = useState<string | null>(null);
  const [stream, setStream] = useState<StreamStatus>('connecting');
  const load = useRef(() => {});
  load.current = () => {
    client.call('GET /v1/clusters').then(
      (r) => setClusters(r.items),
      (e: unknown) => setError(e as ApiError),
    );
    void client.call('GET /v1/regions').then((r) => setRegions(r.items));
  };
  useEffect(() => {
    load.current();
    // Placements change with tenants: reload (at most once a second) when a tenant changes.
    let timer: number | undefined;
    const s = openStream('GET /v1/tenants/events', {
      onStatus: setStream,
      onEvents: (events) => {
        if (!events.some((e) => e.event === 'tenant' && e.data.status)) return;
        timer ??= window.setTimeout(() => ((timer = undefined), load.current()), 1000);
      },
    });
    return () => (s.close(), clearTimeout(timer));
  }, []);
  const act = async (c: Cluster) => {
    setError(null);
    try {
      await client.call(`POST /v1/clusters/:name/${c.cordoned ? 'uncordon' : 'cordon'}`, { params: { name: c.name } });
      setPending(null);
      load.current();
      doctor.reload();
    } catch (e) {
      setError(e as ApiError);
    }
  };
  return (
    <section aria-labelledby="clusters-title">
      <h1 id="clusters-title">Root clusters</h1>
      <Banner status={stream} />
      <BlockingBanner report={doctor.report} />
      <ErrorBox error={error} />
      <table class="clusters">
        <thead>
          <tr>
            <th scope="col">Name</th>
            <th scope="col">Region</th>
            <th scope="col">Reachable</th>
            <th scope="col">Kubernetes</th>
            <th scope="col">Tenants placed / capacity</th>
            <th scope="col">Plans</th>
            <th scope="col">Labels</th>
            <th scope="col">State</th>
            <th scope="col">Action</th>
          </tr>
        </thead>
        <tbody>
          {clusters?.map((c) => {
            const h = healthOf(doctor.report?.checks.find((k) => k.name === `cluster/${c.name}`));
            return (
              <tr key={c.id} data-cluster={c.name}>
                <td>{c.name}</td>
                <td>{c.region}</td>
                <td
                  class={h.reachable === false ? 'health unreachable' : 'health'}
                  data-reachable={h.reachable === null ? 'unknown' : String(h.reachable)}
                  title={`${h.message}; checked ${when(doctor.checkedAt)}`}
                >
                  {h.reachable === null ? '…' : h.reachable ? 'yes' : 'no'}
                  <div class="id">{h.reachable === false ? h.message : `checked ${when(doctor.checkedAt)}`}</div>
                </td>
                <td data-kubernetes>{h.version}</td>
                <td>
                  <meter min={0} max={Math.max(c.capacity, 1)} value={c.tenants} aria-label={`${c.name} load`} />{' '}
                  {c.tenants} / {c.capacity}
                </td>
                <td>{c.plans.length ? c.plans.join(', ') : 'all'}</td>
                <td>
                  {Object.entries(c.labels)
                    .map(([k, v]) => `${k}=${v}`)
                    .join(', ') || '—'}
                </td>
                <td data-state>
                  {c.cordoned
                    ? 'cordoned'
                    : h.reachable === false
                      ? 'accepting, but the probe fails: tenants placed here wait'
                      : 'accepting'}
                </td>
                <td>
                  {pending === c.name ? (
                    <>
                      <button type="button" class="danger" onClick={() => void act(c)}>
                        Confirm {c.cordoned ? 'uncordon' : 'cordon'}
                      </button>{' '}
                      <button type="button" onClick={() => setPending(null)}>
                        Cancel
                      </button>
                    </>
                  ) : (
                    <button type="button" onClick={() => setPending(c.name)}>
                      {c.cordoned ? 'Uncordon…' : 'Cordon…'}
                    </button>
                  )}
                </td>
              </tr>
            );
          })}
          {clusters?.length === 0 && (
            <tr>
              <td colSpan={9}>No root cluster registered yet (`provisioner clusters add`).</td>
            </tr>
          )}
        </tbody>
      </table>
      <h2>Regions</h2>
      <ul class="regions">
        {regions.map((r) => (
          <li key={r.name}>
            {r.name}: {r.accepting ? 'accepting new tenants' : 'full or cordoned'}
          </li>
        ))}
      </ul>
    </section>
  );
}

/** The runtime version catalog, availability, and the upgrade paths as a graph. */
export function VersionsPage({ operator }: { operator: boolean }) {
  const [versions, setVersions] = useState<RuntimeVersionInfo[]>([]);
  const [paths, setPaths] = useState<PathInfo[]>([]);
  const [counts, setCounts] = useState<TenantSummary['runtimeVersions'] | undefined>(undefined);
  const [error, setError] = useState<ApiError | null>(null);
  const load = () => {
    void client.call('GET /v1/tenants/summary').then(
      (r) => setCounts(r.runtimeVersions),
      () => {},
    );
    client.call('GET /v1/runtime-versions').then(
      (r) => setVersions(r.items),
      (e: unknown) => setError(e as ApiError),
    );
    void client.call('GET /v1/runtime-versions/paths').then((r) => setPaths(r.items));
  };
  useEffect(load, []);
  const setAvailability = async (version: string, availability: Availability) => {
    setError(null);
    try {
      await client.call('PUT /v1/runtime-versions/:version/availability', {
        params: { version },
        body: { availability },
      });
      load();
    } catch (e) {
      setError(e as ApiError);
    }
  };
  return (
    <section aria-labelledby="versions-title">
      <h1 id="versions-title">Runtime versions</h1>
      <ErrorBox error={error} />
      <table class="versions">
        <thead>
          <tr>
            <th scope="col">Version</th>
            <th scope="col">Released</th>
            <th scope="col">Channel</th>
            <th scope="col">Availability</th>
            <th scope="col">Tenants (running)</th>
            <th scope="col">Upgrade from</th>
            <th scope="col">Components</th>
          </tr>
        </thead>
        <tbody>
          {versions.map((v) => (
            <tr key={v.version}>
              <td>
                {v.version}
                {v.default ? ' (default)' : ''}
              </td>
              <td class="nowrap">{v.releaseDate}</td>
              <td>{v.channel}</td>
              <td>
                {operator ? (
                  <select
                    aria-label={`Availability of ${v.version}`}
                    value={v.availability}
                    onChange={(e) => void setAvailability(v.version, e.currentTarget.value as Availability)}
                  >
                    <option value="available">available</option>
                    <option value="deprecated">deprecated</option>
                    <option value="withdrawn">withdrawn</option>
                  </select>
                ) : (
                  v.availability
                )}
              </td>
              <td data-version-tenants={v.version}>
                {(() => {
                  const n = counts?.find((x) => x.version === v.version);
                  return counts ? `${n?.tenants ?? 0} (${n?.running ?? 0})` : '…';
                })()}
              </td>
              <td>{v.upgrade.minFrom ? `${v.upgrade.minFrom} or newer` : 'any'}</td>
              <td class="components">
                {Object.entries(v.components)
                  .map(([k, c]) => `${words(k)}${CHART_PINNED.has(k) ? ' chart' : ''} ${c}`)
                  .join(', ')}
              </td>
            </tr>
          ))}
        </tbody>
      </table>
      <h2>Upgrade paths</h2>
      <PathGraph versions={versions.map((v) => v.version)} paths={paths} />
    </section>
  );
}

/** Versions left to right; an arc above for each direct upgrade, below (dashed) for each direct rollback. */
function PathGraph({ versions, paths }: { versions: string[]; paths: PathInfo[] }) {
  if (versions.length === 0) return null;
  const gap = 120;
  const width = gap * (versions.length - 1) + 120;
  const mid = 130;
  const x = (v: string) => 60 + gap * versions.indexOf(v);
  const edges = paths.filter((p) => p.allowed && versions.includes(p.from) && versions.includes(p.to));
  return (
    <figure>
      <svg
        class="graph"
        viewBox={`0 0 ${width} 260`}
        width={width}
        height={260}
        role="img"
        aria-labelledby="graph-title"
      >
        <title id="graph-title">
          Direct upgrades (arcs above) and rollbacks (dashed arcs below) between runtime versions
        </title>
        <defs>
          <marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="6" markerHeight="6" orient="auto">
            <path d="M0,0 L10,5 L0,10 z" class="arrow" />
          </marker>
        </defs>
        {edges.map((e) => {
          const a = x(e.from);
          const b = x(e.to);
          const up = b > a;
          const h = Math.min(110, 18 + Math.abs(b - a) / 4);
          const y = up ? mid - 14 : mid + 14;
          return (
            <path
              key={`${e.from}-${e.to}`}
              class={up ? 'edge' : 'edge rollback'}
              d={`M${a},${y} Q${(a + b) / 2},${up ? y - h : y + h} ${b},${y}`}
              marker-end="url(#arrow)"
            >
              <title>{`${e.from} → ${e.to}${up ? '' : ' (rollback)'}`}</title>
            </path>
          );
        })}
        {versions.map((v) => (
          <g key={v}>
            <circle cx={x(v)} cy={mid} r={14} class="node" />
            <text x={x(v)} y={mid + 36} text-anchor="middle">
              {v}
            </text>
          </g>
        ))}
      </svg>
      <figcaption>
        <ul class="legend" aria-label="Legend">
          <li>
            <svg width="28" height="16" aria-hidden="true" class="legend-mark">
              <circle cx="14" cy="8" r="6" class="node" />
            </svg>
            a runtime version (oldest on the left)
          </li>
          <li>
            <svg width="40" height="16" aria-hidden="true" class="legend-mark">
              <path d="M2,12 Q20,0 36,12" class="edge" marker-end="url(#arrow)" />
            </svg>
            arc above, solid: a direct upgrade, in the arrow's direction
          </li>
          <li>
            <svg width="40" height="16" aria-hidden="true" class="legend-mark">
              <path d="M36,4 Q20,16 4,4" class="edge rollback" marker-end="url(#arrow)" />
            </svg>
            arc below, dashed: a direct rollback
          </li>
        </ul>
        {plural(edges.filter((e) => x(e.to) > x(e.from)).length, 'direct upgrade')},{' '}
        {plural(edges.filter((e) => x(e.to) < x(e.from)).length, 'direct rollback')}. No arc between two versions: no
        direct step; a step the catalog refuses is reached through the path shown on a tenant's page.
      </figcaption>
    </figure>
  );
}
