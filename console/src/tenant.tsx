import { useEffect, useState } from 'preact/hooks';
import {
  client,
  ApiError,
  type Identity,
  type Operation,
  type PathInfo,
  type RuntimeVersionInfo,
  type Tenant,
} from './api.ts';
import { Applications } from './applications.tsx';
import { Products } from './products.tsx';
import { LogView } from './log-view.tsx';
import { TenantFleetUpgrades } from './fleet-upgrades.tsx';
import { TenantRuntimes } from './runtimes.tsx';
import { openStream, type StreamStatus } from './sse.ts';
import { Banner, ErrorBox, notConnectedOf, PhaseBadge, sleepStateOf, Time, when, words } from './util.tsx';

type Action = 'upgrade' | 'suspend' | 'resume' | 'sleep' | 'wake' | 'retry' | 'delete';

/** The IANA zones the browser knows, offered as the time zone's suggestions (the API checks the name). */
const timeZones: readonly string[] = Intl.supportedValuesOf?.('timeZone') ?? [];
/** The browser's own zone: the time zone field's placeholder while the tenant has none. */
const browserZone = Intl.DateTimeFormat().resolvedOptions().timeZone || 'Europe/Berlin';

/**
 * The tenant's idle sleep in words (status.sleep, docs/operations.md "Sleep"): asleep since when,
 * going to sleep, waking up, or awake with its last activity.
 */
function SleepFact({ tenant: t }: { tenant: Tenant }) {
  const state = sleepStateOf(t);
  const s = t.status.sleep;
  const last = s && (
    <>
      last activity <Time iso={s.lastActivityAt} ago />
    </>
  );
  if (state === 'asleep')
    return (
      <>
        asleep
        {s?.since && (
          <>
            {' '}
            since <Time iso={s.since} /> (<Time iso={s.since} ago />)
          </>
        )}
        ; the next request to its runtime wakes it{last && <>; {last}</>}
      </>
    );
  if (state === 'falling-asleep')
    return (
      <>
        going to sleep
        {s?.since && (
          <>
            , asked <Time iso={s.since} ago />
          </>
        )}
        ; the next request to its runtime wakes it
      </>
    );
  if (state === 'waking') return <>waking up: its runtime and virtual cluster start again</>;
  return <>awake{last && <>, {last}</>}</>;
}

export function TenantPage({ me, id, operationId }: { me: Identity; id: string; operationId?: string | undefined }) {
  const [tenant, setTenant] = useState<Tenant | null>(null);
  const [loadError, setLoadError] = useState<ApiError | null>(null);
  const [operations, setOperations] = useState<Operation[]>([]);
  const [versions, setVersions] = useState<RuntimeVersionInfo[]>([]);
  const [paths, setPaths] = useState<PathInfo[]>([]);
  const [stream, setStream] = useState<StreamStatus>('connecting');
  const operator = me.role === 'operator' || me.role === 'admin';

  const loadOperations = () =>
    client.call('GET /v1/tenants/:id/operations', { params: { id }, query: { limit: 50 } }).then(
      (r) => setOperations(r.items),
      () => {},
    );

  useEffect(() => {
    setTenant(null);
    setLoadError(null);
    client.call('GET /v1/tenants/:id', { params: { id } }).then(setTenant, (e: unknown) => setLoadError(e as ApiError));
    void loadOperations();
    void client.call('GET /v1/runtime-versions').then((r) => setVersions(r.items));
    void client.call('GET /v1/runtime-versions/paths').then((r) => setPaths(r.items));
    let lastOp: string | null | undefined;
    const s = openStream('GET /v1/tenants/events', {
      query: { id },
      onStatus: (st) => setStream(st),
      onEvents: (events) => {
        for (const e of events)
          if (e.event === 'tenant') {
            const t = e.data;
            setTenant(t);
            if (t.status.lastOperationId !== lastOp) {
              lastOp = t.status.lastOperationId;
              void loadOperations();
            }
          }
      },
    });
    return () => s.close();
  }, [id]);

  if (loadError)
    return (
      <section>
        <h1>Tenant</h1>
        <ErrorBox error={loadError} />
        <p>
          <a href="#/tenants">Back to the tenants</a>
        </p>
      </section>
    );
  if (!tenant) return <p aria-busy="true">Loading…</p>;
  const t = tenant;
  const history = operations.filter(
    (o) => o.toVersion && (o.kind === 'create' || o.kind === 'upgrade' || o.kind === 'update'),
  );
  const shownOp = operationId ?? operations[0]?.id;

  return (
    <section aria-labelledby="tenant-title">
      <h1 id="tenant-title">
        {t.organization} <PhaseBadge phase={t.status.phase} notConnected={notConnectedOf(t.status.conditions)} />
        {t.status.stale && <span class="stale-tag">stale</span>}
      </h1>
      <Banner status={stream} />
      <div class="grid">
        <div class="card">
          <h2>Spec and status</h2>
          <dl class="facts">
            <dt>Id</dt>
            <dd>{t.id}</dd>
            <dt>Email</dt>
            <dd>{t.email}</dd>
            <dt>Plan</dt>
            <dd>{t.spec.plan}</dd>
            <dt>Region</dt>
            <dd>{t.spec.region ?? 'any'}</dd>
            <dt>Time zone</dt>
            <dd data-time-zone={t.timeZone ?? ''}>{t.timeZone ?? 'not set'}</dd>
            <dt>Runtime version</dt>
            <dd>
              {t.status.runtimeVersion ?? '—'} (wanted {t.spec.runtimeVersion}
              {t.status.previousRuntimeVersion ? `, previous ${t.status.previousRuntimeVersion}` : ''})
            </dd>
            <dt>Generation</dt>
            <dd>
              {t.generation} (observed {t.status.observedGeneration})
            </dd>
            <dt>Cluster</dt>
            <dd>{t.status.cluster ?? '—'}</dd>
            <dt>Tunnel</dt>
            <dd>{t.status.tunnel?.connected ? `connected since ${when(t.status.tunnel.since)}` : 'not connected'}</dd>
            <dt>Suspended</dt>
            <dd>
              {t.spec.suspended
                ? `yes, by ${t.status.suspension?.by ?? '?'}${t.status.suspension?.reason ? `: ${t.status.suspension.reason}` : ''}`
                : 'no'}
            </dd>
            <dt>Sleep</dt>
            <dd data-sleep={sleepStateOf(t)}>
              <SleepFact tenant={t} />
            </dd>
            <dt>Created</dt>
            <dd>
              <Time iso={t.createdAt} /> (<Time iso={t.createdAt} ago />)
            </dd>
            <dt>Status observed</dt>
            <dd class={t.status.stale ? 'stale' : ''}>
              <Time iso={t.status.observedAt ?? null} />
              {t.status.stale ? ' — stale: older than two resync periods' : ''}
            </dd>
            {Object.entries(t.status.endpoints).map(([k, v]) => [
              <dt key={`k${k}`} title={k}>
                {words(k)}
              </dt>,
              <dd key={`v${k}`}>{v}</dd>,
            ])}
          </dl>
        </div>
        <Actions me={me} tenant={t} versions={versions} paths={paths} onDone={() => void loadOperations()} />
      </div>
      <div class="card">
        <h2>Conditions</h2>
        <table>
          <thead>
            <tr>
              <th scope="col">Type</th>
              <th scope="col">Status</th>
              <th scope="col">Reason</th>
              <th scope="col">Message</th>
              <th scope="col">Since</th>
            </tr>
          </thead>
          <tbody>
            {t.status.conditions.map((c) => (
              <tr key={c.type} data-condition={c.type}>
                <td title={c.type}>{words(c.type)}</td>
                <td>{c.status}</td>
                <td>{c.reason}</td>
                <td>{c.message}</td>
                <td>
                  <Time iso={c.lastTransitionTime} ago />
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      {operator && <TenantFleetUpgrades tenantId={t.id} version={t.status.runtimeVersion} />}
      <TenantRuntimes tenantId={t.id} deleted={t.spec.deleted} />
      <Applications tenant={t} />
      {t.status.reporting !== undefined && <Products tenantId={t.id} />}
      <div class="card">
        <h2>Version history</h2>
        {history.length === 0 ? (
          <p>No version change yet.</p>
        ) : (
          <ol class="history">
            {history.map((o) => (
              <li key={o.id}>
                {o.fromVersion ?? 'new'} → {o.toVersion} · {o.kind} · {o.state} · <Time iso={o.createdAt} />
              </li>
            ))}
          </ol>
        )}
      </div>
      <div class="card">
        <h2>Operations</h2>
        <table class="operations">
          <thead>
            <tr>
              <th scope="col">Kind</th>
              <th scope="col">State</th>
              <th scope="col">Versions</th>
              <th scope="col">Created</th>
              <th scope="col">Error</th>
            </tr>
          </thead>
          <tbody>
            {operations.map((o) => (
              <tr key={o.id} class={o.id === shownOp ? 'selected' : ''}>
                <td>
                  <a href={`#/tenants/${t.id}/operations/${o.id}`} aria-current={o.id === shownOp ? 'true' : undefined}>
                    {o.kind}
                  </a>
                </td>
                <td>{o.state}</td>
                <td>{o.toVersion ? `${o.fromVersion ?? '—'} → ${o.toVersion}` : '—'}</td>
                <td>
                  <Time iso={o.createdAt} ago />
                </td>
                <td>{o.error ? `${o.error.code}: ${o.error.message}` : ''}</td>
              </tr>
            ))}
          </tbody>
        </table>
        {shownOp && (
          <LogView
            key={shownOp}
            operationId={shownOp}
            onState={(state) => {
              // The row follows the log: its state at once, its end (finished, error) from the API.
              setOperations((ops) => ops.map((o) => (o.id === shownOp && o.state !== state ? { ...o, state } : o)));
              if (state !== 'queued' && state !== 'running') void loadOperations();
            }}
          />
        )}
      </div>
      {operator && <p class="hint">Operator view: every action is audited with your key.</p>}
    </section>
  );
}

function Actions({
  me,
  tenant,
  versions,
  paths,
  onDone,
}: {
  me: Identity;
  tenant: Tenant;
  versions: RuntimeVersionInfo[];
  paths: PathInfo[];
  onDone: () => void;
}) {
  const [pending, setPending] = useState<Action | null>(null);
  const [target, setTarget] = useState('');
  const [reason, setReason] = useState('');
  const [typed, setTyped] = useState('');
  const [error, setError] = useState<ApiError | null>(null);
  const [done, setDone] = useState('');
  const [busy, setBusy] = useState(false);
  const [zone, setZone] = useState('');
  const operator = me.role === 'operator' || me.role === 'admin';
  const t = tenant;
  if (t.spec.deleted)
    return (
      <div class="card">
        <h2>Actions</h2>
        {done && (
          <p class="done" role="status">
            {done}
          </p>
        )}
        <p>This tenant is deleted.</p>
      </div>
    );
  const current = t.status.runtimeVersion ?? t.spec.runtimeVersion;
  // Never placed on a root cluster: nothing is installed, so no upgrade path applies (the API's rule).
  const firstInstall = t.status.runtimeVersion === null && t.status.cluster === null;
  const path = paths.find((p) => p.from === current && p.to === target);
  // A tenant key may not lift an operator's suspension: that button is not shown to it.
  const canResume = t.spec.suspended && (operator || t.status.suspension?.by !== 'operator');
  // Only a Ready, awake tenant that is not suspended sleeps (the API says why otherwise: 409
  // NOT_SLEEPABLE); one asleep, or still Sleeping with a wake asked, can be woken.
  const sleepable = t.status.phase === 'Ready' && !t.spec.suspended && !t.status.sleep?.asleep;
  const wakeable = t.status.sleep?.asleep === true || t.status.phase === 'Sleeping';
  const retryable =
    t.status.phase === 'Failed' || t.status.conditions.some((c) => c.type === 'Stalled' && c.status === 'True');
  const choices = versions.filter((v) => v.version !== current && (operator || v.availability === 'available'));

  const run = async (action: Action) => {
    setBusy(true);
    setError(null);
    let said = `${action} accepted`;
    try {
      const params = { id: t.id };
      if (action === 'upgrade')
        await client.call('POST /v1/tenants/:id/upgrade', { params, body: { version: target } });
      else if (action === 'suspend')
        await client.call('POST /v1/tenants/:id/suspend', {
          params,
          ...(operator && reason ? { body: { reason } } : {}),
        });
      else if (action === 'delete') await client.call('DELETE /v1/tenants/:id', { params });
      else if (action === 'sleep' || action === 'wake') {
        const a = await client.call(`POST /v1/tenants/:id/${action}`, { params });
        said = a.queued
          ? `${action} accepted`
          : action === 'sleep'
            ? 'already asleep: nothing queued'
            : 'not asleep, or already waking: nothing queued';
      } else await client.call(`POST /v1/tenants/:id/${action}`, { params });
      setDone(said);
      setPending(null);
      setTyped('');
      onDone();
    } catch (err) {
      setError(err as ApiError);
    } finally {
      setBusy(false);
    }
  };
  /** Sets or clears the time zone (a setting: PATCH timeZone, no operation); the page follows the tenant's stream. */
  const saveZone = async (timeZone: string | null) => {
    setBusy(true);
    setError(null);
    setPending(null);
    try {
      const a = await client.call('PATCH /v1/tenants/:id', { params: { id: t.id }, body: { timeZone } });
      setDone(a.tenant.timeZone === null ? 'time zone cleared' : `time zone set to ${a.tenant.timeZone}`);
      setZone('');
    } catch (err) {
      setError(err as ApiError);
    } finally {
      setBusy(false);
    }
  };
  const confirm = (action: Action, label: string, enabled = true, danger = true) => (
    <div class="confirm" role="group" aria-label={`Confirm ${action}`}>
      <button
        type="button"
        class={danger ? 'danger' : undefined}
        disabled={!enabled || busy}
        onClick={() => void run(action)}
      >
        {label}
      </button>
      <button type="button" onClick={() => (setPending(null), setError(null), setTyped(''))}>
        Cancel
      </button>
    </div>
  );

  return (
    <div class="card actions">
      <h2>Actions</h2>
      <div class="action">
        <label>
          Upgrade to
          <select
            value={target}
            onChange={(e) => (setTarget(e.currentTarget.value), setPending(null), setError(null))}
            name="version"
          >
            <option value="">choose a version</option>
            {choices.map((v) => (
              <option value={v.version} key={v.version}>
                {v.version}
                {v.availability !== 'available' ? ` (${v.availability})` : ''}
              </option>
            ))}
          </select>
        </label>
        {target && firstInstall && (
          <p class="path-ok" data-path={target}>
            Nothing is installed yet: {target} is installed directly, whatever the upgrade paths.
          </p>
        )}
        {target && path && !firstInstall && (
          <p class={path.allowed ? 'path-ok' : 'path-refused'} data-path={path.path.join(' ')}>
            {path.allowed
              ? `Direct: ${current} → ${target}`
              : `${path.reason ?? 'Not a direct step'}. Path to follow: ${[current, ...path.path].join(' → ')}`}
          </p>
        )}
        {pending === 'upgrade' ? (
          confirm('upgrade', firstInstall ? `Confirm install ${target}` : `Confirm upgrade ${current} → ${target}`)
        ) : (
          <button type="button" disabled={!target} onClick={() => (setPending('upgrade'), setDone(''))}>
            Upgrade…
          </button>
        )}
      </div>
      <form
        class="action"
        aria-label="Time zone"
        onSubmit={(e) => (e.preventDefault(), setDone(''), void saveZone(zone.trim()))}
      >
        <label>
          Time zone (IANA)
          <input
            name="time-zone"
            list="time-zones"
            value={zone}
            placeholder={t.timeZone ?? browserZone}
            maxLength={64}
            autoComplete="off"
            onInput={(e) => (setZone(e.currentTarget.value), setError(null))}
          />
        </label>
        <datalist id="time-zones">
          {timeZones.map((z) => (
            <option value={z} key={z} />
          ))}
        </datalist>
        <p class="hint">
          Its plan's keep-awake windows (business hours) are read in this zone; not set, in the window's own.
        </p>
        <div class="confirm">
          <button type="submit" disabled={busy || zone.trim() === ''}>
            Set time zone
          </button>
          {t.timeZone !== null && (
            <button type="button" disabled={busy} onClick={() => (setDone(''), void saveZone(null))}>
              Clear time zone
            </button>
          )}
        </div>
      </form>
      {!t.spec.suspended && (
        <div class="action">
          {pending === 'suspend' ? (
            <>
              {operator && (
                <label>
                  Reason (shown to the tenant)
                  <input value={reason} maxLength={500} onInput={(e) => setReason(e.currentTarget.value)} />
                </label>
              )}
              {confirm('suspend', 'Confirm suspend')}
            </>
          ) : (
            <button type="button" onClick={() => (setPending('suspend'), setDone(''))}>
              Suspend…
            </button>
          )}
        </div>
      )}
      {canResume && (
        <div class="action">
          {pending === 'resume' ? (
            confirm('resume', 'Confirm resume')
          ) : (
            <button type="button" onClick={() => (setPending('resume'), setDone(''))}>
              Resume…
            </button>
          )}
        </div>
      )}
      {sleepable && (
        <div class="action">
          {pending === 'sleep' ? (
            <>
              <p class="hint">
                Its runtime and virtual cluster scale to zero; its data is kept. The next request to its runtime, Wake
                or any change of its spec wakes it.
              </p>
              {confirm('sleep', 'Confirm sleep', true, false)}
            </>
          ) : (
            <button type="button" onClick={() => (setPending('sleep'), setError(null), setDone(''))}>
              Sleep…
            </button>
          )}
        </div>
      )}
      {wakeable && (
        <div class="action">
          <button type="button" disabled={busy} onClick={() => (setPending(null), setDone(''), void run('wake'))}>
            Wake
          </button>
        </div>
      )}
      {retryable && (
        <div class="action">
          {pending === 'retry' ? (
            confirm('retry', 'Confirm retry')
          ) : (
            <button type="button" onClick={() => (setPending('retry'), setDone(''))}>
              Retry…
            </button>
          )}
        </div>
      )}
      <div class="action">
        {pending === 'delete' ? (
          <>
            <label>
              Type the organization name <strong>{t.organization}</strong> to delete this tenant
              <input
                value={typed}
                name="confirm-organization"
                onInput={(e) => setTyped(e.currentTarget.value)}
                autoComplete="off"
              />
            </label>
            {confirm('delete', 'Delete this tenant', typed === t.organization)}
          </>
        ) : (
          <button type="button" class="danger" onClick={() => (setPending('delete'), setDone(''))}>
            Delete…
          </button>
        )}
      </div>
      <ErrorBox error={error} />
      {done && (
        <p class="done" role="status">
          {done}
        </p>
      )}
    </div>
  );
}
