import { render } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import { client, ApiError, session, setUnauthorizedHandler, type Identity } from './api.ts';
import { ApplicationPage, segment } from './application-page.tsx';
import { CapacityPage } from './capacity.tsx';
import { ClustersPage, VersionsPage } from './fleet.tsx';
import { ProductPage } from './products.tsx';
import { FleetUpgradePage, FleetUpgradesPage } from './fleet-upgrades.tsx';
import { RuntimesPage } from './runtimes.tsx';
import { TenantPage } from './tenant.tsx';
import { TenantsPage } from './tenants.tsx';
import { ErrorBox } from './util.tsx';
import './style.css';

function useHash(): string {
  const [hash, setHash] = useState(location.hash);
  useEffect(() => {
    const on = () => setHash(location.hash);
    addEventListener('hashchange', on);
    return () => removeEventListener('hashchange', on);
  }, []);
  return hash;
}

async function whoami(key: string): Promise<Identity> {
  return client.call('GET /v1/whoami', { token: key });
}

function SignIn({ onSignedIn, notice }: { onSignedIn: (me: Identity) => void; notice: ApiError | string | null }) {
  const [key, setKey] = useState('');
  const [error, setError] = useState<ApiError | string | null>(notice);
  const [busy, setBusy] = useState(false);
  const submit = async (e: Event) => {
    e.preventDefault();
    setBusy(true);
    setError(null);
    const k = key.trim();
    try {
      const me = await whoami(k);
      if (me.role === 'runtime') {
        setError('A runtime key cannot use the console: sign in with an operator, admin or tenant key.');
        return;
      }
      session.set(k);
      setKey('');
      onSignedIn(me);
    } catch (err) {
      setError(
        err instanceof ApiError && err.status !== 0
          ? err.code === 'INVALID_API_KEY'
            ? new ApiError({
                status: err.status,
                code: err.code,
                message: 'This API key is not valid or has been revoked.',
              })
            : err.code === 'UNAUTHENTICATED'
              ? new ApiError({
                  status: err.status,
                  code: err.code,
                  message: 'That is not an API key: keys start with hrt_ and the role.',
                })
              : err
          : 'The provisioner cannot be reached.',
      );
    } finally {
      setBusy(false);
    }
  };
  return (
    <main class="signin">
      <h1>Hosted runtimes console</h1>
      <form onSubmit={(e) => void submit(e)}>
        <label>
          API key
          <input
            type="password"
            name="api-key"
            autoComplete="off"
            required
            value={key}
            onInput={(e) => setKey(e.currentTarget.value)}
          />
        </label>
        <button type="submit" disabled={busy || key.trim() === ''}>
          Sign in
        </button>
        <p class="hint">
          An operator or admin key sees the fleet; a tenant key sees its own tenant. The key stays in this tab only.
        </p>
      </form>
      <ErrorBox error={error} />
    </main>
  );
}

function App() {
  const [me, setMe] = useState<Identity | null>(null);
  const [checking, setChecking] = useState(session.key() !== null);
  const [notice, setNotice] = useState<ApiError | string | null>(null);
  const hash = useHash();

  const signOut = (why: ApiError | string | null = null) => {
    session.clear();
    setMe(null);
    setNotice(why);
  };
  useEffect(() => {
    setUnauthorizedHandler((err) => signOut(err));
    const key = session.key();
    if (key)
      whoami(key).then(
        (m) => (setMe(m), setChecking(false)),
        (err: unknown) => (signOut(err as ApiError), setChecking(false)),
      );
  }, []);

  if (checking) return <p aria-busy="true">Checking the key…</p>;
  if (!me)
    return (
      <SignIn
        notice={notice}
        onSignedIn={(m) => {
          setMe(m);
          setNotice(null);
          if (m.tenantId && m.role === 'tenant') location.hash = `#/tenants/${m.tenantId}`;
          else if (!location.hash || location.hash === '#/') location.hash = '#/tenants';
        }}
      />
    );

  const operator = me.role === 'operator' || me.role === 'admin';
  const parts = hash.replace(/^#\/?/, '').split('/');
  let page;
  // An application's page: #/tenants/<id>/applications/<ns>/<name> (hosted) or …/runtimes/<runtime>/applications/….
  const appAt = parts[2] === 'runtimes' ? 4 : 2;
  if (parts[0] === 'tenants' && parts[1] && parts[appAt] === 'applications' && parts[appAt + 2])
    page = (
      <ApplicationPage
        tenantId={parts[1]}
        runtime={appAt === 4 ? segment(parts[3]!) : undefined}
        namespace={segment(parts[appAt + 1]!)}
        name={segment(parts[appAt + 2]!)}
      />
    );
  // A product's page: #/tenants/<id>/products/<ns>/<name> (the hosted runtime's).
  else if (parts[0] === 'tenants' && parts[1] && parts[2] === 'products' && parts[4])
    page = <ProductPage tenantId={parts[1]} namespace={segment(parts[3]!)} name={segment(parts[4])} />;
  else if (parts[0] === 'tenants' && parts[1])
    page = <TenantPage me={me} id={parts[1]} operationId={parts[2] === 'operations' ? parts[3] : undefined} />;
  else if (parts[0] === 'clusters' && operator) page = <ClustersPage />;
  else if (parts[0] === 'capacity' && operator) page = <CapacityPage />;
  else if (parts[0] === 'runtimes' && operator) page = <RuntimesPage />;
  else if (parts[0] === 'versions') page = <VersionsPage operator={operator} />;
  else if (parts[0] === 'fleet-upgrades' && operator)
    page = parts[1] ? <FleetUpgradePage id={parts[1]} /> : <FleetUpgradesPage />;
  else if (!operator && me.tenantId) page = <TenantPage me={me} id={me.tenantId} />;
  else page = <TenantsPage me={me} />;
  const here = parts[0] || 'tenants';

  return (
    <>
      <header class="top">
        <span class="brand">Hosted runtimes</span>
        <nav aria-label="Main">
          {operator ? (
            <a href="#/tenants" aria-current={here === 'tenants' ? 'page' : undefined}>
              Tenants
            </a>
          ) : (
            <a href={`#/tenants/${me.tenantId ?? ''}`} aria-current={here === 'tenants' ? 'page' : undefined}>
              My tenant
            </a>
          )}
          {operator && (
            <a href="#/runtimes" aria-current={here === 'runtimes' ? 'page' : undefined}>
              Runtimes
            </a>
          )}
          {operator && (
            <a href="#/clusters" aria-current={here === 'clusters' ? 'page' : undefined}>
              Clusters
            </a>
          )}
          {operator && (
            <a href="#/capacity" aria-current={here === 'capacity' ? 'page' : undefined}>
              Capacity
            </a>
          )}
          {operator && (
            <a href="#/fleet-upgrades" aria-current={here === 'fleet-upgrades' ? 'page' : undefined}>
              Fleet upgrades
            </a>
          )}
          <a href="#/versions" aria-current={here === 'versions' ? 'page' : undefined}>
            Runtime versions
          </a>
        </nav>
        <span class="who" data-role={me.role}>
          {me.role} key
        </span>
        <button type="button" onClick={() => signOut()}>
          Sign out
        </button>
      </header>
      <main>{page}</main>
    </>
  );
}

render(<App />, document.getElementById('app')!);
