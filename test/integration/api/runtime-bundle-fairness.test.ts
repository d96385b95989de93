/**
 * Generated bundles cannot be used to take the control plane from others (real Postgres, real
 * HTTP on loopback): a bundle is built once per runtime settings and versions (a second request,
 * the upgrade route and the upgrader's poll reuse it); 60 concurrent bundle requests of one tenant
 * for every version pair are answered within the runtime's bundle rate and 429 with Retry-After
 * past it, while another tenant's reads and /healthz keep answering within a generous bound (as in
 * fairness.test.ts: the machine is shared); the upgrader's poll and hybrid registrations have
 * their rates too (register/remove churn stops at the tenant's hourly rate).
 */
import t from 'tap';
import { createTestApi } from '../../helpers/api.ts';
import { DEFAULT_TENANT_BUDGETS } from '../../../provisioner/config.ts';
import { ApiClient, type ApiError } from '../../../provisioner/http/api-client.ts';
import type { UpgraderAssignment } from '../../../runtime/protocol/upgrade.ts';
import { catalog } from '../../../runtime/catalog.ts';

const api = await createTestApi({ env: { PROVISIONER_PUBLIC_URL: 'https://cp.example.test' } });
const base = await api.app.listen({ port: 0, host: '127.0.0.1' });
t.teardown(() => api.close());

/** The one client over the loopback socket (the burst below is real HTTP), with no key of its own. */
const client = new ApiClient({ baseUrl: base });
const as = (key: string) => client.withToken(key);
/** The upgrader's poll, a runtimes' own route (outside the route map): its plan; a refusal is an ApiError. */
const poll = async (runtimeKey: string) =>
  (await (await as(runtimeKey).raw('GET', '/v1/runtime/upgrade')).json()) as UpgraderAssignment;

/** Registers a hybrid runtime (argo=existing: an upgrade the upgrader may apply) and redeems its token; answers its runtime key. */
async function hybrid(tenant: { tenantId: string; apiKey: string }, name: string, upgrades: 'agent' | 'customer') {
  const reg = await as(tenant.apiKey).call('POST /v1/tenants/:id/runtimes', {
    params: { id: tenant.tenantId },
    body: {
      name,
      mode: 'hybrid',
      access: 'tunnel',
      argo: 'existing',
      argoNamespace: 'argocd',
      upgrades,
      version: '1.4.1',
    },
  });
  const redeemed = await client.call('POST /v1/runtimes/bootstrap', { body: {}, token: reg.bootstrapToken });
  return redeemed.runtimeToken;
}

const builds = () => api.services.runtimes.bundleCacheStats().builds;

t.test('a bundle is built once per runtime settings and versions', async (t) => {
  const tenant = await api.signup({ runtimeVersion: '1.4.1' });
  const runtimeKey = await hybrid(tenant, 'cached', 'agent');
  const asTenant = as(tenant.apiKey);
  const bundle = (name: string) =>
    asTenant.call('GET /v1/tenants/:id/runtimes/:name/bundle', {
      params: { id: tenant.tenantId, name },
      query: { version: '1.5.0' },
    });

  const first = builds();
  const one = await bundle('cached');
  t.type(one.diff, 'string', 'the first request answers the bundle');
  t.ok(builds() > first, 'the first request built it');
  const second = builds();
  const two = await bundle('cached');
  t.equal(two.diff, one.diff, 'the second request answers it too: the same bundle and diff');
  t.equal(builds(), second, 'the second request built nothing');

  // The upgrade route answers the same bundle: nothing new to build for the answer.
  const upgraded = await asTenant.call('POST /v1/tenants/:id/runtimes/:name/upgrade', {
    params: { id: tenant.tenantId, name: 'cached' },
    body: { version: '1.5.0' },
  });
  t.equal(upgraded.changed, true, 'the upgrade is asked');
  t.equal(upgraded.appliedBy, 'agent', 'for the in-cluster upgrader to apply');

  // The upgrader's poll compares the bundles of the two versions: built at most once, then reused.
  const pull = await poll(runtimeKey);
  t.ok((pull.upgrade?.apply.length ?? 0) > 0, 'the upgrader pulls its plan, with objects to apply');
  const polled = builds();
  for (let i = 0; i < 3; i++) t.same(await poll(runtimeKey), pull, `poll ${i + 2} answers the same plan`);
  t.equal(builds(), polled, 'polls after the first built nothing');

  // Other settings are another entry: another runtime's bundle is its own.
  await hybrid(tenant, 'other', 'customer');
  const before = builds();
  const other = await bundle('other');
  t.ok(builds() > before, "another runtime's bundle is built for it, not taken from the first's");
  t.notOk(
    other.install.manifests.includes('runtime-upgrader'),
    "it is the other runtime's (no upgrader: it did not opt in)",
  );
});

/** Generous: the test machine is shared (fairness.test.ts). */
const BOUND_MS = 3000;

t.test(
  "60 concurrent bundle requests of one tenant: the runtime's rate answers, 429 past it, and another tenant's reads stay within their bound",
  async (t) => {
    const greedy = await api.signup({ runtimeVersion: '1.4.1' });
    await hybrid(greedy, 'greedy', 'customer');
    const other = await api.signup();
    const versions = catalog.versions.map((v) => v.version);
    // Every pair of versions: with no cache a request for each would build two bundles and a diff.
    const pairs = Array.from({ length: 60 }, (_, i) => ({
      version: versions[i % versions.length]!,
      from: versions[Math.floor(i / versions.length) % versions.length]!,
    }));

    const slowest = { read: 0, healthz: 0 };
    let rounds = 0;
    const timed = async (what: keyof typeof slowest, answer: () => Promise<unknown>) => {
      const start = performance.now();
      await answer(); // any refusal is thrown: the read must be answered
      slowest[what] = Math.max(slowest[what], performance.now() - start);
    };
    const buildsBefore = builds();
    let done = false;
    const burst = Promise.all(
      pairs.map((query) =>
        as(greedy.apiKey).request('GET /v1/tenants/:id/runtimes/:name/bundle', {
          params: { id: greedy.tenantId, name: 'greedy' },
          query,
        }),
      ),
    ).finally(() => (done = true));
    do {
      await timed('read', () =>
        as(other.apiKey).call('GET /v1/tenants/:id/runtimes', { params: { id: other.tenantId } }),
      );
      await timed('healthz', () => client.raw('GET', '/healthz'));
      rounds++;
    } while (!done);
    const answers = await burst;

    const limit = DEFAULT_TENANT_BUDGETS.hybridBundlesPerRuntimePerMinute;
    const ok = answers.filter((a) => a.status === 200);
    const refused = answers.filter((a) => a.status === 429);
    t.equal(ok.length, limit, `the runtime's bundle rate (${limit} a minute) was answered`);
    t.equal(refused.length, 60 - limit, 'every other request was refused with 429');
    t.ok(
      refused.every((a) => {
        const retryAfter = Number(a.headers.get('retry-after'));
        return retryAfter >= 1 && retryAfter <= 60;
      }),
      'each 429 says when to try again (Retry-After within the minute)',
    );
    t.ok(
      refused.every(
        (a) =>
          !a.ok &&
          a.body.error.code === 'RATE_LIMITED' &&
          a.body.error.message.includes('PROVISIONER_HYBRID_BUNDLES_PER_RUNTIME_PER_MINUTE'),
      ),
      'each 429 is RATE_LIMITED naming the setting',
    );
    t.ok(builds() - buildsBefore <= limit, `no more bundles built than answered (${builds() - buildsBefore})`);
    for (const what of ['read', 'healthz'] as const)
      t.ok(
        slowest[what] < BOUND_MS,
        `${what}: every answer within ${BOUND_MS} ms (${rounds} rounds, slowest ${Math.round(slowest[what])} ms)`,
      );

    // The tenant's rate across its runtimes: another runtime of the same tenant shares it.
    await hybrid(greedy, 'second', 'customer');
    const tenantLimit = DEFAULT_TENANT_BUDGETS.hybridBundlesPerMinute;
    const more = await Promise.all(
      Array.from({ length: tenantLimit }, () =>
        as(greedy.apiKey).request('GET /v1/tenants/:id/runtimes/:name/bundle', {
          params: { id: greedy.tenantId, name: 'second' },
        }),
      ),
    );
    const tenantRefused = more.filter(
      (a) => !a.ok && a.body.error.message.includes('PROVISIONER_HYBRID_BUNDLES_PER_MINUTE'),
    );
    t.ok(
      tenantRefused.length > 0 && tenantRefused.every((a) => a.status === 429 && a.headers.get('retry-after') !== null),
      `past ${tenantLimit} a minute for the whole tenant, its other runtime is refused too (${tenantRefused.length} refused)`,
    );
  },
);

t.test("an upgrader's polls have a rate: 429 with Retry-After past it", async (t) => {
  const tenant = await api.signup({ runtimeVersion: '1.4.1' });
  const key = await hybrid(tenant, 'poller', 'agent');
  const limit = DEFAULT_TENANT_BUDGETS.upgraderPollsPerRuntimePerMinute;
  let answered = 0;
  for (let i = 0; i < limit; i++) if (await poll(key)) answered++; // a refusal is thrown
  t.equal(answered, limit, `${limit} polls in a minute are answered (an upgrader polls every 30 s)`);
  const over = await poll(key).then(
    () => undefined,
    (err: unknown) => err as ApiError,
  );
  t.match(
    over,
    { status: 429, code: 'RATE_LIMITED', message: /PROVISIONER_HYBRID_UPGRADER_POLLS_PER_RUNTIME_PER_MINUTE/ },
    'the next is refused',
  );
  t.ok((over?.retryAfterSeconds ?? 0) >= 1, 'with Retry-After');
});

t.test('register/remove churn stops at the tenant registration rate', async (t) => {
  const tenant = await api.signup();
  const limit = DEFAULT_TENANT_BUDGETS.hybridRegistrationsPerHour;
  const churn = { name: 'churn', mode: 'hybrid', access: 'tunnel', argo: 'new' } as const;
  const register = (owner: { tenantId: string; apiKey: string }) =>
    as(owner.apiKey).call('POST /v1/tenants/:id/runtimes', { params: { id: owner.tenantId }, body: churn });
  const asTenant = as(tenant.apiKey);
  for (let i = 0; i < limit; i++) {
    await register(tenant); // a refusal is thrown: each one within the rate is registered
    await asTenant.call('DELETE /v1/tenants/:id/runtimes/:name', { params: { id: tenant.tenantId, name: 'churn' } });
  }
  const over = await register(tenant).then(
    () => undefined,
    (err: unknown) => err as ApiError,
  );
  t.match(
    over,
    { status: 429, code: 'RATE_LIMITED', message: /PROVISIONER_HYBRID_REGISTRATIONS_PER_HOUR/ },
    `registration ${limit + 1} within the hour is refused`,
  );
  t.ok((over?.retryAfterSeconds ?? 0) >= 1, 'with Retry-After');
  const listed = await asTenant.call('GET /v1/tenants/:id/runtimes', { params: { id: tenant.tenantId } });
  t.equal(listed.items.length, 1, 'nothing was registered by the refused request (the hosted runtime only)');

  const another = await api.signup();
  const fresh = await register(another);
  t.equal(fresh.runtime.name, 'churn', "another tenant's registration is not counted against the first's rate");
});
