/**
 * Capacity (operators): per plan, the tenants awake, asleep and waking with what they reserve on
 * the root clusters, when the plan's tenants sleep, the warm pool against its size (in all, and per
 * root cluster), and where the last day's signups' runtimes came from; and the last day's wakes.
 * GET /v1/capacity, as `provisioner capacity` prints it (docs/operations.md "Sleep", "Warm pool").
 *
 * Live: read again (at most once a second) when a tenant changes on the tenants' change stream,
 * and every 15 s, since warm pool entries are nobody's tenant and not on that stream.
 */
import { useEffect, useRef, useState } from 'preact/hooks';
import { client, ApiError, type Capacity, type Reservation } from './api.ts';
import { openStream, type StreamStatus } from './sse.ts';
import { Banner, duration, ErrorBox, plural } from './util.tsx';

const POLL_MS = 15_000;

/** Cores, as people read them, to the millicore: `0.545 CPU`, `2 CPU` (the title has Kubernetes' `545m`). */
export function cpu(millicores: number): string {
  return `${Number((millicores / 1000).toFixed(3))} CPU`;
}

/** Binary units: `768 MiB`, `1.8 GiB`. */
export function memory(bytes: number): string {
  const mib = bytes / 1024 ** 2;
  return mib < 1024 ? `${Math.round(mib)} MiB` : `${Number((mib / 1024).toFixed(1))} GiB`;
}

/** `0.545 CPU, 1.8 GiB`; `nothing` for no requests at all. */
export function reserves(r: Reservation): string {
  return r.cpuMillicores === 0 && r.memoryBytes === 0 ? 'nothing' : `${cpu(r.cpuMillicores)}, ${memory(r.memoryBytes)}`;
}

/** A span in the list's compact style: `45s`, `30m`, `4h`, `1h 30m`. */
export function compact(seconds: number): string {
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m`;
  const m = Math.floor((s % 3600) / 60);
  return `${Math.floor(s / 3600)}h${m ? ` ${m}m` : ''}`;
}

/** A wake's run: `0.4 s`, `12 s`, `2 min`. */
export function runTime(seconds: number): string {
  return seconds < 10 ? `${seconds.toFixed(1)} s` : duration(seconds);
}

const kubernetes = (r: Reservation) => `requests: cpu ${r.cpuMillicores}m, memory ${r.memoryBytes} bytes`;

export function CapacityPage() {
  const [capacity, setCapacity] = useState<Capacity | null>(null);
  const [error, setError] = useState<ApiError | null>(null);
  const [stream, setStream] = useState<StreamStatus>('connecting');
  const load = useRef(() => {});
  load.current = () => {
    client.call('GET /v1/capacity').then(
      (c) => (setCapacity(c), setError(null)),
      (e: unknown) => setError(e as ApiError),
    );
  };
  useEffect(() => {
    load.current();
    const poll = window.setInterval(() => load.current(), POLL_MS);
    // Tenants fall asleep, wake, sign up: read again (at most once a second) when one changes.
    let timer: number | undefined;
    const s = openStream('GET /v1/tenants/events', {
      onStatus: setStream,
      onEvents: (events) => {
        if (!events.some((e) => e.event === 'tenant')) return;
        timer ??= window.setTimeout(() => ((timer = undefined), load.current()), 1000);
      },
    });
    return () => (s.close(), clearTimeout(timer), clearInterval(poll));
  }, []);

  const w = capacity?.wakes24h;
  return (
    <section aria-labelledby="capacity-title">
      <h1 id="capacity-title">Capacity</h1>
      <Banner status={stream} />
      <ErrorBox error={error} />
      {!capacity && !error && <p aria-busy="true">Reading capacity…</p>}
      {capacity && (
        <>
          <p class="hint">
            What tenants reserve on the root clusters (their pods' requests, per the plan's budget), whether idle ones
            sleep, and the warm pool that has runtimes Ready ahead of signups. An asleep tenant runs no pod and reserves
            nothing; its data stays on its volume and the next request to its runtime wakes it. New tenants and warm
            pool entries run <span data-default-version>{capacity.defaultVersion}</span>.
          </p>
          <table class="capacity">
            <caption class="sr-only">Capacity per plan</caption>
            <thead>
              <tr>
                <th scope="col">Plan</th>
                <th scope="col">Awake</th>
                <th scope="col">Asleep</th>
                <th scope="col">Waking</th>
                <th scope="col">One tenant reserves</th>
                <th scope="col">Reserved now</th>
                <th scope="col">Sleep</th>
                <th scope="col">Warm pool</th>
                <th scope="col">Signups, last 24 h</th>
              </tr>
            </thead>
            <tbody>
              {capacity.plans.map((p) => {
                const awake = p.tenants.awake + p.tenants.waking;
                const pool = p.warmPool;
                return (
                  <tr key={p.plan} data-plan={p.plan}>
                    <th scope="row">{p.plan}</th>
                    <td data-awake>{p.tenants.awake}</td>
                    <td data-asleep>{p.tenants.asleep}</td>
                    <td data-waking>{p.tenants.waking}</td>
                    <td>
                      <span data-awake-tenant title={kubernetes(p.reservation.awakeTenant)}>
                        awake: {reserves(p.reservation.awakeTenant)}
                      </span>
                      <div class="sub" data-asleep-tenant>
                        asleep: {reserves(p.reservation.asleepTenant)}
                      </div>
                    </td>
                    <td>
                      <span data-reserved-now title={kubernetes(p.reservation.now)}>
                        {reserves(p.reservation.now)}
                      </span>
                      {awake > 0 && (
                        <div class="sub">
                          {plural(awake, 'tenant')} awake{p.tenants.waking ? ` (${p.tenants.waking} waking)` : ''}
                        </div>
                      )}
                    </td>
                    <td class="nowrap" data-sleep-after>
                      {p.sleepAfterSeconds === null ? 'never sleeps' : `sleeps after ${compact(p.sleepAfterSeconds)}`}
                    </td>
                    <td data-warm-pool>
                      {pool.size === 0 ? (
                        <span class="none">no pool: every signup is cold</span>
                      ) : (
                        <>
                          <span
                            class="nowrap"
                            data-pool-ready
                            title={`${pool.size} per root cluster that takes the plan`}
                          >
                            {pool.ready}/{pool.target} ready
                          </span>
                          {pool.provisioning > 0 && (
                            <span data-pool-provisioning>, {pool.provisioning} provisioning</span>
                          )}
                          {pool.failing > 0 && (
                            <span class="failing" data-pool-failing>
                              , {pool.failing} failing
                            </span>
                          )}
                          {pool.oldestReadySeconds !== null && (
                            <div class="sub" data-pool-oldest>
                              oldest ready for {compact(pool.oldestReadySeconds)}
                            </div>
                          )}
                          {pool.clusters.length > 0 && (
                            <div class="sub" data-pool-clusters>
                              {pool.clusters
                                .map(
                                  (c) =>
                                    `${c.cluster}: ${c.ready}/${pool.size}${c.provisioning ? ` (+${c.provisioning})` : ''}${c.failing ? `, ${c.failing} failing` : ''}`,
                                )
                                .join('; ')}
                            </div>
                          )}
                        </>
                      )}
                    </td>
                    <td
                      class="nowrap"
                      data-signups
                      title="warm: served from the warm pool, Ready at signup; cold: provisioned after it"
                    >
                      {p.signups24h.warm} warm, {p.signups24h.cold} cold
                    </td>
                  </tr>
                );
              })}
            </tbody>
          </table>
          <h2>Wakes, last 24 h</h2>
          <p data-wakes>
            {w && w.count > 0 ? (
              <>
                {plural(w.count, 'wake')}: median {runTime(w.p50Seconds ?? 0)}, longest {runTime(w.maxSeconds ?? 0)}{' '}
                <span class="sub">
                  (the wake operation's run; the runtime's pods start about half a minute after it)
                </span>
              </>
            ) : (
              'No tenant woke up in the last 24 h.'
            )}
          </p>
        </>
      )}
    </section>
  );
}
