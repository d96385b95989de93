/**
 * A tenant's Argo CD applications as its runtime's event reporter reported them, live through the
 * tenant's change stream (GET /v1/tenants/:id/changes?kind=application). A row opens the
 * application's page (application-page.tsx: its history and diffs).
 */
import { useEffect, useState } from 'preact/hooks';
import { ApiError, client, type RuntimeObject as Application, type Tenant } from './api.ts';
import { openStream, type StreamStatus } from './sse.ts';
import { Banner, ErrorBox, Time } from './util.tsx';

const key = (a: { namespace: string; name: string }) => `${a.namespace}/${a.name}`;
/** The application's page: `#/tenants/<id>/applications/<namespace>/<name>`. */
export const applicationHref = (tenantId: string, a: { namespace: string; name: string }) =>
  `#/tenants/${tenantId}/applications/${encodeURIComponent(a.namespace)}/${encodeURIComponent(a.name)}`;

export function Applications({ tenant }: { tenant: Tenant }) {
  const [apps, setApps] = useState<Map<string, Application> | null>(null);
  const [error, setError] = useState<ApiError | null>(null);
  const [stream, setStream] = useState<StreamStatus>('connecting');
  const reported = tenant.status.reporting !== undefined;
  useEffect(() => {
    if (!reported) return;
    client.call('GET /v1/tenants/:id/applications', { params: { id: tenant.id }, query: { limit: 500 } }).then(
      (r) => setApps(new Map(r.items.map((a) => [key(a), a]))),
      (e: unknown) => setError(e as ApiError),
    );
    const s = openStream('GET /v1/tenants/:id/changes', {
      params: { id: tenant.id },
      query: { kind: 'application' },
      onStatus: setStream,
      onEvents: (events) =>
        setApps((current) => {
          const next = new Map(current ?? []);
          for (const e of events) {
            // Resumed from before a purged deletion: every live object follows this event.
            if (e.event === 'reset') next.clear();
            if (e.event !== 'change') continue;
            const { deleted, item } = e.data;
            if (deleted) next.delete(key(item));
            else next.set(key(item), item);
          }
          return next;
        }),
    });
    return () => s.close();
  }, [tenant.id, reported]);

  return (
    <div class="card">
      <h2>Applications</h2>
      {!reported ? (
        <p>No application state reported yet: the runtime's event reporter reports once the runtime runs.</p>
      ) : (
        <>
          <Banner status={stream} />
          {tenant.status.reporting?.stale && (
            <p class="stale" role="status">
              The event reporter has not been heard from for over 60 s: what is shown may be out of date.
            </p>
          )}
          <ErrorBox error={error} />
          <table class="applications">
            <thead>
              <tr>
                <th scope="col">Application</th>
                <th scope="col">Health</th>
                <th scope="col">Sync</th>
                <th scope="col">Operation</th>
                <th scope="col">Updated</th>
              </tr>
            </thead>
            <tbody>
              {[...(apps?.values() ?? [])]
                .sort((a, b) => key(a).localeCompare(key(b)))
                .map((a) => (
                  <tr
                    key={key(a)}
                    class="clickable"
                    onClick={(e) => {
                      // The link itself navigates; a click elsewhere on the row does the same.
                      if (!(e.target instanceof HTMLAnchorElement)) location.hash = applicationHref(tenant.id, a);
                    }}
                  >
                    <td>
                      <a href={applicationHref(tenant.id, a)}>{key(a)}</a>
                    </td>
                    <td>{a.health ?? '—'}</td>
                    <td>{a.sync ?? '—'}</td>
                    <td>{a.phase ?? '—'}</td>
                    <td>
                      <Time iso={a.updatedAt} ago />
                    </td>
                  </tr>
                ))}
              {apps?.size === 0 && (
                <tr>
                  <td colSpan={5}>The runtime reports no application.</td>
                </tr>
              )}
            </tbody>
          </table>
        </>
      )}
    </div>
  );
}
