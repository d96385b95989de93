/**
 * Fleet upgrades (operators): the list, and one fleet upgrade with its waves, every tenant's state
 * and last gate result, the steps waiting on their gate (which checks, since when, the time left,
 * what happens then and what the operator can do: wait, skip the checks of the runtime's agents
 * for that step, abort), pause/resume/abort; on a tenant's page, the fleet upgrade it is part of.
 * Live through the tenant change stream: a fleet upgrade moves tenants, so the page reloads it (at
 * most once a second) when a tenant changes; after a skip, until the driver has judged that step.
 */
import { useEffect, useRef, useState } from 'preact/hooks';
import { SKIPPABLE_GATE_CHECKS, type SkippableGateCheck } from '../../provisioner/store/states.ts';
import { ApiError, client, type FleetUpgrade, type FleetUpgradeTenant } from './api.ts';
import { openStream, type StreamStatus } from './sse.ts';
import { Banner, duration, ErrorBox, Time, words } from './util.tsx';

type GateWait = NonNullable<FleetUpgradeTenant['gateWait']>;

/** Who did it: the API key's name and role ("ops-alice (operator key)"), never its bare id. */
export function byKey(key: FleetUpgrade['createdByKey'], actor: string): string {
  if (key) return `${key.name || 'an unnamed key'} (${key.role} key)`;
  return actor === 'system' ? 'the system' : 'a key no longer known';
}

/** The clock, ticking every `ms`: times left count down between reloads. */
function useNow(ms: number): number {
  const [now, setNow] = useState(Date.now());
  useEffect(() => {
    const timer = window.setInterval(() => setNow(Date.now()), ms);
    return () => clearInterval(timer);
  }, [ms]);
  return now;
}

/** Why a check does not pass, and where to look: the tenant's page or the step's operation log. */
const LOOK_AT: Record<string, { why: string; where: 'tenant' | 'operation' }> = {
  tunnel: { why: "its runtime's tunnel client has not connected since the step started", where: 'tenant' },
  applications: {
    why: 'its event reporter has not reported since the step finished, or fewer Applications are Healthy and Synced than before',
    where: 'tenant',
  },
  operation: { why: "the step's operation has not finished", where: 'operation' },
  observedGeneration: { why: "the step's operation has not finished", where: 'operation' },
  version: { why: 'the new version is not running yet', where: 'operation' },
  ready: { why: 'the tenant is not Ready', where: 'tenant' },
};

/**
 * One step waiting on its gate: the checks it waits on (and where to look), since when, the time
 * left (counting down from the answer's `secondsLeft`, on this page's clock) and what happens then.
 */
function GateWaitDetail({
  tenantId,
  wait,
  operationId,
  loadedAt,
  now,
}: {
  tenantId: string;
  wait: GateWait;
  operationId: string | null;
  loadedAt: number;
  now: number;
}) {
  const left = Math.max(0, wait.secondsLeft - Math.floor((now - loadedAt) / 1000));
  return (
    <div class="gate-wait" data-gate-wait={tenantId}>
      <p>
        <strong>Waiting on:</strong>{' '}
        {wait.waitingOn.length === 0 ? (
          "the driver's next judgment (in its next round)"
        ) : (
          <span data-waiting-on={wait.waitingOn.map((c) => c.name).join(' ')}>
            {wait.waitingOn.map((c, i) => (
              <span key={c.name}>
                {i > 0 ? '; ' : ''}
                <span class="check-name">{words(c.name)}</span> ({c.detail})
              </span>
            ))}
          </span>
        )}
      </p>
      <p>
        Since <Time iso={wait.since} /> (<Time iso={wait.since} ago now={now} />
        ); <strong data-seconds-left={left}>{left > 0 ? `${duration(left)} left` : 'timed out'}</strong> before the gate
        times out at <Time iso={wait.timeoutAt} />. Then {wait.onTimeout}.
      </p>
      {wait.waitingOn.length > 0 && (
        <ul class="look-at">
          {[...new Map(wait.waitingOn.map((c) => [c.name, LOOK_AT[c.name]])).entries()].map(([name, look]) => {
            const log = look?.where === 'operation' && operationId !== null;
            return (
              <li key={name}>
                {look?.why ?? `${words(name)} does not pass`}:{' '}
                <a href={log ? `#/tenants/${tenantId}/operations/${operationId}` : `#/tenants/${tenantId}`}>
                  {log ? 'follow the operation log' : "see the tenant's page"}
                </a>
              </li>
            );
          })}
        </ul>
      )}
    </div>
  );
}

const SKIPPABLE: readonly string[] = SKIPPABLE_GATE_CHECKS;
const isSkippable = (name: string): name is SkippableGateCheck => SKIPPABLE.includes(name);

/** The skips of a tenant's gate checks, in words: which checks, of which step, by whom, why. */
function skippedText(t: FleetUpgradeTenant): string {
  return t.gateSkipped
    .map(
      (s) =>
        `${s.checks.map(words).join(' and ')} of ${s.step.from} → ${s.step.to} skipped by ${byKey(s.byKey, s.by)}: ${s.reason}`,
    )
    .join('; ');
}

/**
 * "Skip gate…": a button that opens a small form (the checks, the reason, confirm or cancel) and
 * skips those checks of the tenant's step through the API. Focus goes to the reason when it opens
 * and back to the button when it is cancelled (or Escape); `onSkipped` gets the API's answer.
 */
function SkipGate({
  fleetId,
  tenant,
  checks,
  onSkipped,
}: {
  fleetId: string;
  tenant: FleetUpgradeTenant;
  checks: { name: SkippableGateCheck; detail: string }[];
  onSkipped: (answer: FleetUpgrade) => void;
}) {
  const [open, setOpen] = useState(false);
  const [chosen, setChosen] = useState<SkippableGateCheck[]>(checks.map((c) => c.name));
  const [reason, setReason] = useState('');
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<ApiError | null>(null);
  const opener = useRef<HTMLButtonElement>(null);
  const reasonInput = useRef<HTMLInputElement>(null);
  const returnFocus = useRef(false);
  useEffect(() => {
    if (open) reasonInput.current?.focus();
    else if (returnFocus.current) opener.current?.focus();
    returnFocus.current = false;
  }, [open]);
  const cancel = () => {
    returnFocus.current = true;
    setOpen(false);
    setError(null);
  };
  const submit = async (e: Event) => {
    e.preventDefault();
    setBusy(true);
    setError(null);
    try {
      const answer = await client.call('POST /v1/fleet-upgrades/:id/tenants/:tenantId/skip-gate', {
        params: { id: fleetId, tenantId: tenant.tenantId },
        body: { checks: chosen, reason: reason.trim() },
      });
      setOpen(false);
      setReason('');
      onSkipped(answer);
    } catch (err) {
      setError(err as ApiError);
    } finally {
      setBusy(false);
    }
  };
  if (!open)
    return (
      <button
        type="button"
        ref={opener}
        aria-label={`Skip gate of ${tenant.organization}…`}
        onClick={() => (setChosen(checks.map((c) => c.name)), setOpen(true))}
      >
        Skip gate…
      </button>
    );
  const title = `skip-gate-title-${tenant.tenantId}`;
  return (
    <form
      class="actions skip-gate"
      aria-labelledby={title}
      data-skip-gate={tenant.tenantId}
      onSubmit={(e) => void submit(e)}
      onKeyDown={(e) => e.key === 'Escape' && cancel()}
    >
      <p id={title}>
        <strong>
          Skip the gate of {tenant.organization}'s {tenant.gateWait?.step ?? 'step'}{' '}
          {tenant.step ? `${tenant.step.from} → ${tenant.step.to}` : ''}
        </strong>
        : the checks chosen count as passed for this step only (its other checks are still judged, its later steps in
        full). Recorded with your key and the reason.
      </p>
      <fieldset>
        <legend>Checks to skip</legend>
        {checks.map((c) => (
          <label key={c.name}>
            <input
              type="checkbox"
              name="skip-check"
              value={c.name}
              checked={chosen.includes(c.name)}
              onChange={(e) =>
                setChosen(e.currentTarget.checked ? [...chosen, c.name] : chosen.filter((x) => x !== c.name))
              }
            />{' '}
            {words(c.name)} ({c.detail})
          </label>
        ))}
      </fieldset>
      <label>
        Reason (audited)
        <input
          ref={reasonInput}
          name="skip-reason"
          size={60}
          required
          maxLength={500}
          autoComplete="off"
          value={reason}
          onInput={(e) => setReason(e.currentTarget.value)}
        />
      </label>
      <ErrorBox error={error} />
      <div class="confirm">
        <button type="submit" class="danger" disabled={busy || reason.trim() === '' || chosen.length === 0}>
          Skip gate
        </button>
        <button type="button" onClick={cancel}>
          Cancel
        </button>
      </div>
    </form>
  );
}

/** What the operator can do about one step waiting on its gate: wait (the time left), skip its agents' checks, abort. */
function GateActions({
  f,
  t,
  left,
  onSkipped,
}: {
  f: FleetUpgrade;
  t: FleetUpgradeTenant;
  left: number;
  onSkipped: (answer: FleetUpgrade) => void;
}) {
  const wait = t.gateWait!;
  const skippable = wait.waitingOn.flatMap((c) => (isSkippable(c.name) ? [{ ...c, name: c.name }] : []));
  const others = wait.waitingOn.filter((c) => !SKIPPABLE.includes(c.name)).map((c) => words(c.name));
  return (
    <ul class="gate-actions" data-gate-actions={t.tenantId} aria-label={`What you can do about ${t.organization}`}>
      <li>
        <strong>Wait</strong>:{' '}
        {left > 0
          ? `${duration(left)} left before the gate times out; it passes as soon as its checks do (fix what it waits on, above).`
          : "the gate timed out: the driver's next round fails it."}
      </li>
      <li>
        <strong>Skip gate</strong>:{' '}
        {skippable.length > 0 ? (
          <>
            count {skippable.map((c) => words(c.name)).join(' and ')} as passed for this step only (audited)
            {others.length > 0 ? `; it still waits on ${others.join(', ')}` : ''}.{' '}
            <SkipGate fleetId={f.id} tenant={t} checks={skippable} onSkipped={onSkipped} />
          </>
        ) : others.length > 0 ? (
          `not for ${others.join(', ')}: they say whether the step's change was applied (only ${SKIPPABLE_GATE_CHECKS.map(words).join(' and ')} can be skipped).`
        ) : (
          "nothing to skip before the driver's next judgment."
        )}
      </li>
      <li>
        <strong>Abort</strong>
        {f.state === 'aborting'
          ? ': under way already.'
          : ' (the Abort… button above): the whole fleet upgrade stops, tenants not started are cancelled; with "roll the moved tenants back", the upgraded tenants go back.'}
      </li>
    </ul>
  );
}

/** Reloads `load` when a tenant changes (at most once a second); returns the stream's status. */
function useLiveReload(load: () => void): StreamStatus {
  const [status, setStatus] = useState<StreamStatus>('connecting');
  const latest = useRef(load);
  latest.current = load;
  useEffect(() => {
    let timer: number | undefined;
    const s = openStream('GET /v1/tenants/events', {
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
    .map(([k, n]) => `${n} ${words(k)}`)
    .join(', ') || '—';

export function FleetUpgradesPage() {
  const [items, setItems] = useState<FleetUpgrade[] | null>(null);
  const [error, setError] = useState<ApiError | null>(null);
  const load = () => {
    client.call('GET /v1/fleet-upgrades', { query: { limit: 50 } }).then(
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
              <td>
                <Time iso={f.createdAt} ago />
              </td>
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
  const [loadedAt, setLoadedAt] = useState(Date.now());
  /** The last skip of a gate, said (and focused) until the page leaves. */
  const [notice, setNotice] = useState<string | null>(null);
  /** The tenant whose gate was skipped: the page reloads until the driver has judged its step. */
  const [following, setFollowing] = useState<string | null>(null);
  const noticeRef = useRef<HTMLParagraphElement>(null);
  const latest = useRef<FleetUpgrade | null>(null);
  latest.current = f;
  const now = useNow(15_000);
  const load = () => {
    client.call('GET /v1/fleet-upgrades/:id', { params: { id } }).then(
      (answer) => (setF(answer), setLoadedAt(Date.now())),
      (e: unknown) => setError(e as ApiError),
    );
  };
  useEffect(load, [id]);
  const stream = useLiveReload(load);
  useEffect(() => {
    if (notice) noticeRef.current?.focus();
  }, [notice]);
  useEffect(() => {
    // A step's judgment changes no tenant (no event on the tenant stream): read again every
    // second until the step no longer waits, for at most a minute.
    if (!following) return;
    let rounds = 0;
    const timer = window.setInterval(() => {
      const t = latest.current?.tenants?.find((x) => x.tenantId === following);
      if (++rounds > 60 || (t && t.gateWait === null)) {
        clearInterval(timer);
        setFollowing(null);
        return;
      }
      load();
    }, 1000);
    return () => clearInterval(timer);
  }, [following]);
  const skipped = (answer: FleetUpgrade) => {
    const t = answer.tenants?.[0];
    const last = t?.gateSkipped.at(-1);
    if (!t || !last) return;
    setNotice(
      `Skipped ${last.checks.map(words).join(' and ')} for ${t.organization}'s ${last.step.kind} ${last.step.from} → ${last.step.to}: ` +
        (t.gateWait && t.gateWait.waitingOn.length > 0
          ? `its gate still waits on ${t.gateWait.waitingOn.map((c) => words(c.name)).join(', ')}.`
          : 'the driver moves it on at its next round if its other checks pass.'),
    );
    setFollowing(t.tenantId);
    load();
  };
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
        action === 'abort'
          ? await client.call('POST /v1/fleet-upgrades/:id/abort', { params: { id }, body: { rollback } })
          : await client.call(`POST /v1/fleet-upgrades/:id/${action}`, { params: { id } }),
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
  const waits = (f.tenants ?? [])
    .filter((t) => t.gateWait !== null)
    .sort((a, b) => a.gateWait!.timeoutAt.localeCompare(b.gateWait!.timeoutAt));
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
        {f.stateReason ? `${f.stateReason}. ` : ''}Started <Time iso={f.createdAt} /> by{' '}
        <span data-created-by title={`API key ${f.createdBy}`}>
          {byKey(f.createdByKey, f.createdBy)}
        </span>
        ; {countsText(f.counts)}
        {f.etaSeconds != null ? `; about ${Math.ceil(f.etaSeconds / 60)} min left` : ''}.
      </p>
      {f.windowsOverride && (
        <p data-windows-override>
          Maintenance windows overridden by {byKey(f.windowsOverride.byKey, f.windowsOverride.by)}{' '}
          <Time iso={f.windowsOverride.at} />: {f.windowsOverride.reason}
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
      {notice && (
        <p class="card" role="status" tabIndex={-1} ref={noticeRef} data-skip-notice>
          {notice}
        </p>
      )}
      {waits.length > 0 && (
        <div class="card blocked" role="region" aria-labelledby="gate-waits-title">
          <h2 id="gate-waits-title">
            Waiting on the health gate: {waits.length} tenant{waits.length === 1 ? '' : 's'}
          </h2>
          {waits.slice(0, 20).map((t) => (
            <div key={t.tenantId} class="gate-wait-tenant">
              <h3>
                <a href={`#/tenants/${t.tenantId}`}>{t.organization}</a>: {t.gateWait!.step}{' '}
                {t.step ? `${t.step.from} → ${t.step.to}` : ''}
              </h3>
              <GateWaitDetail
                tenantId={t.tenantId}
                wait={t.gateWait!}
                operationId={t.step?.operationId ?? null}
                loadedAt={loadedAt}
                now={now}
              />
              <p>
                <strong>What you can do:</strong>
              </p>
              <GateActions
                f={f}
                t={t}
                left={Math.max(0, t.gateWait!.secondsLeft - Math.floor((now - loadedAt) / 1000))}
                onSkipped={skipped}
              />
            </div>
          ))}
          {waits.length > 20 && (
            <p class="hint">
              The 20 with the soonest timeout of {waits.length} shown (<code>provisioner fleet skip-gate</code> skips
              the others' checks).
            </p>
          )}
          {f.state === 'running' && (
            <p class="hint" data-fleet-action="pause">
              Or <strong>pause</strong> the fleet upgrade (the Pause… button above): nothing new starts; the steps under
              way are still judged.
            </p>
          )}
          {(f.state === 'paused' || f.state === 'halted') && (
            <p class="hint" data-fleet-action="resume">
              Or <strong>resume</strong> the fleet upgrade (the Resume… button above): it goes on.
            </p>
          )}
        </div>
      )}
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
              <td>
                <Time iso={w.startedAt} />
              </td>
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
                {t.gateWait
                  ? `waiting on ${
                      t.gateWait.waitingOn.map((c) => `${words(c.name)} (${c.detail})`).join('; ') ||
                      "the driver's next judgment"
                    }; ${duration(Math.max(0, t.gateWait.secondsLeft - Math.floor((now - loadedAt) / 1000)))} left`
                  : t.gate
                    ? `${t.gate.passed ? 'passed' : 'failed'}: ${t.gate.checks
                        .map(
                          (c) =>
                            `${words(c.name)} ${c.skipped ? 'skipped' : c.ok ? 'ok' : 'failed'}${c.detail ? ` (${c.detail})` : ''}`,
                        )
                        .join('; ')}`
                    : '—'}
                {t.gateSkipped.length > 0 && (
                  <div
                    class="gate-skipped"
                    data-gate-skipped={[...new Set(t.gateSkipped.flatMap((x) => x.checks))].join(' ')}
                  >
                    <strong>Gate skipped:</strong> {skippedText(t)}
                  </div>
                )}
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

/**
 * On a tenant's page (operators): the fleet upgrades it is part of, each linked, with its state,
 * the tenant's own state and path in it, and its step's gate wait while it has one.
 */
export function TenantFleetUpgrades({ tenantId, version }: { tenantId: string; version: string | null }) {
  const [items, setItems] = useState<FleetUpgrade[] | null>(null);
  const [error, setError] = useState<ApiError | null>(null);
  const [loadedAt, setLoadedAt] = useState(Date.now());
  const now = useNow(15_000);
  useEffect(() => {
    setItems(null);
    client.call('GET /v1/fleet-upgrades', { query: { tenantId, limit: 5 } }).then(
      (r) => (setItems(r.items), setLoadedAt(Date.now()), setError(null)),
      (e: unknown) => setError(e as ApiError),
    );
    // The tenant's version moves with each hop: read again then.
  }, [tenantId, version]);
  if (!error && (!items || items.length === 0)) return null;
  return (
    <div class="card" role="region" aria-labelledby="tenant-fleet-title" data-tenant-fleet-upgrades>
      <h2 id="tenant-fleet-title">Fleet upgrade</h2>
      <ErrorBox error={error} />
      {items?.map((f) => {
        const t = f.tenants?.[0];
        return (
          <div key={f.id} data-fleet-upgrade={f.id}>
            <p>
              Part of the <a href={`#/fleet-upgrades/${f.id}`}>fleet upgrade to {f.targetVersion}</a> ({f.state}
              {f.stateReason ? `: ${f.stateReason}` : ''}), started <Time iso={f.createdAt} /> by{' '}
              {byKey(f.createdByKey, f.createdBy)}.
            </p>
            {t && (
              <p data-fleet-tenant-state={t.state}>
                This tenant: {words(t.state)}
                {t.wave !== null ? ` in ${f.waves[t.wave]?.name ?? `wave ${t.wave}`}` : ''}, path{' '}
                {[t.fromVersion, ...t.path].join(' → ')}
                {t.reason ? `: ${t.reason}` : ''}.
              </p>
            )}
            {t && t.gateSkipped.length > 0 && (
              <p data-gate-skipped={[...new Set(t.gateSkipped.flatMap((x) => x.checks))].join(' ')}>
                Gate skipped: {skippedText(t)}.
              </p>
            )}
            {t?.gateWait && (
              <GateWaitDetail
                tenantId={tenantId}
                wait={t.gateWait}
                operationId={t.step?.operationId ?? null}
                loadedAt={loadedAt}
                now={now}
              />
            )}
          </div>
        );
      })}
    </div>
  );
}
