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
import type { RuntimeBootstrapAnswer, RuntimeRegistered } from '../../../provisioner/api/types.ts';
import { catalog } from '../../../runtime/catalog.ts';

const api = await createTestApi({ env: { PROVISIONER_PUBLIC_URL: 'https://cp.example.test' } });
const base = await api.app.listen({ port: 0, host: '127.0.0.1' });
t.teardown(() => api.close());

type ErrorAnswer = { error: { code: string; message: string; field?: string; details?: Record<string, unknown> } };

async function call<T>(method: string, path: string, key: string | null, body?: unknown) {
  const res = await fetch(`${base}${path}`, {
    method,
    headers: {
      ...(key ? { authorization: `Bearer ${key}` } : {}),
      ...(body !== undefined ? { 'content-type': 'application/json' } : {}),
    },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
  return {
    status: res.status,
    retryAfter: res.headers.get('retry-after'),
    body: (await res.json()) as T & ErrorAnswer,
  };
}

/** Registers a hybrid runtime (argo=existing: an upgrade the upgrader may apply) and redeems its token; answers its runtime key. */
async function hybrid(tenant: { tenantId: string; apiKey: string }, name: string, upgrades: 'agent' | 'customer') {
  const reg = await call<RuntimeRegistered>('POST', `/v1/tenants/${tenant.tenantId}/runtimes`, tenant.apiKey, {
    name,
    mode: 'hybrid',
    access: 'tunnel',
    argo: 'existing',
    argoNamespace: 'argocd',
    upgrades,
    version: '1.4.1',
  });
  if (reg.status !== 201)
    throw new Error(`registration of ${name} answered ${reg.status}: ${JSON.stringify(reg.body)}`);
  const redeemed = await call<RuntimeBootstrapAnswer>('POST', '/v1/runtimes/bootstrap', reg.body.bootstrapToken, {});
  if (redeemed.status !== 200) throw new Error(`bootstrap of ${name} answered ${redeemed.status}`);
  return redeemed.body.runtimeToken;
}

const builds = () => api.services.runtimes.bundleCacheStats().builds;

t.test('a bundle is built once per runtime settings and versions', async (t) => {
  const tenant = await api.signup({ runtimeVersion: '1.4.1' });
  const runtimeKey = await hybrid(tenant, 'cached', 'agent');
  const bundle = `/v1/tenants/${tenant.tenantId}/runtimes/cached/bundle?version=1.5.0`;

  const first = builds();
  const one = await call<{ diff: string }>('GET', bundle, tenant.apiKey);
  t.equal(one.status, 200, 'the first request answers the bundle');
  t.ok(builds() > first, 'the first request built it');
  const second = builds();
  const two = await call<{ diff: string }>('GET', bundle, tenant.apiKey);
  t.equal(two.status, 200, 'the second request answers it too');
  t.equal(two.body.diff, one.body.diff, 'the same bundle and diff');
  t.equal(builds(), second, 'the second request built nothing');

  // The upgrade route answers the same bundle: nothing new to build for the answer.
  const upgraded = await call<{ appliedBy: string }>(
    'POST',
    `/v1/tenants/${tenant.tenantId}/runtimes/cached/upgrade`,
    tenant.apiKey,
    { version: '1.5.0' },
  );
  t.equal(upgraded.status, 200, 'the upgrade is asked');
  t.equal(upgraded.body.appliedBy, 'agent', 'for the in-cluster upgrader to apply');

  // The upgrader's poll compares the bundles of the two versions: built at most once, then reused.
  const pull = await call<{ upgrade: { apply: unknown[] } | null }>('GET', '/v1/runtime/upgrade', runtimeKey);
  t.equal(pull.status, 200, 'the upgrader pulls its plan');
  t.ok((pull.body.upgrade?.apply.length ?? 0) > 0, 'with objects to apply');
  const polled = builds();
  for (let i = 0; i < 3; i++) {
    const again = await call<{ upgrade: unknown }>('GET', '/v1/runtime/upgrade', runtimeKey);
    t.same(again.body, pull.body, `poll ${i + 2} answers the same plan`);
  }
  t.equal(builds(), polled, 'polls after the first built nothing');

  // Other settings are another entry: another runtime's bundle is its own.
  await hybrid(tenant, 'other', 'customer');
  const before = builds();
  const other = await call<{ install: { manifests: string } }>(
    'GET',
    `/v1/tenants/${tenant.tenantId}/runtimes/other/bundle?version=1.5.0`,
    tenant.apiKey,
  );
  t.equal(other.status, 200, "the other runtime's bundle answers");
  t.ok(builds() > before, "another runtime's bundle is built for it, not taken from the first's");
  t.notOk(
    other.body.install.manifests.includes('runtime-upgrader'),
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
    const paths = Array.from({ length: 60 }, (_, i) => {
      const to = versions[i % versions.length]!;
      const from = versions[Math.floor(i / versions.length) % versions.length]!;
      return `/v1/tenants/${greedy.tenantId}/runtimes/greedy/bundle?version=${to}&from=${from}`;
    });

    const slowest = { read: 0, healthz: 0 };
    let rounds = 0;
    const timed = async (what: keyof typeof slowest, path: string, key: string | null) => {
      const start = performance.now();
      const res = await call('GET', path, key);
      if (res.status !== 200) throw new Error(`${what} answered ${res.status}`);
      slowest[what] = Math.max(slowest[what], performance.now() - start);
    };
    const buildsBefore = builds();
    let done = false;
    const burst = Promise.all(paths.map((p) => call('GET', p, greedy.apiKey))).finally(() => (done = true));
    do {
      await timed('read', `/v1/tenants/${other.tenantId}/runtimes`, other.apiKey);
      await timed('healthz', '/healthz', null);
      rounds++;
    } while (!done);
    const answers = await burst;

    const limit = DEFAULT_TENANT_BUDGETS.hybridBundlesPerRuntimePerMinute;
    const ok = answers.filter((a) => a.status === 200);
    const refused = answers.filter((a) => a.status === 429);
    t.equal(ok.length, limit, `the runtime's bundle rate (${limit} a minute) was answered`);
    t.equal(refused.length, 60 - limit, 'every other request was refused with 429');
    t.ok(
      refused.every((a) => Number(a.retryAfter) >= 1 && Number(a.retryAfter) <= 60),
      'each 429 says when to try again (Retry-After within the minute)',
    );
    t.ok(
      refused.every(
        (a) =>
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
        call('GET', `/v1/tenants/${greedy.tenantId}/runtimes/second/bundle`, greedy.apiKey),
      ),
    );
    const tenantRefused = more.filter((a) => a.body.error?.message.includes('PROVISIONER_HYBRID_BUNDLES_PER_MINUTE'));
    t.ok(
      tenantRefused.length > 0 && tenantRefused.every((a) => a.status === 429 && a.retryAfter !== null),
      `past ${tenantLimit} a minute for the whole tenant, its other runtime is refused too (${tenantRefused.length} refused)`,
    );
  },
);

t.test("an upgrader's polls have a rate: 429 with Retry-After past it", async (t) => {
  const tenant = await api.signup({ runtimeVersion: '1.4.1' });
  const key = await hybrid(tenant, 'poller', 'agent');
  const limit = DEFAULT_TENANT_BUDGETS.upgraderPollsPerRuntimePerMinute;
  const statuses: number[] = [];
  for (let i = 0; i < limit; i++) statuses.push((await call('GET', '/v1/runtime/upgrade', key)).status);
  t.ok(
    statuses.every((s) => s === 200),
    `${limit} polls in a minute are answered (an upgrader polls every 30 s)`,
  );
  const over = await call('GET', '/v1/runtime/upgrade', key);
  t.equal(over.status, 429, 'the next is refused');
  t.ok(Number(over.retryAfter) >= 1, 'with Retry-After');
  t.match(over.body.error, {
    code: 'RATE_LIMITED',
    message: /PROVISIONER_HYBRID_UPGRADER_POLLS_PER_RUNTIME_PER_MINUTE/,
  });
});

t.test('register/remove churn stops at the tenant registration rate', async (t) => {
  const tenant = await api.signup();
  const limit = DEFAULT_TENANT_BUDGETS.hybridRegistrationsPerHour;
  const runtimes = `/v1/tenants/${tenant.tenantId}/runtimes`;
  for (let i = 0; i < limit; i++) {
    const reg = await call('POST', runtimes, tenant.apiKey, {
      name: 'churn',
      mode: 'hybrid',
      access: 'tunnel',
      argo: 'new',
    });
    if (reg.status !== 201) throw new Error(`registration ${i + 1} answered ${reg.status}`);
    const removed = await call('DELETE', `${runtimes}/churn`, tenant.apiKey);
    if (removed.status !== 200) throw new Error(`removal ${i + 1} answered ${removed.status}`);
  }
  const over = await call('POST', runtimes, tenant.apiKey, {
    name: 'churn',
    mode: 'hybrid',
    access: 'tunnel',
    argo: 'new',
  });
  t.equal(over.status, 429, `registration ${limit + 1} within the hour is refused`);
  t.ok(Number(over.retryAfter) >= 1, 'with Retry-After');
  t.match(over.body.error, { code: 'RATE_LIMITED', message: /PROVISIONER_HYBRID_REGISTRATIONS_PER_HOUR/ });
  const listed = await call<{ items: unknown[] }>('GET', runtimes, tenant.apiKey);
  t.equal(listed.body.items.length, 1, 'nothing was registered by the refused request (the hosted runtime only)');

  const another = await api.signup();
  const fresh = await call('POST', `/v1/tenants/${another.tenantId}/runtimes`, another.apiKey, {
    name: 'churn',
    mode: 'hybrid',
    access: 'tunnel',
    argo: 'new',
  });
  t.equal(fresh.status, 201, "another tenant's registration is not counted against the first's rate");
});
